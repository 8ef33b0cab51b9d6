"""The row-stationary search's view of a piece of work, its prices, and its lower bounds.

`rs_mapper` searches mappings by branch and bound; the bounds here are what it prunes
with: each at most the objective (energy in pJ, or cycles) of every point it stands for,
so pruning never changes the answer (tests check every bound against the points).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hypar_sim.hardware.conv_work import ConvWork
from hypar_sim.hardware.pe_array import PEArraySpec, ceil_div, set_candidates, strip_rows


@dataclass(frozen=True)
class Piece:
    """The work's sizes as the mapping sees them (R and S segments, padded widths)."""

    images: int
    chans: int  # C': input channels x R segments x S segments
    filters: int
    out_h: int
    out_w: int
    stride: int
    set_rows: int  # R (or one R segment)
    s_seg: int  # S (or one S segment)
    in_w: int  # input columns one S segment reads
    row_segments: int
    col_segments: int
    macs: int
    p_max: int  # most filters a PE holds (the psum spad, the filters there are)
    q_max: int  # most channels a PE holds (the ifmap spad, the channels there are)

    @classmethod
    def of(cls, work: ConvWork, spec: PEArraySpec) -> Piece:
        # Tall kernels: R in segments that fit the array height, their psums accumulated
        # like extra channels ([ISCA16] Sec. V-B); wide ones: S cut to fit the spads.
        row_segments = ceil_div(work.kernel_height, spec.rows)
        col_segments = ceil_div(work.kernel_width, min(spec.ifmap_rf_words, spec.filter_rf_words))
        s_seg = ceil_div(work.kernel_width, col_segments)
        chans = work.in_channels * row_segments * col_segments
        return cls(work.batch, chans, work.out_channels, work.out_height, work.out_width,
                   work.stride, ceil_div(work.kernel_height, row_segments), s_seg,
                   min(work.in_width, (work.out_width - 1) * work.stride + s_seg),
                   row_segments, col_segments, work.macs,
                   max(1, min(spec.psum_rf_words, work.out_channels)),
                   max(1, min(spec.ifmap_rf_words // s_seg, chans)))

    def rows(self, spec: PEArraySpec) -> tuple[np.ndarray, ...]:
        """The (e, r, t) set arrangements (`pe_array.set_candidates`): e, r, t, folds, strips."""
        return set_candidates(spec, self.set_rows, self.out_h, self.chans, self.filters)

    def strip_in(self, e):
        """Input rows one strip of e output rows reads (int or array)."""
        return (e - 1) * self.stride + self.set_rows

    def input_words(self, e):
        """Words of the input read once over all strips of width e (halos again)."""
        return self.images * self.chans * strip_rows(self.out_h, e, self.stride,
                                                     self.set_rows) * self.in_w

    @property
    def output_words(self) -> int:
        return self.images * self.filters * self.out_h * self.out_w

    @property
    def filter_words(self) -> int:
        """Words of the filters, each once (R and S segments counted as channels)."""
        return self.filters * self.chans * self.set_rows * self.s_seg


@dataclass(frozen=True)
class Prices:
    """pJ of one word of each kind for one PU; shared words at their per-PU share."""

    ifmap_dram: float
    filter_dram: float
    dram: float

    @classmethod
    def of(cls, spec: PEArraySpec, shared: str, sharers: int) -> Prices:
        energy = spec.energy
        common = (energy.dram + (sharers - 1) * energy.vault_hop) / sharers
        return cls(common if shared == "ifmap" else energy.dram,
                   common if shared == "filter" else energy.dram, energy.dram)

    def vault_cycles(self, spec: PEArraySpec, ifmap, filters, *rest):
        """Cycles the PU's vault streams its DRAM words in: `ifmap` and `filters` words
        counted at their price over a DRAM word's (a shared word's share), each of `rest`
        whole (arrays broadcast; added in this order)."""
        words = (ifmap * self.ifmap_dram + filters * self.filter_dram) / self.dram
        for more in rest:
            words = words + more
        return words * spec.word_bytes / spec.dram_bytes_per_cycle


def candidate_bounds(g: Piece, spec: PEArraySpec, prices: Prices, rows, p_c, q_c) -> np.ndarray:
    """[rows x columns] a lower bound of the objective over each candidate's blockings.

    Passes of one image group: strips ceil(M / (p t)) ceil(C' / (q r)); n images fit only
    if n (q r x + p t y) <= B (x, y: input and psum words of a channel and a filter for one
    image), so the image groups G >= ceil(N / n_hi) and G n >= N. Cycles >= G (filter
    loads + fills) + N x one image's stream, and >= the input once and G filter fetches at
    the vault's rate.
    Energy >= MACs and four RF accesses each, N x what one image moves (spad fills,
    buffer, psums between PEs), the output once, and G filter fetches plus j input reads:
    in "psum" order m >= M / j filters' psums also fit, so G >= N (q r x + M y / j) / B,
    whose least over real j >= 1 of G a + j b is >= max(a + b, a N q r x / B +
    2 sqrt(a b N M y / B)); in "ifmap" order j = 1 and the input rows of max(C', q r)
    channels fit; a candidate whose one image does not fit spills (G = N, j = M / (p t))."""
    e, r, t, _, strips = (x.astype(np.float64)[:, None] for x in rows)
    p, q = p_c.astype(np.float64)[None, :], q_c.astype(np.float64)[None, :]
    x = g.strip_in(e) * g.in_w
    y = e * g.out_w
    pt, qr = p * t, q * r
    footprint = qr * x + pt * y
    passes = strips * np.ceil(g.filters / pt) * np.ceil(g.chans / qr)
    ifmap = g.input_words(rows[0])[:, None]
    fetch, ofmap = float(g.filter_words), float(g.output_words)
    if spec.objective == "cycles":
        groups = _least_groups(g, spec, footprint)
        bw = spec.bus_words
        loads = strips * g.filter_words / bw
        stream = np.maximum(g.out_w * g.s_seg * (p * q), np.maximum(qr * x, pt * y) / bw)
        cycles = groups * (loads + passes * (g.set_rows + g.s_seg)) \
            + g.images * passes * stream
        return np.maximum(np.maximum(cycles, g.macs / spec.pes),
                          prices.vault_cycles(spec, ifmap, groups * fetch, ofmap))
    energy = spec.energy
    active = g.set_rows * e * r * t
    per_image = passes * (q * (energy.rf * active * g.in_w + energy.buffer * r * x)
                          + pt * y * (energy.buffer * np.maximum(1.0, 2 - qr / g.chans)
                                      + energy.inter_pe * (r * g.set_rows - 1)))
    per_group = passes * (p * q) * (energy.rf * g.s_seg * active) \
        + prices.filter_dram * fetch
    per_read = (prices.ifmap_dram + energy.buffer) * ifmap
    spills = footprint > spec.buffer_words  # not one image's pass fits
    return _energy_bound(g, spec, prices, ofmap, per_image, per_group, per_read, x, y, qr, pt,
                         pt, spills)


def _energy_bound(g: Piece, spec: PEArraySpec, prices: Prices, ofmap, per_image, per_group,
                  per_read, x, y, chans, filters, spill_filters, spills) -> np.ndarray:
    """The energy bound's sum (`candidate_bounds`): MACs and their four RF accesses, the
    output once, N x `per_image`, and the least over the loop orders of the image groups'
    `per_group` and the input reads' `per_read` (pJ), with `chans` channels' and `filters`
    filters' words of one image in flight (`x`, `y` each), a spill where `spills` re-reading
    the input once per `spill_filters` filters."""
    energy = spec.energy
    scale = g.images / spec.buffer_words
    psum_order = np.maximum(per_group + per_read, per_group * scale * chans * x + 2 * np.sqrt(
        per_group * scale * g.filters * y * per_read))
    ifmap_order = per_group * np.maximum(
        1.0, scale * (np.maximum(g.chans, chans) * x + filters * y)) + per_read
    data = np.minimum(psum_order, ifmap_order)
    if np.any(spills):
        data = np.minimum(data, np.where(spills, g.images * per_group
                                         + g.filters / spill_filters * per_read, np.inf))
    return ((energy.mac + 4 * energy.rf) * g.macs + (prices.dram + energy.buffer) * ofmap
            + g.images * per_image + data)


def _least_groups(g: Piece, spec: PEArraySpec, footprint: np.ndarray) -> np.ndarray:
    """The fewest image groups when one image's pass needs `footprint` buffer words (the
    most images that fit, at least one a group)."""
    fits = np.minimum(g.images, np.floor(spec.buffer_words / footprint))
    return np.ceil(g.images / np.maximum(fits, 1.0))


def row_cycles(g: Piece, spec: PEArraySpec, rows) -> np.ndarray:
    """[rows] a lower bound of the processing cycles of every column and blocking of each
    row (`candidate_bounds`' cycles with p, q at the ends of their ranges)."""
    e, r, t, _, strips = (x.astype(np.float64) for x in rows)
    x = g.strip_in(e) * g.in_w
    y = e * g.out_w
    groups = _least_groups(g, spec, r * x + t * y)
    by_filters = strips * np.ceil(g.filters / (g.p_max * t))  # passes / ceil(C' / (q r))
    by_chans = strips * np.ceil(g.chans / (g.q_max * r))  # passes / ceil(M / (p t))
    bw = spec.bus_words
    loads = strips * g.filter_words / bw
    stream = np.maximum(strips * g.filters * g.chans * g.out_w * g.s_seg / (r * t),
                        np.maximum(by_filters * g.chans * x, by_chans * g.filters * y) / bw)
    cycles = groups * (loads + by_filters * np.ceil(g.chans / (g.q_max * r))
                       * (g.set_rows + g.s_seg)) + g.images * stream
    return np.maximum(cycles, g.macs / spec.pes)


@lru_cache(maxsize=65536)
def cycles_bound(work: ConvWork, spec: PEArraySpec) -> float:
    """At most the processing cycles of any mapping of `work` on `spec`: `hmc` skips the
    vault splits whose pieces cannot be as fast as one already mapped."""
    g = Piece.of(work, spec)
    return float(row_cycles(g, spec, g.rows(spec)).min())


def row_bounds(g: Piece, spec: PEArraySpec, prices: Prices, rows) -> np.ndarray:
    """[rows] a lower bound of `candidate_bounds` over every column of each row: p and q at the
    ends of their ranges where a term falls with them, the spad fills dropped, and the
    psum and input words in flight (q r x + p t y) at their least, r x + t y."""
    e, r, t, _, strips = (x.astype(np.float64) for x in rows)
    x = g.strip_in(e) * g.in_w
    y = e * g.out_w
    by_chans = strips * np.ceil(g.chans / (g.q_max * r))  # passes / ceil(M / (p t))
    ifmap = g.input_words(rows[0])
    fetch, ofmap = float(g.filter_words), float(g.output_words)
    if spec.objective == "cycles":
        return np.maximum(row_cycles(g, spec, rows), prices.vault_cycles(
            spec, ifmap, _least_groups(g, spec, r * x + t * y) * fetch, ofmap))
    energy = spec.energy
    active = g.set_rows * e * r * t
    per_image = (strips * g.filters * g.chans / (g.p_max * t * r)
                 * (energy.rf * active * g.in_w + energy.buffer * r * x)
                 + by_chans * g.filters * y * (energy.buffer + energy.inter_pe
                                                * (r * g.set_rows - 1)))
    per_group = prices.filter_dram * fetch
    per_read = (prices.ifmap_dram + energy.buffer) * ifmap
    spills = g.q_max * r * x + g.p_max * t * y > spec.buffer_words
    return _energy_bound(g, spec, prices, ofmap, per_image, per_group, per_read, x, y, r, t,
                         g.p_max * t, spills)


