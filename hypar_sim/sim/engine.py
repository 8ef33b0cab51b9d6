"""The discrete-event engine (SimPy): one training step, time in cycles of the array clock.

Each accelerator is a process that works through its tasks: a computation
keeps its cube's PUs busy for the piece's cycles (compute and DRAM overlapped,
from the hardware models; the computations up to its next message task one timeout,
ending exactly where theirs one by one would); a send starts its messages and goes on; a wait
blocks until every message of that step addressed to the accelerator has
arrived. A collective's messages of round r + 1 (a level stage's next ring)
leave a member once all of its round r has left it (is wholly on its first
link) and it has received all of round r: its rounds go out in order. A ring
is one operation of its group (`Schedule.sent_flat`): each member sends its
successor one message of all its k - 1 rounds' bytes, which holds the links
and channels as the rounds would; every member receives its part when the last
of the ring's parts has arrived, and no sooner than the rounds one after another would take alone
(`StepEngine.late`), so a ring of k members is k messages, not k (k - 1), and the
analytic engine's closed form is what it takes on free links. A message cuts
its bytes into chunks; each chunk is read through one of the source cube's
vault channels, cuts through the links of its route (all messages share them:
contention is modelled) and is written through a vault channel at the
destination (see `hardware.transfer` for the rules, which the analytic engine
mirrors). When the last chunk is in, the route's fixed latency passes and the
message has arrived.

Past `--des-messages` messages, every communication step is one group operation instead
(`sim.operations`): it starts when its last sender reaches it, takes the analytic
engine's closed form, shares links two ways with the operations in flight, and then its
receivers have their parts; members alike in everything are one class. Operations that
start in the same cycle start in the order their classes reach them (SimPy's order of
events at one time: deterministic, but not chosen by the operations, unlike `Lanes`').

Messages use the vault channels through their own `Lanes`; a computation's DRAM
traffic is already inside its piece's cycles (hardware.hmc), so messages and
computation do not compete for the channels here: a simplification, small
because messages are limited by the links (0.2 GB/s against 10 GB/s a vault).

Links and vault channels are `Lanes`: a few identical lanes. Because a chunk
knows how long it will hold a lane when it asks for it (its serialization
time; waiting for its tail to arrive from upstream holds no lane), a grant is
a reservation (the lane's next free time moves on) and the chunk waits only
when the lane is busy. Requests a `Lanes` receives in the same cycle are granted
together once every other event of that cycle has run, in an order that
depends only on them, never on which accelerator happened to run first:
smaller service first, and equal requests (the same service and the same
earliest finish) as one group that shares the lanes and finishes together, as
round-robin arbitration between equal streams does. Members that are
relabellings of one another therefore stay exactly alike, which lets the
engine simulate one of each class (`sim.symmetry`) and count it many times;
`symmetry=False` simulates every member and gives the same result to the last
cycle. Waits and deliveries are timeouts with callbacks rather than processes
of their own.
"""

from __future__ import annotations

from collections import defaultdict

import simpy
from simpy.core import EmptySchedule

from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.topology import Topology
from hypar_sim.hardware.transfer import (
    chunk_sizes,
    rounds_shortfall_cycles,
    route_latency_cycles,
)
from hypar_sim.partition.steps import TransferKind
from hypar_sim.sim.accounting import is_update
from hypar_sim.sim.lanes import Lanes
from hypar_sim.sim.operations import Running
from hypar_sim.sim.schedule import (
    Compute,
    Parallel,
    Schedule,
    Send,
    StepKey,
    Wait,
    task_cycles,
)
from hypar_sim.sim.symmetry import Classes, Sent
from hypar_sim.sim.trace import LinkCounters

#: SimPy priority of the event that grants a cycle's requests: after every other event of
#: the cycle (SimPy's own are URGENT = 0 and NORMAL = 1).
_AFTER_OTHERS = 2
#: Steps whose waits are for another pipeline stage's work (`stage_wait_cycles`).
STAGE_KINDS = frozenset({TransferKind.STAGE_FEATURE, TransferKind.STAGE_ERROR})


class _InFlight:
    """A message on its way: what it stands for, its chunks, the latest write finish."""

    __slots__ = ("sent", "hops", "sizes", "issued", "chunks_left", "last_write", "sent_at")

    def __init__(self, sent: Sent, sizes: list[float], sent_at: float) -> None:
        self.sent = sent
        self.sent_at = sent_at
        self.hops = len(sent.hops)  # links on the route
        self.sizes = sizes
        self.issued = 0
        self.chunks_left = len(sizes)
        self.last_write = 0.0


class StepEngine:
    """The SimPy state of one training step, one process per class of accelerators."""

    def __init__(self, schedule: Schedule, topology: Topology, classes: Classes,
                 running: Running, chunk_bytes: float, max_chunks: int, trace: bool = False,
                 progress: bool = False, summary: bool = False) -> None:
        config: HardwareConfig = schedule.config
        self.progress = progress
        self.schedule = schedule
        self.classes = classes
        self.chunk_bytes = chunk_bytes
        self.max_chunks = max_chunks
        self.config = config
        self.env = simpy.Environment()
        self.vaults = [Lanes(config.vaults_per_cube) for _ in classes.members]
        self.links = [Lanes(topology.links[link].lanes) for link in classes.links]
        self.link_rate = [topology.links[link].spec.bandwidth_bytes_per_cycle  # of a lane
                          for link in classes.links]
        self.vault_rate = config.vault_bandwidth_bytes_per_cycle
        self.asking: list[Lanes] = []  # Lanes with requests this cycle
        self.granting = False
        # arrivals still expected per (class, step) and (class, step, round), by its
        # representative, and the event that fires when a step's reach zero
        self.pending: dict[tuple[int, StepKey], int] = defaultdict(int)
        self.round_pending: dict[tuple[int, StepKey, int], int] = defaultdict(int)
        for (member_class, step, round_), count in classes.expected.items():
            self.pending[(member_class, step)] += count
            self.round_pending[(member_class, step, round_)] = count
        self.running = running  # group operations (`sim.operations`): one arrival each
        for key, count in running.expected.items():
            self.pending[key] += count
        self.arrived = {key: self.env.event() for key in self.pending}
        self.wait_cycles = [defaultdict(float) for _ in classes.members]  # layer -> cycles
        self.passes_end = [0.0] * len(classes.members)  # its last non-update computation's
        self.stage_waits = [0.0] * len(classes.members)  # waiting for other pipeline stages
        # with `trace`: every computation (member, start, end, task) and every message's
        # span on every link ((message id, link) -> [start, finish, bytes])
        self.computations: list[tuple[int, float, float, Compute | Parallel]] | None = \
            [] if trace else None
        self.spans: dict[tuple[int, int], list] | None = {} if trace and not summary \
            else None
        # with a summary trace: bytes on one link of each link class over time
        self.counters = LinkCounters(len(classes.links)) if trace and summary else None
        self.started: set[tuple[int, StepKey]] = set()  # (class, step) whose Send has run
        self.next_round: dict[tuple[int, StepKey], int] = defaultdict(int)
        # messages of (class, step, round) not yet wholly on their first link
        self.leaving: dict[tuple[int, StepKey, int], int] = {}
        self.topology = topology
        # per (step, round, collective class) of rings' messages (`Sent.rounds` > 1): [when
        # the last is ready, messages not yet ready, those ready]: a ring's members receive
        # their parts at once
        self.rings: dict[tuple[StepKey, int, int], list] = {}
        self.last_round: dict[tuple[int, StepKey], int] = {}  # each class's, in each step
        for (member_class, step, round_), messages in classes.outbox.items():
            key = (member_class, step)
            self.last_round[key] = max(self.last_round.get(key, -1), round_)
            for sent in messages:
                if sent.rounds > 1:
                    self.rings.setdefault((step, round_, sent.group), [0.0, 0, []])[1] += 1
        self.rounds_late: dict[tuple[int, float, int], tuple[float, float]] = {}  # `late`'s
        self.updates: dict[int, bool] = {}  # id(task) -> whether it is a weight update

    def ask(self, lanes: Lanes, service: float, not_before: float, count: int,
            state: _InFlight, size: float, stage: int) -> None:
        """Request `lanes` for `count` equal chunks of `size` bytes at `stage` of their way
        (0: read at the source, k: link k of the route, then the write at the destination);
        granted at the end of this cycle (`grant_all`)."""
        if not lanes.requests:
            if not self.asking and not self.granting:
                event = simpy.Event(self.env)
                event._ok, event._value = True, None
                event.callbacks.append(self.grant_all)
                self.env.schedule(event, _AFTER_OTHERS)
            self.asking.append(lanes)
        lanes.requests.append((service, not_before, count, state, size, stage))

    def grant_all(self, _event=None) -> None:
        """Grant every request of this cycle, round after round: requests the grants make
        (a chunk going on to its next link at once) form the next round."""
        self.granting = True
        now = self.env.now
        while self.asking:
            batch, self.asking = self.asking, []
            granted = batch[0].grant(now) if len(batch) == 1 else \
                [item for lanes in batch for item in lanes.grant(now)]
            for request, start, finish, done in granted:
                state, stage = request[3], request[5]
                if stage > state.hops:  # written at the destination
                    self.written(state, finish)
                    continue
                if stage and self.spans is not None:
                    self._span(state, stage - 1, start, finish, request[4])
                elif stage and self.counters is not None:  # over the lanes' holding time
                    link, count = state.sent.hops[stage - 1]
                    self.counters.add(link, start, done, request[4] * count)
                if start > now:
                    self.env.timeout(start - now).callbacks.append(
                        lambda _, state=state, size=request[4], stage=stage, finish=finish:
                        self.holds(state, size, stage, finish))
                else:
                    self.holds(state, request[4], stage, finish)
        self.granting = False

    def start_rounds(self, member_class: int, step: StepKey) -> None:
        """Send the class's rounds of `step` that may go: round 0 at its Send, round r + 1
        once it has received all of round r (a ring's dependency) and its own messages of
        round r have left (are wholly on their first link): a member sends a collective's
        rounds in order, one after another, as a ring does. (Sent together, rounds a late
        member could send at once shared its link and all arrived at the end, and the next
        member waited for the last of them: a ring behind a late member ran 12x slower
        than its rounds in sequence.)"""
        if (member_class, step) not in self.started:
            return
        outbox = self.classes.outbox
        while True:
            round_ = self.next_round[(member_class, step)]
            if round_ > 0 and (self.round_pending[(member_class, step, round_ - 1)] > 0 or
                               self.leaving.get((member_class, step, round_ - 1), 0) > 0):
                return
            if round_ > self.last_round.get((member_class, step), -1):
                return
            messages = outbox.get((member_class, step, round_), ())
            self.next_round[(member_class, step)] = round_ + 1
            if not messages:  # another group's stage (`Schedule.sent_flat` ranks a step's)
                continue
            self.leaving[(member_class, step, round_)] = len(messages)
            for sent in messages:
                self.read(_InFlight(sent, chunk_sizes(sent.message.bytes, self.chunk_bytes,
                                                      self.max_chunks), self.env.now))

    def accelerator(self, member_class: int, bar=None):
        env = self.env
        member = self.classes.members[member_class]
        waits = self.wait_cycles[member_class]
        tasks = self.schedule.member_tasks(member)
        at, count = 0, len(tasks)
        while at < count:
            task = tasks[at]
            if isinstance(task, Compute | Parallel):
                first = at
                end, at = self._computations(member_class, member, tasks, at)
                if end > env.now:
                    yield env.timeout(end - env.now)
                if bar is not None:
                    bar.update(at - first)
                continue
            at += 1
            if bar is not None:
                bar.update(1)
            if isinstance(task, Send):
                self.started.add((member_class, task.step))
                self.start_rounds(member_class, task.step)
                for operation in self.running.reached(member_class, task.step):
                    self.running.start(operation, env.now, self.links, self.link_rate)
                    self.operation_ends(operation)
            elif isinstance(task, Wait):
                arrival = self.arrived.get((member_class, task.step))
                if arrival is None:  # nothing addressed to this member in the step
                    continue
                started = env.now
                yield arrival
                if task.step[1] in STAGE_KINDS:  # another stage's work, not the links'
                    self.stage_waits[member_class] += env.now - started
                else:
                    waits[task.step[0]] += env.now - started

    def _computations(self, member_class: int, member: int, tasks, at: int
                      ) -> tuple[float, int]:
        """The member's computations from task `at` on, up to its next message task, one
        after another from now: (when the last ends, the next task's position). They are
        one timeout, not one each (half of a step's events): where now plus that timeout is
        not the very end their one-by-one timeouts would reach (float sums differ in their
        last bit), the first alone."""
        now = end = self.env.now
        start, count = at, len(tasks)
        while at < count and isinstance(tasks[at], Compute | Parallel):
            task = tasks[at]
            cycles = task_cycles(task, member)
            if cycles > 0:
                if at > start and now + ((end + cycles) - now) != end + cycles:
                    break  # the run so far: its end is exact
                if self.computations is not None:
                    self.computations.append((member, end, end + cycles, task))
                end += cycles
                update = self.updates.get(id(task))
                if update is None:
                    update = self.updates[id(task)] = is_update(task)
                if not update:
                    self.passes_end[member_class] = end
            at += 1
        return end, at

    def read(self, state: _InFlight) -> None:
        """Ask the source's vault channels for the message's next chunk, if any."""
        if state.issued == len(state.sizes):
            return
        size = state.sizes[state.issued]
        state.issued += 1
        sent = state.sent
        self.ask(self.vaults[sent.src_class], size / self.vault_rate, 0.0, sent.src_count,
                 state, size, 0)

    def holds(self, state: _InFlight, size: float, stage: int, finish: float) -> None:
        """The chunk holds what `stage` granted (finishing there at `finish`): it asks the
        next link, or the destination's vault channels past the last; holding its first
        link (or being read, on a route without links), it lets the next chunk go."""
        sent = state.sent
        hops = sent.hops
        if stage < len(hops):
            link, count = hops[stage]
            self.ask(self.links[link], size / self.link_rate[link], finish, count, state,
                     size, stage + 1)
        else:
            self.ask(self.vaults[sent.dst_class], size / self.vault_rate, finish,
                     sent.dst_count, state, size, len(hops) + 1)
        if stage == 1 or not hops:
            if state.issued == len(state.sizes):  # its last chunk is on its way: it has left
                self.left(state)
            else:
                self.read(state)

    def left(self, state: _InFlight) -> None:
        """The message is wholly on its first link: the next round of its sender may go."""
        message = state.sent.message
        key = (state.sent.src_class, message.step, message.round)
        self.leaving[key] -= 1
        if self.leaving[key] == 0:
            self.start_rounds(state.sent.src_class, key[1])

    def written(self, state: _InFlight, finish: float) -> None:
        if finish > state.last_write:
            state.last_write = finish
        state.chunks_left -= 1
        if state.chunks_left == 0:
            ready = (state.last_write + route_latency_cycles(state.sent.route, self.config)
                     + self.late(state))
            if state.sent.rounds == 1:
                self.env.timeout(ready - self.env.now).callbacks.append(
                    lambda _: self.deliver(state))
                return
            key = (state.sent.message.step, state.sent.message.round, state.sent.group)
            held = self.rings[key]
            held[0] = max(held[0], ready)
            held[2].append(state)
            held[1] -= 1
            if held[1] == 0:  # the ring's last member has its part: all have theirs
                self.env.timeout(held[0] - self.env.now).callbacks.append(
                    lambda _: [self.deliver(each) for each in held[2]])

    def late(self, state: _InFlight) -> float:
        """Cycles a message that stands for a ring's n > 1 rounds (`Sent.rounds`: sent at
        once, all n rounds' bytes) arrives after its last chunk and its route's latency:
        the rounds' fixed costs it did not pay (`hardware.transfer.rounds_shortfall_cycles`:
        alone, it takes what its rounds one after another would, as the analytic engine
        counts them). Other messages use a ring's links while its rounds pay those costs;
        where they held up this message's chunks, so much is paid already."""
        sent = state.sent
        if sent.rounds == 1:
            return 0.0
        key = (self.topology.shape_id(sent.route), sent.message.bytes, sent.rounds)
        if key not in self.rounds_late:
            self.rounds_late[key] = rounds_shortfall_cycles(
                sent.route, sent.message.bytes, sent.rounds, self.config, self.chunk_bytes,
                self.max_chunks)
        short, whole = self.rounds_late[key]
        held_up = state.last_write - state.sent_at - whole
        return max(short - max(held_up, 0.0), 0.0)

    def _span(self, state: _InFlight, hop: int, start: float, finish: float,
              size: float) -> None:
        """With a trace: widen the message's span on the link by one chunk."""
        if self.spans is None:
            return
        message = state.sent.message
        link = state.sent.route.links[hop].index
        span = self.spans.setdefault((id(message), link), [start, finish, 0.0, message])
        span[0], span[1] = min(span[0], start), max(span[1], finish)
        span[2] += size

    def deliver(self, state: _InFlight) -> None:
        """The message has arrived (every chunk is written and the route latency passed):
        so have the others of its class the destination receives at the same time."""
        sent = state.sent
        message = sent.message
        step = message.step
        self.round_pending[(sent.dst_class, step, message.round)] -= sent.dst_count
        self.start_rounds(sent.dst_class, step)
        self.arrive(step, (sent.dst_class,), sent.dst_count)

    def operation_ends(self, operation) -> None:
        """At the end the operation has now (later operations sharing its links put it
        off), its parts arrive."""
        finish = self.running.finish[id(operation)]
        if finish > self.env.now:
            self.env.timeout(finish - self.env.now).callbacks.append(
                lambda _: self.operation_ends(operation))
        else:
            if self.counters is not None:
                self.running.count(operation, self.counters)
            self.arrive(operation.step, self.running.receivers[id(operation)])

    def arrive(self, step: StepKey, receivers, count: int = 1) -> None:
        """`count` arrivals of `step` at each of the classes `receivers` (messages, or an
        operation's parts): a class that has all of the step's goes on."""
        for member_class in receivers:
            key = (member_class, step)
            self.pending[key] -= count
            if self.pending[key] == 0:
                self.arrived[key].succeed()

    def run(self) -> tuple[float, int]:
        """Run to the end; (latency in cycles, events processed). With `progress`, a bar on
        stderr of the first member's tasks, shown once the run has taken 2 s."""
        bar = None
        if self.progress:  # tqdm (and its multiprocessing) imported only for a bar
            from tqdm import tqdm

            bar = tqdm(total=len(self.schedule.member_tasks(self.classes.members[0])),
                       unit="task", desc="simulating",
                       delay=2, mininterval=0.5)
        for member_class in range(len(self.classes.members)):
            self.env.process(self.accelerator(member_class, bar if member_class == 0 else None))
        events = 0
        step = self.env.step
        try:
            while True:
                step()
                events += 1
        except EmptySchedule:
            pass
        finally:
            if bar is not None:
                bar.close()
        return self.env.now, events
