"""`tofu`: Tofu's recursive partition search for chains of conv/fc layers.

Paper: M. Wang, C. Huang, J. Li, "Supporting Very Large Models using Automatic Dataflow
Graph Partitioning", EuroSys 2019 (cited below as "Tofu" with its section numbers).

Search space (Tofu Sec 3.1, 4.2). An operator is split by *partition-n-reduce*: every
worker runs the same operator on a part of one loop dimension; the output is the
concatenation of the parts (an output dimension, "Case-1") or their element-wise sum
(a reduction dimension, "Case-2"); splitting an output row dimension reads a halo of
input rows (the x+dx access of Fig 3). A layer's loop nest is (N, K, C, P) here, and
each kind of `TOFU_KINDS` splits one of them, for all three operators of the layer:

=======  ======================  =========================  =========================
kind     forward O = W * F       backward-data E = W^T E'   weight gradient dW
=======  ======================  =========================  =========================
batch    concat on N, reads W    concat on N, reads W       sum over N (partial dW)
out      concat on K, reads F    sum over K (partial E)     concat on K, reads F
in       sum over C (partial O)  concat on C, reads E'      concat on C, reads E'
spatial  concat on P, F halo     concat on rows, the halo   sum over P, F halo
                                 rows partial
=======  ======================  =========================  =========================

Cost (Tofu Sec 2 "System setting", Sec 5 "Optimization goal", Sec 6). Tofu minimises
the bytes workers fetch from one another. Every tensor is partitioned along one of its
dimensions at each step (Tofu keeps no replicas: Sec 5 "Optimization goal", Sec 9
"always partitions every operator and tensor across all workers"), so a worker holds
1/k of every tensor, the weights included. Each operator fetches what it reads and
does not hold (one fetch per operator: Sec 6 "Fusing operators for remote data fetch"),
and the owner of a part of an output fetches the other workers' contributions to it
(Case-2's reduction, spread over all workers, Sec 6). For one tensor of which a
group's workers write W_v and read R_w, with owners' parts T_w (the tensor split along
axis t), in elements (`_relayout`):

    cost = min over t of  [ sum_v |W_v| - sum_w |T_w & W_w| ]       (write; x the pooling
                          + reads x sum_w ( |R_w| - |R_w & T_w| )     ratio if partial)

plus, at later steps, the partial sums a group reduces before sending them to another
group and the cells of another group's output ("extra input tensors", Sec 5.2) that
several of its workers read (`tensor_cost`). W and dW share one partition (the
optimiser's element-wise update, Sec 5.1 "Coalescing operators"); an activation F and
its error E are partitioned separately (Sec 5.1: a group's members may differ). The
forward and weight-gradient operators both read F, the backward-data and
weight-gradient ones both read E' and the forward and backward-data ones both read W:
`reads` is 2 (1 for the first layer, which computes no input error). So a batch split
costs 3(k-1)|W| (HyPar's replicated weights: 2(k-1)|W|), an in split (k-1)|F'| x the
pooling ratio forward plus 2(k-1)|E'| backward (both backward operators read all of E'),
and a batch -> in boundary |F|/2 + |E|/2 at k = 2 (HyPar's Table 2: F's partition is
chosen so that it moves once).

Coarsening (Tofu Sec 5.1). A layer's forward, backward-data and weight-gradient
operators form one group and its pooling and activation coalesce with it, so the
coarsened graph of a chain is the chain of layers, and Tofu runs the DP of its [14]
over it (`search.chain_dp`, states: a layer's kind at this step; a boundary's cost is
the min over the partitions of its tensors, so the DP is exact per step).

Recursion (Tofu Sec 5.2). k workers are factorised as k = k_1 * ... * k_m and step i
partitions each worker group's graph k_i ways; step i's cost delta_i is one group's
(G_0's) cost times the number of groups prod(k_1..k_(i-1)) ("repeat step 1 on G_0 and
apply the partition result to G_1"); the plan's cost is sum_i delta_i (`plan_costs`).
Here step i is level i of the hierarchy, top first (Sec 5.2 notes the recursion puts
the cheaper steps near the top of a hierarchical interconnect); the default hierarchy
is the prime factors largest first, Tofu's own k_i >= k_(i+1). G_0's share of a layer
is the first part of every loop dimension split above (Tofu's even split, as
fractions: its symbolic intervals, Sec 4.2 Eq. 1). Tofu proves the recursion optimal
from the commutativity of its steps (Theorem 1). With this cost it is not always: the
order of two splits decides which members share samples or channels with the layer
before, so swapping two steps can change the cost; brute force on 3-layer chains at
two levels finds the recursion's plan optimal in most cases, not all
(tests/test_tofu.py has a counter-example), and more often wrong where a 2-way level
comes before a 3-way one, against Tofu's k_i >= k_(i+1).

Where this hardware forces a difference: a plan is one kind per layer per level (the
simulator runs one loop box per member), so the three operators of a layer take the
same kind at each step, where Tofu's group search may give them different ones;
pooling and the loss are coalesced with the layer before them (the loss takes its
input in the partition the search picks; its error comes back in that partition); an
in-split layer reduces its pre-pooling output (the nonlinearity needs the full sum),
so its reduction is charged x the pre/post-pooling size ratio. The plan's real bytes
are the traffic model's (`make_plan`), not this cost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS, Dim, kind_of
from hypar_sim.partition.shares import Column
from hypar_sim.planner.search import chain_dp
from hypar_sim.planner.strategies import PlanRequest, register_strategy
from hypar_sim.planner.tofu_regions import Interval, Region, even_parts, relayout, tensor_cost
from hypar_sim.workload.layers import FeatureShape, Layer, LayerKind

#: Tofu's kinds: its partition-n-reduce splits of a conv/fc loop nest (Sec 4.2).
TOFU_KINDS = tuple(kind_of(dim) for dim in (Dim.N, Dim.C, Dim.K, Dim.P))

Offered = Callable[[Layer, int, Column, Hierarchy], bool]


@dataclass(frozen=True)
class LoopBox:
    """A part of a layer's loop nest: samples N, output channels K, input channels C and
    output rows P (after pooling); columns are never split."""

    n: Interval
    k: Interval
    c: Interval
    p: Interval

    def split(self, dim: Dim, parts: int) -> tuple[LoopBox, ...]:
        """`parts` equal parts along `dim` (Tofu's even split)."""
        field = dim.value.lower()
        lo, hi = getattr(self, field)
        step = (hi - lo) / parts
        return tuple(dataclasses.replace(self, **{field: (lo + i * step, lo + (i + 1) * step)})
                     for i in range(parts))


def group_box(layer: Layer, batch: int, prefix: Column, sizes: Sequence[int]) -> LoopBox:
    """G_0's share of `layer` after the steps of `prefix`: the first part of every split."""
    box = LoopBox((0.0, float(batch)), (0.0, float(layer.output.channels)),
                  (0.0, float(layer.input.channels)), (0.0, float(layer.output.height)))
    for kind, size in zip(prefix, sizes, strict=True):
        box = box.split(KINDS[kind].dim, size)[0]
    return box


def _clip(lo: float, hi: float, size: int) -> Interval:
    lo, hi = max(lo, 0.0), min(hi, float(size))
    return (lo, hi) if hi > lo else (0.0, 0.0)


def output_region(box: LoopBox) -> Region:
    """(samples, channels, rows) of the layer's output (after pooling) that `box` computes."""
    return ((box.n, box.k, box.p),)


def input_region(layer: Layer, box: LoopBox, space: FeatureShape) -> Region:
    """(samples, channels, rows) of the tensor `space` (the producer's output) that `box`
    reads: the rows through pooling and the kernel, halo included (Sec 4.2's affine
    intervals: x*stride - pad to x*stride - pad + kernel - stride); an fc layer's input
    channels are `space` flattened, so its C interval is a range of whole maps."""
    if layer.kind is LayerKind.FC:
        maps = space.height * space.width
        return ((box.n, (box.c[0] / maps, box.c[1] / maps), (0.0, float(space.height))),)
    lo, hi = box.p
    if lo >= hi:
        return ((box.n, box.c, (0.0, 0.0)),)
    pool = layer.pool
    if pool is not None:
        lo, hi = _clip(lo * pool.stride - pool.padding,
                       hi * pool.stride - pool.padding + pool.kernel - pool.stride,
                       layer.conv_output.height)
    rows = _clip(lo * layer.stride - layer.padding,
                 hi * layer.stride - layer.padding + layer.kernel - layer.stride,
                 layer.input.height)
    return ((box.n, box.c, rows),)


def _weights(box: LoopBox) -> Region:
    return ((box.k, box.c),)


@lru_cache(maxsize=65536)
def weight_cost(layer: Layer, box: LoopBox, kind: str, parts: int, first: bool) -> float:
    """Elements the step moves for W and dW of `layer` (G_0's share `box`) split by `kind`:
    the forward and backward-data operators read W of their part (a batch or spatial
    worker needs all of it), the weight-gradient operator writes dW (partial sums over a
    batch or spatial split), W and dW sharing one partition along K or C."""
    workers = box.split(KINDS[kind].dim, parts)
    regions = [_weights(w) for w in workers]
    whole = _weights(box)
    return layer.kernel ** 2 * tensor_cost(whole, whole, regions, regions, 1 if first else 2,
                                            parts, even_parts)


def _pooling_ratio(layer: Layer) -> float:
    return layer.conv_output.size / layer.output.size


@lru_cache(maxsize=65536)
def boundary_cost(producer: Layer, consumer: Layer | None, producer_box: LoopBox,
                  consumer_box: LoopBox | None, producer_kind: str, consumer_kind: str | None,
                  parts: int, producer_first: bool) -> float:
    """Elements the step moves across the boundary after `producer` (consumer None: the
    loss): its output F' forward (G_0's producer writes the region `made`, its consumer
    reads `needed`) and the error E' backward (the consumer writes `needed`, the
    producer reads `made`)."""
    out = producer.output
    made = output_region(producer_box)
    producers = [output_region(b) for b in producer_box.split(KINDS[producer_kind].dim, parts)]
    partial = KINDS[producer_kind].dim is Dim.C
    scale = _pooling_ratio(producer) if partial else 1.0
    error_reads = 1 if producer_first else 2
    if consumer is None or consumer_box is None or consumer_kind is None:
        forward = relayout(made, producers, None, 0, parts, even_parts, scale)
        backward = relayout(made, None, producers, error_reads, parts, even_parts)
        return out.width * (forward + backward)
    needed = input_region(consumer, consumer_box, out)
    readers = [input_region(consumer, b, out)
               for b in consumer_box.split(KINDS[consumer_kind].dim, parts)]
    forward = tensor_cost(made, needed, producers, readers, 2, parts, even_parts, scale)
    backward = tensor_cost(needed, made, readers, producers, error_reads, parts, even_parts)
    return out.width * (forward + backward)


def step_costs(layers: Sequence[Layer], batch: int, prefixes: Sequence[Column],
               options: Sequence[Sequence[str]], sizes: Sequence[int],
               word_bytes: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """One group's bytes at the step after `prefixes` (each layer's kinds above), for
    every kind of `options` a layer may take: own costs (weights; the loss for the last
    layer) and boundary matrices [producer kind, consumer kind], for `chain_dp`."""
    level = len(prefixes[0]) if prefixes else 0
    parts = sizes[level]
    boxes = [group_box(layer, batch, prefix, sizes[:level])
             for layer, prefix in zip(layers, prefixes, strict=True)]
    last = len(layers) - 1
    own = []
    for index, (layer, box, kinds) in enumerate(zip(layers, boxes, options, strict=True)):
        costs = [weight_cost(layer, box, kind, parts, index == 0) for kind in kinds]
        if index == last:
            costs = [cost + boundary_cost(layer, None, box, None, kind, None, parts, index == 0)
                     for cost, kind in zip(costs, kinds, strict=True)]
        own.append(np.array(costs) * word_bytes)
    boundary = [np.array([[boundary_cost(layers[i - 1], layers[i], boxes[i - 1], boxes[i], a, b,
                                         parts, i == 1) for b in options[i]]
                          for a in options[i - 1]]) * word_bytes
                for i in range(1, len(layers))]
    return own, boundary


def plan_costs(layers: Sequence[Layer], batch: int, columns: Sequence[Column],
               hierarchy: Hierarchy, word_bytes: int) -> tuple[float, ...]:
    """Tofu's delta_i (bytes) of a plan: step i's cost for one group times the number of
    groups, prod(sizes[:i]) (Sec 5.2, Theorem 1's delta_i); the plan's cost is their sum."""
    deltas = []
    for level in range(hierarchy.levels):
        prefixes = [column[:level] for column in columns]
        options = [[column[level]] for column in columns]
        own, boundary = step_costs(layers, batch, prefixes, options, hierarchy.sizes, word_bytes)
        step = sum(float(c[0]) for c in own) + sum(float(b[0, 0]) for b in boundary)
        deltas.append(hierarchy.subarray_counts[level] * step)
    return tuple(deltas)


def allowed_kinds(requested: Sequence[str], offered: Sequence[str] = TOFU_KINDS,
                  why: str = "(its partition-n-reduce splits)") -> tuple[str, ...]:
    """The kinds of `offered` the user allowed (in that order); InputError, saying `why`
    these are offered, if none."""
    kinds = tuple(kind for kind in offered if kind in requested)
    if not kinds:
        raise InputError(f"--kinds: strategy tofu takes only {','.join(offered)} {why}, got "
                         f"{','.join(requested)}; allowed: any of {', '.join(offered)}")
    return kinds


def recursive_search(layers: Sequence[Layer], batch: int, hierarchy: Hierarchy,
                     kinds: Sequence[str], word_bytes: int, offered: Offered) -> list[Column]:
    """Tofu's recursion (Sec 5.2): at each level, top first, the chain DP over one group's
    graph picks every layer's kind given the kinds above; a kind is tried only where
    `offered` lets the layer take it."""
    columns: list[Column] = [() for _ in layers]
    for level in range(hierarchy.levels):
        upper = Hierarchy(hierarchy.sizes[:level + 1])
        options = []
        for layer, prefix in zip(layers, columns, strict=True):
            mine = [kind for kind in kinds if offered(layer, batch, prefix + (kind,), upper)]
            if not mine:
                raise InputError(
                    f"--kinds: no kind of {','.join(kinds)} can split layer {layer.name} at "
                    f"level {level + 1} of hierarchy {hierarchy} (batch {batch}); allowed: "
                    "kinds whose dimension has at least as many indices as the level has "
                    "members (e.g. batch)")
            options.append(mine)
        own, boundary = step_costs(layers, batch, columns, options, hierarchy.sizes, word_bytes)
        _, states = chain_dp(own, boundary)
        columns = [prefix + (mine[state],)
                   for prefix, mine, state in zip(columns, options, states, strict=True)]
    return columns


@register_strategy("tofu", searches=True, default_kinds=TOFU_KINDS, own_cost="its bytes")
def _tofu(request: PlanRequest) -> Sequence[Column]:
    """Tofu's recursive search over `--kinds` & TOFU_KINDS, the levels as its steps."""
    return recursive_search(request.network.layers, request.batch, request.hierarchy,
                            allowed_kinds(request.options.kinds), request.word_bytes,
                            request.model.offered)


# This strategy's implementation on graph networks registers itself on the entry above.
from hypar_sim.planner import tofu_graph  # noqa: E402, F401
