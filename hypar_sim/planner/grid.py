"""`grid`: the 2D/2.5D/3D family of distributed CNN algorithms, one grid per layer.

Paper: R. Li, Y. Xu, A. Sukumaran-Rajam, A. Rountev, P. Sadayappan, "Efficient distributed
algorithms for Convolutional Neural Networks" (SPAA 2021; arXiv:2105.13480). Its Sec. 2.2 puts
the P processors on a logical grid P_b x P_h x P_w x P_k x P_c; each runs the work partition
W_i = N_i / P_i of the loop nest of Listing 1. In is read by the P_k processors along k, Ker by
the P_b P_h P_w along b, h, w, and Out, where P_c > 1, is *replicated* over the P_c processors
along c, each holding a partial sum reduced at the end. P_c = 1 is the 2D (SUMMA) algorithm
(Case 1, Eq. 6-7); P_c > 1 the 2.5D one when memory bounds it (Case 2b, Eq. 9) and the 3D one
when it does not (Case 2a, Eq. 8). The paper counts words moved per processor to and from a
virtual global memory: cost_D = cost_I + cost_C (Eq. 10), cost_I the initial distribution
(1/P of In and of Ker, and the Out block), cost_C the In and Ker tiles broadcast to it.

On this hardware:

- **Grid of a column.** Each level's kind names a dimension: batch -> b, spatial -> h (output
  rows), out -> k, in -> c. P_i is the product of the sizes of the levels of that kind. The
  replication factor of 2.5D is P_c: the levels of kind `in`, whose members hold partial sums
  of the same Out block, reduced (the paper's replication of Out across c).
- **Tiles = partitions.** A member keeps its whole share in its cube through the step (what
  `hardware.capacity.footprint` counts), so T_i = W_i: Case 2 and Case 1b. Case 1a (Eq. 6, tiles
  smaller than a partition streamed through local memory in W_c steps) has no counterpart:
  a grid whose share does not fit a cube is infeasible.
- **Bytes between accelerators.** A member owns 1/P of each tensor (the paper's initial
  distribution) and receives the rest of what its partition touches: its In slice minus its
  part, its Ker slice minus its part, and for P_c > 1 the other replicas' partial sums of its
  1/P_c of the Out block (a reduce-scatter). Summed over the members (`received_words`):
  In (P_k - 1) + halo rows + Ker (P_b P_h - 1) + Out (P_c - 1), which on an even grid is
  P cost_D - 2 (|In| + |Ker|) - |Out|: Eq. 10 without the initial loads (already in place,
  counted once in cost_I and again as the member's own share of the broadcasts in cost_C)
  and without the Out share the member keeps. Slices are the members' real boxes
  (`partition.shares`: padding not stored, halo rows clipped at the map's edges) where Eq. 10
  writes (S_w T_w + N_r - 1) rows.
- **Training.** The paper treats the forward convolution only. On the same grid the two
  backward ones move the same words transposed: dIn, partial over k, is reduce-scattered along
  k (In was gathered along k); dKer, partial over b, h, along b, h (Ker was gathered; the
  all-reduce of weights kept replicated moves the same); dOut is gathered along c (Out was
  reduced). A step moves twice the forward words, less the first layer's dIn (not computed).
- **Memory (Eq. 11 with T = W).** The busiest member's weights, weight gradient and kept input
  (`footprint`) plus its pre-pooling output block (Eq. 11's Out block), in words of
  `word_bytes`, must fit `capacity_bytes`, layer by layer as the paper (the simulator adds up
  every layer's footprint). The Out block grows with P_c, as M_L caps P_c in Case 2b; but with
  nothing streamed every replicated tensor costs memory as it costs words, so the limit bites
  mostly where weights are replicated (their gradient doubles them): see the tests.

Search: per layer, as the paper optimises one convolution (Sec. 2.1-2.2): every grid the
hierarchy realises with the allowed kinds and the traffic model offers; the least training
words, then the smaller footprint. The paper ignores the cost between layers (each starts
from its own initial distribution), and so does this search, except to break exact ties
(equal words and footprint: equal-size levels swapped, or a 1x1 convolution split by rows
instead of samples): then the column agreeing with the previous layer's at the most levels,
then the larger batch, rows, out extents.

Not expressible here: Case 1a's streamed tiles; extents other than products of level sizes
(2x2x2x2 gives powers of two, so Eq. 8's P^(1/3) per dimension is approximated); splitting w
(output columns); the paper's topology-free count (a word costs the same at every level);
pooling (the paper has none: the pre-pooling output is counted, which the reduction acts on).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import Dim, kind_of
from hypar_sim.partition.shares import Column, conv_spans, input_spans, member_intervals
from hypar_sim.planner.strategies import PlanRequest, register_strategy
from hypar_sim.workload.layers import Layer

#: The kinds a grid uses, in the order of its dimensions: b, h (rows), k, c.
GRID_KINDS = tuple(kind_of(dim) for dim in (Dim.N, Dim.P, Dim.K, Dim.C))


@dataclass(frozen=True, order=True)
class Grid:
    """Processor-grid extents: samples x output rows x output channels x input channels."""

    batch: int = 1
    rows: int = 1
    out: int = 1
    inn: int = 1  # P_c, the replication factor of Out

    @property
    def members(self) -> int:
        return self.batch * self.rows * self.out * self.inn

    def __str__(self) -> str:
        return f"b{self.batch} x h{self.rows} x k{self.out} x c{self.inn}"


def grid_of(column: Column, hierarchy: Hierarchy) -> Grid:
    """The grid a column realises: per dimension, the product of its levels' sizes."""
    extents = [1, 1, 1, 1]
    for size, kind in zip(hierarchy.sizes, column, strict=True):
        extents[GRID_KINDS.index(kind)] *= size
    return Grid(*extents)


@dataclass(frozen=True)
class GridCost:
    """A layer on a grid: words moved (all members), the paper's Eq. 10, memory."""

    grid: Grid
    in_words: float  # forward: input words members receive (replication along k, halo rows)
    weight_words: float  # forward: weight words received (replication along b, h)
    out_words: float  # forward: partial-output words reduce-scattered (replication along c)
    eq10_words: float  # Eq. 10's cost_D of the busiest member, T = W (virtual global memory)
    footprint_words: float  # busiest member: weights + gradients + input + pre-pooling output
    first: bool  # the network's first layer: no input error is computed

    @property
    def received_words(self) -> float:
        """Forward pass: what members receive that they do not own (the mapping above)."""
        return self.in_words + self.weight_words + self.out_words

    @property
    def training_words(self) -> float:
        """Forward and both backward passes (twice the forward, less the first layer's dIn)."""
        return 2 * self.received_words - (self.in_words if self.first else 0.0)


def _lengths(intervals: np.ndarray) -> np.ndarray:
    return (intervals[..., 1] - intervals[..., 0]).astype(np.float64)


def tensor_words(layer: Layer, batch: int) -> tuple[int, int, int]:
    """|In|, |Ker|, |Out| of a layer: input, weights, pre-pooling output (elements)."""
    out = layer.conv_output
    return (batch * layer.input.size, layer.weights,
            batch * out.channels * out.height * out.width)


def grid_cost(layer: Layer, batch: int, column: Column, hierarchy: Hierarchy,
              first: bool = False) -> GridCost:
    """`layer` on the grid of `column`: every member's real box (uneven where a dimension
    does not divide), summed for the words and maximised for Eq. 10 and memory."""
    def parts(total: int, dim: Dim) -> np.ndarray:
        return member_intervals(total, column, hierarchy, dim)

    n = _lengths(parts(batch, Dim.N))
    k = _lengths(parts(layer.output.channels, Dim.K))
    c = _lengths(parts(layer.input.channels, Dim.C))
    conv_rows = conv_spans(layer, parts(layer.output.height, Dim.P), "rows")
    conv_cols = conv_spans(layer, np.array([0, layer.output.width]), "cols")
    in_rows = _lengths(input_spans(layer, conv_rows, "rows"))
    in_cols = _lengths(input_spans(layer, conv_cols, "cols"))
    inputs = n * c * in_rows * in_cols
    weights = k * c * layer.kernel ** 2
    outputs = n * k * _lengths(conv_rows) * _lengths(conv_cols)
    total_in, total_ker, _ = tensor_words(layer, batch)
    grid = grid_of(column, hierarchy)
    members = hierarchy.members
    return GridCost(
        grid,
        in_words=max(0.0, float(inputs.sum()) - total_in),
        weight_words=max(0.0, float(weights.sum()) - total_ker),
        out_words=float(outputs.sum()) * (1 - 1 / grid.inn),
        eq10_words=float((outputs + inputs + weights).max()) + (total_in + total_ker) / members,
        footprint_words=float((2 * weights + inputs + outputs).max()),
        first=first)


def eq4_words(layer: Layer, batch: int, grid: Grid) -> float:
    """Eq. 4 (Sec. 2.1) at tiles = partitions: W_k W_bhw + W_k W_c N_r N_s + W_c W_bhw S^2
    words per processor (halo and the N_r - 1 terms dropped, real-valued shares)."""
    out = layer.conv_output
    w_bhw = batch * out.height * out.width / (grid.batch * grid.rows)
    w_k, w_c = out.channels / grid.out, layer.input.channels / grid.inn
    return w_k * w_bhw + w_k * w_c * layer.kernel ** 2 + w_c * w_bhw * layer.stride ** 2


def table1_words(layer: Layer, batch: int, members: int, memory_words: float) -> float:
    """Table 1 (Sec. 2.1): the least Eq. 4 cost per processor with c the innermost tile loop,
    local memory M_L = `memory_words` (math.inf: unbounded). V = N_k N_c N_bhw / P,
    A = N_k N_bhw / P, B = N_r N_s S_w S_h."""
    out = layer.conv_output
    n_bhw = batch * out.height * out.width
    volume = out.channels * layer.input.channels * n_bhw / members
    block = out.channels * n_bhw / members
    stencil = layer.kernel ** 2 * layer.stride ** 2
    three_d = volume ** (2 / 3) * stencil ** (1 / 3)
    if block >= memory_words:  # Eq. 6 (Case 1a, 2D with tiles below the partition)
        return block + 2 * volume * math.sqrt(stencil / memory_words)
    if memory_words >= three_d:  # Eq. 8 (Case 2a, 3D)
        return 3 * three_d
    return memory_words + 2 * volume * math.sqrt(stencil / memory_words)  # Eq. 9 (2.5D)


def grid_columns(hierarchy: Hierarchy, kinds: Sequence[str]) -> dict[Grid, Column]:
    """Every grid the hierarchy realises with `kinds`, and one column realising it (the first
    in the order of `kinds`, top level first)."""
    reachable: dict[Grid, Column] = {Grid(): ()}
    for size in hierarchy.sizes:
        grown: dict[Grid, Column] = {}
        for grid, column in reachable.items():
            for kind in kinds:
                extents = [grid.batch, grid.rows, grid.out, grid.inn]
                extents[GRID_KINDS.index(kind)] *= size
                grown.setdefault(Grid(*extents), column + (kind,))
        reachable = grown
    return reachable


def realise(grid: Grid, hierarchy: Hierarchy, kinds: Sequence[str],
            previous: Column | None) -> Column:
    """The column realising `grid` that agrees with `previous` at the most levels (ties: the
    first in the order of `kinds`); every such column has the same paper cost."""
    sizes = hierarchy.sizes
    target = (grid.batch, grid.rows, grid.out, grid.inn)

    @cache
    def best(level: int, extents: tuple[int, ...]) -> tuple[int, Column] | None:
        if level == len(sizes):
            return (0, ()) if extents == target else None
        found = None
        for kind in kinds:
            index = GRID_KINDS.index(kind)
            grown = list(extents)
            grown[index] *= sizes[level]
            if target[index] % grown[index]:
                continue
            rest = best(level + 1, tuple(grown))
            if rest is None:
                continue
            score = rest[0] + int(previous is not None and previous[level] == kind)
            if found is None or score > found[0]:
                found = (score, (kind,) + rest[1])
        return found

    result = best(0, (1, 1, 1, 1))
    if result is None:
        raise ValueError(f"grid {grid} is not realisable on hierarchy {hierarchy}")
    return result[1]


def layer_grids(request: PlanRequest, layer: Layer, first: bool,
                columns: dict[Grid, Column]) -> list[GridCost]:
    """Every grid the traffic model offers `layer`, costed."""
    return [grid_cost(layer, request.batch, column, request.hierarchy, first)
            for column in columns.values()
            if request.model.offered(layer, request.batch, column, request.hierarchy)]


def choose(costs: Sequence[GridCost], what: str, capacity_bytes: float | None,
           word_bytes: int) -> list[GridCost]:
    """The grids of least training words among those that fit a cube, ties kept (then the
    smaller footprint); InputError naming `what` ("layer conv1", "node add3") and the memory
    the leanest grid needs. Any costs with `training_words`, `footprint_words` and `grid`."""
    fitting = [c for c in costs
               if capacity_bytes is None or c.footprint_words * word_bytes <= capacity_bytes]
    if not fitting:
        leanest = min(costs, key=lambda c: (c.footprint_words, c.grid))
        gib = 2 ** 30
        raise InputError(
            f"capacity: {what} fits no grid in a cube of "
            f"{capacity_bytes / gib:.3g} GiB: the leanest grid ({leanest.grid}) needs "
            f"{leanest.footprint_words * word_bytes / gib:.3g} GiB per cube; use more "
            "accelerators, a smaller batch or a larger cube_capacity_gib")
    best = min((c.training_words, c.footprint_words) for c in fitting)
    return [c for c in fitting if (c.training_words, c.footprint_words) == best]


def agreement(column: Column, previous: Column | None) -> int:
    """At how many levels two columns agree (the tie-break towards the producer's)."""
    return sum(a == b for a, b in zip(column, previous or (), strict=False))


@register_strategy("grid", searches=True, default_kinds=GRID_KINDS, own_cost="Eq. 10 words")
def grid_strategy(request: PlanRequest) -> list[Column]:
    """Each layer on its cheapest grid under the paper's cost and the memory limit."""
    kinds = [kind for kind in GRID_KINDS if kind in request.options.kinds]
    if not kinds:
        raise InputError(f"--kinds: the grid strategy needs at least one of "
                         f"{', '.join(GRID_KINDS)}; got {', '.join(request.options.kinds)}")
    columns = grid_columns(request.hierarchy, kinds)
    chosen: list[Column] = []
    for index, layer in enumerate(request.network.layers):
        costs = layer_grids(request, layer, index == 0, columns)
        if not costs:
            raise InputError(
                f"--kinds: layer {layer.name} cannot be split onto hierarchy "
                f"{request.hierarchy} (batch {request.batch}) by any grid of kinds "
                f"{', '.join(kinds)}; allowed kinds for grid: {', '.join(GRID_KINDS)}")
        previous = chosen[-1] if chosen else None
        options = []
        for tied in choose(costs, f"layer {layer.name}", request.capacity_bytes,
                           request.word_bytes):
            column = realise(tied.grid, request.hierarchy, kinds, previous)
            if not request.model.offered(layer, request.batch, column, request.hierarchy):
                column = columns[tied.grid]  # a model whose offer depends on more than grids
            g = tied.grid
            options.append(((-agreement(column, previous), -g.batch, -g.rows, -g.out), column))
        chosen.append(min(options)[1])
    return chosen


# This strategy's implementation on graph networks registers itself on the entry above.
from hypar_sim.planner import grid_graph  # noqa: E402, F401
