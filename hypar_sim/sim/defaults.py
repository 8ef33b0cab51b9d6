"""The simulator's defaults and choices, in a module that imports nothing (the command line
reads them for its help without loading the simulator)."""

from __future__ import annotations

#: Engines: "des", SimPy event by event; "analytic", closed form.
ENGINES = ("des", "analytic")

#: Default chunk a message is cut into on its way through the network, bytes: the
#: granularity at which messages sharing a link take turns (a chunk cuts through, so
#: its size does not change the time of a message alone). Smaller chunks share links
#: more finely, at more events; 1 MiB keeps a VGG-E step well under a second.
DEFAULT_CHUNK_BYTES = 1024 * 1024
#: Most chunks per message: larger messages get larger chunks, which bounds the events
#: of the heaviest plans (model parallelism moves 315 GB for VGG-E).
DEFAULT_MAX_CHUNKS = 32

#: Messages the event-driven engine simulates one by one (one of each symmetry class; a
#: ring member's rounds are one); past it, every communication step runs as one group
#: operation (`sim.operations`). At some 200 us of CPU a message, about 2 s.
DEFAULT_DES_MESSAGES = 10_000

#: Gradient bucket of a graph's step, MiB: PyTorch DDP's default bucket_cap_mb = 25.
DEFAULT_BUCKET_MB = 25
