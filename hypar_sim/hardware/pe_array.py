"""Analytic model of one Eyeriss-like row-stationary (RS) processing unit (PU).

The PU is a 2-D array of PEs (12 x 14 on the Eyeriss chip), each with three
scratch pads (filter, ifmap, psum; sizes in words), a global buffer (GLB) and a
DRAM behind it. Work is any convolution-shaped computation (`conv_work.ConvWork`); a
fully-connected layer is a 1x1 convolution on a 1x1 map.

Sources (cited at each rule below):

* [JSSC17] Y.-H. Chen, T. Krishna, J. Emer, V. Sze, "Eyeriss: An Energy-Efficient
  Reconfigurable Accelerator for Deep Convolutional Neural Networks", IEEE JSSC
  52(1), 2017. Table III (RS mapping parameters m, n, e, p, q, r, t and GLB
  allocation of AlexNet), Table IV (chip: 168 PEs, 108 KB GLB, spads of 224 /
  12 / 24 words of 16 bit), Table V (per-layer latency and active PEs), Fig. 9-10
  (PE sets of AlexNet CONV1-5 on the 12 x 14 array).
* [ISCA16] Y.-H. Chen, J. Emer, V. Sze, "Eyeriss: A Spatial Architecture for
  Energy-Efficient Dataflow for CNNs", ISCA 2016, Sec. IV-V (RS dataflow: 1-D
  row primitives, logical PE sets of R x E, folding and replication) and Sec. VI
  (access counting per storage level).

Mapping (the notation of [JSSC17] Table III):

* A logical PE set has ``R`` rows (one filter row each) and ``e`` columns (one
  ofmap row each); the E ofmap rows are strip-mined into ``ceil(E / e)`` strips.
  A set wider than the array is cut into segments of at most ``cols`` columns
  stacked vertically (CONV2's 5 x 27 set in [JSSC17] Fig. 9). A kernel taller
  than the array (``R > rows``) or wider than the spads is cut into R / S
  segments whose psums are accumulated like extra input channels.
* ``r`` sets with different channels and ``t`` sets with different filters
  fill the rest of the array.
* Each PE holds ``q`` channels x ``p`` filters of one filter row (``p*q*S``
  filter words, ``q*S`` ifmap words, ``p`` psums must fit the spads).
* The GLB holds the psums of ``m`` filters x ``n`` images of a strip and the
  ifmap rows of the channels in flight; filters stream from DRAM past the GLB
  ([JSSC17] Table III allocates the GLB to ifmaps and psums only).

The search over these mappings and the buffer's blocking is `rs_mapper.map_conv`.
Cycles are *processing* cycles (Table V "processing latency"): DRAM transfer
time is left to the caller, who has the DRAM model and the access counts here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hypar_sim.hardware.conv_work import check_positive_ints

__all__ = [
    "AccessCounts",
    "AccessEnergy",
    "ArrayCost",
    "MAPPER_OBJECTIVES",
    "PEArraySpec",
    "RSMapping",
    "ceil_div",
    "elementwise_cost",
    "set_candidates",
    "strip_rows",
    "update_cost",
]

#: What the mapping search minimises (`rs_mapper`): the PU's energy or its cycles.
MAPPER_OBJECTIVES = ("energy", "cycles")


@dataclass(frozen=True)
class AccessEnergy:
    """pJ per action the mapping search prices (one word of `word_bytes`). Defaults: HyPar
    6.1's fp32 table (MAC = ADD + MULT 0.9 + 3.7, SRAM 5, DRAM 640), 1 pJ RF (Horowitz),
    2 pJ inter-PE ([ISCA16]: 2x an RF access), a vault-to-vault hop 2.5 pJ/bit (Tetris)."""

    mac: float = 4.6
    rf: float = 1.0
    inter_pe: float = 2.0
    buffer: float = 5.0
    dram: float = 640.0
    vault_hop: float = 80.0

    def on_chip_pj(self, macs, rf, buffer, inter_pe):
        """pJ of the PU's own actions, DRAM aside: MACs, scratch-pad and buffer accesses,
        words passed between PEs (counts, or arrays of them)."""
        return self.mac * macs + self.rf * rf + self.buffer * buffer + self.inter_pe * inter_pe


@dataclass(frozen=True)
class PEArraySpec:
    """One row-stationary PU. Defaults: the Eyeriss chip ([JSSC17] Table IV) at fp32 words."""

    rows: int = 12  # physical PE rows ([JSSC17] Table IV: 168 PEs as 12 x 14)
    cols: int = 14  # physical PE columns
    # Scratch pads in bytes, as the chip has them ([JSSC17] Table IV: 224, 12 and 24 words of
    # 16 bit): the words they hold follow `word_bytes` (112, 6 and 12 at fp32), the convention
    # HyPar 6.1 applies to the buffer (Eyeriss's 108 KB at 32-bit words).
    filter_rf_bytes: int = 448  # filter spad per PE
    ifmap_rf_bytes: int = 24  # ifmap spad per PE
    psum_rf_bytes: int = 48  # psum spad per PE
    buffer_bytes: int = 108 * 1024  # global buffer ([JSSC17] Table IV: 108 KB)
    word_bytes: int = 4  # fp32 in hypar-sim; 2 for the Eyeriss chip (16-bit)
    clock_hz: float = 250e6  # array clock ([JSSC17] Table IV: 100-250 MHz)
    # Width of each on-chip data bus GLB -> array (filter, ifmap, psum), bytes per cycle:
    # the config's pe_bus_bits; 64 bits is the global buffer's width in Timeloop/Accelergy's
    # Eyeriss model (configs/hypar_paper.yaml cites it): 4 16-bit or 2 fp32 words a cycle.
    bus_bytes: int = 8
    objective: str = "energy"  # what the mapping search minimises: "energy" or "cycles"
    energy: AccessEnergy = AccessEnergy()
    # The vault's DRAM rate in bytes per PU cycle (10 GB/s at 250 MHz): the cycles
    # objective overlaps the PU's DRAM stream with its processing at this rate.
    dram_bytes_per_cycle: float = 40.0

    def __post_init__(self) -> None:
        check_positive_ints("PEArraySpec", {
            "rows": self.rows, "cols": self.cols, "filter_rf_bytes": self.filter_rf_bytes,
            "ifmap_rf_bytes": self.ifmap_rf_bytes, "psum_rf_bytes": self.psum_rf_bytes,
            "buffer_bytes": self.buffer_bytes, "word_bytes": self.word_bytes,
            "bus_bytes": self.bus_bytes,
        })
        smallest = min(self.filter_rf_bytes, self.ifmap_rf_bytes, self.psum_rf_bytes)
        if smallest < self.word_bytes:
            raise ValueError(f"PEArraySpec: every scratch pad must hold one {self.word_bytes}-byte "
                             f"word; the smallest has {smallest} B")
        if self.objective not in MAPPER_OBJECTIVES:
            raise ValueError(f"PEArraySpec: objective {self.objective!r}; allowed: "
                             f"{', '.join(MAPPER_OBJECTIVES)}")
        if not self.dram_bytes_per_cycle > 0:
            raise ValueError("PEArraySpec: dram_bytes_per_cycle must be > 0")
        if not self.clock_hz > 0:
            raise ValueError(f"PEArraySpec: clock_hz must be > 0, got {self.clock_hz!r}")

    @property
    def pes(self) -> int:
        """Physical PEs."""
        return self.rows * self.cols

    @property
    def filter_rf_words(self) -> int:
        return self.filter_rf_bytes // self.word_bytes

    @property
    def ifmap_rf_words(self) -> int:
        return self.ifmap_rf_bytes // self.word_bytes

    @property
    def psum_rf_words(self) -> int:
        return self.psum_rf_bytes // self.word_bytes

    @property
    def bus_words(self) -> int:
        """Words per cycle each GLB <-> array bus carries (at least one)."""
        return max(1, self.bus_bytes // self.word_bytes)

    @property
    def buffer_words(self) -> int:
        """Global-buffer capacity in words."""
        return self.buffer_bytes // self.word_bytes


@dataclass(frozen=True)
class AccessCounts:
    """Data movement of one piece of work, in words (not bytes) per storage level."""

    macs: int  # useful MACs
    rf: int  # scratch-pad reads + writes
    buffer: int  # global-buffer reads + writes
    inter_pe: int  # words passed PE to PE (psum accumulation between PEs / sets)
    dram_read: int  # words read from DRAM (ifmap, filter, spilled psums)
    dram_write: int  # words written to DRAM (ofmap, spilled psums)
    dram_ifmap: int = 0  # of dram_read: the input feature map's words (its re-reads included)
    dram_filter: int = 0  # of dram_read: the filters' words


@dataclass(frozen=True)
class RSMapping:
    """A row-stationary mapping in the notation of [JSSC17] Table III."""

    set_rows: int  # filter rows per PE set (R, or one R segment)
    set_cols: int  # e: ofmap rows per PE set (strip height)
    strips: int  # ceil(E / e)
    row_segments: int  # R split into this many segments (R > rows)
    col_segments: int  # S split into this many segments (S > spads)
    set_folds: int  # a set wider than the array is stacked in this many column segments
    r: int  # sets with different channels
    t: int  # sets with different filters
    p: int  # filters per PE
    q: int  # channels per PE
    n: int  # images per pass (filters reused across them in the spad)
    m: int  # filters whose psums the GLB holds
    passes: int  # processing passes of the whole array
    order: str = "psum"  # DRAM-level loop order (`rs_mapper.ORDERS`): psum, ifmap or spill
    space: int = 0  # (e, r, t, p, q, blocking) points of the searched space

    @property
    def psum_spill(self) -> bool:
        """Whether psums do not fit the GLB and go to DRAM between channel groups."""
        return self.order == "spill"


@dataclass(frozen=True)
class ArrayCost:
    """Cost of one piece of work on one PU."""

    cycles: int  # processing cycles (DRAM transfer time excluded)
    active_pes: int  # PEs the mapping configures (as [JSSC17] Table V counts them)
    utilization: float  # active_pes / (rows * cols), in [0, 1]
    mac_utilization: float  # useful MACs / (cycles * rows * cols), in [0, 1]
    latency_s: float  # cycles / clock, seconds
    accesses: AccessCounts
    mapping: RSMapping | None  # None for element-wise work


def ceil_div(a, b):
    """The ceiling of a / b for positive integers (or int arrays)."""
    return -(-a // b)


def strip_rows(out_h: int, e, stride: int, set_rows: int):
    """Input rows all strips of height e (int or array) read in total (halos read again)."""
    full, rest = out_h // e, out_h % e  # full strips of e rows, then one of `rest` rows
    return full * ((e - 1) * stride + set_rows) + np.where(
        rest > 0, (rest - 1) * stride + set_rows, 0)


def _ragged_arange(counts: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ranges starts[g], starts[g] + 1, ... (counts[g] >= 1 values) over groups g.

    Returns (group of each value, the values), i.e. the flattened nested loop
    ``for g in groups: for v in range(starts[g], starts[g] + counts[g])``.
    """
    group = np.repeat(np.arange(counts.size), counts)
    offset = np.arange(group.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return group, starts[group] + offset


def set_candidates(spec: PEArraySpec, set_rows: int, out_h: int, virt_chans: int,
                    filters: int) -> tuple[np.ndarray, ...]:
    """Candidate (e, r, t) PE-set arrangements; arrays e, r, t, folds, strips, one entry each.

    Ordered as the loops ``for e: for r: for t`` (ascending) would produce them: the
    order breaks the last ties of `rs_mapper.map_conv`.
    """
    # The set is R x e ([ISCA16] Sec. V-B, [JSSC17] Fig. 9). e <= cols * (rows // R) is
    # exactly the condition that the ceil(e / cols) stacked segments of R rows fit the
    # array height, so every e of the range fits.
    # Of the widths giving the same number of strips k, the least, ceil(E / k), is never
    # worse: the same passes and input rows ((E - k) U + k R in all), fewer PEs, shorter
    # psum and ifmap streams, more sets that fit; so only those widths are candidates.
    e = np.arange(1, min(out_h, spec.cols * (spec.rows // set_rows)) + 1)
    e = e[-(-out_h // (-(-out_h // e))) == e]
    folds = -(-e // spec.cols)  # segments of a set wider than the array, stacked
    # Replicated sets ([JSSC17] Fig. 9): how many R*folds x min(e, cols) sets fit.
    fit = (spec.rows // (set_rows * folds)) * (spec.cols // np.minimum(e, spec.cols))
    by_e, r = _ragged_arange(np.minimum(fit, virt_chans), np.ones_like(e))  # r = 1..min(fit, C')
    t_hi = np.minimum(fit[by_e] // r, filters)
    # Fewer than half the sets that fit never pays: compute time scales with 1/(r*t).
    t_lo = np.maximum(1, t_hi // 2)
    by_r, t = _ragged_arange(t_hi - t_lo + 1, t_lo)
    by_e = by_e[by_r]
    return e[by_e], r[by_r], t, folds[by_e], -(-out_h // e[by_e])


def elementwise_cost(ops: int, read_words: int, written_words: int, streams: int,
                     spec: PEArraySpec) -> ArrayCost:
    """An element-wise pass on one PU (a weightless operator of a graph: pooling, an
    activation, a normalisation, an addition, a copy), the update's model below with
    other counts: `ops` operations, one per PE per cycle; the input words arrive over
    `streams` GLB -> array buses of ``bus_words`` each per cycle and the output leaves at
    that rate; every word is read from DRAM and written back once, through the GLB (in and
    out) and a scratch pad once."""
    check_positive_ints("elementwise_cost", {"streams": streams})
    moved = read_words + written_words
    cycles = max(ceil_div(ops, spec.pes), ceil_div(read_words, streams * spec.bus_words),
                 ceil_div(written_words, spec.bus_words), 1)
    active = max(1, min(spec.pes, ops))
    accesses = AccessCounts(macs=ops, rf=moved, buffer=2 * moved, inter_pe=0,
                            dram_read=read_words, dram_write=written_words)
    return ArrayCost(cycles=cycles, active_pes=active, utilization=active / spec.pes,
                     mac_utilization=ops / (cycles * spec.pes),
                     latency_s=cycles / spec.clock_hz, accesses=accesses, mapping=None)


@lru_cache(maxsize=4096)
def update_cost(weights: int, spec: PEArraySpec, state_words: int = 0,
                macs_per_weight: int = 1) -> ArrayCost:
    """Element-wise weight update on one PU: W -= lr * dW (SGD), or an optimizer's rule
    that also reads and writes back `state_words` values per weight in
    `macs_per_weight` MACs (`planner.optimizers`).

    SGD: one MAC-equivalent per weight; reads W and dW from DRAM, writes W back. The PEs
    do one MAC per cycle each, but the GLB -> array buses feed W and dW at ``bus_words``
    each per cycle and take W back at the same rate, so the update is bus-bound on any
    array wider than the bus. An optimizer's state streams in over the same two input
    buses and back over the output bus.
    """
    check_positive_ints("update_cost", {"weights": weights, "macs_per_weight": macs_per_weight})
    reads, writes = 2 + state_words, 1 + state_words  # words per weight
    cycles = max(ceil_div(macs_per_weight * weights, spec.pes),
                 ceil_div(reads * weights, 2 * spec.bus_words),
                 ceil_div(writes * weights, spec.bus_words))
    active = min(spec.pes, weights)
    macs = macs_per_weight * weights
    accesses = AccessCounts(macs=macs, rf=(reads + writes) * weights,
                            buffer=2 * (reads + writes) * weights, inter_pe=0,
                            dram_read=reads * weights, dram_write=writes * weights)
    return ArrayCost(cycles=cycles, active_pes=active, utilization=active / spec.pes,
                     mac_utilization=macs / (cycles * spec.pes),
                     latency_s=cycles / spec.clock_hz, accesses=accesses, mapping=None)
