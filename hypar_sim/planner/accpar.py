"""AccPar's planner (Song, Chen, Zhuo, Qian, Li and Chen, "AccPar: Tensor Partitioning for
Heterogeneous Deep Learning Accelerators", HPCA 2020): its three types, its cost and its
level-by-level search, on a network's graph (a `layers:` chain is a graph too).

Sources. The paper's text was reachable only in part (its abstract); its tables are taken from
the authors' public implementation (github.com/linghaosong/AccPar, `src/accpar.cpp`:
`Com_Cost_Inter_Layer`, `dp_on_one_hierarchy`, `h_partition`), checked by deriving each entry
from the tensor layouts (`tests/test_accpar.py`). "Paper" below means the paper's model as those
sources give it; section names are the paper's, not numbers we could verify. A layer trains
with F_{l+1} = F_l x W_l (F_l: B x D_i, W_l: D_i x D_o), E_l = E_{l+1} x W_l^T,
dW_l = F_l^T x E_{l+1}. Every quantity below is one member's, in elements, at one level of k
members, on the share of the tensors its group holds after the levels above.

- **Types** (the three basic partition types). A node takes one at each level: Type-I splits
  the samples B (`batch`), Type-II the reduction D_i (`in`, input channels C), Type-III the
  output channels D_o (`out`, K); a convolution's positions go with B, its kernel with D_i.
  A node without a reduction (pooling, add, norms, activations, softmax, reshapes...) has
  one channel dimension, which in and out both split (`node_layout.dim_of`): its Type-II
  and Type-III are one split. AccPar has no such nodes (its layers fold them in).
- **Intra-layer communication** (`intra_elements`): a split that leaves a partial sum
  all-reduces it, 2 (k - 1)/k of it per member (a ring's reduce-scatter and all-gather, as
  the simulator sends it; k = 2: the whole tensor, the authors' A(.)): Type-I dW (here with a
  bias's or a norm's scale and shift), Type-II the output F_{l+1} (after a folded pooling, as
  the authors count it), Type-III the error E_l of an input it does not index. Which tensors
  are partial is read off the node's one-level layout (`node_layout.layout`).
- **Inter-layer communication** (`edge_fraction`): per edge (a tensor from its producer to one
  consumer) F moves forward from what each member of the producer holds to what the same
  member of the consumer reads, E backward the other way; a member receives what it needs
  minus what it holds, a partial sum whole after its all-reduce. On two layers' matrices this
  is the authors' 3 x 3 table (`Com_Cost_Inter_Layer`): rows to columns (k - 1)/k^2, parts to
  whole (k - 1)/k, else 0; k = 2: I->II, III->I 1/4 (A(F) + A(E)); I->III, III->III 1/2 A(F);
  II->I, II->II 1/2 A(E). On a graph it also costs what that table cannot express: a reshape
  into heads, a concatenation read in parts, a transpose. The fraction depends on the two
  types alone, as the table does: taken on the whole tensor at one level of k members, times
  the tensor's share in the consumer's group (`h_partition` divides by the types above).
- **Computation** (`compute_seconds`): forward, backward and gradient products, 3 x the node's
  forward MACs per sample x batch, of the heaviest sub-group's share of the loop nest, at the
  sub-group's peak. **Heterogeneity**: the paper's partition ratio alpha = c_i / (c_i + c_j)
  gives the faster group the larger share; every cube here is the same, so alpha = 1/k, and
  shares are integer boxes (`partition.shares`): a split of d indices gives the heaviest member
  ceil(d / k), so only rounding (and communication) tells the types apart in computation.
- **Cost** of a plan: communication elements x word_bytes / one link's bandwidth + computation
  seconds, per level, summed over levels (`AccParPlan.seconds`).

**Search.** The authors' `dp_on_one_hierarchy` is a chain DP; on ResNets it adds, at a layer a
shortcut enters, a second inter-layer term between this layer's type and that of the block's
first layer, read off the DP's back-pointers (so the minimum is not exact), from a second table
(`Com_Cost_Inter_Layer_Block`: the inter-layer table with Type-II and Type-III exchanged, which
we could not derive from the tensors' layouts). The paper's own multi-path section was not
available to us. Here each level is an exact min-sum over the whole graph
(`search.minimise`, variables in topological order, states: a node's type at this level; on
a chain, the authors' DP): node costs are unary tables, edge costs pairwise ones, a skip edge
an edge like any other. Levels are decided from the top down on the shares the levels above
leave (`h_partition`, as HyPar's Algorithm 2; `--search joint` does not change it). A graph too
entangled for the exact elimination falls back to `search.local_search` (noted).

Where this hardware forces a difference: levels of k > 2 members (the same types with 1/k
shares); the bandwidth between a level's groups is one link's (the H-tree joins them through
one link); throughput is the cube's peak, pus_per_cube x pe_count MACs a cycle at clock_mhz (a
group of m cubes computes m times as fast; the default hardware unless the request carries a
`config`); only the allowed kinds the layout offers are searched. A graph input's error is
charged where a split leaves it partial, as the authors' code charges the first layer's E_l
(a lookup's token ids have none); a pooling that is a node of its own (not folded) makes a
Type-II convolution all-reduce its unpooled output; the loss is not costed (AccPar has none).
`--traffic-model paper` (HyPar's reading of a chain) does not plan this strategy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import HardwareConfig, load_hardware
from hypar_sim.partition import node_layout
from hypar_sim.partition.axes import Site
from hypar_sim.partition.axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import Dim, kind_of, listed
from hypar_sim.partition.redistribute import Region
from hypar_sim.partition.regions import volume, weight_shape
from hypar_sim.partition.shares import Column
from hypar_sim.planner.plan import PlanRequest
from hypar_sim.planner.plan_messages import graph_edges
from hypar_sim.planner.search import Factor, minimise_or_search
from hypar_sim.planner.strategies import register_strategy
from hypar_sim.workload.graph import Graph

__all__ = ["TYPES", "AccParPlan", "Hardware", "Shares", "accpar_columns", "check_types",
           "edge_fraction", "node_shares", "overlap", "plan_cost", "plan_levels",
           "request_hardware", "volume"]

#: Our kinds and AccPar's partition types, in search (tie-break) order.
TYPES: Mapping[str, str] = MappingProxyType({kind_of(Dim.N): "Type-I", kind_of(Dim.C): "Type-II",
                                             kind_of(Dim.K): "Type-III"})


@dataclass(frozen=True)
class Hardware:
    """The two numbers of AccPar's cost model for one cube and one link."""

    macs_per_s: float  # one cube's peak: MACs a second
    link_bytes_per_s: float  # one link, one direction

    def __post_init__(self) -> None:
        if not (self.macs_per_s > 0 and self.link_bytes_per_s > 0):
            raise InputError(f"accpar: throughput and bandwidth must be positive, got "
                             f"{self.macs_per_s} MAC/s and {self.link_bytes_per_s} B/s")

    @classmethod
    def from_config(cls, config: HardwareConfig) -> Hardware:
        """Peak = pus_per_cube x pe_count MACs a cycle (one MAC per PE) x clock_mhz; the link's
        link_bandwidth_gbps / 8 bytes a second (raw, before packet headers)."""
        return cls(config.pus_per_cube * config.pe_count * config.clock_hz,
                   config.link_bandwidth_gbps * 1e9 / 8)


def request_hardware(request: PlanRequest) -> Hardware:
    """The cost model's numbers: from the request's hardware (`make_plan` passes it),
    else the default hardware at the request's word size."""
    config = request.config
    if config is None:
        config = load_hardware(overrides={"word_bytes": request.word_bytes})
    return Hardware.from_config(config)


@dataclass(frozen=True)
class AccParPlan:
    """The columns chosen and each level's cost for one group (seconds): communication and
    computation, summed over nodes and edges."""

    columns: tuple[Column, ...]
    communication_s: tuple[float, ...]
    computation_s: tuple[float, ...]

    @property
    def seconds(self) -> float:
        """AccPar's cost of the plan: every level's (the groups of a level run in parallel)."""
        return sum(self.communication_s) + sum(self.computation_s)


def check_types(columns: Sequence[Column]) -> None:
    """Only AccPar's three types can be costed."""
    bad = sorted({kind for column in columns for kind in column} - set(TYPES))
    if bad:
        raise InputError(f"plan: accpar cannot cost kind(s) {','.join(bad)}; allowed: "
                         f"{', '.join(TYPES)}")


#: The loop dimensions that index a node's weights (a split of any other leaves dW partial).
WEIGHT_DIMS = (Dim.K, Dim.C, Dim.G)


def overlap(a: Region, b: Region) -> int:
    """Elements two regions share (each made of disjoint boxes)."""
    return sum(math.prod(max(0, min(p[1], q[1]) - max(p[0], q[0])) for p, q in
                         zip(x, y, strict=True)) for x in a for y in b)


@dataclass(frozen=True)
class Shares:
    """The heaviest member's part of one node under a column: its output, each input it
    reads and its weights with their vectors (elements), and its loop nest (a fraction)."""

    output: int
    inputs: tuple[int, ...]
    weights: float
    work: float


def node_shares(site: Site, batch: int, column: Column, hierarchy: Hierarchy) -> Shares:
    """A node's shares on `hierarchy` split by `column` (no levels: the whole node)."""
    node, op = site.node, site.desc
    own = node_layout.layout(site, batch, column, hierarchy)
    sizes = node_layout.loops(site, batch)
    extent = {d: (b[:, 1] - b[:, 0]).astype(np.float64) for d, b in own.boxes.items()}
    work = np.ones(own.members)
    for d, e in extent.items():
        work = work * e / sizes[d]
    weights = np.zeros(own.members)
    scale = op.weights.scale if op.weights is not None else 0
    if scale:
        rows, columns = weight_shape(op)
        weights = np.full(own.members, float(rows * columns * scale))
        for d in WEIGHT_DIMS:
            if d in extent:
                weights = weights * extent[d] / sizes[d]
    vectors = op.vectors
    if vectors and Dim.K in extent:  # one value per output channel: K (within G groups)
        weights = weights + vectors * extent[Dim.K] * extent.get(Dim.G, 1.0)
    return Shares(max(volume(r) for r in own.outputs()),
                  tuple(max(volume(r) for r in own.reads(i)) for i in range(len(node.inputs))),
                  float(weights.max()), float(work.max()))


class _Model:
    """AccPar's per-level costs on one graph (one planning run; one-level layouts remembered
    by geometry, since networks repeat their blocks)."""

    def __init__(self, graph: Graph, sites: Sequence[Site], batch: int, hardware: Hardware,
                 word_bytes: int) -> None:
        self.graph, self.sites, self.batch = graph, sites, batch
        self.hardware, self.word_bytes = hardware, word_bytes
        self.edges = graph_edges(graph)
        self._partial: dict[tuple, tuple[bool, tuple[bool, ...], bool]] = {}
        self._fractions: dict[tuple, float] = {}

    def _one_level(self, site: Site, kind: str, k: int) -> node_layout.NodeLayout:
        return node_layout.layout(site, self.batch, (kind,), Hierarchy((k,)))

    def partial(self, site: Site, kind: str, k: int) -> tuple[bool, tuple[bool, ...], bool]:
        """What a split by `kind` leaves partial: the output, each input's error, dW."""
        key = (site.geometry, kind, k)
        if key not in self._partial:
            own = self._one_level(site, kind, k)
            made = own.outputs()
            reads = [own.reads(i) for i in range(len(site.node.inputs))]
            dim = node_layout.dim_of(site.desc, kind)
            self._partial[key] = (all(m == made[0] for m in made),
                                  tuple(all(r == read[0] for r in read) for read in reads),
                                  dim not in WEIGHT_DIMS)
        return self._partial[key]

    def intra_elements(self, i: int, kind: str, k: int, group: Shares) -> float:
        """The paper's intra-layer communication (the authors' intra table: Type-I A(dW),
        Type-II A(F_{l+1}), Type-III A(E_l)) of node `i` split by `kind` among k members:
        2 (k - 1)/k of each partial sum it leaves, on its group's shares `group`."""
        site = self.sites[i]
        output, inputs, weights = self.partial(site, kind, k)
        whole = group.output * output + group.weights * weights
        # as the authors' code, the first layer's input error too (E_l of every layer);
        # a lookup's token ids have none
        whole += sum(share for share, partial in zip(group.inputs, inputs, strict=True)
                     if partial and not site.desc.lookup)
        return 2 * (k - 1) / k * whole

    def compute_seconds(self, i: int, column: Column, hierarchy: Hierarchy,
                        lower: Hierarchy) -> float:
        """The paper's computation cost: the heaviest sub-group's forward, backward and
        gradient products under `column` (levels `lower`), at its peak (partition ratio 1/k
        on equal cubes)."""
        node = self.sites[i].node
        if not node.macs:
            return 0.0
        work = node_shares(self.sites[i], self.batch, column, lower).work
        cubes = hierarchy.members // lower.members
        return 3 * node.macs * self.batch * work / (cubes * self.hardware.macs_per_s)

    def edge_fraction(self, p: int, c: int, index: int, before: str, kind: str, k: int) -> float:
        """The paper's inter-layer communication (`Com_Cost_Inter_Layer`) on edge p -> c
        (input `index`), types `before` and `kind`: one member's receipt, a fraction of the
        tensor."""
        producer, consumer = self.sites[p], self.sites[c]
        key = (producer.geometry, consumer.geometry, index,
               before, kind, k)
        if key not in self._fractions:
            self._fractions[key] = edge_fraction(
                self._one_level(producer, before, k).outputs(),
                self._one_level(consumer, kind, k).reads(index),
                self.batch * math.prod(producer.node.shape))
        return self._fractions[key]


def edge_fraction(held: Sequence[Region], read: Sequence[Region], elements: int) -> float:
    """The heaviest member's receipt, a fraction of the tensor's `elements`: F forward, what
    it reads minus what it holds; E backward, what it holds (of what anyone reads: an error
    nobody makes is zero) minus what it reads. A partial `held` region is whole (all-reduced
    by the intra-layer step), as is the error of a `read` region every member reads."""
    same = all(r == read[0] for r in read)
    worst = 0
    for mine, need in zip(held, read, strict=True):
        kept = overlap(need, mine)
        covered = overlap(mine, read[0]) if same else min(volume(mine), sum(
            overlap(mine, r) for r in read))
        worst = max(worst, volume(need) - kept + covered - kept)
    return worst / elements


@dataclass(frozen=True)
class _Level:
    """One level's tables (seconds): per node and option, per edge and option pair."""

    communication: list[np.ndarray]
    computation: list[np.ndarray]
    edges: list[np.ndarray]


def _level(model: _Model, columns: Sequence[Column], options: Sequence[Sequence[str]],
           hierarchy: Hierarchy, level: int) -> _Level:
    upper, lower = Hierarchy(hierarchy.sizes[:level]), Hierarchy(hierarchy.sizes[:level + 1])
    k = hierarchy.sizes[level]
    per_element = model.word_bytes / model.hardware.link_bytes_per_s
    groups = [node_shares(site, model.batch, column, upper)
              for site, column in zip(model.sites, columns, strict=True)]
    communication = [np.array([model.intra_elements(i, kind, k, groups[i]) * per_element
                               for kind in kinds]) for i, kinds in enumerate(options)]
    computation = [np.array([model.compute_seconds(i, columns[i] + (kind,), hierarchy, lower)
                             for kind in kinds]) for i, kinds in enumerate(options)]
    edges = [np.array([[model.edge_fraction(p, c, index, before, kind, k)
                        * groups[c].inputs[index] * per_element for kind in options[c]]
                       for before in options[p]]) for p, c, index in model.edges]
    return _Level(communication, computation, edges)


def plan_levels(graph: Graph, batch: int, hierarchy: Hierarchy, kinds: Sequence[str],
                hardware: Hardware, word_bytes: int = 4, fixed: Sequence[Column] | None = None,
                notes: list[str] | None = None,
                sites: Sequence[Site] | None = None) -> AccParPlan:
    """AccPar's search: level by level from the top, an exact min-sum over the graph (state:
    a node's type at this level). With `fixed`, every node's column is given (its cost)."""
    sites = list(sites) if sites is not None else graph_sites(graph)
    kinds = [kind for kind in TYPES if kind in kinds]
    model = _Model(graph, sites, batch, hardware, word_bytes)
    columns: list[Column] = [() for _ in sites]
    communication, computation = [], []
    for level in range(hierarchy.levels):
        upper = Hierarchy(hierarchy.sizes[:level + 1])
        options = []
        for i, site in enumerate(sites):
            allowed = [fixed[i][level]] if fixed is not None else [
                kind for kind in kinds
                if node_layout.offered(site, batch, columns[i] + (kind,), upper)]
            if not allowed:
                raise InputError(
                    f"--kinds: accpar cannot split node {site.node.name} ({site.node.op}) at "
                    f"level {level + 1} of {hierarchy} with {','.join(kinds)}; allowed: "
                    f"{', '.join(TYPES)} (AccPar's Type-I, II, III) where the dimension has an "
                    "index for every member")
            options.append(allowed)
        tables = _level(model, columns, options, hierarchy, level)
        factors = [Factor((i,), c + p) for i, (c, p) in enumerate(
            zip(tables.communication, tables.computation, strict=True))]
        factors += [Factor((p, c), table)
                    for (p, c, _), table in zip(model.edges, tables.edges, strict=True)]
        choice = minimise_or_search([len(o) for o in options], factors, range(len(sites)),
                                    notes)
        communication.append(
            sum(float(t[s]) for t, s in zip(tables.communication, choice, strict=True))
            + sum(float(t[choice[p], choice[c]])
                  for (p, c, _), t in zip(model.edges, tables.edges, strict=True)))
        computation.append(sum(float(t[s]) for t, s in zip(tables.computation, choice,
                                                          strict=True)))
        columns = [column + (opts[s],) for column, opts, s in zip(columns, options, choice,
                                                                 strict=True)]
    return AccParPlan(tuple(columns), tuple(communication), tuple(computation))


def plan_cost(graph: Graph, batch: int, columns: Sequence[Column], hierarchy: Hierarchy,
              hardware: Hardware, word_bytes: int = 4) -> AccParPlan:
    """AccPar's cost of a given plan of a graph (kinds batch, in, out only)."""
    check_types(columns)
    return plan_levels(graph, batch, hierarchy, tuple(TYPES), hardware, word_bytes,
                       fixed=columns)


@register_strategy("accpar", searches=True, default_kinds=tuple(TYPES),
                   own_cost="its time")
def accpar_columns(request: PlanRequest) -> list[Column]:
    """AccPar's plan of a graph over the allowed kinds it has types for (its own cost: bytes
    objective only, as the registry says)."""
    kinds = [kind for kind in TYPES if kind in request.kinds]
    if not kinds:
        raise InputError(f"--kinds: accpar searches {listed(TYPES)} (AccPar's Type-I, II, "
                         f"III); got {','.join(request.kinds)}")
    return list(plan_levels(request.graph, request.batch, request.hierarchy, kinds,
                            request_hardware(request), request.word_bytes,
                            notes=request.notes, sites=request.sites).columns)
