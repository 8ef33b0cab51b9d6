"""`tofu`: Tofu's coarsening, its exact search per step and its recursion, on a network's
graph (a `layers:` chain is a graph too).

Paper: M. Wang, C. Huang, J. Li, "Supporting Very Large Models using Automatic Dataflow
Graph Partitioning", EuroSys 2019 ("Tofu" below, with its section numbers).

Search space (Tofu Sec 3.1, 4.2). An operator is split by *partition-n-reduce*: every
worker runs it on a part of one loop dimension; the output is the concatenation of the
parts (an output dimension, "Case-1") or their element-wise sum (a reduction, "Case-2");
splitting output rows reads a halo of input rows (the x+dx access of Fig 3). Each kind of
`TOFU_KINDS` splits one loop of a node's operators: batch (N: W read whole, partial dW),
out (K: partial input error), in (C: partial output), spatial (rows: halo, partial dW).

Coarsening (Tofu Sec 5.1, `coarsen`). A node of `workload.graph` is one forward operator
whose backward-data and weight-gradient operators are grouped with it ("grouping forward
and backward operations"): its cost counts what all of them fetch. Consecutive element-wise
nodes (`Description.elementwise`: batch norm, activation, add, ...) are coalesced into one
unit ("merging consecutive element-wise operators", partitioned alike): one joins the unit
of the first of its inputs that is element-wise and read by it alone, so a residual block's
bn, add and relu are one unit and the block is a fork-join (the skip edge, or the
downsampling conv, runs from the block's input unit to that unit), which Sec 5.1's footnote
counts as linear; a chain's units are its layers. A unit's nodes take one kind per step
(coalesced operators "share the same partition strategy"); a conv and its bn stay apart.

Cost (Tofu Sec 2 "System setting", Sec 5 "Optimization goal", Sec 6; `tofu_regions`). The
bytes the workers of one group fetch from one another. Tofu keeps no replicas (Sec 9
"always partitions every operator and tensor across all workers"): every tensor a group
touches is partitioned among its workers along one axis t, the cheapest for it; each
operator fetches what it reads and does not hold (one fetch per operator: Sec 6 "Fusing
operators for remote data fetch"), and the owner of a cell fetches the other writers'
contributions (Case-2's partial sums). For a tensor whose workers write W_v and read R_w
(`reads` operators each), with owners' parts T_w, in elements (`tofu_regions.relayout`):

    cost = min over t of  [ sum_v |W_v| - sum_w |T_w & W_w| ]       (x the pooling ratio
                          + reads x sum_w ( |R_w| - |R_w & T_w| )     if partial)

plus, at later steps, the partial sums a group reduces before sending them to another
group and the cells of another group's output ("extra input tensors", Sec 5.2) that several
of its workers read (`tofu_regions.tensor_cost`). Per node: its weights and dW, one
partition (the optimiser's element-wise update, Sec 5.1 "Coalescing operators"), read by
the forward and backward-data operators (`node_cost`); every edge (its activation read by
`input_reads` operators of the consumer, its error by `error_reads` of the producer, each
partitioned on its own; a tensor read by two consumers is costed per reading edge,
`edge_cost`); the loss. So a batch split costs 3(k-1)|W| (HyPar's replicated weights:
2(k-1)|W|; 2(k-1)|W| for a first layer, which computes no input error), and a batch -> in
boundary |F|/2 + |E|/2 at k = 2 (HyPar's Table 2). What a worker reads for its box of loops
is `regions.region` (halo rows, a flatten's boxes, a product's operands), on the
simulator's integer boxes (`node_layout.layout`).

Recursion (Tofu Sec 5.2, `recursive_search`). k workers are factorised k = k_1 ... k_m;
step i partitions each group's graph k_i ways. Here step i is level i of the hierarchy, top
first (the default hierarchy is the prime factors largest first, Tofu's k_i >= k_(i+1)):
the exact min-sum search over the coarsened graph's units (`search.minimise`, states: a
unit's kind at this level; Tofu runs the DP of its [14] on the linear coarsened graph, and
variable elimination is that DP on a fork-join) picks every unit's kind given the kinds
above. Step i's cost is group G_0's (the members whose coordinates above level i are 0)
times the number of groups, prod(sizes[:i]) (Theorem 1's delta_i; the plan's cost is their
sum, `plan_costs`). Tofu proves the recursion optimal from the commutativity of its steps
(Theorem 1). With this cost the steps do not commute (the order of two splits decides which
members share samples or channels with the node before), so the recursion is exact per
step but not always over all steps (tests/test_tofu.py has a chain where it is not; on
resnet18 at 16 accelerators HyPar's plan with Tofu's kinds costs 4% less by this cost).

Where this hardware forces a difference: one kind per node per level (a member runs one
box of loops), so a group's forward and backward operators are split alike where Tofu's
brute force inside a group may split them differently (their tensors still take the
cheapest partition each); pooling is folded into its conv, and an in-split node reduces its
pre-pooling output (the nonlinearity needs the full sum), x the pre/post-pooling size
ratio; the loss takes its input in the partition the search picks; the partial sums of a
tensor read by two consumers are charged per reading edge, as the layout model does; batch
norm statistics are per member; a tied projection's weights are costed as its own. Besides
Tofu's kinds, `heads` and `groups` are taken when asked (loop dimensions of an operator,
which Tofu's TDL analysis would find). The plan's real bytes are the layout model's
(`plan.evaluate_plan`), not this cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.partition import node_layout
from hypar_sim.partition.axes import Site, sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import GRAPH_EXTRA_KINDS, Dim, kind_of
from hypar_sim.partition.redistribute import Region
from hypar_sim.partition.regions import Box, region, weight_shape
from hypar_sim.partition.shares import Column
from hypar_sim.planner.plan import PlanRequest
from hypar_sim.planner.plan_messages import graph_edges
from hypar_sim.planner.search import Factor, minimise_or_search
from hypar_sim.planner.strategies import register_strategy
from hypar_sim.planner.tofu_regions import relayout, tensor_cost
from hypar_sim.workload.graph import Graph, Node

#: Tofu's kinds: its partition-n-reduce splits of a conv/fc loop nest (Sec 4.2).
TOFU_KINDS = tuple(kind_of(dim) for dim in (Dim.N, Dim.C, Dim.K, Dim.P))


def _elementwise(node: Node) -> bool:
    """Its output cell reads the same cell of every input (Tofu Sec 5.1's merge)."""
    return node.desc is not None and node.desc.elementwise


@dataclass(frozen=True)
class Coarse:
    """The coarsened graph: every unit's node indices (a chain, the anchor first), units in
    topological order (by their last node), and every node's unit."""

    units: tuple[tuple[int, ...], ...]
    unit_of: tuple[int, ...]


def coarsen(graph: Graph) -> Coarse:
    """Tofu Sec 5.1: a node per group of forward and backward operators; an element-wise
    node joins the unit of the first of its inputs made by an element-wise node and read
    by it alone."""
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    readers = graph.consumers()
    members: list[list[int]] = []
    unit_of: list[int] = []
    for i, node in enumerate(graph.nodes):
        joined = None
        if _elementwise(node):
            joined = next((unit_of[index[s]] for s in node.inputs
                           if s in index and _elementwise(graph.nodes[index[s]])
                           and readers[s] == [node.name]), None)
        if joined is None:
            members.append([i])
            unit_of.append(len(members) - 1)
        else:
            members[joined].append(i)
            unit_of.append(joined)
    order = sorted(range(len(members)), key=lambda u: members[u][-1])
    rank = {u: r for r, u in enumerate(order)}
    return Coarse(tuple(tuple(members[u]) for u in order), tuple(rank[u] for u in unit_of))


# ----- per node and per edge costs of one step -----

def input_reads(node: Node) -> int:
    """Operators of a node's group that read its input: the forward one, and the weight
    gradient (conv, fc) or the other operand's gradient (matmul): every operator with a
    multiply-accumulate body."""
    return 2 if node.desc is not None and node.desc.channel is not None else 1


def error_reads(node: Node, fed: Sequence[bool]) -> int:
    """Operators of a node's group that read its output's error: the weight gradient, and
    the backward-data operator(s) where an input (`fed`: made by a node) needs an error
    (a product of two activations has one per operand)."""
    weighted = node.desc.weights is not None
    data = sum(fed) if node.desc.channel is not None and not weighted else int(any(fed))
    return int(weighted) + data


@dataclass(frozen=True)
class Workers:
    """G_0's box of a node's loops at one step, and its workers' boxes."""

    group: Box
    boxes: tuple[Box, ...]


def workers(site: Site, batch: int, column: Column, sizes: Sequence[int]) -> Workers:
    """G_0's workers for `column` (one kind per level down to this step): the members of the
    upper levels' hierarchy whose coordinates above this level are 0."""
    upper = Hierarchy(tuple(sizes[:len(column)]))
    layout = node_layout.layout(site, batch, column, upper)
    boxes = tuple(layout.box(m) for m in range(sizes[len(column) - 1]))
    group = {d: (min(b[d][0] for b in boxes), max(b[d][1] for b in boxes)) for d in boxes[0]}
    return Workers(group, boxes)


def _weight_regions(site: Site, box: Box) -> tuple[Region, Region | None]:
    """A box's regions of the node's weights (rows, columns) and of its per-channel vectors."""
    desc = site.desc
    made = region(desc.makes, box)
    channel = 1 + site.output.index(Dim.K) if Dim.K in site.output else None
    vectors = tuple((m[channel],) for m in made) if channel is not None else None
    if desc.weights is None:
        return (), vectors
    if not desc.weights.by_channel:  # an embedding table: every row of its columns
        return (((0, weight_shape(desc)[0]), box[Dim.K]),), vectors
    return tuple((m[channel], box[Dim.C]) for m in made), vectors


def _pooled(site: Site, kind: str) -> float:
    """What one partial output element weighs when `kind` splits the node's reduction:
    its pre-pooling elements per pooled one (a partial sum is reduced before the folded
    pooling, as the layout model charges it); 1 otherwise."""
    desc = site.desc
    partial = desc.reduction is not None and node_layout.dim_of(desc, kind) is desc.reduction
    return desc.pooled_ratio if partial else 1.0


def node_cost(site: Site, fed: Sequence[bool], is_output: bool, team: Workers,
              parts: int, pooled: float = 1.0) -> float:
    """Elements G_0 moves at one step for a node's weights and dW, its vectors (a bias, a
    norm's scale and shift) and, for an output, the loss (its partial sums reduced, `pooled`
    x each, its error read by the node's backward operators)."""
    node, op = site.node, site.desc
    whole, whole_vectors = _weight_regions(site, team.group)
    mine = [_weight_regions(site, box) for box in team.boxes]
    cost = 0.0
    if whole:
        scale = op.weights.scale or 1  # a conv's kernel area; a tied projection's 1
        times = 1 + int(not op.lookup and any(fed))
        regions = [m[0] for m in mine]
        cost += scale * tensor_cost(whole, whole, regions, regions, times, parts)
    if op.vectors and whole_vectors is not None:
        regions = [m[1] for m in mine]
        cost += op.vectors * tensor_cost(whole_vectors, whole_vectors, regions, regions,
                                         1, parts)
    if is_output:
        made = region(op.makes, team.group)
        outs = [region(op.makes, box) for box in team.boxes]
        cost += relayout(made, outs, None, 0, parts, pooled)
        cost += relayout(made, None, outs, error_reads(node, fed), parts)
    return cost


def edge_cost(producer: Site, consumer: Site, index: int, producer_fed: Sequence[bool],
              sender: Workers, receiver: Workers, parts: int, pooled: float = 1.0) -> float:
    """Elements G_0 moves at one step for the tensor on one edge: forward, the producer's
    output into the consumer's reads of input `index` (its writes `pooled` x: partial sums
    before a folded pooling); backward, the consumer's error contributions (partial where
    its reads overlap) into the producer's output parts."""
    made_by, read_by = producer.desc.makes, consumer.desc.reads[index]
    made = region(made_by, sender.group)
    needed = region(read_by, receiver.group)
    writes = [region(made_by, box) for box in sender.boxes]
    reads = [region(read_by, box) for box in receiver.boxes]
    forward = tensor_cost(made, needed, writes, reads, input_reads(consumer.node), parts, pooled)
    backward = tensor_cost(needed, made, reads, writes,
                           error_reads(producer.node, producer_fed), parts)
    return forward + backward


class TofuCosts:
    """Tofu's bytes of a graph's nodes and edges at any step, remembered by geometry (a
    network repeats its blocks) for one planning run."""

    def __init__(self, graph: Graph, batch: int, sizes: Sequence[int], word_bytes: int) -> None:
        self.graph, self.batch, self.sizes, self.word_bytes = graph, batch, tuple(sizes), word_bytes
        self.sites = sites(graph)
        names = {node.name for node in graph.nodes}
        self.fed = [tuple(s in names for s in node.inputs) for node in graph.nodes]
        outputs = set(graph.outputs)
        self.is_output = [node.name in outputs for node in graph.nodes]
        self.edges = graph_edges(graph)
        self._nodes: dict[tuple, float] = {}
        self._edges: dict[tuple, float] = {}
        self._workers: dict[tuple, Workers] = {}

    def _team(self, i: int, column: Column) -> Workers:
        key = (self.sites[i].geometry, column)
        if key not in self._workers:
            self._workers[key] = workers(self.sites[i], self.batch, column, self.sizes)
        return self._workers[key]

    def node(self, i: int, column: Column) -> float:
        """Bytes of node i's own tensors (weights, vectors, the loss) at step len(column)."""
        site = self.sites[i]
        key = (site.geometry, self.fed[i], self.is_output[i], column)
        if key not in self._nodes:
            parts = self.sizes[len(column) - 1]
            self._nodes[key] = self.word_bytes * node_cost(
                site, self.fed[i], self.is_output[i], self._team(i, column), parts,
                _pooled(site, column[-1]))
        return self._nodes[key]

    def edge(self, p: int, c: int, index: int, producer: Column, consumer: Column) -> float:
        """Bytes of the edge from node p into input `index` of node c at step len(column)."""
        key = (self.sites[p].geometry, self.sites[c].geometry,
               index, self.fed[p], producer, consumer)
        if key not in self._edges:
            parts = self.sizes[len(producer) - 1]
            self._edges[key] = self.word_bytes * edge_cost(
                self.sites[p], self.sites[c], index, self.fed[p], self._team(p, producer),
                self._team(c, consumer), parts, _pooled(self.sites[p], producer[-1]))
        return self._edges[key]


def allowed_kinds(requested: Sequence[str]) -> tuple[str, ...]:
    """The kinds of TOFU_KINDS and GRAPH_EXTRA_KINDS the user allowed (in that order);
    InputError if none."""
    offered = (*TOFU_KINDS, *GRAPH_EXTRA_KINDS)
    kinds = tuple(kind for kind in offered if kind in requested)
    if not kinds:
        raise InputError(f"--kinds: strategy tofu takes only {','.join(offered)} (loop "
                         f"dimensions of its operators), got {','.join(requested)}; allowed: "
                         f"any of {', '.join(offered)}")
    return kinds


def unit_options(costs: TofuCosts, members: Sequence[int], prefix: Column,
                 kinds: Sequence[str]) -> list[str]:
    """The kinds every node of a unit takes at the next level (`node_layout.offered`), one
    per distinct split of the unit's loops (`in` and `out` both split a weightless node's
    channels)."""
    upper = Hierarchy(costs.sizes[:len(prefix) + 1])
    options, seen = [], set()
    for kind in kinds:
        column = prefix + (kind,)
        if not all(node_layout.offered(costs.sites[i], costs.batch, column, upper)
                   for i in members):
            continue
        signature = tuple(node_layout.dim_of(costs.sites[i].desc, kind)
                          for i in members)
        if signature not in seen:
            seen.add(signature)
            options.append(kind)
    if not options:
        node = costs.graph.nodes[members[0]]
        raise InputError(f"--kinds: no kind of {','.join(kinds)} can split node {node.name} "
                         f"({node.op}, output {list(node.shape)}) and the nodes coalesced "
                         f"with it at level {len(prefix) + 1} of {Hierarchy(costs.sizes)}; "
                         "allowed: kinds whose dimension has at least as many indices as the "
                         "level has members (e.g. batch)")
    return options


def step_factors(costs: TofuCosts, coarse: Coarse, prefixes: Sequence[Column],
                 options: Sequence[Sequence[str]]) -> list[Factor]:
    """One step's cost tables over units (bytes of G_0): every unit's own (its nodes and the
    edges inside it) by option, every edge between units by (producer's, consumer's)."""
    unit_of = coarse.unit_of
    inside: list[list[tuple[int, int, int]]] = [[] for _ in coarse.units]
    between = []
    for p, c, k in costs.edges:
        if unit_of[p] == unit_of[c]:
            inside[unit_of[c]].append((p, c, k))
        else:
            between.append((p, c, k))
    factors = []
    for u, members in enumerate(coarse.units):
        columns = [prefixes[u] + (kind,) for kind in options[u]]
        table = [sum(costs.node(i, col) for i in members)
                 + sum(costs.edge(p, c, k, col, col) for p, c, k in inside[u]) for col in columns]
        factors.append(Factor((u,), np.array(table)))
    for p, c, k in between:
        a, b = unit_of[p], unit_of[c]
        table = [[costs.edge(p, c, k, prefixes[a] + (x,), prefixes[b] + (y,))
                  for y in options[b]] for x in options[a]]
        factors.append(Factor((a, b), np.array(table)))
    return factors


def recursive_search(graph: Graph, batch: int, hierarchy: Hierarchy, kinds: Sequence[str],
                     word_bytes: int = 4, notes: list[str] | None = None) -> list[Column]:
    """Tofu's recursion (Sec 5.2) over the coarsened graph (Sec 5.1): at each level, top
    first, the exact search over units picks every unit's kind given those above; every
    node gets its unit's column. Where a step's exact elimination is too wide, a local
    search (said in `notes`)."""
    coarse = coarsen(graph)
    costs = TofuCosts(graph, batch, hierarchy.sizes, word_bytes)
    prefixes: list[Column] = [() for _ in coarse.units]
    for _ in range(hierarchy.levels):
        options = [unit_options(costs, members, prefix, kinds)
                   for members, prefix in zip(coarse.units, prefixes, strict=True)]
        factors = step_factors(costs, coarse, prefixes, options)
        choice = minimise_or_search([len(o) for o in options], factors, range(len(options)),
                                    notes)
        prefixes = [prefix + (opts[i],)
                    for prefix, opts, i in zip(prefixes, options, choice, strict=True)]
    return [prefixes[u] for u in coarse.unit_of]


def plan_costs(graph: Graph, batch: int, columns: Sequence[Column], hierarchy: Hierarchy,
               word_bytes: int = 4, costs: TofuCosts | None = None) -> tuple[float, ...]:
    """Tofu's delta_i (bytes) of any plan (a column per node): step i's cost for G_0, every
    node and every edge with the nodes' own kinds, times prod(sizes[:i]) (Sec 5.2);
    `costs`: a cache of the same graph, batch, hierarchy and word size to reuse."""
    costs = costs or TofuCosts(graph, batch, hierarchy.sizes, word_bytes)
    deltas = []
    for level in range(hierarchy.levels):
        cut = [column[:level + 1] for column in columns]
        step = sum(costs.node(i, col) for i, col in enumerate(cut))
        step += sum(costs.edge(p, c, k, cut[p], cut[c]) for p, c, k in costs.edges)
        deltas.append(hierarchy.subarray_counts[level] * step)
    return tuple(deltas)


@register_strategy("tofu", searches=True, default_kinds=TOFU_KINDS, own_cost="its bytes")
def tofu_columns(request: PlanRequest) -> list[Column]:
    """Tofu's recursive search over the coarsened graph, `--kinds` & Tofu's loop dimensions,
    the levels as its steps (its own recursion: `--search` does not apply)."""
    if request.search == "joint":
        request.notes.append("tofu searches level by level (its recursion, Sec 5.2)")
    return recursive_search(request.graph, request.batch, request.hierarchy,
                            allowed_kinds(request.kinds), request.word_bytes, request.notes)
