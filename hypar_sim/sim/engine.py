"""The discrete-event engine (SimPy): one training step, time in cycles of the array clock.

Each accelerator is a process that works through its tasks: a computation
keeps its cube's PUs busy for the piece's cycles (compute and DRAM overlapped,
from the hardware models); a send starts one process per message and goes on;
a wait blocks until every message of that step addressed to the accelerator
has arrived. A collective's messages of round r + 1 (a ring's next step) leave
a member once it has sent its own and received all of round r. A message cuts
its bytes into chunks; each chunk is read through
one of the source cube's vault channels, cuts through the links of its route
(all messages share them: contention is modelled) and is written through a
vault channel at the destination (see `accounting` for the rules, which the
analytic engine mirrors). When the last chunk is in, the route's fixed
latency passes and the message has arrived.

Messages use the vault channels through their own `Lanes`; a computation's DRAM
traffic is already inside its piece's cycles (hardware.hmc), so messages and
computation do not compete for the channels here: a simplification, small
because messages are limited by the links (0.2 GB/s against 10 GB/s a vault).

Links and vault channels are `Lanes`: a few identical lanes granted first come,
first served. Because a chunk knows how long it will hold a lane when it asks
for it, a request is a reservation (the lane's next free time moves on) and
the chunk waits only when the lane is busy: one timeout instead of a request
and a release, and none at all without contention. A chunk that waits for a
lane further down its route, and a message's delivery, are a timeout with a
callback rather than a process of their own (a quarter to a half fewer events).
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections import defaultdict

import simpy
from simpy.core import EmptySchedule

from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.topology import Route, Topology
from hypar_sim.hardware.transfer import chunk_sizes, route_latency_cycles
from hypar_sim.results import SimResult
from hypar_sim.sim.accounting import assemble_result
from hypar_sim.sim.defaults import DEFAULT_CHUNK_BYTES, DEFAULT_MAX_CHUNKS
from hypar_sim.sim.schedule import (
    Compute,
    Message,
    Parallel,
    Schedule,
    Send,
    StepKey,
    Wait,
    task_cycles,
)
from hypar_sim.sim.trace import trace_events


class Lanes:
    """A resource of identical lanes, each serving one request at a time, first come first served."""

    def __init__(self, count: int) -> None:
        self.free = [0.0] * count  # a heap of the times the lanes are next free
        self.busy_cycles = 0.0  # lane-cycles held so far
        self.grants = 0  # requests served so far

    def reserve(self, now: float, service: float, not_before: float = 0.0) -> tuple[float, float]:
        """Take the lane that frees first, asked at `now` for `service` cycles, ending no
        earlier than `not_before`; returns (start, finish)."""
        free = self.free
        start = free[0] if free[0] > now else now
        finish = start + service
        if not_before > finish:
            finish = not_before
        if len(free) == 1:  # most links have one lane: no heap to keep
            free[0] = finish
        else:
            heapq.heapreplace(free, finish)
        self.busy_cycles += finish - start
        self.grants += 1
        return start, finish


class _InFlight:
    """A message on its way: its route, chunks not yet written, latest write finish."""

    __slots__ = ("message", "route", "chunks_left", "last_write")

    def __init__(self, message: Message, route: Route, chunks: int) -> None:
        self.message = message
        self.route = route
        self.chunks_left = chunks
        self.last_write = 0.0


class _Step:
    """The SimPy state of one training step."""

    def __init__(self, schedule: Schedule, topology: Topology, chunk_bytes: float,
                 max_chunks: int, trace: bool = False, progress: bool = False) -> None:
        config: HardwareConfig = schedule.config
        self.progress = progress
        self.schedule = schedule
        self.topology = topology
        self.chunk_bytes = chunk_bytes
        self.max_chunks = max_chunks
        self.config = config
        self.env = simpy.Environment()
        self.vaults = [Lanes(config.vaults_per_cube) for _ in range(schedule.accelerators)]
        self.links = [Lanes(link.lanes) for link in topology.links]
        self.link_rate = [link.spec.bandwidth_bytes_per_cycle for link in topology.links]  # a lane
        self.vault_rate = config.vault_bandwidth_bytes_per_cycle
        # arrivals still expected per (destination, step), and the event that fires at zero
        self.pending: dict[tuple[int, StepKey], int] = defaultdict(int)
        for step, messages in schedule.steps.items():
            for message in messages:
                self.pending[(message.dst, step)] += 1
        self.arrived = {key: self.env.event() for key in self.pending}
        self.wait_cycles: dict[int, float] = defaultdict(float)
        # with `trace`: every computation (member, start, end, task) and every message's
        # span on every link ((message id, link) -> [start, finish, bytes])
        self.computations: list[tuple[int, float, float, Compute | Parallel]] | None = \
            [] if trace else None
        self.spans: dict[tuple[int, int], list[float]] | None = {} if trace else None
        # messages per (sender, step, round), and per (receiver, step, round) still expected
        self.outbox: dict[tuple[int, StepKey, int], list[Message]] = defaultdict(list)
        self.round_pending: dict[tuple[int, StepKey, int], int] = defaultdict(int)
        for step, messages in schedule.steps.items():
            for message in messages:
                self.outbox[(message.src, step, message.round)].append(message)
                self.round_pending[(message.dst, step, message.round)] += 1
        self.started: set[tuple[int, StepKey]] = set()  # (member, step) whose Send has run
        self.next_round: dict[tuple[int, StepKey], int] = defaultdict(int)

    def start_rounds(self, member: int, step: StepKey) -> None:
        """Send the member's rounds of `step` that may go: round 0 at its Send, round r + 1
        once it has received all of round r (a ring's dependency)."""
        if (member, step) not in self.started:
            return
        while True:
            round_ = self.next_round[(member, step)]
            if round_ > 0 and self.round_pending[(member, step, round_ - 1)] > 0:
                return
            messages = self.outbox.get((member, step, round_))
            if not messages:
                return
            self.next_round[(member, step)] = round_ + 1
            for message in messages:
                self.env.process(self.message(message))

    def accelerator(self, index: int, bar=None):
        env = self.env
        for task in self.schedule.tasks:
            if bar is not None:
                bar.update(1)
            if isinstance(task, Compute | Parallel):
                cycles = task_cycles(task, index)
                if cycles > 0:
                    if self.computations is not None:
                        self.computations.append((index, env.now, env.now + cycles, task))
                    yield env.timeout(cycles)
            elif isinstance(task, Send):
                self.started.add((index, task.step))
                self.start_rounds(index, task.step)
            elif isinstance(task, Wait):
                arrival = self.arrived.get((index, task.step))
                if arrival is None:  # nothing addressed to this member in the step
                    continue
                started = env.now
                yield arrival
                self.wait_cycles[task.step[0]] += env.now - started

    def message(self, message: Message):
        """Issue the chunks; each next one once the previous holds its first link."""
        env = self.env
        route = self.topology.route(message.src, message.dst)
        links = route.links
        sizes = chunk_sizes(message.bytes, self.chunk_bytes, self.max_chunks)
        state = _InFlight(message, route, len(sizes))
        source = self.vaults[message.src]
        vault_rate = self.vault_rate
        for size in sizes:
            start, finish = source.reserve(env.now, size / vault_rate)  # read at the source
            if start > env.now:
                yield env.timeout(start - env.now)
            if links:
                first = links[0].index
                start, finish = self.links[first].reserve(env.now, size / self.link_rate[first],
                                                          finish)
                self._span(message, first, start, finish, size)
                if start > env.now:
                    yield env.timeout(start - env.now)
            self.forward(state, size, 1, finish)

    def forward(self, state: _InFlight, size: float, hop: int, upstream_finish: float) -> None:
        """Move a chunk on from `hop` as far as it goes now; a timeout's callback goes on
        where it must wait for a lane, or where the message's last chunk waits to arrive."""
        now = self.env.now
        indices = state.route.indices
        lanes, rates = self.links, self.link_rate
        while hop < len(indices):
            index = indices[hop]
            start, upstream_finish = lanes[index].reserve(now, size / rates[index],
                                                          upstream_finish)
            if self.spans is not None:
                self._span(state.message, index, start, upstream_finish, size)
            hop += 1
            if start > now:  # go on when the lane is ours: a timeout with a callback, no process
                self.env.timeout(start - now).callbacks.append(
                    lambda _, hop=hop, finish=upstream_finish: self.forward(state, size, hop,
                                                                            finish))
                return
        _, finish = self.vaults[state.message.dst].reserve(now, size / self.vault_rate,
                                                           upstream_finish)
        if finish > state.last_write:
            state.last_write = finish
        state.chunks_left -= 1
        if state.chunks_left == 0:
            wait = state.last_write - self.env.now + route_latency_cycles(state.route, self.config)
            self.env.timeout(wait).callbacks.append(lambda _: self.deliver(state))

    def _span(self, message: Message, link: int, start: float, finish: float,
              size: float) -> None:
        """With a trace: widen the message's span on the link by one chunk."""
        if self.spans is None:
            return
        span = self.spans.setdefault((id(message), link), [start, finish, 0.0, message])
        span[0], span[1] = min(span[0], start), max(span[1], finish)
        span[2] += size

    def deliver(self, state: _InFlight) -> None:
        """The message has arrived (every chunk is written and the route latency passed)."""
        message = state.message
        step = (message.layer, message.kind)
        key = (message.dst, step)
        self.round_pending[(message.dst, step, message.round)] -= 1
        self.start_rounds(message.dst, step)
        self.pending[key] -= 1
        if self.pending[key] == 0:
            self.arrived[key].succeed()

    def run(self) -> tuple[float, int]:
        """Run to the end; (latency in cycles, events processed). With `progress`, a bar on
        stderr of the first member's tasks, shown once the run has taken 2 s."""
        from tqdm import tqdm

        bar = tqdm(total=len(self.schedule.tasks), unit="task", desc="simulating", delay=2,
                   disable=not self.progress, mininterval=0.5)
        for index in range(self.schedule.accelerators):
            self.env.process(self.accelerator(index, bar if index == 0 else None))
        events = 0
        step = self.env.step
        try:
            while True:
                step()
                events += 1
        except EmptySchedule:
            pass
        finally:
            bar.close()
        return self.env.now, events


def simulate_des(schedule: Schedule, topology: Topology,
                 chunk_bytes: float = DEFAULT_CHUNK_BYTES, max_chunks: int = DEFAULT_MAX_CHUNKS,
                 config_dict=None, trace: bool = False, progress: bool = False) -> SimResult:
    """Simulate one training step event by event (with `trace`, the result carries its
    trace events: `sim.trace`; with `progress`, a bar on stderr for runs over 2 s)."""
    started = time.perf_counter()
    state = _Step(schedule, topology, chunk_bytes, max_chunks, trace, progress)
    latency, events = state.run()
    unfinished = [key for key, count in state.pending.items() if count]
    if unfinished:
        raise RuntimeError(f"simulation ended with undelivered messages: {unfinished[:3]}")
    accelerators = schedule.accelerators
    waits = {layer: cycles / accelerators for layer, cycles in state.wait_cycles.items()}
    busy = [lanes.busy_cycles / link.lanes
            for lanes, link in zip(state.links, topology.links, strict=True)]
    grants = sum(lanes.grants for lanes in (*state.links, *state.vaults))
    result = assemble_result(schedule, topology, "des", latency, waits, busy, events,
                             time.perf_counter() - started, config_dict)
    traced = tuple(trace_events(schedule, topology, state.computations, state.spans,
                                schedule.config.clock_hz)) if trace else ()
    return dataclasses.replace(result, lane_grants=grants, trace_events=traced)
