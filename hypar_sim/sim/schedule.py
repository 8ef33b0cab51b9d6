"""One training step as work: per accelerator, the ordered tasks and the messages.

Every accelerator holds the same share of every layer (the hierarchical
partition is symmetric), so all run the same task list; only the partners of
their messages differ. At level h (0 = top) of H, the 2**h groups of 2**(H-h)
accelerators are split into halves, and accelerator a exchanges with its
counterpart a ^ 2**(H-h-1) in the other half. Each of the 2**(H-h-1)
accelerators of a half sends its part (1 / 2**(H-h-1)) of what its half sends
to the other half (`comm_model.layer_transfers`, the planner's own function),
so all messages add up to the planner's traffic exactly.

Order of one step (every accelerator):

- forward, layer by layer: receive the re-laid-out input (dp -> mp boundary),
  compute, exchange partial sums (mp);
- backward, from the last layer: error backward (not for the first layer),
  send the re-laid-out error (dp -> mp boundary; the layer before waits for
  it), weight gradient, send the gradient partial sums (dp);
- update, layer by layer: wait for the layer's gradients, update the weights.

With `overlap_gradients` (the default) the gradient exchange of a layer runs
while the backward pass goes on to earlier layers, as data-parallel training
systems do (the gradients are needed only by the update); without it, each
layer's backward pass waits for its gradient exchange.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.costs import PieceCost, footprint, phase_cost
from hypar_sim.hardware.hmc import check_capacity
from hypar_sim.planner.comm_model import (
    TRANSFER_PHASE,
    LayerSplit,
    Phase,
    TransferKind,
    layer_transfers,
)
from hypar_sim.planner.plan import Plan, level_splits, split_all
from hypar_sim.workload.network import Network

StepKey = tuple[int, TransferKind]  # (layer index, why)


@dataclass(frozen=True)
class Message:
    """Bytes one accelerator sends another for one layer, at one level."""

    src: int
    dst: int
    bytes: float
    layer: int
    level: int
    kind: TransferKind

    @property
    def phase(self) -> Phase:
        return TRANSFER_PHASE[self.kind]


@dataclass(frozen=True)
class Compute:
    """Run one phase of one layer on the accelerator's PUs."""

    layer: int
    phase: Phase
    cost: PieceCost


@dataclass(frozen=True)
class Send:
    """Start the accelerator's messages of a communication step (does not wait)."""

    step: StepKey


@dataclass(frozen=True)
class Wait:
    """Block until all messages of a step addressed to the accelerator have arrived."""

    step: StepKey


Task = Compute | Send | Wait


@dataclass(frozen=True)
class Schedule:
    """The work of one training step for every accelerator."""

    network: Network
    plan: Plan
    config: HardwareConfig
    shares: tuple[LayerSplit, ...]  # what one accelerator holds of each layer
    tasks: tuple[Task, ...]  # the same for every accelerator
    steps: dict[StepKey, tuple[Message, ...]]  # all messages of the array, per step
    overlap_gradients: bool = True

    @property
    def accelerators(self) -> int:
        return self.plan.accelerators

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(m for messages in self.steps.values() for m in messages)



def plan_messages(network: Network, plan: Plan) -> dict[StepKey, tuple[Message, ...]]:
    """Every message of the plan, grouped by (layer, kind), levels in order."""
    levels = plan.levels
    accelerators = 2**levels
    steps: dict[StepKey, list[Message]] = defaultdict(list)
    splits_per_level = level_splits(network, plan.batch, plan.choices, plan.word_bytes)
    for level, (splits, choices) in enumerate(zip(splits_per_level, plan.choices, strict=True)):
        half = 2 ** (levels - level - 1)  # accelerators in each half of a pair
        previous = None
        for index, (split, choice) in enumerate(zip(splits, choices, strict=True)):
            for transfer in layer_transfers(split, previous, choice):
                part = transfer.bytes_per_direction / half
                for src in range(accelerators):
                    steps[(index, transfer.kind)].append(
                        Message(src, src ^ half, part, index, level, transfer.kind))
            previous = choice
    return {key: tuple(messages) for key, messages in steps.items()}


def leaf_shares(network: Network, plan: Plan) -> tuple[LayerSplit, ...]:
    """What one accelerator holds of each layer after all levels of the plan."""
    splits = level_splits(network, plan.batch, plan.choices, plan.word_bytes)
    if not plan.choices:
        return tuple(LayerSplit(layer, float(plan.batch), 1.0, plan.word_bytes)
                     for layer in network.layers)
    return split_all(splits[-1], plan.choices[-1])


def build_schedule(network: Network, plan: Plan, config: HardwareConfig,
                   overlap_gradients: bool = True) -> Schedule:
    """Tasks and messages of one training step; refuses a plan that does not fit a cube."""
    shares = leaf_shares(network, plan)
    steps = plan_messages(network, plan)
    received = [defaultdict(float) for _ in steps]  # bytes per destination, per step
    for per_destination, messages in zip(received, steps.values(), strict=True):
        for message in messages:
            per_destination[message.dst] += message.bytes
    buffers = max((max(per_destination.values()) for per_destination in received), default=0.0)
    check_capacity([footprint(share, config.word_bytes) for share in shares], buffers, config,
                   network.name)

    def step(layer: int, kind: TransferKind) -> StepKey | None:
        return (layer, kind) if (layer, kind) in steps else None

    def cost(index: int, phase: Phase) -> Compute:
        return Compute(index, phase, phase_cost(shares[index], phase, config, index == 0))

    tasks: list[Task] = []
    last = len(shares) - 1
    for index in range(len(shares)):
        if relayout := step(index, TransferKind.RELAYOUT_FEATURE):
            tasks += [Send(relayout), Wait(relayout)]
        tasks.append(cost(index, Phase.FORWARD))
        if partial := step(index, TransferKind.PARTIAL_SUM):
            tasks += [Send(partial), Wait(partial)]
    for index in range(last, -1, -1):
        if index < last and (error := step(index + 1, TransferKind.RELAYOUT_ERROR)):
            tasks.append(Wait(error))
        if index > 0:
            tasks.append(cost(index, Phase.BACKWARD))
        if error := step(index, TransferKind.RELAYOUT_ERROR):
            tasks.append(Send(error))
        tasks.append(cost(index, Phase.GRADIENT))
        if gradient := step(index, TransferKind.GRADIENT):
            tasks.append(Send(gradient))
            if not overlap_gradients:
                tasks.append(Wait(gradient))
    for index in range(len(shares)):
        if overlap_gradients and (gradient := step(index, TransferKind.GRADIENT)):
            tasks.append(Wait(gradient))
        tasks.append(cost(index, Phase.UPDATE))
    return Schedule(network, plan, config, shares, tuple(tasks), steps, overlap_gradients)
