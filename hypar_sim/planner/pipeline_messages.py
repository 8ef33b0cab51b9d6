"""The messages of a pipeline plan (`--pipeline S`): every stage is the same sub-array of
m members (the array's lower levels) holding a contiguous run of the graph's nodes, laid
out by the plan's columns for one micro-batch.

A stage's own steps are those of its nodes read as a graph of their own (inputs from
earlier stages are its graph inputs; `plan_messages.graph_matrices`), on its members
(stage s: members s m to s m + m - 1), once per micro-batch; its gradients' exchange once
per training step. An edge between stages moves its tensor from the producer's stage to
the consumer's and the error back (`partition.stage_edges`): the reduction of partial sums
within a stage joins that stage's steps, what crosses is a step of its own
(`STAGE_FEATURE` keyed by the reader, `STAGE_ERROR` by the producer), per micro-batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from hypar_sim.partition import node_layout
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.redistribute import Moved
from hypar_sim.partition.stage_edges import stage_edge_matrices
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
                  TransferKind.UPDATE_GATHER})
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
    later stages each node sends its output (`sends_after`) and which producers each node
    sends its input error back to (`errors_after`)."""

    steps: dict[StepKey, StepMessages]
    buckets: tuple[tuple[tuple[int, ...], ...], ...]
    sends_after: dict[int, list[int]]
    errors_after: dict[int, list[int]]


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
            moved = Moved(total, matrix.src + s * m, matrix.dst + s * m, matrix.amount)
            add(once if kind in ONCE else per_micro, (nodes[local], kind), moved)
        backward = [nodes[local] for generation in reversed(sub.generations())
                    for local in reversed(generation)]
        buckets.append(tuple(tuple(b) for b in gradient_buckets(graph, backward, word_bytes,
                                                                 bucket_bytes)))
    sends_after: dict[int, list[int]] = {}
    errors_after: dict[int, list[int]] = {}
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
        add(per_micro, (reader, TransferKind.STAGE_FEATURE), parts["forward gather"])
        add(per_micro, (reader, TransferKind.ERROR_REDUCE), parts["backward reduce"])
        add(per_micro, (p, TransferKind.STAGE_ERROR), parts["backward gather"])
        sends_after.setdefault(p, [])
        if reader not in sends_after[p]:
            sends_after[p].append(reader)
        errors_after.setdefault(reader, []).append(p)
    steps: dict[StepKey, StepMessages] = {}
    for (i, kind), transfers in sent(once, [b for stage in buckets for b in stage],
                                     collective, hierarchy).items():
        steps[(i, kind)] = transfers.messages(i, kind, hierarchy)
    for (i, kind), transfers in sent(per_micro, (), collective, hierarchy).items():
        messages = transfers.messages(i, kind, hierarchy)
        for micro in range(training.microbatches):
            steps[step_key(i, kind, micro)] = dataclasses.replace(messages, micro=micro)
    return PipelineMessages(steps, tuple(buckets), sends_after,
                            {c: sorted(set(ps)) for c, ps in errors_after.items()})
