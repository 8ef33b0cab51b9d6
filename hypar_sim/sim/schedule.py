"""One training step as work: the ordered tasks of every member and the messages.

The traffic model of the plan gives every message (`planner.traffic`: the
planner's own function, so their bytes add up to the planner's traffic) and
every member's share of every layer; shares may differ by one sample,
channel or row where a dimension does not divide, so computations carry a
cost per member. The task order is the same for all members:

- forward, layer by layer: sends and waits before the layer (its input into
  its layout), compute, sends and waits after it (its partial outputs);
- backward, from the last layer: waits for the errors it needs, error
  backward (not for the first layer), sends of its input errors, weight
  gradient, sends of the gradient;
- update, layer by layer: waits for the gradients, update.

Where each transfer kind is sent and awaited is its `partition.steps.StepRule`
(with `overlap_gradients`, the default, a layer's gradient exchange runs
while the backward pass goes on and only its update waits, as HyPar's text
ties the exchange to the update: configs/hypar_paper.yaml gives the quote;
without it each layer's backward pass waits for it). A member with no
message in a step does not wait for it.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hypar_sim.hardware.capacity import check_capacity, footprint
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.costs import PieceCost, phase_cost
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.shares import Share
from hypar_sim.partition.steps import (
    Message,
    Phase,
    Slot,
    StepMessages,
    TransferKind,
    largest_receive,
    step_rule,
)
from hypar_sim.planner.plan import Plan
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.workload.network import Network

StepKey = tuple[int, TransferKind]  # (layer index, why)

__all__ = ["Compute", "Message", "Parallel", "Schedule", "Send", "StepKey", "Units", "Wait",
           "build_schedule", "largest_receive", "task_cycles"]


@dataclass(frozen=True)
class Compute:
    """Run one phase of one layer on a member's PUs; `costs[member]`."""

    layer: int
    phase: Phase
    costs: tuple[PieceCost, ...]


@dataclass(frozen=True)
class Send:
    """Start the member's messages of a communication step (does not wait)."""

    step: StepKey


@dataclass(frozen=True)
class Wait:
    """Block until all messages of a step addressed to the member have arrived."""

    step: StepKey


@dataclass(frozen=True)
class Parallel:
    """Computations that run side by side on a member's cube (independent nodes of a graph
    whose PUs fit the cube together): they take as long as the longest."""

    computes: tuple[Compute, ...]

    def cycles(self, member: int) -> float:
        return max(compute.costs[member].cycles for compute in self.computes)


Task = Compute | Parallel | Send | Wait


def task_cycles(task: Compute | Parallel, member: int) -> float:
    """How long a computation keeps the member's cube busy, cycles."""
    return task.cycles(member) if isinstance(task, Parallel) else task.costs[member].cycles


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

    @classmethod
    def of_plan(cls, network: Network, plan: Plan) -> Units:
        return cls(network.name, plan.strategy, plan.batch, plan.hierarchy, network.layer_names,
                   plan.choices, plan.traffic_model, plan.phases)


@dataclass(frozen=True)
class Schedule:
    """The work of one training step for every member."""

    units: Units
    config: HardwareConfig
    tasks: tuple[Task, ...]  # the same order for every member
    steps: dict[StepKey, StepMessages]  # all messages of the array, per step
    overlap_gradients: bool = True
    shares: tuple[tuple[Share, ...], ...] = ()  # a chain's [layer][member] shares

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
        """Every message of the step in one set of arrays, steps in order."""
        return FlatMessages.of(self.steps.values())

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(m for messages in self.steps.values() for m in messages)


@dataclass(frozen=True)
class FlatMessages:
    """Messages of many steps as arrays (each step's in order, steps one after another)."""

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    level: np.ndarray
    layer: np.ndarray
    round: np.ndarray
    step: np.ndarray  # the position of the message's step among `steps`

    @classmethod
    def of(cls, steps: Iterable[StepMessages]) -> FlatMessages:
        steps = list(steps)
        if not steps:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, np.zeros(0), empty, empty, empty, empty)
        return cls(*(np.concatenate([getattr(step, name) for step in steps])
                     for name in ("src", "dst", "bytes", "level")),
                   np.concatenate([np.full(len(step), step.layer) for step in steps]),
                   np.concatenate([step.round for step in steps]),
                   np.repeat(np.arange(len(steps)), [len(step) for step in steps]))


def plan_messages(network: Network, plan: Plan) -> dict[StepKey, StepMessages]:
    """Every message of the plan, grouped by (layer, kind)."""
    model = traffic_model(plan.traffic_model, plan.phases)
    return model.steps(network.layers, plan.batch, plan.columns, plan.hierarchy, plan.word_bytes)


def member_shares(network: Network, plan: Plan) -> tuple[tuple[Share, ...], ...]:
    """[layer][member]: what every member computes of every layer."""
    model = traffic_model(plan.traffic_model)
    return tuple(tuple(model.member_shares(layer, plan.batch, column, plan.hierarchy))
                 for layer, column in zip(network.layers, plan.columns, strict=True))


def _step_tasks(steps: dict[StepKey, StepMessages], overlap: bool) -> dict[
        tuple[Slot, int], list[Send | Wait]]:
    """Sends and waits of every step, by (slot, layer), in the order they run there."""
    placed: dict[tuple[Slot, int], list[tuple[int, int, Send | Wait]]] = defaultdict(list)
    order = list(TransferKind)
    for key in steps:
        layer, kind = key
        rule = step_rule(kind, overlap)
        rank = order.index(kind)
        placed[(rule.send, layer)].append((rank, 0, Send(key)))
        placed[(rule.wait, layer + rule.wait_offset)].append((rank, 1, Wait(key)))
    return {slot: [task for *_, task in sorted(tasks, key=lambda t: t[:2])]
            for slot, tasks in placed.items()}


def build_schedule(network: Network, plan: Plan, config: HardwareConfig,
                   overlap_gradients: bool = True) -> Schedule:
    """Tasks and messages of one training step (a plan for inference: of its forward pass
    alone); refuses a plan that does not fit a cube. Inference keeps no gradients; its
    activations are counted as a training step keeps them (a bound: a layer's input could
    be freed once the next layer has its own)."""
    shares = member_shares(network, plan)
    steps = plan_messages(network, plan)
    buffers = largest_receive(steps)
    forward_only = plan.phases == "forward"
    for member_footprints in {tuple(layer[m] for layer in shares)
                              for m in range(plan.accelerators)}:
        kept = [footprint(share, config.word_bytes) for share in member_footprints]
        if forward_only:
            kept = [dataclasses.replace(item, gradients_bytes=0.0) for item in kept]
        check_capacity(kept, buffers, config, network.name)

    distinct = []  # per layer: its distinct shares, and each member's position among them
    for layer_shares in shares:
        position: dict[Share, int] = {}
        distinct.append((position, [position.setdefault(s, len(position)) for s in layer_shares]))

    def cost(index: int, phase: Phase) -> Compute:
        position, of_member = distinct[index]
        costs = [phase_cost(share, phase, config, index == 0) for share in position]
        return Compute(index, phase, tuple(costs[i] for i in of_member))

    around = _step_tasks(steps, overlap_gradients)

    def at(slot: Slot, index: int) -> list[Send | Wait]:
        return around.get((slot, index), [])

    tasks: list[Task] = []
    layers = range(len(network.layers))
    for index in layers:
        tasks += at(Slot.FORWARD_BEFORE, index)
        tasks.append(cost(index, Phase.FORWARD))
        tasks += at(Slot.FORWARD_AFTER, index)
    if forward_only:
        return Schedule(Units.of_plan(network, plan), config, tuple(tasks), steps,
                        overlap_gradients, shares)
    for index in reversed(layers):
        tasks += at(Slot.BACKWARD_BEFORE, index)
        if index > 0:
            tasks.append(cost(index, Phase.BACKWARD))
        tasks += at(Slot.BACKWARD_AFTER, index)
        tasks.append(cost(index, Phase.GRADIENT))
        tasks += at(Slot.GRADIENT_AFTER, index)
    for index in layers:
        tasks += at(Slot.UPDATE_BEFORE, index)
        tasks.append(cost(index, Phase.UPDATE))
    return Schedule(Units.of_plan(network, plan), config, tuple(tasks), steps, overlap_gradients,
                    shares)
