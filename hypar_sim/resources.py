"""What the machine lets this process use: the memory bound that large cases are checked
against before they allocate (one line instead of a MemoryError after minutes), and how the
C allocator keeps what numpy frees."""

from __future__ import annotations

import ctypes
import gc
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from hypar_sim.errors import InputError

#: Allocations between two collections of the youngest generation (Python's default: 700). A
#: step allocates many short-lived objects that reference counting frees and few cycles, so
#: the command collects less often. Measured (2026-12-07, garbage collection's own time):
#: `run resnet50 --accelerators 64 --batch 256` 0.047-0.061 s at 10,000, 0.024-0.031 s at
#: 50,000; `plan gpt2_small --accelerators 64` 0.061 s and 0.035 s; `run vgg_a` 0.014 s and
#: 0.005 s (29 ms at Python's 700).
GC_THRESHOLD = 50_000


def process_settings() -> None:
    """A command's process settings, and its pool workers' (`executors`): the collector's
    threshold and freed memory kept (`keep_freed_memory`)."""
    gc.set_threshold(GC_THRESHOLD)
    keep_freed_memory()


#: Whether `check_memory` refuses: off while a request that forces its way plans and runs
#: (`memory_checks`; `--force-memory`). A context, so a worker's request sets its own.
_CHECKS: ContextVar[bool] = ContextVar("hypar_sim_memory_checks", default=True)


def memory_limit_bytes() -> int:
    """The memory this process may use, bytes: the smaller of the machine's physical memory
    and the process's address-space limit (RLIMIT_AS, `ulimit -v`) where one is set."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return physical if soft in (resource.RLIM_INFINITY, -1) else min(physical, soft)


def check_memory(need_bytes: float, what: str, advice: str) -> None:
    """A one-line InputError if `what` would need more than `memory_limit_bytes()`, unless
    the checks are off (`memory_checks`)."""
    limit = memory_limit_bytes()
    if need_bytes > limit and _CHECKS.get():
        raise InputError(f"{what} would need {_size(need_bytes)} of memory; this process may "
                         f"use {_size(limit)}; {advice}; or --force-memory to try anyway")


@contextmanager
def memory_checks(enabled: bool) -> Iterator[None]:
    """`check_memory` refusing (`enabled`) or not, within the block."""
    token = _CHECKS.set(enabled)
    try:
        yield
    finally:
        _CHECKS.reset(token)


def _size(value: float) -> str:
    """Bytes in GiB, or MiB below one GiB."""
    return f"{value / 2**30:,.1f} GiB" if value >= 2**30 else f"{value / 2**20:,.1f} MiB"


#: glibc's mallopt parameters (malloc.h) and the values `keep_freed_memory` sets: the
#: main heap's blocks all from the heap (none mapped on their own, but where the heap cannot
#: grow), up to 256 MiB of free memory kept at its top, and 64 MiB more taken each time it
#: grows (not under an address-space limit, where an allocation within 64 MiB of the limit
#: would fail with the pad).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
_KEEP = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 256 * 2**20))
_PAD = (_M_TOP_PAD, 64 * 2**20)


def keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory for the next allocations of this process.

    By default it maps every block above 128 KiB afresh (the threshold then grows only as
    large blocks are freed, to 32 MiB at most) and gives the heap's top back to the system
    once more than a threshold (128 KiB, then twice the mapping threshold) is free there;
    numpy's temporaries are freed and allocated again thousands of times a second, and
    every page given back costs a page fault when it is touched again. Measured (whole
    processes, 2026-12-07): `plan gpt3_2_7b` with optimal choosing how to train spent 20.1 s
    of its 89 s CPU in the kernel, 0.5 s with these settings (48 s wall against 33 s); the
    GPT-3-shaped graph on 1,024 accelerators 59 s against 51-55 s (its 124 MB arrays of
    15.5M messages reused, not mapped again), its peak memory 3.97 against 4.04 GB. The
    price: memory freed below a live block is not given back, so a process stays near its
    peak (a sweep's worker near the largest case it has run). A process setting, like the
    garbage collector's: the command line and its pool workers set it; without glibc (macOS,
    musl) nothing changes."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    limited = soft not in (resource.RLIM_INFINITY, -1)
    for parameter, value in (*_KEEP, *(() if limited else (_PAD,))):
        mallopt(parameter, value)
