"""The messages of a pipeline plan (`--pipeline S`): every stage is the same sub-array of
m members (the array's lower levels) holding a contiguous run of the graph's nodes, laid
out by the plan's columns for one micro-batch.

A stage's own steps are those of its nodes read as a graph of their own (inputs from
earlier stages are its graph inputs; `plan_messages.graph_matrices`), on its members
(stage s: members s m to s m + m - 1), once per micro-batch; its gradients' exchange once
per training step. An edge between stages moves its tensor from the producer's stage to
the consumer's and the error back (`partition.stage_edges`): the reduction of partial sums
within a stage joins that stage's steps, what crosses is a step of its own
(`STAGE_FEATURE` keyed by the producer, `STAGE_ERROR` by the reader), per micro-batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from hypar_sim.partition import node_layout
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.moved import Moved
from hypar_sim.partition.redistribute import redistribute, redistribute_both_ways
from hypar_sim.partition.regions import weight_shape
from hypar_sim.partition.stage_edges import placed, stage_edge_matrices
from hypar_sim.partition.steps import StepMessages, TransferKind, step_key
from hypar_sim.planner.plan_messages import (
    gradient_buckets,
    graph_edges,
    graph_matrices,
    sent,
    training_matrices,
)
from hypar_sim.planner.training import Training
from hypar_sim.workload.graph import Graph

#: Steps of the training step as a whole, not of one micro-batch (sent once).
ONCE = frozenset({TransferKind.GRADIENT, TransferKind.GRADIENT_GATHER,
                  TransferKind.UPDATE_GATHER, TransferKind.TIED_GRADIENT})
StepKey = tuple


def stage_graph(graph: Graph, nodes: Sequence[int], stage: int) -> Graph:
    """The stage's nodes as a graph of their own: what they read from earlier stages is its
    input; the whole graph's outputs among them its outputs."""
    names = {graph.nodes[i].name for i in nodes}
    shapes = {node.name: node.shape for node in graph.nodes} | dict(graph.inputs)
    inputs = {name: shapes[name] for i in nodes for name in graph.nodes[i].inputs
              if name not in names}
    return Graph(f"{graph.name} stage {stage + 1}", inputs,
                 tuple(graph.nodes[i] for i in nodes),
                 tuple(name for name in graph.outputs if name in names))


@dataclass(frozen=True)
class PipelineMessages:
    """A pipeline plan's steps: `steps` every message (per micro-batch keyed by
    `step_key`), the gradient `buckets` per stage (global node indices), which readers in
    earlier stages each reader waits for (`feeds`: it waits for `(p, STAGE_FEATURE)`, which
    p's stage sends) and which readers in later stages each producer waits for (`readers`:
    `(c, STAGE_ERROR)`, which c's stage sends), and the tied copies' exchange (`tied`: node
    -> (the node whose key it sends, the node whose key it waits for)). Each stage's members
    work through their own stage's tasks (`sim.pipeline_schedule`)."""

    steps: dict[StepKey, StepMessages]
    buckets: tuple[tuple[tuple[int, ...], ...], ...]
    feeds: dict[int, list[int]]
    readers: dict[int, list[int]]
    tied: dict[int, list[tuple[int, int]]]


def stage_nodes(stages: Sequence[int], count: int) -> list[list[int]]:
    """Every stage's nodes, in order."""
    nodes: list[list[int]] = [[] for _ in range(count)]
    for i, stage in enumerate(stages):
        nodes[stage].append(i)
    return nodes


def pipeline_messages(graph: Graph, layouts: Sequence[node_layout.NodeLayout],
                      stages: Sequence[int], hierarchy: Hierarchy, micro_batch: int,
                      word_bytes: int, training: Training, collective: str = "ring",
                      bucket_bytes: float = 0.0) -> PipelineMessages:
    """The steps of one training step: `layouts` every node's on the sub-array for a
    micro-batch of `micro_batch` samples, `stages` every node's stage, `hierarchy` the
    whole array (its top level the stages); gradients fused in buckets of `bucket_bytes`
    within each stage (0: one exchange per node)."""
    count, total = training.stages, hierarchy.members
    m = total // count
    per_micro: dict[StepKey, Moved] = {}
    once: dict[StepKey, Moved] = {}

    def add(table: dict, key: StepKey, matrix: Moved) -> None:
        table[key] = table[key] + matrix if key in table else matrix

    buckets = []
    for s, nodes in enumerate(stage_nodes(stages, count)):
        sub = stage_graph(graph, nodes, s)
        own = [layouts[i] for i in nodes]
        matrices = training_matrices(sub, graph_matrices(sub, own, micro_batch, word_bytes),
                                     training)
        for (local, kind), matrix in matrices.items():
            add(once if kind in ONCE else per_micro, (nodes[local], kind),
                _offset(matrix, s, m, total))
        backward = [nodes[local] for generation in reversed(sub.generations())
                    for local in reversed(generation)]
        buckets.append(tuple(tuple(b) for b in gradient_buckets(graph, backward, word_bytes,
                                                                 bucket_bytes)))
    tied = tied_apart(graph, stages)
    for t, owner in tied.items():  # the copy's gradients reduced within its stage
        regions = node_layout.weight_regions(layouts[t])
        shape = weight_shape(layouts[t].site.desc)
        both = [*node_layout.weight_regions(layouts[owner]), *regions]
        parts = redistribute(shape, regions, regions, layouts[t].replicas)
        s = stages[t]
        add(once, (t, TransferKind.GRADIENT), _offset(parts.reduce * word_bytes, s, m, total))
        add(once, (t, TransferKind.GRADIENT_GATHER),
            _offset(parts.gather * word_bytes, s, m, total))
        nothing: list[tuple] = [()] * m
        there, back = (stages.gather for stages in redistribute_both_ways(
            shape, both[:m] + nothing, nothing + both[m:], None, None))
        add(once, (owner, TransferKind.TIED_GRADIENT),
            placed(there * word_bytes, stages[owner], s, m, total))
        add(once, (t, TransferKind.TIED_GRADIENT),
            placed(back * word_bytes, stages[owner], s, m, total))
        buckets[s] = (*buckets[s], (t,))
    feeds: dict[int, list[int]] = {}
    readers: dict[int, list[int]] = {}
    generation = graph.generation_of()
    groups: dict[tuple, list[tuple[int, int, int]]] = {}
    for p, c, k in graph_edges(graph):
        if stages[p] != stages[c]:
            groups.setdefault((p, stages[c], layouts[c].read_signature(k)), []).append((p, c, k))
    for edges in groups.values():
        p, c, k = edges[0]
        reader = min((c for _, c, _ in edges), key=lambda i: (generation[i], i))
        parts = stage_edge_matrices(layouts[p], layouts[c], k, micro_batch, word_bytes,
                                    stages[p], stages[c], total)
        add(per_micro, (p, TransferKind.PARTIAL_SUM), parts["forward reduce"])
        add(per_micro, (p, TransferKind.STAGE_FEATURE), parts["forward gather"])
        add(per_micro, (reader, TransferKind.ERROR_REDUCE), parts["backward reduce"])
        add(per_micro, (reader, TransferKind.STAGE_ERROR), parts["backward gather"])
        for table, key, value in ((feeds, reader, p), (readers, p, reader)):
            if value not in table.setdefault(key, []):
                table[key].append(value)
    steps: dict[StepKey, StepMessages] = {}
    for (i, kind), transfers in sent(once, [b for stage in buckets for b in stage],
                                     collective, hierarchy).items():
        steps[(i, kind)] = transfers.messages(i, kind, hierarchy)
    for (i, kind), transfers in sent(per_micro, (), collective, hierarchy).items():
        messages = transfers.messages(i, kind, hierarchy)
        for micro in range(training.microbatches):
            steps[step_key(i, kind, micro)] = dataclasses.replace(messages, micro=micro)
    pairs: dict[int, list[tuple[int, int]]] = {}
    for t, owner in tied.items():
        pairs.setdefault(owner, []).append((owner, t))
        pairs.setdefault(t, []).append((t, owner))
    return PipelineMessages(steps, tuple(buckets), feeds, readers, pairs)


def tied_apart(graph: Graph, stages: Sequence[int]) -> dict[int, int]:
    """Tied projections in another stage than their weights' owner (GPT-2's output
    projection and its token embedding) -> the owner. Such a stage keeps a copy of the
    weights; the two copies' gradients are summed before either is updated (as Megatron-LM
    all-reduces the embedding between its first and last stage)."""
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    found = {}
    for i, node in enumerate(graph.nodes):
        owner = index.get(str(node.attrs.get("tied_to", "")))
        if owner is not None and stages[owner] != stages[i]:
            found[i] = owner
    return found


def _offset(moved: Moved, stage: int, members: int, total: int) -> Moved:
    """A stage's matrix (its m members) as the array's members."""
    return moved.relabelled(total, lambda local: local + stage * members)
