"""One training step of a graph network as work: every member's tasks and the messages.

The messages are the transfer matrices of the graph plan (`partition.graph_layout`,
the same the planner sums, sent by the `ring` collective), grouped into steps
keyed like a chain's: an edge's forward reduce by its producer (PARTIAL_SUM),
its forward gather by its consumer (RELAYOUT_FEATURE), its backward reduce by
the consumer (ERROR_REDUCE), its backward gather by the producer
(ERROR_GATHER); a node's gradient all-reduce by the node (GRADIENT,
GRADIENT_GATHER); the loss by the output node (PARTIAL_SUM, ERROR_GATHER).

Every member runs the nodes one after another in topological order (branches
of a graph do not yet run side by side on a cube's vaults): forward, the
backward pass in reverse order, then the updates. A node's inputs are
gathered before it runs; its partial outputs reduced after it; its output
error gathered before its backward pass, its input errors reduced after it;
its gradient all-reduce overlaps the rest of the backward pass (waited before
its update) unless `overlap_gradients` is off. Each member's activations,
weights and gradients must fit its cube.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.graph_costs import node_cost, params
from hypar_sim.hardware.hmc import Footprint, check_capacity
from hypar_sim.partition import graph_layout
from hypar_sim.partition.graph_ops import output_box
from hypar_sim.partition.steps import Message, Phase, TransferKind
from hypar_sim.planner.graph_plan import GraphPlan, graph_edges, graph_layouts, graph_steps
from hypar_sim.sim.schedule import Compute, Schedule, Send, StepKey, Task, Units, Wait
from hypar_sim.workload.graph import Graph

#: Gradient bucket of a graph's step, MiB: PyTorch DDP's default bucket_cap_mb = 25.
DEFAULT_BUCKET_MB = 25


def build_graph_schedule(graph: Graph, plan: GraphPlan, config: HardwareConfig,
                         overlap_gradients: bool = True,
                         bucket_bytes: float = DEFAULT_BUCKET_MB * 2**20) -> Schedule:
    """Tasks and messages of one training step of `graph` under `plan` (gradients fused in
    buckets of `bucket_bytes`, 0: one all-reduce per node; see `graph_steps`)."""
    hierarchy, batch = plan.hierarchy, plan.batch
    layouts = graph_layouts(graph, batch, hierarchy, plan.columns)
    steps = graph_steps(graph, layouts, batch, hierarchy, config.word_bytes, bucket_bytes)
    _check_fits(graph, layouts, steps, config)
    predecessors = defaultdict(bool)
    for _, c, _ in graph_edges(graph):
        predecessors[c] = True

    shapes = [_box_sizes(own) for own in layouts]

    def compute(i: int, phase: Phase) -> Compute:
        """Members with boxes of the same sizes share one cost."""
        _, first, inverse = np.unique(shapes[i], axis=0, return_index=True,
                                      return_inverse=True)
        distinct = [node_cost(layouts[i], int(m), phase, config, predecessors[i])
                    for m in first]
        return Compute(i, phase, tuple(distinct[j] for j in inverse.reshape(-1)))

    def exchange(key: StepKey) -> list[Task]:
        return [Send(key), Wait(key)] if key in steps else []

    tasks: list[Task] = []
    order = range(len(graph.nodes))
    for i in order:
        tasks += exchange((i, TransferKind.RELAYOUT_FEATURE))
        tasks.append(compute(i, Phase.FORWARD))
        tasks += exchange((i, TransferKind.PARTIAL_SUM))
    for i in reversed(order):
        tasks += exchange((i, TransferKind.ERROR_GATHER))
        tasks.append(compute(i, Phase.BACKWARD))
        tasks += exchange((i, TransferKind.ERROR_REDUCE))
        tasks.append(compute(i, Phase.GRADIENT))
        if (i, TransferKind.GRADIENT) in steps:
            tasks.append(Send((i, TransferKind.GRADIENT)))
            if not overlap_gradients:
                tasks += [Wait((i, TransferKind.GRADIENT))]
                tasks += exchange((i, TransferKind.GRADIENT_GATHER))
    for i in order:
        if overlap_gradients and (i, TransferKind.GRADIENT) in steps:
            tasks.append(Wait((i, TransferKind.GRADIENT)))
            tasks += exchange((i, TransferKind.GRADIENT_GATHER))
        tasks.append(compute(i, Phase.UPDATE))
    units = Units(graph.name, plan.strategy, batch, hierarchy, plan.node_names,
                  tuple(tuple(column[h] for column in plan.columns)
                        for h in range(hierarchy.levels)), "layout")
    return Schedule(units, config, tuple(tasks), steps, overlap_gradients)


def _check_fits(graph: Graph, layouts: list[graph_layout.NodeLayout],
                steps: dict[StepKey, tuple[Message, ...]], config: HardwareConfig) -> None:
    """Every member's parameters, gradients and kept activations (every node's output box:
    what the backward pass reads), plus the most it receives in one step, fit its cube."""
    word = config.word_bytes
    received: dict[tuple[StepKey, int], float] = defaultdict(float)
    for key, messages in steps.items():
        for message in messages:
            received[(key, message.dst)] += message.bytes
    buffers = max(received.values(), default=0.0)
    if not layouts:
        return
    every = np.concatenate([_box_sizes(own) for own in layouts], axis=1)
    _, members = np.unique(every, axis=0, return_index=True)
    for m in members.tolist():  # members whose boxes all have the same sizes: one check
        footprints = []
        for own in layouts:
            box = own.box(m)
            kept = np.prod([hi - lo for lo, hi in output_box(own.site, box)])
            held = params(own, box) * word
            footprints.append(Footprint(own.site.node.name, held, held, float(kept) * word))
        check_capacity(footprints, buffers, config, graph.name)


def _box_sizes(own: graph_layout.NodeLayout) -> np.ndarray:
    """[members, dimensions] the length of every member's interval of every loop dimension."""
    return np.stack([parts[:, 1] - parts[:, 0] for parts in own.boxes.values()], axis=1)
