"""A pipeline plan's training step as work (`planner.pipeline`): every stage's members run
its micro-batches' forward and backward passes in the order of the schedule, then its
gradients' exchange and its updates.

Each stage's passes are those of a plain step over its own nodes (`sim.step_tasks`, one
micro-batch at a time); before a node's forward pass it waits for what earlier stages send
it, before its backward pass for its output's error from later stages. GPipe (Huang et al.
2019) runs a stage's M forward passes, then its M backward passes, the last micro-batch
first; 1F1B (Narayanan et al. 2021) runs S - s - 1 forward passes on stage s, then one
forward and one backward pass in turn, then the backward passes left. A bucket's
gradients are sent during the stage's last backward pass. With S equal stages and no
communication, either leaves each stage idle (S - 1)/(M + S - 1) of the step (the bubble).

Each member works through its own stage's task list (`Schedule.stage_tasks`); the
schedule's `tasks` are the stages' lists one after another, each computation costing the
other stages' members nothing, for the accounting.
"""

from __future__ import annotations

import dataclasses

from hypar_sim.hardware.capacity import Footprint, check_capacity
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.costs import ZERO_COST, PieceCost
from hypar_sim.partition.steps import Phase, largest_receive
from hypar_sim.planner.pipeline import in_flight, micro_batch, pipeline_footprint, sub_array
from hypar_sim.planner.pipeline_messages import (
    ONCE,
    pipeline_messages,
    stage_graph,
    stage_nodes,
    tied_apart,
)
from hypar_sim.planner.plan import Plan
from hypar_sim.planner.plan_messages import graph_layouts
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.planner.training import Recompute, Training, recompute_plan
from hypar_sim.sim.schedule import Schedule, member_costs, units_of
from hypar_sim.sim.step_tasks import StepTasks
from hypar_sim.sim.tasks import Compute, Task
from hypar_sim.workload.graph import Graph


def passes(training: Training, stage: int) -> list[tuple[Phase, int]]:
    """The stage's passes in order: (FORWARD or BACKWARD, micro-batch)."""
    count, s = training.microbatches, stage
    if training.schedule == "gpipe":
        return [(Phase.FORWARD, u) for u in range(count)] + \
            [(Phase.BACKWARD, u) for u in reversed(range(count))]
    warm = min(training.stages - s - 1, count)
    order = [(Phase.FORWARD, u) for u in range(warm)]
    for u in range(count - warm):
        order += [(Phase.FORWARD, warm + u), (Phase.BACKWARD, u)]
    return order + [(Phase.BACKWARD, u) for u in range(count - warm, count)]


def build_pipeline_schedule(graph: Graph, plan: Plan, config: HardwareConfig,
                            overlap_gradients: bool, bucket_bytes: float) -> Schedule:
    """Tasks and messages of one training step under the pipeline `plan` (gradients fused
    in buckets of `bucket_bytes` within each stage)."""
    training = plan.training
    count = training.stages
    sub = sub_array(plan.hierarchy, count)
    micro = micro_batch(plan.batch, training)
    model = traffic_model(plan.traffic_model, plan.phases)
    layouts = list(plan.layouts) or graph_layouts(graph, micro, sub, plan.columns, model)
    messages = pipeline_messages(graph, layouts, plan.stages, plan.hierarchy, micro,
                                 config.word_bytes, training, model.collective,
                                 bucket_bytes if model.fuses_gradients else 0)
    # the plan's receive buffer: a fused bucket's all-reduce runs in place (`sim.schedule`)
    receive = dict(plan.footprint_parts)["buffers"] if plan.word_bytes == config.word_bytes \
        else largest_receive({key: step for key, step in messages.steps.items()
                              if key[1] not in ONCE})
    parts = dict(pipeline_footprint(graph, layouts, plan.stages, config.word_bytes, receive,
                                    training))
    check_capacity([Footprint("the busiest stage", parts["weights"], parts["gradients"],
                              parts["activations"], parts["optimizer_state"])],
                   parts["buffers"] + parts["gathered_weights"], config, graph.name)
    local = member_costs(graph, layouts, config, training, tied_apart(graph, plan.stages))
    m = sub.members
    cached: dict[tuple[int, Phase], Compute] = {}

    def compute(i: int, phase: Phase) -> Compute:
        """The node's computation: its stage's members' costs, nothing for the others."""
        if (i, phase) not in cached:
            s = plan.stages[i]
            costs: tuple[PieceCost, ...] = (ZERO_COST,) * (s * m) + local(i, phase) \
                + (ZERO_COST,) * ((count - s - 1) * m)
            cached[(i, phase)] = Compute(i, phase, costs)
        return cached[(i, phase)]

    lists: list[tuple[Task, ...]] = []
    for s, nodes in enumerate(stage_nodes(plan.stages, count)):
        tasks: list[Task] = []
        own = stage_graph(graph, nodes, s)
        generations = [[nodes[j] for j in generation] for generation in own.generations()]
        recompute = _global(recompute_plan(own, training.recompute, in_flight(training, s)),
                            nodes)
        buckets = messages.buckets[s]
        order = passes(training, s)
        last = [u for phase, u in order if phase is Phase.BACKWARD][-1]
        build = StepTasks(messages.steps, compute, config.pus_per_cube, overlap_gradients,
                          0, messages.feeds, messages.readers, messages.tied)
        for phase, u in order:
            step = dataclasses.replace(build, micro=u)
            if phase is Phase.FORWARD:
                tasks += step.forward(generations)
            else:
                tasks += step.backward(generations, recompute,
                                       {b[-1] for b in buckets} if u == last else set())
        tasks += build.updates(nodes, buckets)
        lists.append(tuple(tasks))
    return Schedule(units_of(plan), config, tuple(t for part in lists for t in part),
                    messages.steps, overlap_gradients, tuple(lists))


def _global(plan: Recompute, nodes: list[int]) -> Recompute:
    """A stage's recomputation with the graph's node indices."""
    return Recompute(tuple(tuple(nodes[j] for j in segment) for segment in plan.segments),
                     frozenset(nodes[j] for j in plan.recomputed),
                     frozenset(nodes[j] for j in plan.kept))
