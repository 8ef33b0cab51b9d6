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

`map_conv` searches (e, r, t, p, q) for the fewest cycles (ties: fewer filter
words loaded, less GLB traffic, fewer PEs), then picks (n, m) for the fewest
DRAM words. The search skips the (e, r, t) whose lower bound on cycles exceeds a
candidate already found; its result is that of the exhaustive search.
Cycles are *processing* cycles (Table V "processing latency"): DRAM transfer
time is left to the caller, who has the DRAM model and the access counts here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hypar_sim.hardware.conv_work import ConvWork, check_positive_ints

__all__ = [
    "AccessCounts",
    "ArrayCost",
    "PEArraySpec",
    "RSMapping",
    "elementwise_cost",
    "map_conv",
    "update_cost",
]


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
    psum_spill: bool  # psums do not fit the GLB and go to DRAM between channel groups


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


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _strip_rows(work: ConvWork, e: int, set_rows: int) -> int:
    """Input rows all strips of height e read in total (halo rows are read again)."""
    full, rest = divmod(work.out_height, e)  # full strips of e rows, then one of `rest` rows
    total = full * ((e - 1) * work.stride + set_rows)
    if rest:
        total += (rest - 1) * work.stride + set_rows
    return total


def _ragged_arange(counts: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ranges starts[g], starts[g] + 1, ... (counts[g] >= 1 values) over groups g.

    Returns (group of each value, the values), i.e. the flattened nested loop
    ``for g in groups: for v in range(starts[g], starts[g] + counts[g])``.
    """
    group = np.repeat(np.arange(counts.size), counts)
    offset = np.arange(group.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return group, starts[group] + offset


def _set_candidates(spec: PEArraySpec, set_rows: int, out_h: int, virt_chans: int,
                    filters: int) -> tuple[np.ndarray, ...]:
    """Candidate (e, r, t) PE-set arrangements; arrays e, r, t, folds, strips, one entry each.

    Ordered as the loops ``for e: for r: for t`` (ascending) would produce them: the
    order breaks the last ties of `map_conv`.
    """
    # The set is R x e ([ISCA16] Sec. V-B, [JSSC17] Fig. 9). e <= cols * (rows // R) is
    # exactly the condition that the ceil(e / cols) stacked segments of R rows fit the
    # array height, so every e of the range fits.
    e = np.arange(1, min(out_h, spec.cols * (spec.rows // set_rows)) + 1)
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


# Candidate (e, r, t) rows `map_conv` evaluates first (those of lowest cycle bound); the
# next chunks double in size until the bound of the rows left exceeds the best found.
_FIRST_ROWS = 8


@lru_cache(maxsize=65536)
def map_conv(work: ConvWork, spec: PEArraySpec, shared: str = "", sharers: int = 1) -> ArrayCost:
    """Map `work` onto the PU `spec` with the RS dataflow; cycles and word accesses. With
    `shared` ("ifmap" or "filter"), that tensor is read once from DRAM for `sharers` PUs
    doing alike pieces (`hmc.VaultSplit`): the buffer blocking weighs its words so.

    Cached by its arguments: identical calls return the identical object.
    """
    if not isinstance(work, ConvWork) or not isinstance(spec, PEArraySpec):
        raise ValueError("map_conv: expects (ConvWork, PEArraySpec)")
    if shared not in ("", "ifmap", "filter") or sharers < 1:
        raise ValueError(f"map_conv: shared {shared!r}, sharers {sharers}; allowed: '', "
                         "'ifmap' or 'filter', and at least 1 sharer")
    n_img, chans, filters = work.batch, work.in_channels, work.out_channels
    out_h, out_w, stride = work.out_height, work.out_width, work.stride
    bw = spec.bus_words

    # Tall kernels: split R into segments that fit the array height; their psums are
    # accumulated through the GLB like extra channels ([ISCA16] Sec. V-B: any
    # dimension that does not fit is folded in time).
    row_segments = _ceil(work.kernel_height, spec.rows)
    set_rows = _ceil(work.kernel_height, row_segments)
    # Wide kernels: one PE keeps q*S ifmap and p*q*S filter words ([ISCA16] Sec. V-A,
    # 1-D row primitive), so S is cut to fit the ifmap and filter spads.
    s_cap = min(spec.ifmap_rf_words, spec.filter_rf_words)
    col_segments = _ceil(work.kernel_width, s_cap)
    s_seg = _ceil(work.kernel_width, col_segments)
    virt_chans = chans * row_segments * col_segments
    in_w = min(work.in_width, (out_w - 1) * stride + s_seg)  # columns one S segment reads

    # Candidate (e, r, t) triples ("rows" below).
    e_a, r_a, t_a, folds_a, strips_a = _set_candidates(spec, set_rows, out_h, virt_chans, filters)

    # (p, q) grid with the spad limits ([ISCA16] Sec. V-A; [JSSC17] Table III p, q),
    # q-major like ``for q: for p`` ("columns" below).
    q_max = max(1, min(spec.ifmap_rf_words // s_seg, virt_chans))
    p_max = max(1, min(spec.psum_rf_words, filters))
    q_a, p_a = np.nonzero(np.arange(1, q_max + 1)[:, None] * np.arange(1, p_max + 1) * s_seg
                          <= spec.filter_rf_words)
    q_a, p_a = q_a + 1, p_a + 1
    fill = set_rows + s_seg  # 1-D pipeline fill + vertical psum chain per pass

    def cost(i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Cycles of one image (n = 1), filter words loaded and GLB words of rows i x columns j."""
        e, r, t, p, q = e_a[i], r_a[i], t_a[i], p_a[j], q_a[j]
        passes = strips_a[i] * -(-filters // (p * t)) * -(-virt_chans // (q * r))
        compute = out_w * s_seg * p * q  # one MAC per PE per cycle ([JSSC17] Sec. V-A)
        filt_words = r * t * set_rows * s_seg * p * q  # spads loaded before a pass
        ifmap_words = r * q * ((e - 1) * stride + set_rows) * in_w  # multicast to t sets
        # Psums go out on the output network and come back on the input one: separate buses
        # ([JSSC17] Sec. V: GIN for data into the array, GON for psums out of it).
        psum_words = t * p * e * out_w
        stream = np.maximum(compute, np.maximum(-(-ifmap_words // bw), -(-psum_words // bw)))
        total = passes * (-(-filt_words // bw) + stream + fill)
        return total, passes * filt_words, passes * (ifmap_words + 2 * psum_words)

    # Lower bound of `total` over all columns of each row (M filters, C' channels, F = out_w,
    # W' = in_w, R x S = set_rows x s_seg). Let pad_m(t) = min over p <= p_max
    # of ceil(M/(p t)) p t >= M (filters padded to whole passes) and pad_c(r) the same for
    # C' over q <= q_max; then passes = strips ceil(M/(p t)) ceil(C'/(q r)) times
    #   ceil(filt_words / bw)  >= strips * pad_m(t) pad_c(r) R S / bw
    #   compute                >= strips * pad_m(t) pad_c(r) F S / (r t)
    #   ceil(psum_words / bw)  >= strips * ceil(C'/(q_max r)) pad_m(t) e F / bw
    #   ceil(ifmap_words / bw) >= strips * ceil(M/(p_max t)) pad_c(r) ((e-1) U + R) W' / bw
    #   fill                   >= strips * ceil(M/(p_max t)) ceil(C'/(q_max r)) fill
    # and stream is the largest of the middle three. Floors keep it a bound in integers.
    x = np.arange(1, t_a.max() + 1)[:, None] * np.arange(1, p_max + 1)
    pad_m = (-(-filters // x) * x).min(axis=1)[t_a - 1]
    y = np.arange(1, r_a.max() + 1)[:, None] * np.arange(1, q_max + 1)
    pad_c = (-(-virt_chans // y) * y).min(axis=1)[r_a - 1]
    min_cf = -(-filters // (p_max * t_a))
    min_cc = -(-virt_chans // (q_max * r_a))
    bound = strips_a * (
        pad_m * pad_c * set_rows * s_seg // bw + min_cf * min_cc * fill
        + np.maximum(np.maximum(pad_m * pad_c * out_w * s_seg // (r_a * t_a),
                                min_cc * pad_m * e_a * out_w // bw),
                     min_cf * pad_c * ((e_a - 1) * stride + set_rows) * in_w // bw))
    # Evaluate rows in order of increasing bound, in chunks of doubling size, until the next
    # bound exceeds the fewest cycles found: no row left can then win or even tie, so the
    # result is the one the search of all rows x columns gives.
    order = np.argsort(bound, kind="stable")
    cols = np.arange(p_a.size)[None, :]
    parts, done, chunk, fewest = [], 0, _FIRST_ROWS, None
    while done < order.size and (fewest is None or bound[order[done]] <= fewest):
        rows = order[done:done + chunk]
        parts.append((rows, *cost(rows[:, None], cols)))
        fewest = parts[-1][1].min() if fewest is None else min(fewest, parts[-1][1].min())
        done, chunk = done + chunk, 2 * chunk
    rows, total, loaded, glb = (parts[0] if len(parts) == 1 else
                                (np.concatenate(arrays) for arrays in zip(*parts, strict=True)))
    # Fewest cycles; ties to fewer filter words loaded, less GLB traffic, fewer PEs, and
    # last to the first candidate in (e, r, t, q, p) loop order.
    tied = np.flatnonzero(total == fewest)
    i_t, j_t = rows[tied // p_a.size], tied % p_a.size
    pes = set_rows * e_a[i_t] * r_a[i_t] * t_a[i_t]
    best = np.lexsort((j_t, i_t, pes, glb.ravel()[tied], loaded.ravel()[tied]))[0]
    i, j = i_t[best], j_t[best]
    e, r, t, folds, strips = (int(a[i]) for a in (e_a, r_a, t_a, folds_a, strips_a))
    p, q = int(p_a[j]), int(q_a[j])
    active = set_rows * e * r * t

    # Buffer blocking ([JSSC17] Table III: GLB holds psums of m filters x n images of a
    # strip, and the ifmap rows of the q*r channels in flight): pick (n, m) with the
    # fewest DRAM words, ties to larger n (filters reused across more images); a shared
    # tensor's words count 1/sharers of a word the PU reads alone.
    rows_total = _strip_rows(work, e, set_rows)
    strip_in_rows = (e - 1) * stride + set_rows
    pt = p * t
    filters_pad = _ceil(filters, pt) * pt
    cgroups = _ceil(virt_chans, q * r)
    filter_fetch = filters_pad * virt_chans * set_rows * s_seg  # all filters, once
    ifmap_fetch = n_img * virt_chans * rows_total * in_w  # all ifmaps, once
    # n images leave room = buffer - n q r strip_in_rows W' words for psums, and the
    # largest m that fits is best for this n (fewest ifmap re-reads): a multiple of p t,
    # at least p t, so n fits iff n (q r strip_in_rows W' + p t e F) <= buffer.
    n_fit = min(n_img, spec.buffer_words // (q * r * strip_in_rows * in_w + pt * e * out_w))
    spill = n_fit < 1
    if spill:
        n, m = 1, pt
    else:
        # int64 like the cycle search above: exact below 2**63 words.
        ns = np.arange(1, n_fit + 1)
        room = spec.buffer_words - ns * q * r * strip_in_rows * in_w
        ms = np.minimum(filters_pad, room // (ns * e * out_w) // pt * pt)
        ifmap_weight = 1 if shared == "ifmap" else sharers
        filter_weight = 1 if shared == "filter" else sharers
        words = (ifmap_weight * -(-filters // ms) * ifmap_fetch
                 + filter_weight * -(-n_img // ns) * filter_fetch)
        n = n_fit - int(np.argmin(words[::-1]))  # the last (largest) n of fewest words
        m = int(ms[n - 1])

    n_groups = _ceil(n_img, n)
    passes_f = n_groups * strips * _ceil(filters, pt) * cgroups
    compute_f = n * out_w * s_seg * p * q
    filt_f = r * t * set_rows * s_seg * p * q
    ifmap_f = n * r * q * strip_in_rows * in_w
    psum_out = n * t * p * e * out_w  # after vertical and inter-set accumulation
    stream_f = max(compute_f, _ceil(ifmap_f, bw), _ceil(psum_out, bw))
    cycles = passes_f * (_ceil(filt_f, bw) + stream_f + set_rows + s_seg)
    useful = work.macs
    cycles = max(cycles, _ceil(useful, spec.pes))

    ofmap = n_img * filters * out_h * out_w
    psum_traffic = passes_f * psum_out
    psum_reads = psum_traffic - psum_traffic // cgroups  # not for the first channel group
    dram_ifmap = _ceil(filters, m) * ifmap_fetch
    dram_filter = n_groups * filter_fetch
    spill_words = (cgroups - 1) * ofmap if spill else 0
    # Register-file accesses: four per MAC, the filter weight, the ifmap value and the psum
    # read and the updated psum written ([ISCA16] Sec. II and VI-A count a MAC so; its
    # energy table prices each at one RF access), plus each word written into a spad when
    # a pass fills it; one access is one word of `word_bytes`, priced by energy_rf_pj.
    rf = 4 * useful + passes_f * active * (p * q * s_seg + n * q * in_w)
    buffer = (passes_f * ifmap_f + dram_ifmap  # ifmap to array, and in from DRAM
              + psum_traffic + psum_reads + ofmap)  # psums out/in, ofmap out to DRAM
    # Psums move up the R PEs of a set, then across the r sets of different channels
    # ([ISCA16] Sec. V-A; [JSSC17] Sec. V: local PE-to-PE psum network).
    inter_pe = passes_f * n * t * p * e * out_w * (r * (set_rows - 1) + (r - 1))
    accesses = AccessCounts(
        macs=useful, rf=rf, buffer=buffer, inter_pe=inter_pe,
        dram_read=dram_ifmap + dram_filter + spill_words, dram_write=ofmap + spill_words,
        dram_ifmap=dram_ifmap, dram_filter=dram_filter,
    )
    mapping = RSMapping(set_rows=set_rows, set_cols=e, strips=strips,
                        row_segments=row_segments, col_segments=col_segments, set_folds=folds,
                        r=r, t=t, p=p, q=q, n=n, m=m, passes=passes_f, psum_spill=spill)
    return ArrayCost(cycles=cycles, active_pes=active, utilization=active / spec.pes,
                     mac_utilization=useful / (cycles * spec.pes),
                     latency_s=cycles / spec.clock_hz, accesses=accesses, mapping=mapping)


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
    cycles = max(_ceil(ops, spec.pes), _ceil(read_words, streams * spec.bus_words),
                 _ceil(written_words, spec.bus_words), 1)
    active = max(1, min(spec.pes, ops))
    accesses = AccessCounts(macs=ops, rf=moved, buffer=2 * moved, inter_pe=0,
                            dram_read=read_words, dram_write=written_words)
    return ArrayCost(cycles=cycles, active_pes=active, utilization=active / spec.pes,
                     mac_utilization=ops / (cycles * spec.pes),
                     latency_s=cycles / spec.clock_hz, accesses=accesses, mapping=None)


@lru_cache(maxsize=4096)
def update_cost(weights: int, spec: PEArraySpec) -> ArrayCost:
    """Element-wise weight update W -= lr * dW on one PU.

    One MAC-equivalent per weight; reads W and dW from DRAM, writes W back. The
    PEs do one MAC per cycle each, but the GLB -> array buses feed W and dW at
    ``bus_words`` each per cycle and take W back at the same rate, so the update
    is bus-bound on any array wider than the bus.
    """
    check_positive_ints("update_cost", {"weights": weights})
    cycles = max(_ceil(weights, spec.pes), _ceil(weights, spec.bus_words))
    active = min(spec.pes, weights)
    accesses = AccessCounts(macs=weights, rf=3 * weights, buffer=6 * weights, inter_pe=0,
                            dram_read=2 * weights, dram_write=weights)
    return ArrayCost(cycles=cycles, active_pes=active, utilization=active / spec.pes,
                     mac_utilization=weights / (cycles * spec.pes),
                     latency_s=cycles / spec.clock_hz, accesses=accesses, mapping=None)
