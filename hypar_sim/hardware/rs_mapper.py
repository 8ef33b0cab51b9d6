"""The row-stationary mapping search: one convolution-shaped piece of work on one PU.

The searched space (issue 13, cause 2), for a piece of N images, C' input channels (R and
S segments counted as channels), M filters and E output rows:

* the PE-array mapping ([JSSC17] Table III, `pe_array.set_candidates`): set width e (the
  least width of each number of strips, ceil(E / k), up to what the array's height allows),
  r sets of different channels and t of different filters (r t sets fit the array; t at
  least half the most that fit), p filters and q channels per PE (within the scratch pads);
* the buffer blocking and loop order at the DRAM level (as nn_dataflow and Timeloop
  search them; the buffer holds what Eyeriss gives it, ifmaps and psums, [JSSC17] Table
  III): "psum" order keeps the psums of m filters x n images in the buffer while the
  channel groups stream past (the input is read once per group of m filters, the filters
  once per group of n images); "ifmap" order keeps the input rows of all C' channels of n
  images (the input read once, m = p t); where not even one image's pass fits, the psums
  spill to DRAM between channel groups ("spill"). n takes four values from the most
  images that fit with m = p t to the most that fit with every filter's psums (equal
  steps of log n), "ifmap" the most that fit; the winner's n is then searched over all
  1 .. N.

That is rows x columns x 5 points per piece (`RSMapping.space`; 10^3 to 10^6 on the paper's
networks). The objective (`PEArraySpec.objective`) is the PU's energy (default: every
access priced by `AccessEnergy`, a word the PUs share at 1/P of a DRAM read plus its
(P - 1)/P hops) or its cycles (processing overlapped with its vault's DRAM stream); ties
go to the other, then to fewer PEs, then to the first in (e, r, t, q, p) loop order.
A branch and bound (`rs_bounds`): rows are expanded by a lower bound over their columns,
their candidates evaluated by a lower bound over their blockings, both in chunks of
doubling size, until no bound left is at most the best found: the result is the
exhaustive search's (tested against it). Cached per (work, spec, sharing).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from hypar_sim.hardware.conv_work import ConvWork
from hypar_sim.hardware.pe_array import (
    AccessCounts,
    ArrayCost,
    PEArraySpec,
    RSMapping,
    ceil_div,
)
from hypar_sim.hardware.rs_bounds import Piece, Prices, candidate_bounds, row_bounds

#: Loop orders at the DRAM level (index in the blocking axis of the search).
ORDERS = ("psum", "ifmap", "spill")
#: Values of n searched in "psum" order before the winner's n is searched in full: this
#: search's own choice, from no source (more values search more of the n axis; a few
#: pieces' mappings depend on it).
_PSUM_NS = 4
#: Rows of (e, r, t) expanded first (then every row that may beat the best found) and
#: candidates evaluated first (then chunks of doubling size). Speed only: the answer is the
#: exhaustive search's whatever they are. 128 maps the 213 pieces of the vgg_a, alexnet_half
#: and sfc runs in 0.26 s CPU, 0.32-0.34 s at 32 and 0.29 s at 64 (fewer, larger numpy calls).
_FIRST_ROWS = 128
_FIRST = 128


def _evaluate(g: Piece, spec: PEArraySpec, prices: Prices, e, r, t, p, q, n, m,
              order) -> dict:
    """Counts of the candidates given as broadcastable int64 arrays (n, m the blocking;
    order 0 psum, 1 ifmap, 2 spill), their processing cycles, their cycles with the DRAM
    stream overlapped ("overlapped") and their energy ("pj")."""
    pt, qr = p * t, q * r
    strips = ceil_div(g.out_h, e)
    strip_in = g.strip_in(e)
    groups = ceil_div(g.images, n)
    cgroups = ceil_div(g.chans, qr)
    passes = groups * strips * ceil_div(g.filters, pt) * cgroups
    ofmap = g.output_words
    ifmap_fetch = g.input_words(e)
    dram_ifmap = np.where(order == 1, ifmap_fetch, ceil_div(g.filters, m) * ifmap_fetch)
    dram_filter = groups * ceil_div(g.filters, pt) * pt * g.chans * g.set_rows * g.s_seg
    spill = np.where(order == 2, (cgroups - 1) * ofmap, 0)
    active = g.set_rows * e * r * t
    ifmap = n * r * q * strip_in * g.in_w  # to the array per pass, multicast to the t sets
    psum = n * t * p * e * g.out_w  # out of the array per pass, after accumulation
    bw = spec.bus_words
    filt = r * t * g.set_rows * g.s_seg * p * q  # spads loaded before a pass
    stream = np.maximum(n * g.out_w * g.s_seg * p * q, np.maximum(ceil_div(ifmap, bw),
                                                                  ceil_div(psum, bw)))
    cycles = np.maximum(passes * (ceil_div(filt, bw) + stream + g.set_rows + g.s_seg),
                        ceil_div(g.macs, spec.pes))
    psum_traffic = passes * psum
    # RF: four accesses per MAC (filter, ifmap and psum read, psum written: [ISCA16]
    # Sec. II, VI-A), plus the spads filled at each pass.
    rf = 4 * g.macs + passes * active * (p * q * g.s_seg + n * q * g.in_w)
    buffer = (passes * ifmap + dram_ifmap + psum_traffic
              + psum_traffic - psum_traffic // cgroups + ofmap)
    # Psums move up a set's R PEs, then across its r sets ([ISCA16] Sec. V-A).
    inter_pe = psum_traffic * (r * (g.set_rows - 1) + (r - 1))
    energy = spec.energy
    pj = (energy.on_chip_pj(g.macs, rf, buffer, inter_pe) + prices.ifmap_dram * dram_ifmap
          + prices.filter_dram * dram_filter + prices.dram * (ofmap + 2 * spill))
    return dict(passes=passes, dram_ifmap=dram_ifmap, dram_filter=dram_filter, spill=spill,
                ofmap=ofmap, active=active, cycles=cycles, rf=rf, buffer=buffer,
                inter_pe=inter_pe, pj=pj,
                overlapped=np.maximum(cycles, prices.vault_cycles(spec, dram_ifmap, dram_filter,
                                                                  ofmap, 2 * spill)))


def _most_psums(g: Piece, spec: PEArraySpec, e, qr, pt, n):
    """In "psum" order with n images a group, the most filters whose psums fit beside the
    input rows of q r channels: a multiple of p t, at most the filters padded to one (below
    p t where not even p t fit). Broadcast over the arrays given."""
    room = spec.buffer_words // n - qr * g.strip_in(e) * g.in_w
    return np.minimum(ceil_div(g.filters, pt) * pt, room // (e * g.out_w) // pt * pt)


def _blockings(g: Piece, spec: PEArraySpec, e, r, t, p, q):
    """[..., 5] (n, m, order) of every candidate: four n in "psum" order, one in "ifmap"
    order; a candidate none of whose blockings fits one image spills (n = 1, m = p t)."""
    pt, qr = p * t, q * r
    strip_in = g.strip_in(e)
    filters_pad = ceil_div(g.filters, pt) * pt
    words = spec.buffer_words
    per_chan = strip_in * g.in_w
    n_hi = np.minimum(g.images, words // (qr * per_chan + pt * e * g.out_w))
    n_lo = np.maximum(1, np.minimum(g.images, words // (qr * per_chan + filters_pad * e
                                                          * g.out_w)))
    steps = np.arange(_PSUM_NS) / (_PSUM_NS - 1)
    n_psum = np.round(n_lo[..., None] * (np.maximum(n_hi, 1) / n_lo)[..., None] ** steps)
    n_psum = np.minimum(n_psum.astype(np.int64), np.maximum(n_hi, 1)[..., None])
    m_psum = _most_psums(g, spec, e[..., None], qr[..., None], pt[..., None], n_psum)
    n_ifmap = np.minimum(g.images, words // (np.maximum(g.chans, qr) * per_chan
                                             + pt * e * g.out_w))
    spills = n_hi < 1
    n = np.concatenate([np.where(spills[..., None], 1, n_psum),
                        np.maximum(n_ifmap, 1)[..., None]], axis=-1)
    m = np.concatenate([np.where(spills[..., None], pt[..., None], m_psum),
                        pt[..., None]], axis=-1)
    order = np.concatenate([np.where(spills[..., None], 2, np.zeros_like(n_psum)),
                            np.ones_like(n_ifmap)[..., None]], axis=-1)
    valid = np.concatenate([np.ones_like(n_psum, dtype=bool),
                            (n_ifmap >= 1)[..., None]], axis=-1)
    return n, m, order, valid


def _names(spec: PEArraySpec) -> tuple[str, str]:
    """(the objective's value, the other's): the search minimises them in this order."""
    return ("overlapped", "pj") if spec.objective == "cycles" else ("pj", "overlapped")


def _chunks(row_bound: np.ndarray, bounds_of, columns: int, best):
    """Candidates to evaluate (flat indices row x columns + column), in chunks of doubling
    size, the least bounds first: the pool of expanded rows' candidates (their bounds from
    `bounds_of(rows)`) is evaluated before more rows are expanded; the first rows by bound,
    then, once a best is known (`best()`, read again before each chunk), every row whose
    bound is at most it; candidates whose bound exceeds the best are dropped. So no
    candidate left unevaluated can beat or tie the best."""
    rows = np.argsort(row_bound, kind="stable")
    pool, pool_bound = np.zeros(0, dtype=np.int64), np.zeros(0)
    expanded, chunk = 0, _FIRST
    while True:
        limit = best()
        keep = pool_bound <= limit
        pool, pool_bound = pool[keep], pool_bound[keep]
        if pool.size:
            pick = np.argpartition(pool_bound, chunk - 1)[:chunk] if pool.size > chunk \
                else np.arange(pool.size)
            yield np.sort(pool[pick])
            rest = np.ones(pool.size, dtype=bool)
            rest[pick] = False
            pool, pool_bound = pool[rest], pool_bound[rest]
            chunk *= 2
        elif expanded < rows.size and row_bound[rows[expanded]] <= limit:
            # the first rows by bound; once a best is known, every row that may hold better
            until = expanded + _FIRST_ROWS if np.isinf(limit) else np.searchsorted(
                row_bound[rows], limit, side="right")
            taken = rows[expanded:until]
            expanded = expanded + taken.size
            pool = (taken[:, None] * columns + np.arange(columns)).ravel()
            pool_bound = bounds_of(taken).ravel()
        else:
            return


def _columns(g: Piece, spec: PEArraySpec) -> tuple[np.ndarray, np.ndarray]:
    """(p, q) within the spads ([ISCA16] Sec. V-A; [JSSC17] Table III), q-major."""
    at_q, at_p = np.nonzero(np.arange(1, g.q_max + 1)[:, None] * np.arange(1, g.p_max + 1)
                            * g.s_seg <= spec.filter_rf_words)
    return at_p + 1, at_q + 1


def _best_of(g: Piece, spec: PEArraySpec, prices: Prices, rows, i: np.ndarray,
             p: np.ndarray, q: np.ndarray) -> tuple[tuple, tuple]:
    """(key, (row, p, q, n, m, order)) of the best blocking of the candidates (row index
    i, p, q: arrays of one length) by the objective, then the other, fewer PEs, the row
    (loop order), q, p and the blocking's place."""
    e, r, t = (x[i][:, None] for x in rows[:3])
    p, q = p[:, None], q[:, None]
    n, m, order, valid = _blockings(g, spec, e[:, 0], r[:, 0], t[:, 0], p[:, 0], q[:, 0])
    primary, secondary = _names(spec)
    values = _evaluate(g, spec, prices, e, r, t, p, q, n, m, order)
    main = np.where(valid, np.broadcast_to(values[primary], n.shape), np.inf)
    other = np.broadcast_to(values[secondary], n.shape)
    active = np.broadcast_to(values["active"], n.shape)
    a, c = np.nonzero(main == main.min())  # the ties, then by the other objective
    pick = np.lexsort((c, p[a, 0], q[a, 0], i[a], active[a, c], other[a, c]))[0]
    a, c = a[pick], c[pick]
    key = (float(main[a, c]), float(other[a, c]), int(active[a, c]), int(i[a]),
           int(q[a, 0]), int(p[a, 0]), int(c))
    return key, (int(i[a]), int(p[a, 0]), int(q[a, 0]), int(n[a, c]), int(m[a, c]),
                 int(order[a, c]))


@lru_cache(maxsize=65536)
def map_conv(work: ConvWork, spec: PEArraySpec, shared: str = "", sharers: int = 1) -> ArrayCost:
    """Map `work` onto the PU `spec` with the RS dataflow: the best point of the searched
    space (module docstring) by `spec.objective`. With `shared` ("ifmap" or "filter"), that
    tensor is read once from DRAM for `sharers` PUs doing alike pieces (`hmc.VaultSplit`)
    and priced so. Cached by its arguments: identical calls return the identical object."""
    if not isinstance(work, ConvWork) or not isinstance(spec, PEArraySpec):
        raise ValueError("map_conv: expects (ConvWork, PEArraySpec)")
    if shared not in ("", "ifmap", "filter") or sharers < 1:
        raise ValueError(f"map_conv: shared {shared!r}, sharers {sharers}; allowed: '', "
                         "'ifmap' or 'filter', and at least 1 sharer")
    g = Piece.of(work, spec)
    prices = Prices.of(spec, shared, sharers)
    rows = g.rows(spec)
    p_c, q_c = _columns(g, spec)
    row_bound = row_bounds(g, spec, prices, rows)
    best: list[tuple] = []  # (key, point) of the best found (read by the chunks as they go)

    def bounds_of(taken: np.ndarray) -> np.ndarray:
        return candidate_bounds(g, spec, prices, tuple(x[taken] for x in rows), p_c, q_c)

    for flat in _chunks(row_bound, bounds_of, p_c.size,
                        lambda: best[0][0][0] if best else np.inf):
        i, j = np.divmod(flat, p_c.size)
        found = _best_of(g, spec, prices, rows, i, p_c[j], q_c[j])
        if not best or found[0] < best[0][0]:
            best[:] = [found]
    i, p, q, n, m, order = best[0][1]
    space = row_bound.size * p_c.size * (_PSUM_NS + 1)
    return _result(g, spec, prices, rows, (i, p, q, n, m, order), space)


def _result(g: Piece, spec: PEArraySpec, prices: Prices, rows,
            point: tuple[int, int, int, int, int, int], space: int) -> ArrayCost:
    """The winner's cost, its n searched over every value in "psum" order."""
    i, p, q, n, m, order = point
    e, r, t, folds, _ = (int(a[i]) for a in rows)
    if order == 0:  # every n whose pass fits (n <= the buffer's words), m the most psums
        pt = p * t  # that then fit
        ns = np.arange(1, min(g.images, spec.buffer_words) + 1)
        ms = _most_psums(g, spec, e, q * r, pt, ns)
        ns, ms = ns[ms >= pt], ms[ms >= pt]
        values = _evaluate(g, spec, prices, e, r, t, p, q, ns, ms, 0)
        first, second = (values[name] for name in _names(spec))
        pick = np.lexsort((-ns, second, first))[0]
        n, m = int(ns[pick]), int(ms[pick])
        chosen = {name: np.broadcast_to(value, ns.shape)[pick]
                  for name, value in values.items()}
    else:
        chosen = _evaluate(g, spec, prices, e, r, t, p, q, n, m, order)
    v = {name: int(value) for name, value in chosen.items() if name not in ("pj", "overlapped")}
    accesses = AccessCounts(
        macs=g.macs, rf=v["rf"], buffer=v["buffer"], inter_pe=v["inter_pe"],
        dram_read=v["dram_ifmap"] + v["dram_filter"] + v["spill"],
        dram_write=v["ofmap"] + v["spill"], dram_ifmap=v["dram_ifmap"],
        dram_filter=v["dram_filter"])
    mapping = RSMapping(set_rows=g.set_rows, set_cols=e, strips=ceil_div(g.out_h, e),
                        row_segments=g.row_segments, col_segments=g.col_segments,
                        set_folds=folds, r=r, t=t, p=p, q=q, n=n, m=m, passes=v["passes"],
                        order=ORDERS[order], space=space)
    active = v["active"]
    return ArrayCost(cycles=v["cycles"], active_pes=active, utilization=active / spec.pes,
                     mac_utilization=g.macs / (v["cycles"] * spec.pes),
                     latency_s=v["cycles"] / spec.clock_hz, accesses=accesses, mapping=mapping)
