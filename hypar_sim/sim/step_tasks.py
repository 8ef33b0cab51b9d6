"""The tasks of a training step's passes over a graph's nodes, shared by the plain schedule
(`sim.schedule`) and a pipeline stage's (`sim.pipeline_schedule`, one micro-batch at a
time): the forward pass generation by generation, the backward pass in reverse (with
recomputation before each segment), the updates.

A node's inputs are gathered before its generation runs and its partial outputs reduced
after it; its output error gathered before its backward pass, its input errors reduced
while its generation computes its gradients (waited after them). A bucket's gradient
all-reduce is sent once its last gradient is computed and overlaps the rest of the
backward pass (waited before the first update of its nodes) unless `overlap_gradients`
is off. Under a pipeline, a node waits for what an earlier stage sends it before its
forward pass, and for its output's error from a later stage before its backward pass,
and sends the same on once its own steps are done.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from hypar_sim.partition.steps import Phase, TransferKind, step_key
from hypar_sim.planner.pipeline_messages import ONCE
from hypar_sim.planner.training import Recompute
from hypar_sim.sim.tasks import Compute, Parallel, Send, StepKey, Task, Wait

#: The steps that carry a node's input errors toward its producers: sent once its backward
#: pass has computed them, waited after its gradients (the layout models' reduction of
#: partial errors; HyPar's relayout of a batch -> in boundary's error).
_INPUT_ERRORS = (TransferKind.RELAYOUT_ERROR, TransferKind.ERROR_REDUCE)


@dataclass(frozen=True)
class StepTasks:
    """Tasks over `steps` (keyed by `step_key`, per-micro-batch steps of micro-batch
    `micro`); `compute(i, phase)` a node's computation; a pipeline's `feeds[c]` the
    producers in earlier stages whose outputs c waits for, `readers[p]` the readers in later
    stages whose errors of p's output p waits for, `tied[i]` (the key i sends, the key it
    waits for) of tied copies' gradients summed before i's update
    (`planner.pipeline_messages`)."""

    steps: Mapping[StepKey, object]
    compute: Callable[[int, Phase], Compute]
    pus: int
    overlap_gradients: bool = True
    micro: int = 0
    feeds: Mapping[int, Sequence[int]] = field(default_factory=dict)
    readers: Mapping[int, Sequence[int]] = field(default_factory=dict)
    tied: Mapping[int, Sequence[tuple[int, int]]] = field(default_factory=dict)

    def key(self, i: int, kind: TransferKind) -> StepKey:
        return step_key(i, kind, 0 if kind in ONCE else self.micro)

    def has(self, i: int, kind: TransferKind) -> bool:
        return self.key(i, kind) in self.steps

    def send(self, i: int, kind: TransferKind) -> list[Task]:
        return [Send(self.key(i, kind))] if self.has(i, kind) else []

    def wait(self, i: int, kind: TransferKind) -> list[Task]:
        return [Wait(self.key(i, kind))] if self.has(i, kind) else []

    def exchange(self, *pairs: tuple[int, TransferKind]) -> list[Task]:
        return [task for i, kind in pairs for task in (*self.send(i, kind),
                                                       *self.wait(i, kind))]

    def together(self, nodes: Sequence[int], phase: Phase) -> list[Task]:
        return packed([self.compute(i, phase) for i in nodes], self.pus)

    def forward(self, generations: Sequence[Sequence[int]]) -> list[Task]:
        tasks: list[Task] = []
        for generation in generations:
            for i in generation:
                for producer in self.feeds.get(i, ()):
                    tasks += self.wait(producer, TransferKind.STAGE_FEATURE)
                tasks += self.exchange((i, TransferKind.WEIGHT_GATHER),
                                       (i, TransferKind.RELAYOUT_FEATURE))
            tasks += self.together(generation, Phase.FORWARD)
            for i in generation:
                tasks += self.exchange((i, TransferKind.PARTIAL_SUM))
                tasks += self.send(i, TransferKind.STAGE_FEATURE)
        return tasks

    def backward(self, generations: Sequence[Sequence[int]], recompute: Recompute,
                 bucket_ends: set[int]) -> list[Task]:
        """The backward pass, generation by generation in reverse; before a segment's last
        generation, its recomputed nodes' forward (their steps sent again) in forward
        order, and under ZeRO 3 its nodes' weights gathered again; the gradients of
        `bucket_ends`' buckets sent as they complete."""
        tasks: list[Task] = []
        segment = recompute.segment_of()
        for g in reversed(range(len(generations))):
            nodes = list(generations[g])[::-1]
            later = [gen[0] for gen in generations[g + 1:]]
            if not later or segment[later[0]] != segment[nodes[0]]:  # a segment's last
                tasks += self._segment([gen for gen in generations[:g + 1]
                                        if segment[gen[0]] == segment[nodes[0]]], recompute)
            for i in nodes:
                for reader in self.readers.get(i, ()):
                    tasks += self.wait(reader, TransferKind.STAGE_ERROR)
                tasks += self.exchange((i, TransferKind.ERROR_GATHER))
            tasks += self.together(nodes, Phase.BACKWARD)
            reduced = [(i, kind) for i in nodes for kind in _INPUT_ERRORS if self.has(i, kind)]
            tasks += [task for i, kind in reduced for task in self.send(i, kind)]
            tasks += self.together(nodes, Phase.GRADIENT)
            for i in nodes:
                if i in bucket_ends and self.has(i, TransferKind.GRADIENT):
                    tasks += self.send(i, TransferKind.GRADIENT)
                    if not self.overlap_gradients:
                        tasks += self.wait(i, TransferKind.GRADIENT)
                        tasks += self.exchange((i, TransferKind.GRADIENT_GATHER))
            # input errors are reduced while the gradients are computed (the chain's rule:
            # waited before the producers' backward pass)
            tasks += [task for i, kind in reduced for task in self.wait(i, kind)]
            for i in nodes:
                tasks += self.send(i, TransferKind.STAGE_ERROR)
        return tasks

    def _segment(self, generations: Sequence[Sequence[int]], recompute: Recompute
                 ) -> list[Task]:
        """Before a segment's backward pass: its weights gathered again (ZeRO 3), its
        recomputed nodes' forward run again."""
        tasks: list[Task] = []
        for i in (i for gen in reversed(generations) for i in reversed(gen)):
            tasks += self.exchange((i, TransferKind.WEIGHT_REGATHER))
        for gen in generations:
            again = [i for i in gen if i in recompute.recomputed]
            if again:
                tasks += self.exchange(*((i, TransferKind.RECOMPUTE_FEATURE) for i in again))
                tasks += self.together(again, Phase.RECOMPUTE)
                tasks += self.exchange(*((i, TransferKind.RECOMPUTE_SUM) for i in again))
        return tasks

    def updates(self, nodes: Sequence[int], buckets: Sequence[Sequence[int]]) -> list[Task]:
        """Every node's update in order, a bucket's all-reduce waited before its first
        node's update; under ZeRO 1 and 2 its updated weights gathered after its last
        node's."""
        tasks: list[Task] = []
        bucket_of = {i: bucket[-1] for bucket in buckets for i in bucket}
        last_of = {max(bucket): bucket[-1] for bucket in buckets}
        waited: set[int] = set()
        for i in nodes:
            key = bucket_of.get(i)
            if self.overlap_gradients and key is not None and key not in waited:
                waited.add(key)
                if self.has(key, TransferKind.GRADIENT):
                    tasks += self.wait(key, TransferKind.GRADIENT)
                    tasks += self.exchange((key, TransferKind.GRADIENT_GATHER))
            for sent, awaited in self.tied.get(i, ()):
                tasks += self.send(sent, TransferKind.TIED_GRADIENT)
                tasks += self.wait(awaited, TransferKind.TIED_GRADIENT)
            tasks.append(self.compute(i, Phase.UPDATE))
            if i in last_of:
                tasks += self.exchange((last_of[i], TransferKind.UPDATE_GATHER))
        return tasks


def packed(computes: list[Compute], pus: int) -> list[Task]:
    """Independent computations side by side while every member's busiest PU counts fit
    the cube's PUs together; one after another otherwise (greedy, in order)."""
    tasks: list[Task] = []
    group: list[Compute] = []
    used = np.zeros(0)  # the group's PUs per member

    def close() -> None:
        if len(group) > 1:
            tasks.append(Parallel(tuple(group)))
        else:
            tasks.extend(group)

    for compute in computes:
        wanted = np.fromiter((c.pus_used for c in compute.costs), np.float64,
                             count=len(compute.costs))
        if group and not bool(np.all(used + wanted <= pus)):
            close()
            group = []
        used = used + wanted if group else wanted
        group.append(compute)
    close()
    return tasks
