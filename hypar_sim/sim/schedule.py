"""One training step as work: every member's ordered tasks and the messages.

The messages are the plan's traffic model's (`planner.traffic`: the layout models'
transfer matrices, `partition.node_layout`, the same the planner sums, sent by their
collective; HyPar's reading its pairwise exchanges, no buckets), grouped into steps
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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from hypar_sim.hardware.capacity import check_capacity
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.costs import PieceCost, update_piece_cost
from hypar_sim.hardware.node_costs import node_cost
from hypar_sim.partition import node_layout
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.steps import (
    Message,
    Phase,
    StepMessages,
    largest_receive,
)
from hypar_sim.planner.footprint import memory_picture
from hypar_sim.planner.plan import Plan
from hypar_sim.planner.plan_messages import (
    fed_nodes,
    gradient_buckets,
    graph_layouts,
    training_matrices,
)
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.planner.training import Training, recompute_plan
from hypar_sim.sim.defaults import DEFAULT_BUCKET_MB
from hypar_sim.sim.step_tasks import StepTasks
from hypar_sim.sim.tasks import Compute, Parallel, Send, StepKey, Task, Wait, task_cycles
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.network import Network, as_graph

__all__ = ["Compute", "Message", "Parallel", "Schedule", "Send", "StepKey", "Units", "Wait",
           "build_schedule", "largest_receive", "task_cycles"]


@dataclass(frozen=True)
class Units:
    """What the results say about the plan a schedule runs: the network, the strategy,
    the units (a chain's layers, a graph's nodes) and their kinds per level."""

    network: str
    strategy: str
    batch: int
    hierarchy: Hierarchy
    names: tuple[str, ...]
    kinds: tuple[tuple[str, ...], ...]  # [level][unit]
    traffic_model: str
    phases: str = "training"  # or "forward" (inference)


@dataclass(frozen=True)
class Schedule:
    """The work of one training step for every member."""

    units: Units
    config: HardwareConfig
    tasks: tuple[Task, ...]  # every member's, in order (a pipeline's: `stage_tasks` joined)
    steps: dict[StepKey, StepMessages]  # all messages of the array, per step
    overlap_gradients: bool = True
    #: A pipeline's: every stage's own tasks (`tasks` is their concatenation), which a
    #: member of that stage works through (`member_tasks`); () without one.
    stage_tasks: tuple[tuple[Task, ...], ...] = ()

    def member_tasks(self, member: int) -> tuple[Task, ...]:
        """The tasks `member` works through: its stage's, or every task."""
        if not self.stage_tasks:
            return self.tasks
        return self.stage_tasks[member * len(self.stage_tasks) // self.accelerators]

    @property
    def accelerators(self) -> int:
        return self.units.hierarchy.members

    @property
    def computes(self) -> tuple[Compute, ...]:
        """Every computation, those that run side by side one by one."""
        return tuple(c for task in self.tasks for c in (
            task.computes if isinstance(task, Parallel) else (task,) if isinstance(task, Compute)
            else ()))

    @cached_property
    def compute_cycles(self) -> np.ndarray:
        """[computation task, member] cycles: how long each `Compute` or `Parallel` task, in
        task order, keeps each member's cube busy (`task_cycles`; read-only)."""
        members = self.accelerators
        rows = [np.fromiter((c.cycles for c in task.costs), np.float64, count=members)
                if isinstance(task, Compute) else
                np.array([task.cycles(m) for m in range(members)], dtype=np.float64)
                for task in self.tasks if isinstance(task, Compute | Parallel)]
        cycles = np.array(rows, dtype=np.float64).reshape(len(rows), members)
        cycles.flags.writeable = False
        return cycles

    @cached_property
    def flat(self) -> FlatMessages:
        """Every message of the step in one set of arrays, steps in order (a ring's rounds
        one row per member, `FlatMessages.repeats`)."""
        return FlatMessages.of(self.steps.values())

    def sent_flat(self) -> FlatMessages:
        """The rows as the event-driven engine sends them: each row one message, a row of
        `repeats` n (a member's part of a ring's n rounds) standing for its n rounds, and each
        step's rounds numbered 0, 1, ... in their order (`sim.engine`)."""
        flat = self.flat
        if not len(flat.src):
            return flat
        span = int(flat.round.max()) + 1
        keys, inverse = np.unique(flat.step * span + flat.round, return_inverse=True)
        steps = keys // span
        ranks = np.arange(len(keys)) - np.searchsorted(steps, steps)
        return replace(flat, round=ranks[inverse.reshape(-1)])

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(m for messages in self.steps.values() for m in messages)


@dataclass(frozen=True)
class FlatMessages:
    """Messages of many steps as arrays (each step's in order, steps one after another); a
    row of `repeats` n stands for n equal messages in consecutive rounds."""

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    level: np.ndarray
    layer: np.ndarray
    round: np.ndarray
    step: np.ndarray  # the position of the message's step among `steps`
    repeats: np.ndarray
    group: np.ndarray  # the collective of its step the row is part of (-1: none)

    @classmethod
    def of(cls, steps: Iterable[StepMessages]) -> FlatMessages:
        steps = list(steps)
        if not steps:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, np.zeros(0), empty, empty, empty, empty, empty, empty)
        return cls(*(np.concatenate([getattr(step, name) for step in steps])
                     for name in ("src", "dst", "bytes", "level")),
                   np.concatenate([np.full(len(step), step.layer) for step in steps]),
                   np.concatenate([step.round for step in steps]),
                   np.repeat(np.arange(len(steps)), [len(step) for step in steps]),
                   np.concatenate([step.counts for step in steps]),
                   np.concatenate([step.groups for step in steps]))

    @cached_property
    def sent_bytes(self) -> np.ndarray:
        """Bytes of each row, all its rounds (once: the accounting reads it thrice)."""
        return self.bytes * self.repeats

    @property
    def messages(self) -> int:
        """Messages the rows stand for."""
        return int(self.repeats.sum())



def build_schedule(workload: Graph | Network, plan: Plan, config: HardwareConfig,
                   overlap_gradients: bool = True,
                   bucket_bytes: float = DEFAULT_BUCKET_MB * 2**20) -> Schedule:
    """Tasks and messages of one training step of `workload` (a graph, or a chain read as
    one) under `plan` (gradients fused in buckets of `bucket_bytes`, 0: one all-reduce per
    node; see `graph_steps`) and its training options (`planner.training`)."""
    graph = as_graph(workload)
    if plan.stages:
        from hypar_sim.sim.pipeline_schedule import build_pipeline_schedule

        return build_pipeline_schedule(graph, plan, config, overlap_gradients, bucket_bytes)
    hierarchy, batch, training = plan.hierarchy, plan.batch, plan.training
    forward_only = plan.phases == "forward"
    model = traffic_model(plan.traffic_model, plan.phases)
    layouts, matrices = list(plan.layouts), plan.matrices  # what the planner evaluated
    if not layouts or plan.word_bytes != config.word_bytes:
        layouts = graph_layouts(graph, batch, hierarchy, plan.columns, model)
        matrices = model.plan_matrices(graph, layouts, batch, config.word_bytes)
        if not forward_only:
            matrices = training_matrices(graph, matrices, training)
    generations = graph.generations()
    backward = [i for generation in reversed(generations) for i in reversed(generation)]
    buckets = [] if forward_only else gradient_buckets(
        graph, backward, config.word_bytes, bucket_bytes if model.fuses_gradients else 0)
    steps = model.graph_steps(graph, plan.columns, matrices, batch, hierarchy,
                              config.word_bytes, buckets)
    _check_fits(graph, layouts, plan, config, not forward_only)
    costs = member_costs(graph, layouts, config, training)
    build = StepTasks(steps, lambda i, phase: Compute(i, phase, costs(i, phase)),
                      config.pus_per_cube, overlap_gradients)
    tasks = build.forward(generations)
    if not forward_only:
        tasks += build.backward(generations, recompute_plan(graph, training.recompute),
                                {bucket[-1] for bucket in buckets})
        tasks += build.updates(range(len(graph.nodes)), buckets)
    return Schedule(units_of(plan), config, tuple(tasks), steps, overlap_gradients)


def units_of(plan: Plan) -> Units:
    """What a result says of `plan`."""
    return Units(plan.network, plan.strategy, plan.batch, plan.hierarchy, plan.node_names,
                 plan.choices, plan.traffic_model, plan.phases)


def member_costs(graph: Graph, layouts: Sequence[node_layout.NodeLayout],
                 config: HardwareConfig, training: Training, copies: Iterable[int] = ()
                 ) -> Callable[[int, Phase], tuple[PieceCost, ...]]:
    """Every member's cost of a node's phase (`node_cost`; members with boxes of the same
    sizes, and the same ZeRO shards, share one); the nodes of `copies` update a copy of the
    weights they are tied to (a pipeline stage apart from their owner)."""
    copies = set(copies)
    fed = fed_nodes(graph)
    rule = training.update_rule(config.word_bytes)
    shards = [node_layout.weight_copies(own) if training.zero else np.ones(own.members, int)
              for own in layouts]
    shapes = [np.column_stack([own.box_sizes(), part]) for own, part in zip(layouts, shards,
                                                                            strict=True)]

    known: dict[tuple, tuple[PieceCost, ...]] = {}  # a repeated block's costs, once

    def costs(i: int, phase: Phase) -> tuple[PieceCost, ...]:
        key = (layouts[i].shape_key, phase, graph.nodes[i].name in fed, i in copies,
               shards[i].tobytes())
        if key not in known:
            known[key] = _costs(i, phase)
        return known[key]

    def _costs(i: int, phase: Phase) -> tuple[PieceCost, ...]:
        _, first, inverse = np.unique(shapes[i], axis=0, return_index=True,
                                      return_inverse=True)
        if phase is Phase.UPDATE and i in copies:
            held = node_layout.tied_copy_params(layouts[i])
            distinct = [update_piece_cost(-(-int(held[m]) // int(shards[i][m])), config, rule)
                        for m in first]
        else:
            distinct = [node_cost(layouts[i], int(m), phase, config,
                                  graph.nodes[i].name in fed, rule, int(shards[i][m]))
                        for m in first]
        return tuple(distinct[j] for j in inverse.reshape(-1))

    return costs


def _check_fits(graph: Graph, layouts: list[node_layout.NodeLayout], plan: Plan,
                config: HardwareConfig, gradients: bool = True) -> None:
    """The busiest member's memory at its peak (`planner.footprint.memory_picture`: the
    parts the planner checked, here node by node for the message) fits its cube; its
    receive buffer the plan's (a fused bucket's all-reduce runs in place on its
    gradients, as PyTorch DDP's gradient_as_bucket_view does, so fusing adds no buffer)."""
    if not layouts:
        return
    picture = memory_picture(graph, layouts, config.word_bytes, gradients,
                             dict(plan.footprint_parts)["buffers"], plan.training)
    check_capacity(list(picture.nodes), picture.buffers_bytes, config, graph.name)
