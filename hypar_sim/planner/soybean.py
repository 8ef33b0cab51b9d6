"""SoyBean's tensor-tiling planner (Wang, Huang and Li, "Unifying Data, Model and Hybrid
Parallelism in Deep Learning via Tensor Tiling"; sections cited as §), on a network's graph
(a `layers:` chain is a graph too).

**Matrices** (§2.1, §4.5): a conv or fc layer trains with three matmuls over its unrolled
matrices, forward F' = W x F, backward E = W^T x E', gradient dW = E' x F^T, with W and dW
K rows x C columns, F and E C x N, F' and E' K x N (before pooling); a conv's spatial
positions go with N and its kernel with C (§4.5: "multipliers" of batch and weight size), so
an area is the tensor's elements. **Tilings** (§4.1, Def. 1): R, C, r; a split reduction
leaves `red` (§4.2.1). **Aligned tilings** (§4.2.1, Fig. 6, Eq. 2) of Z = X x Y (X: a x b,
Y: b x c): split a: X=R, Y=r, Z=R; split c: X=r, Y=C, Z=C; split b: X=C, Y=R, Z=red. Our
kinds are the loops: batch = N, in = C, out = K. **Conversion cost** (§4.2.1, Fig. 7: ghost
area minus held area, summed over a group's members): `conversion`, `volume`. **Cost** of a
matmul (Eq. 2): converting its inputs to the aligned form and its output from it; of a plan
(Eq. 3): the sum over matmuls (`plan_costs`).

SoyBean states its search on a dataflow graph of matrix products (§4.2.2: the DP runs over
the graph's BFS levels). Every node is a set of products or element-wise passes, each tensor
a matrix with a stored tiling:

- **Aligned forms** from the node's description (`workload.tdl`), for the node's kind
  splitting its loop d (`node_layout.dim_of`): a tensor it reads is split along the axis d
  indexes, or replicated (r) where d indexes none; a tensor it writes is split the same way,
  or holds partial sums (red) where d is summed over (Fig. 6's aligned tilings: on an fc
  layer, R is the channel axis, C the samples).
- **Products** (§2.1): a weighted multiply-accumulate node runs forward (reads W, X; writes
  Z), backward (reads W, dZ; writes dX; none where X is a graph input: no error is computed
  for it) and gradient (reads dZ, X; writes dW); a product of two activations runs forward
  and one backward product per input (dX reads dZ and Y, dY reads X and dZ); any other node
  reads its inputs and writes its output forward, reads dZ and writes each input's error
  backward. Eq. 3 charges every read and write (`volume`: a tensor read by two products is
  converted twice). Biases and norm scales are left out, as SoyBean's matrices leave them.
- **Tilings** of a tensor: split along its sample axis, along an axis some node's kind
  splits, or r; R <-> C is a change of split axis (each member keeps 1/k^2 of its part).
- **One cut** (§4.2.2, Eqs. 4-5): the least sum over every node's kind and every tensor's
  stored (forward, error) tilings, an exact min-sum elimination over the graph (`search`;
  on a chain, the DP over its layers with state tau_l = the tilings of F_{l+1} and E_{l+1}).
  **k cuts** (§4.3, Algorithm 1, Theorem 1): the top level of the hierarchy is the first cut
  (§5.1: the slowest links), then the groups' tile graphs (each node's split loops divided
  by the level size), c_k = delta_k + 2 c_{k-1}.

Where this hardware forces a difference:

- one kind per node per level (a member's share is one box of loop dimensions): a node's
  products take the aligned forms of one loop (Eq. 2 lets each choose); only allowed kinds
  (`--kinds`) the layout offers are searched; `spatial` never (§4.5 drops image dimensions).
- element-wise ops keep one tiling on both sides (§4.5): dW takes W's (the update), the
  products write F' and read E' before a folded pooling. §4.5 bars all-replicated
  element-wise ops but §4.1's model parallelism replicates activation gradients: r is
  allowed everywhere (Def. 2).
- a level of k >= 3 members is one k-way cut: the same tilings, tiles of 1/k, conversions
  scaled by what each member holds (`conversion`), deeper costs times the groups (Theorem 1
  becomes sum_h groups_h delta_h). The tile graph of a deeper cut sizes each conversion as
  `volume` says (the paper is silent).
- a graph input takes whatever tiling its first reader wants; the loss is element-wise (an
  output's forward tiling converted to its error's).

**Against HyPar** (kinds batch, in; two-way levels): the costs are the same (dp: red -> r on
dW, 2 A(dW); mp: red -> R on F', A(F'), and R -> r on E, A(E); dp -> mp: C -> R on F, A(F)/2,
and R -> C on E, A(E)/2) except where a pooling stage sits between two layers: (1) an
in-split layer's partial output is reduced before its ReLU and pooling (red is no stored
tiling), A(F'_pre) - A(F_post) more than HyPar's Table 1; (2) at a batch -> in boundary the
next layer's forward and gradient matmuls each convert the pooled input (Eq. 3 charges each
matmul), or the producer converts the 4x larger map once: min(A, A_pre / 2) instead of Table
2's A/2. Algorithm 1 is greedy like HyPar's (§4.4 claims it optimal; `tests/test_soybean.py`
shows a chain where it is not).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from enum import StrEnum

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.partition import layout_costs, node_layout
from hypar_sim.partition.axes import sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS, kind_of, listed
from hypar_sim.partition.shares import Column
from hypar_sim.planner.plan import PlanRequest
from hypar_sim.planner.plan_messages import graph_edges
from hypar_sim.planner.search import Factor, minimise, minimise_or_search
from hypar_sim.planner.strategies import register_strategy
from hypar_sim.workload.dims import Dim
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.tdl import Access, Flat, Grouped, Whole

__all__ = ["MATRIX_DIMS", "SOYBEAN_KINDS", "Tiling", "conversion", "plan_costs",
           "soybean_columns", "volume"]

#: The kinds SoyBean can search: the loop dimensions of its matrices (§4.5 drops the image's).
MATRIX_DIMS = (Dim.N, Dim.C, Dim.K)
#: SoyBean's kinds: row, column and replicated tilings split samples, input or output channels.
SOYBEAN_KINDS = tuple(kind_of(dim) for dim in MATRIX_DIMS)


class Tiling(StrEnum):
    """SoyBean's basic tilings (§4.1) and the partial-sum form of a reduction (§4.2.1)."""

    ROW = "R"
    COL = "C"
    REP = "r"
    RED = "red"


def conversion(source: Tiling, target: Tiling, parts: int) -> float:
    """c(source -> target) of §4.2.1 as a fraction of the matrix's area, summed over the
    `parts` = k members of a group: what each needs (its "ghost area") minus what it holds.

    R <-> C: each holds 1/k, needs 1/k and shares 1/k^2 of it: 1 - 1/k in all (k = 2: 1/2,
    Figure 7(b)). R or C -> r: k - 1. red -> R or C: each sums its 1/k from k - 1 other
    partials: k - 1. red -> r: red -> R -> r, 2(k - 1) (an update of replicated weights
    happens on a partitioned dW, §4.5; at k = 2 it is also each member fetching the other's
    whole partial, 2). From r, or to the same tiling: 0."""
    if target is Tiling.RED:
        raise ValueError("red is a matmul's output form, never a target tiling")
    if source is target or source is Tiling.REP:
        return 0.0
    if source is Tiling.RED:
        return (parts - 1) * (2 if target is Tiling.REP else 1)
    return parts - 1.0 if target is Tiling.REP else 1.0 - 1.0 / parts


def volume(source: Tiling, target: Tiling, parts: int, writer: float, reader: float) -> float:
    """Elements a group moves for one conversion in the tile graph of a deeper cut (§4.3),
    where the matrix's producer and its reader may hold parts of different sizes (`writer`,
    `reader` elements): a reduction sums the producer's whole partial, a gather (to r) fills
    the reader's part, an R <-> C exchange moves within the part both hold (the smaller).
    At the top cut both are the whole matrix and this is `conversion` x area. (The paper's
    ConstructTileGraph is silent on this; with these, two-level gathers, exchanges and
    reductions sum to their exact needs minus holds (tested), and HyPar's shares follow.)"""
    if source is target or source is Tiling.REP:
        return 0.0
    if source is Tiling.RED:
        moved = (parts - 1) * writer
        return moved + ((parts - 1) * reader if target is Tiling.REP else 0.0)
    if target is Tiling.REP:
        return conversion(source, target, parts) * reader
    return conversion(source, target, parts) * min(writer, reader)


REP, RED, SAMPLES = "r", "red", -1  # a tiling: an axis index, SAMPLES, REP (or RED, a form)
Tile = int | str


def _axis(access: Access | None, dim: Dim | None) -> Tile:
    """The tensor axis `dim` indexes in `access` (the samples: SAMPLES), else REP."""
    if dim is None:
        return REP
    if dim is Dim.N:
        return SAMPLES
    if access is None:
        return REP
    axis = 0
    for expr in access.axes:
        if isinstance(expr, Flat):
            if dim in expr.dims:
                return axis
            axis += len(expr.shape)
            continue
        if not isinstance(expr, Whole) and dim in ((expr.group, expr.dim) if isinstance(
                expr, Grouped) else (expr.dim,)):
            return axis
        axis += 1
    return REP


def _moved(source: Tile, target: Tile, parts: int, writer: float, reader: float) -> float:
    """Elements a group moves to convert a tensor from `source` to `target` (`volume`)."""
    if source == target:
        return 0.0
    src = Tiling.RED if source == RED else Tiling.REP if source == REP else Tiling.ROW
    dst = Tiling.REP if target == REP else Tiling.COL
    return volume(src, dst, parts, writer, reader)


class _Cut:
    """One cut of the graph: every node's kinds at this level, its share after the cuts
    above (`columns`), and its products; with `fixed`, every node's kind is given (the cost
    of a plan), its tensors' tilings still those `kinds` offer."""

    def __init__(self, request: PlanRequest, columns: Sequence[Column], level: int,
                 kinds: Sequence[str], fixed: Sequence[str] | None = None) -> None:
        self.request, self.columns, self.level = request, columns, level
        self.parts = request.hierarchy.sizes[level]
        self.upper = Hierarchy(request.hierarchy.sizes[:level + 1])
        graph = request.graph
        #: every node's source of each input (None: a graph input), and its readers
        self.sources: list[list[int | None]] = [[None] * len(n.inputs) for n in graph.nodes]
        self.readers: list[list[tuple[int, int]]] = [[] for _ in graph.nodes]
        for p, c, k in graph_edges(graph):
            self.sources[c][k] = p
            self.readers[p].append((c, k))
        self.options = []
        for i, site in enumerate(request.sites):
            offered = [k for k in kinds if KINDS[k].dim in MATRIX_DIMS and node_layout.offered(
                site, request.batch, columns[i] + (k,), self.upper)]
            if fixed is not None and fixed[i] not in offered:
                offered.append(fixed[i])
            if not offered:
                raise InputError(
                    f"--kinds: soybean cannot split node {site.node.name} ({site.node.op}) at "
                    f"level {level + 1} with {','.join(kinds)}; allowed: "
                    f"{', '.join(SOYBEAN_KINDS)} where the dimension has an index per member")
            self.options.append(offered)
        self.tiles = [self._tiles(i) for i in range(len(graph.nodes))]
        if fixed is not None:
            self.options = [[kind] for kind in fixed]

    def domains(self) -> list[int]:
        """The sizes of the variables of `factors`: node i's kinds, its output's tilings."""
        return [size for kinds, tiles in zip(self.options, self.tiles, strict=True)
                for size in (len(kinds), len(tiles))]

    def _tiles(self, producer: int) -> list[tuple[Tile, Tile]]:
        """The (forward, error) stored tilings of a node's output: the axes any kind of its
        own or of its readers splits there, and r."""
        axes: set[Tile] = {SAMPLES}
        site = self.request.sites[producer]
        for kind in self.options[producer]:
            axes.add(_axis(site.desc.makes, node_layout.dim_of(site.desc, kind)))
        for c, k in self.readers[producer]:
            reader = self.request.sites[c]
            for kind in self.options[c]:
                axes.add(_axis(reader.desc.reads[k], node_layout.dim_of(reader.desc, kind)))
        # Definition 1's order of stored tilings, R, C, r: channels, samples, r
        ordered: list[Tile] = sorted(a for a in axes if a not in (REP, SAMPLES)) + [SAMPLES, REP]
        return list(itertools.product(ordered, ordered))

    def _share(self, i: int, access: Access | None, elements: float) -> float:
        """Elements of a tensor of node i in its group's share after the cuts above."""
        desc = self.request.sites[i].desc
        for size, kind in zip(self.request.hierarchy.sizes, self.columns[i], strict=False):
            if _axis(access, node_layout.dim_of(desc, kind)) != REP:
                elements /= size
        return elements

    def factors(self) -> tuple[list[Factor], list[int]]:
        """The cost tables over the variables: node i's kind is variable 2i, the tilings of
        its output 2i + 1; and the elimination order."""
        graph, batch = self.request.graph, self.request.batch
        tensor = [batch * math.prod(node.shape) for node in graph.nodes]
        factors: list[Factor] = []
        for i, (site, node) in enumerate(zip(self.request.sites, graph.nodes, strict=True)):
            desc = site.desc
            sources = self.sources[i]
            fed = [s is not None for s in sources]
            weighted = desc.weights is not None and desc.channel is not None
            mine = self._share(i, desc.makes, tensor[i])
            for k, source in enumerate(sources):
                if source is None:  # a graph input takes whatever tiling its reader wants
                    continue
                area = self._share(i, desc.reads[k], tensor[source])
                made = self._share(source, self.request.sites[source].desc.makes,
                                   tensor[source])
                reads = 2 if desc.channel is not None else 1  # forward; gradient or dY
                factors.append(self._uses(i, desc.reads[k], source, reads, (made, area),
                                          (area, made)))
            if weighted:
                dz = int(any(fed)) + 1  # backward, where an input needs its error; gradient
            elif desc.channel is not None:
                dz = sum(fed)  # one backward product per input that needs its error
            else:
                dz = int(any(fed))
            after = max((self._share(c, self.request.sites[c].desc.reads[k], tensor[i])
                         for c, k in self.readers[i]), default=mine)
            # the products write F' and read E' before a folded pooling
            own, far = mine * desc.pooled_ratio, after * desc.pooled_ratio
            factors.append(self._uses(i, desc.makes, i, dz, (far, own), (own, far),
                                      output=True))
            if weighted:
                factors.append(Factor((2 * i,), self._weights(i, fed)))
            if node.name in graph.outputs:  # the loss: F's tiling converted to E's
                factors.append(Factor((2 * i + 1,), np.array(
                    [_moved(f, e, self.parts, mine, mine) for f, e in self.tiles[i]])))
        order = [v for i in range(len(graph.nodes)) for v in (2 * i, 2 * i + 1)]
        return factors, order

    def _uses(self, i: int, access: Access, tensor: int, reads: int,
              read_sides: tuple[float, float], write_sides: tuple[float, float],
              output: bool = False) -> Factor:
        """Node i's conversions of one tensor (the output of node `tensor`) by its kind and
        the tensor's stored (forward, error) tilings: an input's forward tiling read `reads`
        times and its error written once; the output written once and its error read
        `reads` times. Sides: (writer's, reader's) elements."""
        tiles = self.tiles[tensor]
        kinds = self.options[i]
        table = np.zeros((len(kinds), len(tiles)))
        read, written = (1, 0) if output else (0, 1)  # which stored tiling each touches
        for a, kind in enumerate(kinds):
            form = _axis(access, node_layout.dim_of(self.request.sites[i].desc, kind))
            made = RED if form == REP else form
            for b, pair in enumerate(tiles):
                table[a, b] = reads * _moved(pair[read], form, self.parts, *read_sides) \
                    + _moved(made, pair[written], self.parts, *write_sides)
        return Factor((2 * i, 2 * tensor + 1), table)

    def _weights(self, i: int, fed: Sequence[bool]) -> np.ndarray:
        """W and dW under each kind, with their best common tiling (K rows, C columns, r)."""
        desc = self.request.sites[i].desc
        weights = desc.weights
        assert weights is not None
        axes = (desc.channel, desc.reduction) if weights.by_channel else \
            (desc.reduction, desc.channel)
        area = float(weights.rows * weights.columns * max(weights.scale, 1))
        for size, kind in zip(self.request.hierarchy.sizes, self.columns[i], strict=False):
            if node_layout.dim_of(desc, kind) in axes:
                area /= size
        reads = 2 if any(fed) else 1  # forward, and backward where an input needs its error
        costs = []
        for dim in (node_layout.dim_of(desc, kind) for kind in self.options[i]):
            form: Tile = axes.index(dim) if dim in axes else REP
            made: Tile = RED if form == REP else form
            costs.append(min(reads * _moved(w, form, self.parts, area, area)
                             + _moved(made, w, self.parts, area, area) for w in (0, 1, REP)))
        return np.array(costs)


@register_strategy("soybean", searches=True, default_kinds=SOYBEAN_KINDS,
                   own_cost="Eq. 3 bytes")
def soybean_columns(request: PlanRequest) -> list[Column]:
    """Algorithm 1 (§4.3) over the allowed kinds that have a matrix dimension: the top
    level's cut first, then each level below on the groups' tile graphs (it minimises its
    own Eq. 3 bytes: no other objective)."""
    kinds = [k for k in request.kinds if KINDS[k].dim in MATRIX_DIMS]
    if not kinds:
        raise InputError(f"--kinds: soybean searches {listed(SOYBEAN_KINDS)} (SoyBean's matrix "
                         f"dimensions); got {','.join(request.kinds)}")
    columns: list[Column] = [() for _ in request.sites]
    for level in range(request.hierarchy.levels):
        cut = _Cut(request, columns, level, kinds)
        factors, order = cut.factors()
        choice = minimise_or_search(cut.domains(), factors, order, request.notes)
        columns = [column + (cut.options[i][choice[2 * i]],)
                   for i, column in enumerate(columns)]
    return columns


def plan_costs(graph: Graph, batch: int, columns: Sequence[Column], hierarchy: Hierarchy,
               word_bytes: int = 4, kinds: Sequence[str] = SOYBEAN_KINDS) -> tuple[float, ...]:
    """SoyBean's cost of a fixed plan (a column per node), bytes per level: the cut's Eq. 3
    at its best stored tilings (those `kinds` offer) times the groups at the level, Theorem
    1's groups_h delta_h; the plan's cost is their sum."""
    bad = sorted({k for column in columns for k in column if KINDS[k].dim not in MATRIX_DIMS})
    if bad:
        raise InputError(f"plan: soybean cannot cost kind(s) {','.join(bad)}; allowed: "
                         f"{', '.join(SOYBEAN_KINDS)}")
    request = PlanRequest(graph, sites(graph), batch, hierarchy, tuple(kinds), "",
                          layout_costs.Costs(batch, word_bytes), [], word_bytes)
    deltas = []
    for level, groups in enumerate(hierarchy.subarray_counts):
        cut = _Cut(request, [column[:level] for column in columns], level, kinds,
                   [column[level] for column in columns])
        factors, order = cut.factors()
        deltas.append(groups * word_bytes * minimise(cut.domains(), factors, order)[0])
    return tuple(deltas)
