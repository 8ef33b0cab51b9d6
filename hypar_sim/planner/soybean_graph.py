"""SoyBean's tensor tiling (`planner.soybean`, sections cited as §) on a graph network.

SoyBean states its search on a dataflow graph of matrix products (§4.2.2: the DP runs over
the graph's BFS levels); `planner.soybean` runs it on chains. Here every node of a graph is
a set of products or element-wise passes, each tensor a matrix with a stored tiling:

- **Aligned forms** from the node's description (`workload.tdl`), for the node's kind
  splitting its loop d (`graph_layout.dim_of`): a tensor it reads is split along the axis d
  indexes, or replicated (r) where d indexes none; a tensor it writes is split the same way,
  or holds partial sums (red) where d is summed over (Fig. 6's aligned tilings: on an fc
  layer these are exactly `soybean.aligned`'s R, C, r and red, R the channel axis, C the
  samples).
- **Products** (§2.1): a weighted multiply-accumulate node runs forward (reads W, X; writes
  Z), backward (reads W, dZ; writes dX; none where X is a graph input) and gradient (reads
  dZ, X; writes dW); a product of two activations runs forward and one backward product per
  input (dX reads dZ and Y, dY reads X and dZ); any other node reads its inputs and writes
  its output forward, reads dZ and writes each input's error backward (§4.5: element-wise
  ops keep one tiling on both sides, the conversions around them are charged). Eq. 3
  charges every read and write (`soybean.volume`: a tensor read by two products is
  converted twice); W and dW share one tiling, the node's best (the update is
  element-wise). Biases and norm scales are left out, as SoyBean's matrices leave them.
- **Tilings** of a tensor: split along its sample axis, along an axis some node's kind
  splits, or r; R <-> C is a change of split axis (each member keeps 1/k^2 of its part).
- **One cut** (§4.2.2): the least sum over every node's kind and every tensor's stored
  (forward, error) tilings, an exact min-sum elimination over the graph (`graph_dp`): a
  node's costs are each a table over its kind and one tensor's tilings. The loss converts
  each output's forward tiling to its error's. **k cuts** (§4.3, Algorithm 1): the top
  level first, then the groups' tile graphs (each node's split loops divided by the level
  size), as on a chain.

Kinds: batch, in, out (SoyBean's matrix dimensions, §4.5 drops the image's).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.partition import graph_layout
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS, listed
from hypar_sim.partition.shares import Column
from hypar_sim.planner.graph_dp import Factor, minimise_or_search
from hypar_sim.planner.graph_plan import GraphRequest
from hypar_sim.planner.plan_messages import graph_edges
from hypar_sim.planner.soybean import MATRIX_DIMS, SOYBEAN_KINDS, Tiling, volume
from hypar_sim.planner.strategies import register_graph_columns
from hypar_sim.workload.dims import Dim
from hypar_sim.workload.tdl import Access, Flat, Grouped, Whole

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
    above (`prefix`), and its products."""

    def __init__(self, request: GraphRequest, columns: Sequence[Column], level: int,
                 kinds: Sequence[str]) -> None:
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
            offered = [k for k in kinds if KINDS[k].dim in MATRIX_DIMS and graph_layout.offered(
                site, request.batch, columns[i] + (k,), self.upper)]
            if not offered:
                raise InputError(
                    f"--kinds: soybean cannot split node {site.node.name} ({site.node.op}) at "
                    f"level {level + 1} with {','.join(kinds)}; allowed: "
                    f"{', '.join(SOYBEAN_KINDS)} where the dimension has an index per member")
            self.options.append(offered)
        self.tiles = [self._tiles(i) for i in range(len(graph.nodes))]

    def _tiles(self, producer: int) -> list[tuple[Tile, Tile]]:
        """The (forward, error) stored tilings of a node's output: the axes any kind of its
        own or of its readers splits there, and r."""
        axes: set[Tile] = {SAMPLES}
        site = self.request.sites[producer]
        for kind in self.options[producer]:
            axes.add(_axis(site.desc.makes, graph_layout.dim_of(site.desc, kind)))
        for c, k in self.readers[producer]:
            reader = self.request.sites[c]
            for kind in self.options[c]:
                axes.add(_axis(reader.desc.reads[k], graph_layout.dim_of(reader.desc, kind)))
        # the chain's order of stored tilings (`soybean.STORED`: R, C, r): channels, samples, r
        ordered: list[Tile] = sorted(a for a in axes if a not in (REP, SAMPLES)) + [SAMPLES, REP]
        return list(itertools.product(ordered, ordered))

    def _share(self, i: int, access: Access | None, elements: float) -> float:
        """Elements of a tensor of node i in its group's share after the cuts above."""
        desc = self.request.sites[i].desc
        for size, kind in zip(self.request.hierarchy.sizes, self.columns[i], strict=False):
            if _axis(access, graph_layout.dim_of(desc, kind)) != REP:
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
            # the products write F' and read E' before a folded pooling (`soybean.Areas`)
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
            form = _axis(access, graph_layout.dim_of(self.request.sites[i].desc, kind))
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
            if graph_layout.dim_of(desc, kind) in axes:
                area /= size
        reads = 2 if any(fed) else 1  # forward, and backward where an input needs its error
        costs = []
        for dim in (graph_layout.dim_of(desc, kind) for kind in self.options[i]):
            form: Tile = axes.index(dim) if dim in axes else REP
            made: Tile = RED if form == REP else form
            costs.append(min(reads * _moved(w, form, self.parts, area, area)
                             + _moved(made, w, self.parts, area, area) for w in (0, 1, REP)))
        return np.array(costs)


def soybean_graph_columns(request: GraphRequest) -> list[Column]:
    """Algorithm 1 on a graph: the top level's cut first, then each level below on the
    groups' tile graphs."""
    kinds = [k for k in request.kinds if KINDS[k].dim in MATRIX_DIMS]
    if not kinds:
        raise InputError(f"--kinds: soybean searches {listed(SOYBEAN_KINDS)} (SoyBean's matrix "
                         f"dimensions); got {','.join(request.kinds)}")
    columns: list[Column] = [() for _ in request.sites]
    for level in range(request.hierarchy.levels):
        cut = _Cut(request, columns, level, kinds)
        factors, order = cut.factors()
        domains = [size for i in range(len(columns))
                   for size in (len(cut.options[i]), len(cut.tiles[i]))]
        choice = minimise_or_search(domains, factors, order, request.notes)
        columns = [column + (cut.options[i][choice[2 * i]],)
                   for i, column in enumerate(columns)]
    return columns


@register_graph_columns("soybean")
def _soybean(request: GraphRequest) -> list[Column]:
    return soybean_graph_columns(request)

