"""One training step of a graph network as work: every member's tasks and the messages.

The messages are the transfer matrices of the graph plan (`partition.graph_layout`,
the same the planner sums, sent by the `ring` collective), grouped into steps
keyed like a chain's: an edge's forward reduce by its producer (PARTIAL_SUM),
its forward gather by its consumer (RELAYOUT_FEATURE), its backward reduce by
the consumer (ERROR_REDUCE), its backward gather by the producer
(ERROR_GATHER); a node's gradient all-reduce by the node (GRADIENT,
GRADIENT_GATHER); the loss by the output node (PARTIAL_SUM, ERROR_GATHER).

Every member runs the graph generation by generation (a node's generation is
one more than its latest input's): forward, the backward pass in reverse,
then the updates. A generation's nodes are independent; those whose busiest
PU counts fit the cube's PUs together run side by side (`Parallel`: as long
as the longest; each PU streams from its own vault), the rest one after
another. A node's inputs are gathered before its generation runs and its
partial outputs reduced after it; its output error gathered before its
backward pass, its input errors reduced while its generation computes its
gradients (waited after them, as a chain's). Gradients are fused in
buckets (`planner.plan_messages.gradient_buckets`); a bucket's all-reduce is sent
once its last gradient is computed and overlaps the rest of the backward
pass (waited before the first update of its nodes) unless
`overlap_gradients` is off. Each member's activations, weights and gradients
must fit its cube.
"""

from __future__ import annotations

import numpy as np

from hypar_sim.hardware.capacity import Footprint, check_capacity
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.graph_costs import node_cost
from hypar_sim.partition import graph_layout
from hypar_sim.partition.steps import Phase, TransferKind
from hypar_sim.planner.graph_plan import GraphPlan
from hypar_sim.planner.plan_messages import (
    collective_of,
    fed_nodes,
    gradient_buckets,
    graph_layouts,
    graph_matrices,
    graph_steps,
)
from hypar_sim.sim.defaults import DEFAULT_BUCKET_MB
from hypar_sim.sim.schedule import (
    Compute,
    Parallel,
    Schedule,
    Send,
    StepKey,
    Task,
    Units,
    Wait,
)
from hypar_sim.workload.graph import Graph


def build_graph_schedule(graph: Graph, plan: GraphPlan, config: HardwareConfig,
                         overlap_gradients: bool = True,
                         bucket_bytes: float = DEFAULT_BUCKET_MB * 2**20) -> Schedule:
    """Tasks and messages of one training step of `graph` under `plan` (gradients fused in
    buckets of `bucket_bytes`, 0: one all-reduce per node; see `graph_steps`)."""
    hierarchy, batch = plan.hierarchy, plan.batch
    forward_only = plan.phases == "forward"
    layouts, matrices = list(plan.layouts), plan.matrices  # what the planner evaluated
    if not layouts or plan.word_bytes != config.word_bytes:
        layouts = graph_layouts(graph, batch, hierarchy, plan.columns)
        matrices = graph_matrices(graph, layouts, batch, config.word_bytes, forward_only)
    generations = graph.generations()
    backward = [i for generation in reversed(generations) for i in reversed(generation)]
    buckets = [] if forward_only else gradient_buckets(graph, backward, config.word_bytes,
                                                       bucket_bytes)
    steps = graph_steps(matrices, hierarchy, buckets, collective_of(plan.traffic_model))
    _check_fits(graph, layouts, plan, config, not forward_only)
    fed = fed_nodes(graph)

    shapes = [own.box_sizes() for own in layouts]

    def compute(i: int, phase: Phase) -> Compute:
        """Members with boxes of the same sizes share one cost."""
        _, first, inverse = np.unique(shapes[i], axis=0, return_index=True,
                                      return_inverse=True)
        distinct = [node_cost(layouts[i], int(m), phase, config, graph.nodes[i].name in fed)
                    for m in first]
        return Compute(i, phase, tuple(distinct[j] for j in inverse.reshape(-1)))

    def exchange(key: StepKey) -> list[Task]:
        return [Send(key), Wait(key)] if key in steps else []

    def together(nodes: list[int], phase: Phase) -> list[Task]:
        return _packed([compute(i, phase) for i in nodes], config.pus_per_cube)

    gradient = {bucket[-1]: bucket for bucket in buckets}
    units = Units(graph.name, plan.strategy, batch, hierarchy, plan.node_names,
                  tuple(tuple(column[h] for column in plan.columns)
                        for h in range(hierarchy.levels)), plan.traffic_model, plan.phases)
    tasks: list[Task] = []
    for generation in generations:
        for i in generation:
            tasks += exchange((i, TransferKind.RELAYOUT_FEATURE))
        tasks += together(generation, Phase.FORWARD)
        for i in generation:
            tasks += exchange((i, TransferKind.PARTIAL_SUM))
    if forward_only:
        return Schedule(units, config, tuple(tasks), steps, overlap_gradients)
    for generation in reversed(generations):
        nodes = generation[::-1]
        for i in nodes:
            tasks += exchange((i, TransferKind.ERROR_GATHER))
        tasks += together(nodes, Phase.BACKWARD)
        reduced = [(i, TransferKind.ERROR_REDUCE) for i in nodes
                   if (i, TransferKind.ERROR_REDUCE) in steps]
        tasks += [Send(key) for key in reduced]
        tasks += together(nodes, Phase.GRADIENT)
        for i in nodes:
            if i in gradient and (i, TransferKind.GRADIENT) in steps:
                tasks.append(Send((i, TransferKind.GRADIENT)))
                if not overlap_gradients:
                    tasks.append(Wait((i, TransferKind.GRADIENT)))
                    tasks += exchange((i, TransferKind.GRADIENT_GATHER))
        # input errors are reduced while the gradients are computed (the chain's rule:
        # waited before the producers' backward pass)
        tasks += [Wait(key) for key in reduced]
    bucket_of = {i: bucket[-1] for bucket in buckets for i in bucket}
    waited: set[int] = set()
    for i in range(len(graph.nodes)):
        key = bucket_of.get(i)
        if overlap_gradients and key is not None and key not in waited:
            waited.add(key)
            if (key, TransferKind.GRADIENT) in steps:
                tasks.append(Wait((key, TransferKind.GRADIENT)))
                tasks += exchange((key, TransferKind.GRADIENT_GATHER))
        tasks.append(compute(i, Phase.UPDATE))
    return Schedule(units, config, tuple(tasks), steps, overlap_gradients)


def _packed(computes: list[Compute], pus: int) -> list[Task]:
    """Independent computations side by side while every member's busiest PU counts fit
    the cube's PUs together; one after another otherwise (greedy, in order)."""
    tasks: list[Task] = []
    group: list[Compute] = []

    def close() -> None:
        if len(group) > 1:
            tasks.append(Parallel(tuple(group)))
        else:
            tasks.extend(group)

    for compute in computes:
        fits = all(sum(c.costs[m].pus_used for c in (*group, compute)) <= pus
                   for m in range(len(compute.costs)))
        if group and not fits:
            close()
            group = []
        group.append(compute)
    close()
    return tasks


def _check_fits(graph: Graph, layouts: list[graph_layout.NodeLayout], plan: GraphPlan,
                config: HardwareConfig, gradients: bool = True) -> None:
    """The busiest member's parameters, gradients (none in an inference) and kept
    activations (every node's output box: what the backward pass reads), plus the plan's
    communication buffer, fit its cube: the parts the planner checked (`GraphPlan
    .footprint_parts`; a fused bucket's all-reduce runs in place on its gradients, as
    PyTorch DDP's gradient_as_bucket_view does, so fusing adds no buffer), here node by node
    for the message."""
    if not layouts:
        return
    word = config.word_bytes
    params, kept = graph_layout.busiest_member(layouts, gradients)
    footprints = [Footprint(own.site.node.name, float(params[i] * word),
                            float(params[i] * word * gradients), float(kept[i] * word))
                  for i, own in enumerate(layouts)]
    check_capacity(footprints, dict(plan.footprint_parts)["buffers"], config, graph.name)
