"""One HMC cube: its vaults' DRAM and how a layer's work is spread over the vaults.

Each vault has its own DRAM channel (the cube's bandwidth shared evenly,
320 GB/s / 32 = 10 GB/s, i.e. 40 B per 250 MHz cycle) and, on the logic die,
one row-stationary PU. A layer's share of work on one cube is split over the
PUs along one dimension: output channels, samples, output rows or input
channels, the one with the fewest cycles, then the fewest DRAM words, whatever
the PU mapping's objective (`mapper_objective`): chosen by energy, with no
static power in the energy (HyPar 6.1's table has none), VGG-A's HyPar step
took 1.84 s instead of 0.89 s for 4% less energy (65.6 J against 68.5 J). The PUs
run in parallel, each streaming its tiles from its own vault with double
buffering, so a PU's time is max(compute, memory) plus the fill of one tile
and one DRAM access latency.

What the PUs of a split have in common crosses DRAM once (Tetris, Gao et al.,
ASPLOS 2017, Sec. 5: vaults share data over the logic die's network instead of
each fetching it): the tensor every piece reads whole (the input under an
output-channel split, the filters under a sample or row split) is read once,
each vault reading its 1/P of it, and multicast to the P PUs along a spanning
tree of the vaults' mesh, one hop per PU beyond the first; under an
input-channel split each PU holds partial sums of the whole output, reduced
and scattered over the same network (P - 1 hops and adds per output word),
each vault writing 1/P of the result. The network's hops cost energy
(`energy_vault_hop_pj_per_bit`); its bandwidth is not modelled (no cited
figure): a PU takes its stream at the rate its vault's DRAM would feed it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.conv_work import ConvWork
from hypar_sim.hardware.energy import Action, EnergyTable
from hypar_sim.hardware.pe_array import AccessEnergy, ArrayCost, PEArraySpec
from hypar_sim.hardware.rs_bounds import cycles_bound
from hypar_sim.hardware.rs_mapper import map_conv

#: The dimensions a layer's work may be split along over the PUs of a cube, each with the
#: tensor every piece reads whole (multicast), or None where the pieces hold partial sums of
#: one output instead (reduced).
SHARED_READS = {"out_channels": "ifmap", "batch": "filter", "out_height": "filter",
                "in_channels": None}
SPLIT_DIMENSIONS = tuple(SHARED_READS)


def pe_array_spec(config: HardwareConfig) -> PEArraySpec:
    """The PU of `config` as the PE-array model sees it, priced as the energy report prices
    it (`EnergyTable.from_config`)."""
    price = EnergyTable.from_config(config).pj_per_action
    return PEArraySpec(
        rows=config.pe_rows, cols=config.pe_cols,
        filter_rf_bytes=config.rf_filter_bytes, ifmap_rf_bytes=config.rf_ifmap_bytes,
        psum_rf_bytes=config.rf_psum_bytes, buffer_bytes=config.buffer_bytes,
        word_bytes=config.word_bytes, clock_hz=config.clock_hz,
        bus_bytes=config.pe_bus_bits // 8, objective=config.mapper_objective,
        energy=AccessEnergy(
            mac=price[Action.MAC], rf=price[Action.RF], inter_pe=price[Action.INTER_PE],
            buffer=price[Action.BUFFER], dram=price[Action.DRAM],
            vault_hop=price[Action.VAULT_HOP_BIT] * 8 * config.word_bytes),
        dram_bytes_per_cycle=config.vault_bandwidth_bytes_per_cycle,
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
    """How one cube spreads a piece of work over its PUs, and what they share (words)."""

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

    def _common(self) -> tuple[int, int]:
        """(the words every PU reads or writes alike, the most of them one PU does): the
        shared reads, or under an input-channel split the partial outputs."""
        field = _common_field(self.dimension)
        return self.total(field), max(getattr(cost.accesses, field) for _, _, cost in self.pieces)

    @property
    def noc_hop_words(self) -> int:
        """Words over one vault-to-vault hop: each PU beyond the first gets the shared words
        (or sends its partial sums) over one edge of a spanning tree; alone, none."""
        every, most = self._common()
        return every - most

    @property
    def reduce_adds(self) -> int:
        """Partial-sum additions of an input-channel split (one per word reduced)."""
        return self.noc_hop_words if SHARED_READS[self.dimension] is None else 0

    @property
    def dram_words(self) -> int:
        """DRAM words the cube reads and writes: every piece's, the common ones once."""
        return self.total("dram_read") + self.total("dram_write") - self.noc_hop_words

    @property
    def vault_dram_words(self) -> float:
        """DRAM words of the slowest PU's vault: its own, and 1/P of the common ones."""
        field = _common_field(self.dimension)
        accesses = self.slowest.accesses
        common = getattr(accesses, field)
        return accesses.dram_read + accesses.dram_write - common + self._common()[1] / self.pus_used


def _common_field(dimension: str) -> str:
    """The `AccessCounts` field of the words a split's PUs read or write alike."""
    shared = SHARED_READS[dimension]
    return f"dram_{shared}" if shared else "dram_write"


def split_works(work: ConvWork, dimension: str,
                pus: int) -> tuple[int, tuple[tuple[ConvWork, int], ...]]:
    """(PUs used, (piece, PUs running it) largest first) of `work` cut along `dimension`
    over at most `pus` PUs."""
    total = getattr(work, dimension)
    parts = min(pus, total)
    return parts, tuple((_piece(work, dimension, size), count)
                        for size, count in even_parts(total, parts))


def map_split(dimension: str, parts: int, works: tuple[tuple[ConvWork, int], ...],
              spec: PEArraySpec) -> VaultSplit:
    """The split of `split_works`, each piece mapped on a PU of `spec`."""
    shared = SHARED_READS[dimension] or ""
    return VaultSplit(dimension, parts, tuple((piece, count, map_conv(piece, spec, shared, parts))
                                              for piece, count in works))


def split_over_vaults(work: ConvWork, config: HardwareConfig) -> VaultSplit:
    """Spread `work` over the cube's PUs: the split with the fewest cycles (compute and its
    vault's DRAM overlapped), then the fewest DRAM words."""
    spec = pe_array_spec(config)
    options = []
    for order, dimension in enumerate(SPLIT_DIMENSIONS):
        parts, works = split_works(work, dimension, config.pus_per_cube)
        options.append((cycles_bound(works[0][0], spec), order, dimension, parts, works))
    candidates = []
    for bound, order, dimension, parts, works in sorted(options):
        if candidates and bound > min(candidates)[0][0]:
            continue  # its largest piece alone takes longer than a split already found
        split = map_split(dimension, parts, works, spec)
        time = split_time(split, config)
        candidates.append(((time.total_cycles, split.dram_words, order), split))
    return min(candidates, key=lambda candidate: candidate[0])[1]


def split_time(split: VaultSplit, config: HardwareConfig) -> OverlapTime:
    """The cube's time for `split`: its slowest PU's, with its vault's DRAM words."""
    return pu_time(split.slowest, split.vault_dram_words, config)


def pu_time(cost: ArrayCost, dram_words: float, config: HardwareConfig) -> OverlapTime:
    """A PU's time for its piece `cost` streaming `dram_words` from its vault, a tile a pass
    (`overlapped_cycles`)."""
    tiles = cost.mapping.passes if cost.mapping else 1
    return overlapped_cycles(cost.cycles, dram_words * config.word_bytes, tiles, config)


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
