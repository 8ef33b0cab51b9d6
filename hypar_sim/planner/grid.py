"""`grid`: the 2D/2.5D/3D family of distributed CNN algorithms, one grid per contraction.

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

- **Which nodes get a grid.** Every node whose loop nest has Listing 1's shape (Sec. 2; matrix
  multiplication its special case, Sec. 1): a convolution (grouped and depthwise included), an
  fc layer, a product of two activations (attention's Q K^T and its product with V) and an
  embedding (a lookup: Ker is the table, In the token ids, no reduction). Its grid gives each
  loop dimension (`node_layout.loops`) the product of the sizes of the levels whose kind
  splits it: batch -> b (N), spatial -> h (P, output rows or token positions), out -> k (K),
  in -> c (C, the reduction: the P_c replicas of Out hold partial sums).
- **Tiles = partitions.** A member keeps its whole share in its cube through the step, so
  T_i = W_i: Case 2 and Case 1b. Case 1a (Eq. 6, tiles smaller than a partition streamed
  through local memory) has no counterpart: a grid whose share does not fit is infeasible.
- **Words between accelerators** (`node_grid_cost`). A member owns 1/P of each tensor (the
  paper's initial distribution) and receives the rest of what its partition touches: per
  input, what the members read beyond its size (replication along the dimensions that do not
  index it, and halo rows); the weights they hold beyond |Ker| (replication along b, h); for
  P_c > 1 the other replicas' partial sums of its 1/P_c of the Out block (a reduce-scatter),
  before a folded pooling (the reduction acts on the convolution's own rows). On an even grid
  this is P cost_D - 2 (|In| + |Ker|) - |Out|: Eq. 10 without the initial loads (in place,
  counted once in cost_I and again as the member's own share in cost_C) and without the Out
  share it keeps. Regions are the members' real ones (`node_layout.layout`: padding not
  stored, halo clipped at the map's edges; a grouped convolution reads its groups' channels,
  a matmul A's rows and B's columns) where Eq. 10 writes (S_w T_w + N_r - 1) rows.
- **Training.** The paper treats the forward convolution only. On the same grid the two
  backward ones move the same words transposed: dIn, partial over k, is reduce-scattered along
  k (In was gathered along k); dKer, partial over b, h, along b, h (Ker was gathered); dOut is
  gathered along c (Out was reduced). A step moves twice the forward words, less the input
  words of a graph input (no error is computed for it).
- **Memory (Eq. 11 with T = W).** The busiest member's weights, weight gradient, inputs read
  and pre-pooling Out block, in words of `word_bytes`, must fit `capacity_bytes`, node by node
  as the paper (the plan's check adds every node up). The Out block grows with P_c, as M_L
  caps P_c in Case 2b; with nothing streamed, memory follows replication.
- **Choice** (`choose`; Sec. 2.1-2.2, one convolution at a time): the grid of least training
  words among those that fit, then the smaller footprint. The paper ignores the cost between
  layers (each starts from its own initial distribution), and so does this choice, except to
  break exact ties: among the columns realising the chosen grids, the one agreeing at the most
  levels with the column of the node producing its first input (`agreement`), then the larger
  b, h, k extents, then the order of the kinds.
- **Nodes the paper does not cover** (add, pooling, norms, activations, softmax, reshapes,
  concatenation...): it ignores everything between its convolutions; here such a node copies
  the column of the producer of one of its inputs (in input order) wherever that is offered
  and costs nothing by the layout model (`layout_costs.Costs.edge`, over its input edges);
  else it takes the offered column of least such edge cost (ties: a producer's column, then
  the order of the kinds), trying every column where there are at most `MAX_TRIED`, else
  changing one level at a time from the cheapest producer's column while that helps.
- **Not in the paper.** Attention heads and groups: its loop nest has neither. A grouped
  convolution's G loop (`groups`) and attention's H loop (`heads`) are used only when --kinds
  names them, costed by the same rule. By default the grid uses the paper's four dimensions,
  so a depthwise convolution gets a grid of b and h only. A weight tied to another (GPT-2's
  output projection) counts no Ker words of its own.

Not expressible here: Case 1a's streamed tiles; extents other than products of level sizes
(2x2x2x2 gives powers of two, so Eq. 8's P^(1/3) per dimension is approximated); splitting w
(output columns); the paper's topology-free count (a word costs the same at every level).
`--traffic-model paper` (HyPar's reading of a chain) does not plan this strategy.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.partition import node_layout
from hypar_sim.partition.axes import Site
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import GRAPH_EXTRA_KINDS, Dim, kind_of
from hypar_sim.partition.redistribute import Region
from hypar_sim.partition.regions import interval, volume, weight_shape
from hypar_sim.partition.shares import Column
from hypar_sim.planner.plan import PlanRequest
from hypar_sim.planner.plan_messages import graph_edges
from hypar_sim.planner.strategies import register_strategy
from hypar_sim.workload.graph import Node

__all__ = ["GRID_KINDS", "NodeGrid", "NodeGridCost", "agreement", "choose", "grid_columns",
           "is_contraction", "node_grid", "node_grid_cost"]

#: The paper's grid dimensions as kinds: b, h (rows), k, c.
GRID_KINDS = tuple(kind_of(dim) for dim in (Dim.N, Dim.P, Dim.K, Dim.C))
#: Order and letters of grid dimensions (the paper's b, h, k, c; then ours).
_LETTERS = {Dim.N: "b", Dim.P: "h", Dim.Q: "w", Dim.K: "k", Dim.C: "c", Dim.H: "heads",
            Dim.G: "g"}
_WEIGHT_DIMS = (Dim.K, Dim.C, Dim.G)


def is_contraction(node: Node) -> bool:
    """A convolution- or matmul-shaped loop nest (a reduction), or an embedding's lookup."""
    return node.desc is not None and (node.desc.reduction is not None or node.desc.lookup)


@dataclass(frozen=True, order=True)
class NodeGrid:
    """Processors along each split loop dimension (dimensions of extent 1 left out)."""

    extents: tuple[tuple[str, int], ...]

    def extent(self, dim: Dim) -> int:
        return dict(self.extents).get(dim.value, 1)

    @property
    def members(self) -> int:
        return math.prod(e for _, e in self.extents)

    def __str__(self) -> str:
        return " x ".join(f"{_LETTERS[Dim(d)]}{e}" for d, e in self.extents) or "1"


def node_grid(site: Site, column: Column, hierarchy: Hierarchy) -> NodeGrid:
    """The grid a column realises on a node: per dimension, its levels' sizes multiplied."""
    op = site.desc
    extents: dict[Dim, int] = {}
    for size, kind in zip(hierarchy.sizes, column, strict=True):
        dim = node_layout.dim_of(op, kind)
        extents[dim] = extents.get(dim, 1) * size
    order = list(_LETTERS)
    return NodeGrid(tuple((d.value, e) for d, e in sorted(extents.items(),
                                                         key=lambda item: order.index(item[0]))))


@dataclass(frozen=True)
class NodeGridCost:
    """A contraction on a grid: words moved (all members), Eq. 10, memory."""

    grid: NodeGrid
    in_words: tuple[float, ...]  # per input: words read beyond its size (replication, halo)
    weight_words: float  # weight words held beyond |Ker| (replication along b, h)
    out_words: float  # partial-output words reduce-scattered (replication along c)
    eq10_words: float  # Eq. 10's cost_D of the busiest member, T = W
    footprint_words: float  # busiest member: weights + gradients + inputs + Out block
    errors: tuple[bool, ...]  # per input: its error is computed (not a graph input)

    @property
    def received_words(self) -> float:
        """Forward pass: what members receive that they do not own."""
        return sum(self.in_words) + self.weight_words + self.out_words

    @property
    def training_words(self) -> float:
        """Both passes: twice the forward, less the input words of inputs with no error."""
        return 2 * self.received_words - sum(
            words for words, error in zip(self.in_words, self.errors, strict=True) if not error)


def _volumes(regions: Sequence[Region]) -> np.ndarray:
    return np.array([volume(region) for region in regions], dtype=np.float64)


def _pre_pooling(own: node_layout.NodeLayout, outputs: np.ndarray) -> np.ndarray:
    """[members] Eq. 11's Out block before a folded pooling (the paper has no pooling; the
    reduction acts on the convolution's own rows): each pooled axis's interval widened to the pre-pooling
    rows (or columns) it needs (`regions.interval` of the pooling's window, halo included)."""
    pooling = own.site.desc.pooling
    if not pooling:
        return outputs
    scaled = outputs.copy()
    for m in range(own.members):
        box = own.box(m)
        for window in pooling:
            lo, hi = box[window.dim]
            if hi > lo:
                pre_lo, pre_hi = interval(window, box)
                scaled[m] = scaled[m] * (pre_hi - pre_lo) / (hi - lo)
    return scaled


def node_grid_cost(site: Site, batch: int, column: Column, hierarchy: Hierarchy,
                   errors: Sequence[bool] | None = None) -> NodeGridCost:
    """A contraction node on the grid of `column` (Sec. 2.2): every member's real region
    (uneven where a dimension does not divide), summed for the words moved (Eq. 10 without the
    initial loads), maximised for Eq. 10's cost_D and Eq. 11's footprint, T = W.
    `errors`: per input, whether its error is computed (default: all)."""
    node, op = site.node, site.desc
    own = node_layout.layout(site, batch, column, hierarchy)
    sizes = node_layout.loops(site, batch)
    reads = [_volumes(own.reads(i)) for i in range(len(node.inputs))]
    totals = [batch * math.prod(shape) for shape in node.input_shapes]
    scale = op.weights.scale if op.weights is not None else 0
    rows, columns = weight_shape(op) if scale else (0, 0)
    ker = float(rows * columns * scale)
    weights = np.full(own.members, ker)
    for dim in _WEIGHT_DIMS:
        if dim in own.boxes:
            weights = weights * (own.boxes[dim][:, 1] - own.boxes[dim][:, 0]) / sizes[dim]
    outputs = _pre_pooling(own, _volumes(own.outputs()))
    replicas = math.prod(size for size, kind in zip(hierarchy.sizes, column, strict=True)
                         if node_layout.dim_of(op, kind) is Dim.C)
    read = np.sum(reads, axis=0)
    return NodeGridCost(
        node_grid(site, column, hierarchy),
        in_words=tuple(max(0.0, float(r.sum()) - t) for r, t in zip(reads, totals, strict=True)),
        weight_words=max(0.0, float(weights.sum()) - ker),
        out_words=float(outputs.sum()) * (1 - 1 / replicas),
        eq10_words=float((outputs + read + weights).max()) + (sum(totals) + ker) / own.members,
        footprint_words=float((2 * weights + read + outputs).max()),
        errors=tuple(errors) if errors is not None else (True,) * len(node.inputs))


def choose(costs: Sequence[NodeGridCost], what: str, capacity_bytes: float | None,
           word_bytes: int) -> list[NodeGridCost]:
    """The grids of least training words among those that fit a cube (Eq. 11 with T = W),
    ties kept (then the smaller footprint); InputError naming `what` ("node conv1") and the
    memory the leanest grid needs."""
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


#: Most columns a following node tries one by one (four kinds on four levels); with more,
#: it moves one level at a time from its producers' columns.
MAX_TRIED = 256


class _Planner:
    """One planning run: the request, the nodes' columns so far, offered columns and grid
    costs remembered by geometry (networks repeat their blocks)."""

    def __init__(self, request: PlanRequest, kinds: Sequence[str],
                 capacity_bytes: float | None) -> None:
        self.request, self.kinds, self.capacity_bytes = request, tuple(kinds), capacity_bytes
        self.every = list(itertools.product(kinds, repeat=request.hierarchy.levels))
        self.inputs: dict[int, list[tuple[int, int]]] = {}
        for p, c, index in graph_edges(request.graph):
            self.inputs.setdefault(c, []).append((p, index))
        self.columns: list[Column] = []
        self._offered: dict[tuple, list[Column]] = {}
        self._costs: dict[tuple, NodeGridCost] = {}

    def offered(self, site: Site) -> list[Column]:
        r, key = self.request, site.geometry
        if key not in self._offered:
            self._offered[key] = [c for c in self.every
                                  if node_layout.offered(site, r.batch, c, r.hierarchy)]
        return self._offered[key]

    def contraction(self, i: int, offered: Sequence[Column]) -> Column:
        r, site = self.request, self.request.sites[i]
        errors = tuple(source not in r.graph.inputs for source in site.node.inputs)
        by_grid: dict[NodeGrid, list[Column]] = {}
        for column in offered:
            by_grid.setdefault(node_grid(site, column, r.hierarchy), []).append(column)
        costs = []
        for grid, columns in by_grid.items():
            key = (site.geometry, grid, errors)
            if key not in self._costs:
                self._costs[key] = node_grid_cost(site, r.batch, columns[0], r.hierarchy, errors)
            costs.append(self._costs[key])
        inputs = self.inputs.get(i, [])
        previous = self.columns[inputs[0][0]] if inputs else None
        options = []
        for cost in choose(costs, f"node {site.node.name}", self.capacity_bytes, r.word_bytes):
            g = cost.grid
            for order, column in enumerate(by_grid[g]):
                options.append(((-agreement(column, previous), -g.extent(Dim.N),
                                 -g.extent(Dim.P), -g.extent(Dim.K), order), column))
        return min(options)[1]

    def follow(self, i: int, offered: Sequence[Column]) -> Column:
        r, site = self.request, self.request.sites[i]
        inputs = self.inputs.get(i, [])
        if not inputs:
            return offered[0]

        def cost(column: Column) -> float:
            return sum(r.costs.edge(r.sites[p], site, index, self.columns[p], column,
                                    r.hierarchy) for p, index in inputs)

        allowed = set(offered)
        candidates = list(dict.fromkeys(self.columns[p] for p, _ in inputs
                                        if self.columns[p] in allowed))
        for column in candidates:
            if cost(column) == 0:
                return column
        if len(offered) <= MAX_TRIED:
            return min(candidates + [c for c in offered if c not in candidates], key=cost)
        best = min(candidates or [offered[0]], key=cost)
        least, moved = cost(best), True
        while moved:  # one level at a time, until no single change helps
            moved = False
            for level, kind in itertools.product(range(len(best)), self.kinds):
                column = best[:level] + (kind,) + best[level + 1:]
                if column in allowed and cost(column) < least:
                    best, least, moved = column, cost(column), True
        return best


def grid_columns(request: PlanRequest, capacity_bytes: float | None = None) -> list[Column]:
    """Every contraction on its cheapest grid under the paper's cost and `capacity_bytes`
    (`choose`; one cube, bytes; None: unlimited); every other node following its producers."""
    kinds = [k for k in (*GRID_KINDS, *GRAPH_EXTRA_KINDS) if k in request.kinds]
    if not kinds:
        raise InputError(f"--kinds: the grid strategy needs at least one of "
                         f"{', '.join(GRID_KINDS + GRAPH_EXTRA_KINDS)}; got {', '.join(request.kinds)}")
    planner = _Planner(request, kinds, capacity_bytes)
    for i, site in enumerate(request.sites):
        offered = planner.offered(site)
        if not offered:
            raise InputError(
                f"--kinds: node {site.node.name} ({site.node.op}) cannot be split onto "
                f"hierarchy {request.hierarchy} (batch {request.batch}) by any column of kinds "
                f"{', '.join(kinds)}; allowed kinds for grid: "
                f"{', '.join(GRID_KINDS + GRAPH_EXTRA_KINDS)}")
        pick = planner.contraction if is_contraction(site.node) else planner.follow
        planner.columns.append(pick(i, offered))
    return planner.columns


@register_strategy("grid", searches=True, default_kinds=GRID_KINDS,
                   own_cost="Eq. 10 words")
def _grid(request: PlanRequest) -> list[Column]:
    return grid_columns(request, request.capacity_bytes)
