"""What the machine lets this process use: the memory bound that large cases are checked
against before they allocate (one line instead of a MemoryError after minutes)."""

from __future__ import annotations

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
