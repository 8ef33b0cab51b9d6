"""One HMC cube: its vaults' DRAM, how a layer's work is spread over the vaults, capacity.

Each vault has its own DRAM channel (the cube's bandwidth shared evenly,
320 GB/s / 32 = 10 GB/s, i.e. 40 B per 250 MHz cycle) and, on the logic die,
one row-stationary PU. A layer's share of work on one cube is split over the
PUs along one dimension (output channels, samples or output rows: the one
that keeps the most PUs busy with the least DRAM traffic); the PUs then run
in parallel, each streaming its tiles from its own vault with double
buffering, so a PU's time is max(compute, memory) plus the fill of one tile
and one DRAM access latency.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.pe_array import ArrayCost, ConvWork, PEArraySpec, map_conv

#: The dimensions a layer's work may be split along over the PUs of a cube.
SPLIT_DIMENSIONS = ("out_channels", "batch", "out_height")


def pe_array_spec(config: HardwareConfig) -> PEArraySpec:
    """The PU of `config` as the PE-array model sees it."""
    return PEArraySpec(
        rows=config.pe_rows, cols=config.pe_cols,
        filter_rf_words=config.rf_filter_words, ifmap_rf_words=config.rf_ifmap_words,
        psum_rf_words=config.rf_psum_words, buffer_bytes=config.buffer_bytes,
        word_bytes=config.word_bytes, clock_hz=config.clock_hz,
        bus_bytes=config.pe_bus_bits // 8,
    )


def _piece(work: ConvWork, dimension: str, size: int) -> ConvWork:
    """`work` cut to `size` along `dimension` (output rows bring their input rows)."""
    if dimension != "out_height":
        return replace(work, **{dimension: size})
    rows = (size - 1) * work.stride + work.kernel_height  # input rows one piece needs
    return replace(work, out_height=size, in_height=min(work.in_height, rows))


def even_parts(total: int, parts: int) -> list[tuple[int, int]]:
    """`total` in `parts` near-equal integer sizes, as (size, how many) pairs, largest first."""
    base, extra = divmod(total, parts)
    return [(size, count) for size, count in ((base + 1, extra), (base, parts - extra)) if count]


@dataclass(frozen=True)
class VaultSplit:
    """How one cube spreads a piece of work over its PUs."""

    dimension: str  # one of SPLIT_DIMENSIONS
    pus_used: int
    pieces: tuple[tuple[ConvWork, int, ArrayCost], ...]  # (piece, PUs running it, its cost)

    @property
    def slowest(self) -> ArrayCost:
        """The cost of the largest piece: the PUs finish together with it."""
        return self.pieces[0][2]

    def total(self, field: str) -> int:
        """An access count summed over every PU's piece."""
        return sum(count * getattr(cost.accesses, field) for _, count, cost in self.pieces)


def split_over_vaults(work: ConvWork, config: HardwareConfig) -> VaultSplit:
    """Spread `work` over the cube's PUs: the split with the fewest cycles, then least DRAM."""
    spec = pe_array_spec(config)
    candidates = []
    for dimension in SPLIT_DIMENSIONS:
        total = getattr(work, dimension)
        parts = min(config.pus_per_cube, total)
        pieces = tuple((piece, count, map_conv(piece, spec))
                       for piece, count in ((_piece(work, dimension, size), count)
                                            for size, count in even_parts(total, parts)))
        split = VaultSplit(dimension, parts, pieces)
        dram_words = split.total("dram_read") + split.total("dram_write")
        candidates.append(((split.slowest.cycles, dram_words), split))
    return min(candidates, key=lambda candidate: candidate[0])[1]


@dataclass(frozen=True)
class OverlapTime:
    """Time of one PU streaming tiles with double buffering, in cycles."""

    compute_cycles: float
    memory_cycles: float
    total_cycles: float


def overlapped_cycles(compute_cycles: float, dram_bytes: float, tiles: int,
                      config: HardwareConfig) -> OverlapTime:
    """max(compute, memory) + the first tile's fill + one DRAM access latency.

    With double buffering, tile i+1 loads while tile i computes; only the first
    load (or the last compute) is not hidden: min(compute, memory) / tiles.
    """
    memory_cycles = dram_bytes / config.vault_bandwidth_bytes_per_cycle
    fill = min(compute_cycles, memory_cycles) / max(1, tiles)
    latency = config.dram_latency_cycles if dram_bytes > 0 else 0
    return OverlapTime(compute_cycles, memory_cycles,
                       max(compute_cycles, memory_cycles) + fill + latency)


@dataclass(frozen=True)
class Footprint:
    """Bytes one cube keeps for one layer through a training step."""

    layer: str
    weights_bytes: float
    gradients_bytes: float
    activations_bytes: float  # the input kept for the backward pass

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.activations_bytes


def check_capacity(footprints: list[Footprint], buffers_bytes: float, config: HardwareConfig,
                   network: str) -> float:
    """Bytes per cube: every layer's footprint plus the communication buffers (the most
    one cube receives in one communication step). InputError naming the layer where the
    cube's capacity is crossed, with the numbers."""
    capacity = config.cube_capacity_bytes
    running = buffers_bytes
    gib = 2**30
    for item in footprints:
        running += item.total_bytes
        if running > capacity:
            raise InputError(
                f"capacity: {network} needs {running / gib:.2f} GiB per cube by layer {item.layer} "
                f"(weights {item.weights_bytes / gib:.2f}, gradients {item.gradients_bytes / gib:.2f}, "
                f"activations {item.activations_bytes / gib:.2f} GiB for that layer; communication "
                f"buffers {buffers_bytes / gib:.2f} GiB), more than the cube's "
                f"{config.cube_capacity_gib:g} GiB; use more accelerators, a smaller batch or a "
                "larger cube_capacity_gib"
            )
    return running
