"""The tasks every member of a schedule works through (`sim.schedule`): computations, and
the sends and waits of communication steps, keyed by `partition.steps.step_key`."""

from __future__ import annotations

from dataclasses import dataclass

from hypar_sim.hardware.costs import PieceCost
from hypar_sim.partition.steps import Phase

StepKey = tuple  # (layer index, why) or (layer index, why, micro-batch): `step_key`


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
