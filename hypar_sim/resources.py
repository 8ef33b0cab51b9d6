"""What the machine lets this process use: the memory bound that large cases are checked
against before they allocate (one line instead of a MemoryError after minutes), and how the
C allocator keeps what numpy frees."""

from __future__ import annotations

import ctypes
import os
import resource

from hypar_sim.errors import InputError


def memory_limit_bytes() -> int:
    """The memory this process may use, bytes: the smaller of the machine's physical memory
    and the process's address-space limit (RLIMIT_AS, `ulimit -v`) where one is set."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return physical if soft in (resource.RLIM_INFINITY, -1) else min(physical, soft)


def check_memory(need_bytes: float, what: str, advice: str) -> None:
    """A one-line InputError if `what` would need more than `memory_limit_bytes()`."""
    limit = memory_limit_bytes()
    if need_bytes > limit:
        raise InputError(f"{what} would need {_size(need_bytes)} of memory; this process may "
                         f"use {_size(limit)}; {advice}")


def _size(value: float) -> str:
    """Bytes in GiB, or MiB below one GiB."""
    return f"{value / 2**30:,.1f} GiB" if value >= 2**30 else f"{value / 2**20:,.1f} MiB"


#: glibc's mallopt parameters (malloc.h) and the values `keep_freed_memory` sets: 64 MiB
#: kept at the heap's top when memory is freed, and blocks up to 32 MiB (glibc's largest
#: allowed threshold on 64-bit) taken from the heap rather than mapped afresh.
_M_TOP_PAD, _M_MMAP_THRESHOLD = -2, -3
_TOP_PAD_BYTES = 64 * 2**20
_MMAP_THRESHOLD_BYTES = 32 * 2**20


def keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory for the next allocations of this process.

    By default it gives the heap's top back to the system once more than 128 KiB there are
    free, and maps blocks above 128 KiB afresh (its threshold then grows only as large
    blocks are freed); numpy's temporaries are freed and allocated again thousands of times
    a second, and every page taken back costs a page fault. Measured on `plan gpt3_2_7b`
    (optimal choosing how to train, 64 accelerators): 20.1 s of its 89 s CPU were the
    kernel's (page faults), 0.5 s with these settings, for 33 s wall against 48 s, its
    peak memory the same. A process setting, like the garbage collector's: the command line
    and its pool workers set it; without glibc (macOS, musl) nothing changes."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(_M_TOP_PAD, _TOP_PAD_BYTES)
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
