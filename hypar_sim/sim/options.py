"""How to simulate (not what: that is the plan and the hardware), in a module that does not
load the simulator (the run's request holds these options; `plan` never simulates)."""

from __future__ import annotations

from dataclasses import dataclass

from hypar_sim.errors import InputError, clip_value, closest
from hypar_sim.hardware.topology import TOPOLOGIES
from hypar_sim.hardware.topology_file import is_topology_file
from hypar_sim.sim.defaults import (
    DEFAULT_BUCKET_MB,
    DEFAULT_CHUNK_BYTES,
    DEFAULT_DES_MESSAGES,
    DEFAULT_MAX_CHUNKS,
    ENGINES,
)

#: What a trace keeps of the links: every message's span, or per class of alike links a
#: counter of GB/s (bounded by the classes: `sim.trace.summary_events`).
TRACE_LINKS = ("messages", "summary")


@dataclass(frozen=True)
class SimOptions:
    """How to simulate (not what: that is the plan and the hardware)."""

    topology: str = "htree"
    engine: str = "des"  # "des": SimPy event by event; "analytic": closed form
    chunk_bytes: int = DEFAULT_CHUNK_BYTES  # a message crosses the network in chunks of this size
    max_chunks: int = DEFAULT_MAX_CHUNKS  # ... or in this many larger chunks, if that is fewer
    overlap_gradients: bool = True  # gradient exchange overlaps the rest of the backward pass
    bucket_mb: float = DEFAULT_BUCKET_MB  # graph networks: gradients fused in buckets (0: off)
    trace: bool = False  # the result carries a Chrome/Perfetto trace of the step (des only)
    trace_links: str = "messages"  # every message on every link, or "summary": counters
    symmetry: bool = True  # des: one accelerator per symmetry class (the same result, faster)
    progress: bool = False  # a bar on stderr for a simulation longer than 2 s (des)
    #: des: messages simulated one by one; past them, group operations (`sim.operations`)
    des_messages: int = DEFAULT_DES_MESSAGES

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES and not is_topology_file(self.topology):
            raise InputError(f"topology: unknown '{self.topology}'{closest(self.topology, TOPOLOGIES)}"
                             f"; allowed: {', '.join(TOPOLOGIES)} or a topology file (.yaml)")
        if self.trace_links not in TRACE_LINKS:
            raise InputError(f"--trace-links: unknown {clip_value(self.trace_links)}; allowed: "
                             f"{', '.join(TRACE_LINKS)}")
        if self.trace_links != "messages" and not self.trace:
            raise InputError(f"--trace-links {self.trace_links}: needs --trace FILE")
        if self.engine not in ENGINES:
            raise InputError(f"engine: unknown '{self.engine}'; allowed: {', '.join(ENGINES)}")
        if isinstance(self.chunk_bytes, bool) or not isinstance(self.chunk_bytes, int) \
                or self.chunk_bytes < 1:
            raise InputError(f"chunk_bytes: must be a positive integer, got {clip_value(self.chunk_bytes)}")
        if isinstance(self.max_chunks, bool) or not isinstance(self.max_chunks, int) \
                or self.max_chunks < 1:
            raise InputError(f"max_chunks: must be a positive integer, got {clip_value(self.max_chunks)}")
        if isinstance(self.des_messages, bool) or not isinstance(self.des_messages, int) \
                or self.des_messages < 0:
            raise InputError(f"--des-messages: must be an integer from 0 (every step a group "
                             f"operation) up, got {clip_value(self.des_messages)}")
        if isinstance(self.bucket_mb, bool) or not isinstance(self.bucket_mb, int | float) \
                or not 0 <= self.bucket_mb <= 2**20:
            raise InputError(f"--bucket-mb: must be a number of MiB from 0 (off) to {2**20}, got "
                             f"{clip_value(self.bucket_mb)}")
