"""Group operations: where a step's messages are too many to simulate one by one, the
event-driven engine runs every communication step as one operation.

The engine simulates every message chunk by chunk (`sim.engine`): exact, and some 200 us
of CPU a message. A redistribution between two layouts on a thousand accelerators is
some 60,000 messages a step (vgg_a at batch 4096 on 1,024: 268,000 of its 283,000), so
where more messages than a budget (`DEFAULT_DES_MESSAGES`, `--des-messages`) would be
simulated one by one, one of each symmetry class (`sim.symmetry`), every step becomes one
described operation (issue "Scale": its size, its group, its links):

- it starts when the last of its senders reaches it;
- alone it takes its closed form, the analytic engine's (`hardware.transfer.step_cycles`:
  the slowest message alone, the busiest link or the busiest cube's DRAM carrying all of
  its bytes, rounds one after another);
- operations in flight at once that share a link share it two ways, as the analytic
  engine's steps do (`sim.analytic`): each ends later by the time the two overlap;
- when it ends, every member it sends to has its part.

The engine keeps what the closed form does not: each member's own timeline, its waits
and what it computes meanwhile. Members alike in all the engine reads of them are one
class (`sim.symmetry.alike_classes`), so a thousand members that do the same thing are
simulated once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hypar_sim.hardware.topology import Topology
from hypar_sim.hardware.transfer import Routed, step_cycles
from hypar_sim.sim.lanes import Lanes
from hypar_sim.sim.schedule import FlatMessages, Schedule, StepKey
from hypar_sim.sim.symmetry import Classes


@dataclass(frozen=True)
class Operation:
    """One step's messages as one operation: its time alone, and the bytes on every link
    and at every member's cube."""

    step: StepKey
    alone_cycles: float  # `hardware.transfer.step_cycles` of its messages
    link_bytes: np.ndarray  # [link] bytes it carries over each link
    sent_bytes: np.ndarray  # [member] bytes each member's cube reads for it
    received_bytes: np.ndarray  # [member] bytes each member's cube writes for it


#: Past this many messages for each one the budget allows, classifying them to count the
#: classes would take long (vgg_a at batch 4096 on 1,024 accelerators: 283,000 messages, no
#: symmetry kept, 8 s to classify): every step is an operation without counting.
CLASSIFIED_PER_MESSAGE = 20


def grouped_steps(messages: int, budget: int | None) -> bool | None:
    """Whether every step runs as a group operation, given a schedule's `messages` (rows)
    and the `budget` of messages simulated one by one (None: no budget): False within
    it; True past `CLASSIFIED_PER_MESSAGE` times it; None between, where the message
    classes decide (`sim.symmetry.classify`'s `most`)."""
    if budget is None or messages <= budget:
        return False
    return True if messages > CLASSIFIED_PER_MESSAGE * budget else None


def build_operations(schedule: Schedule, flat: FlatMessages, routed: Routed,
                     topology: Topology, chunk_bytes: float, max_chunks: int) -> list[Operation]:
    """Every step's operation: `flat` its messages as the engine sends them
    (`Schedule.sent_flat`, rows in `schedule.flat`'s order, steps one after another),
    `routed` their routes."""
    if not len(flat.src):
        return []
    bounds = np.flatnonzero(np.r_[True, np.diff(flat.step) != 0, True]).tolist()
    keys = list(schedule.steps)
    members, links = schedule.accelerators, len(topology.links)
    sent = flat.sent_bytes
    operations = []
    for first, last in zip(bounds[:-1], bounds[1:], strict=True):
        step = keys[int(flat.step[first])]
        part, sizes = routed.part(first, last), sent[first:last]
        operations.append(Operation(
            step,  # the step's own rows: their rounds as the closed form's
            step_cycles(schedule.steps[step], topology, schedule.config, chunk_bytes,
                        max_chunks, part),
            part.loads(sizes, links),
            np.bincount(flat.src[first:last], sizes, minlength=members),
            np.bincount(flat.dst[first:last], sizes, minlength=members)))
    return operations


def kept_by(operations: list[Operation]) -> tuple[np.ndarray, np.ndarray] | None:
    """What members and links of a class must share for the operations to stay alike on
    them (`sim.symmetry.alike_classes`): ([member] rows of bytes read and written, [link]
    rows of bytes carried); None: no operations."""
    if not operations:
        return None
    return (np.stack([part for op in operations for part in (op.sent_bytes, op.received_bytes)]),
            np.stack([op.link_bytes for op in operations]))


class Running:
    """The engine's side of the operations on classes of members and links
    (`sim.symmetry.Classes`): the sender classes each still waits for, when each in flight
    ends, and the links each uses."""

    def __init__(self, operations: list[Operation], classes: Classes) -> None:
        self.by_step: dict[StepKey, list[tuple[Operation, set[int]]]] = {}
        self.expected: dict[tuple[int, StepKey], int] = {}  # (class, step) -> operations
        self.receivers: dict[int, list[int]] = {}  # id(operation) -> classes it sends to
        self.used: dict[int, np.ndarray] = {}  # id(operation) -> [link] whether it uses it
        # id(operation) -> (link class, bytes on its representative link) where it carries any
        self.carried: dict[int, list[tuple[int, float]]] = {}
        representatives = np.asarray(classes.links, dtype=np.int64)
        self.finish: dict[int, float] = {}  # id(operation) -> when it ends, once started
        self.began: dict[int, float] = {}  # id(operation) -> when it started
        self.flowing: list[tuple[Operation, float]] = []  # started, maybe in flight: start
        member_class = classes.member_class
        for op in operations:
            senders = set(np.unique(member_class[op.sent_bytes > 0]).tolist())
            self.by_step.setdefault(op.step, []).append((op, senders))
            receivers = np.unique(member_class[op.received_bytes > 0]).tolist()
            self.receivers[id(op)] = receivers
            self.used[id(op)] = op.link_bytes > 0
            on_classes = op.link_bytes[representatives]
            carrying = np.flatnonzero(on_classes > 0)
            self.carried[id(op)] = list(zip(carrying.tolist(), on_classes[carrying].tolist(),
                                            strict=True))
            for receiver in receivers:
                self.expected[(receiver, op.step)] = self.expected.get((receiver, op.step),
                                                                       0) + 1

    def reached(self, member_class: int, step: StepKey) -> list[Operation]:
        """The class has reached its Send of `step`: the operations it was the last sender
        of, to start now."""
        ready = []
        for op, senders in self.by_step.get(step, ()):
            if member_class in senders:
                senders.discard(member_class)
                if not senders:
                    ready.append(op)
        return ready

    def start(self, op: Operation, now: float, links: list[Lanes],
              link_rate: list[float]) -> float:
        """Start `op` at `now`; when it ends: its closed form later, and later still by the
        time it overlaps each operation in flight on a link of its own, which is later by
        as much (`sim.analytic`'s two-way sharing). Each link's lanes count its bytes as
        busy time (`Lanes.busy_cycles`, lane-cycles)."""
        alone = op.alone_cycles
        used = self.used[id(op)]
        finish = self.finish
        self.flowing = [item for item in self.flowing if finish[id(item[0])] > now]
        later = 0.0
        for other, began in self.flowing:
            overlap = min(finish[id(other)], now + alone) - max(began, now)
            if overlap > 0 and np.any(used & self.used[id(other)]):
                later = max(later, overlap)
                finish[id(other)] += overlap
        finish[id(op)] = now + alone + later
        self.began[id(op)] = now
        self.flowing.append((op, now))
        for link_class, carried in self.carried[id(op)]:
            links[link_class].busy_cycles += carried / link_rate[link_class]
            links[link_class].grants += 1
        return finish[id(op)]

    def count(self, op: Operation, counters) -> None:
        """With a summary trace (`sim.trace.LinkCounters`): the ended operation's bytes on
        one link of each link class, spread over its time."""
        for link_class, carried in self.carried[id(op)]:
            counters.add(link_class, self.began[id(op)], self.finish[id(op)], carried)
