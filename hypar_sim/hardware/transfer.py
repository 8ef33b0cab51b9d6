"""How long messages take on a topology: alone (chunks cutting through DRAM, links and
DRAM) and as one communication step (the slowest message, the busiest link or the busiest
cube's DRAM). Both engines and the planner's time estimate use these.

A message is read from DRAM at its source, crosses its route's links and is
written to DRAM at its destination, in chunks. A chunk moves cut-through: it
holds one lane of a link for its serialization time (chunk / lane bandwidth),
its head goes on to the next link at once, and it cannot finish on a link
before it has finished arriving from the one before. The next chunk of a
message is issued once the previous one holds its first link, so messages
sharing a link take turns chunk by chunk. The route latency (links and
switches) is added once, when the last chunk has arrived.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.interconnect import switch_latency_cycles
from hypar_sim.hardware.topology import Route, Topology
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.steps import StepMessages


def chunk_sizes(total_bytes: float, chunk_bytes: float,
                max_chunks: int) -> list[float]:
    """`total_bytes` cut into equal chunks of at least `chunk_bytes`, at most `max_chunks`
    of them, and one last, smaller chunk."""
    if total_bytes <= 0:
        return []
    count = min(max_chunks, math.ceil(total_bytes / chunk_bytes))
    size = max(chunk_bytes, total_bytes / count)
    count = min(count, math.ceil(total_bytes / size))
    return [size] * (count - 1) + [total_bytes - size * (count - 1)]


def route_latency_cycles(route: Route, config: HardwareConfig) -> float:
    """Fixed latency of a route: its links and its switches, cycles."""
    links = sum(link.spec.latency_cycles for link in route.links)
    return links + route.switches * switch_latency_cycles(config)


def cut_through_cycles(chunks: Sequence[float], route: Route, config: HardwareConfig) -> float:
    """Cycles for a message's chunks to reach DRAM at its destination, alone in the array.

    The same rules as the event-driven engine (see the module docstring), with
    every link and vault channel free when a chunk asks for it.
    """
    dram = config.vault_bandwidth_bytes_per_cycle
    lanes = [[0.0] * link.lanes for link in route.links]  # when each lane is next free
    issue = arrived = 0.0
    for chunk in chunks:
        start, finish = issue, issue + chunk / dram  # read at the source
        for hop, link in enumerate(route.links):
            free = lanes[hop]
            lane = free.index(min(free))
            start = max(start, free[lane])
            free[lane] = start + chunk / link.spec.bandwidth_bytes_per_cycle  # sent
            finish = max(free[lane], finish)  # and arrived from upstream
            if hop == 0:
                issue = start
        arrived = max(arrived, max(start + chunk / dram, finish))  # written at the destination
    return arrived


def alone_cycles(route: Route, size: float, config: HardwareConfig, chunk_bytes: float,
                  max_chunks: int) -> float:
    """Time of a message of `size` bytes alone on `route` (no contention), cycles."""
    chunks = chunk_sizes(size, chunk_bytes, max_chunks)
    return cut_through_cycles(chunks, route, config) + route_latency_cycles(route, config)


def rounds_shortfall_cycles(route: Route, total_bytes: float, rounds: int,
                            config: HardwareConfig, chunk_bytes: float,
                            max_chunks: int) -> tuple[float, float]:
    """A ring's `rounds` equal rounds, `total_bytes` in all, on `route` sent as one message:
    (how much sooner it arrives alone than the rounds one after another would, each alone
    (`alone_cycles`): the n - 1 rounds' fixed costs, latency, the first chunk's way through,
    reading and writing it; the whole message's chunks' time alone on the route, its
    latency aside (`cut_through_cycles`)), cycles."""
    whole = cut_through_cycles(chunk_sizes(total_bytes, chunk_bytes, max_chunks), route,
                               config)
    one = alone_cycles(route, total_bytes / rounds, config, chunk_bytes, max_chunks)
    return max(rounds * one - whole - route_latency_cycles(route, config), 0.0), whole


@dataclass(frozen=True)
class Routed:
    """Many messages' routes as arrays: each message's route shape (`Topology.shape_id`),
    how many links it crosses, its links weighted by their energy per bit
    (`Route.energy_links`) and its switches; the links themselves (`crossed`: all messages'
    in a row, message by message) only when asked, where the topology can give the bytes
    on every link without them (`Topology.link_loads`: a fat tree's, link by link in the
    messages' order, the same sums)."""

    shapes: np.ndarray
    per_message: np.ndarray
    energy_links: np.ndarray
    switches: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    topology: Topology = field(repr=False, compare=False)
    known: np.ndarray | None = field(default=None, repr=False, compare=False)  # `crossed`

    @classmethod
    def of(cls, src: np.ndarray, dst: np.ndarray, topology: Topology) -> Routed:
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        shapes, crossed, per_message, energy, switches = topology.route_arrays(src, dst,
                                                                               links=False)
        return cls(shapes, per_message, energy, switches, src, dst, topology, crossed)

    @cached_property
    def crossed(self) -> np.ndarray:
        """The links every message crosses, message by message, in route order."""
        if self.known is not None:
            return self.known
        return self.topology.route_arrays(self.src, self.dst)[1]

    @cached_property
    def link_ends(self) -> np.ndarray:
        """Where each message's links end in `crossed` (cumulative `per_message`)."""
        return np.cumsum(self.per_message)

    def part(self, first: int, last: int) -> Routed:
        """The routes of messages `first` .. `last` - 1."""
        known = None
        if self.known is not None:
            low = int(self.link_ends[first - 1]) if first else 0
            high = int(self.link_ends[last - 1]) if last > first else low
            known = self.known[low:high]
        return Routed(self.shapes[first:last], self.per_message[first:last],
                      self.energy_links[first:last], self.switches[first:last],
                      self.src[first:last], self.dst[first:last], self.topology, known)

    def loads(self, sizes: np.ndarray, links: int) -> np.ndarray:
        """Bytes on each link (each link's added in the messages' order; the last sizes'
        remembered: a step of direct messages asks twice, for its round and for it all)."""
        last = self.__dict__.get("_last_loads")
        if last is not None and last[0] == links and np.array_equal(last[1], sizes):
            return last[2]
        loads = None
        if self.known is None:
            loads = self.topology.link_loads(self.src, self.dst, sizes, self.per_message)
        if loads is None:
            loads = np.bincount(self.crossed, np.repeat(sizes, self.per_message),
                                minlength=links)
        self.__dict__["_last_loads"] = (links, np.array(sizes, copy=True), loads)
        return loads


def step_cycles(messages: StepMessages, topology: Topology, config: HardwareConfig,
                chunk_bytes: float, max_chunks: int, routed: Routed | None = None) -> float:
    """Cycles for all messages of one communication step to arrive: its rounds one after
    another, each as long as its slowest message alone, its busiest link carrying all the
    round's bytes or its busiest cube's DRAM reading and writing them, whichever is longest
    (a ring's k - 1 equal rounds: k - 1 times one, timed once). `routed`: the messages'
    routes in their order, where the caller has them."""
    if not len(messages):
        return 0.0
    src, dst, sizes, first = messages.src, messages.dst, messages.bytes, messages.round
    last = first + messages.counts  # a row is sent in rounds first .. last - 1
    routed = routed or Routed.of(src, dst, topology)
    bandwidth = topology.link_bandwidths
    dram = config.vault_bandwidth_bytes_per_cycle * config.vaults_per_cube
    alone: dict[tuple[int, float], float] = {}  # many messages share a route shape and a size
    ends = np.stack([src, dst], axis=1).ravel()  # read at the source, written at the destination
    bounds = np.unique(np.concatenate([first, last]))
    runs = []
    for low, high in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        active = (first <= low) & (last > low)  # the rows of rounds low .. high - 1
        rows = np.flatnonzero(active)
        if not len(rows):
            continue
        # one row of each distinct (route shape, size): sorted, the first of each run
        order = rows[np.lexsort((sizes[rows], routed.shapes[rows]))]
        changed = np.r_[True, (np.diff(routed.shapes[order]) != 0)
                        | (np.diff(sizes[order]) != 0)]
        keys = set()
        for at in order[changed].tolist():
            key = (int(routed.shapes[at]), float(sizes[at]))
            keys.add(key)
            if key not in alone:
                alone[key] = alone_cycles(topology.route(int(src[at]), int(dst[at])), key[1],
                                           config, chunk_bytes, max_chunks)
        slowest = max(alone[key] for key in keys)
        round_sizes = np.where(active, sizes, 0.0)
        carried = routed.loads(round_sizes, len(bandwidth))
        busiest = float((carried / bandwidth).max(initial=0.0)) if len(bandwidth) else 0.0
        per_cube = np.bincount(ends, np.repeat(round_sizes, 2))
        runs.append((max(slowest, busiest, float(per_cube.max()) / dram), high - low))
    return runs_cycles(runs)


def runs_cycles(runs: Sequence[tuple[float, int]]) -> float:
    """Rounds one after another, given as (cycles of a round, rounds) in order: the sum of
    their cycles, equal rounds next to each other multiplied (a ring's k - 1 rounds are
    exactly k - 1 times one)."""
    total, run, count = 0.0, None, 0
    for cycles, rounds in runs:
        if cycles != run:
            total += run * count if count else 0.0
            run, count = cycles, 0
        count += rounds
    return total + (run * count if count else 0.0)


def rounds_cycles(per_round: dict[int, float]) -> float:
    """Rounds one after another: the sum of their cycles (equal rounds multiplied, so a
    ring's k - 1 rounds are exactly k - 1 times one)."""
    return runs_cycles([(per_round[round_], 1) for round_ in sorted(per_round)])


@dataclass(frozen=True)
class Pattern:
    """One round of messages on a topology, each edge sending one byte: what the planner's
    estimate scales by the bytes a message carries (`planner.estimate`)."""

    edges: int
    busiest_link_cycles: float  # cycles on the busiest link, per byte a message
    message_cycles: float  # cycles per byte of the slowest message alone (its slowest hop)
    latency_cycles: float  # the longest route's fixed latency
    links_per_edge: float  # links crossed (weighted by their energy per bit), mean over edges
    switches_per_edge: float  # switches passed, mean over the edges

    @classmethod
    def measure(cls, edges: Sequence[tuple[int, int]], topology: Topology,
                config: HardwareConfig) -> Pattern:
        load: dict[int, int] = defaultdict(int)
        slowest = latency = links = switches = 0.0
        vault = config.vault_bandwidth_bytes_per_cycle
        for src, dst in edges:
            route = topology.route(src, dst)
            rate = min([vault] + [link.spec.bandwidth_bytes_per_cycle for link in route.links])
            slowest = max(slowest, 1 / rate)
            latency = max(latency, route_latency_cycles(route, config))
            for link in route.links:
                load[link.index] += 1
            links += sum(link.spec.energy_scale for link in route.links)
            switches += route.switches
        busiest = max((count / topology.links[index].bandwidth_bytes_per_cycle
                       for index, count in load.items()), default=0.0)
        count = max(len(edges), 1)
        return cls(len(edges), busiest, slowest, latency, links / count, switches / count)


def level_edges(hierarchy: Hierarchy, level: int) -> list[tuple[int, int]]:
    """Every member to each partner that differs from it only at `level` (HyPar's pairs on
    two-way levels)."""
    stride, size = hierarchy.strides[level], hierarchy.sizes[level]
    edges = []
    for member in range(hierarchy.members):
        own = (member // stride) % size
        edges += [(member, member + (other - own) * stride) for other in range(size)
                  if other != own]
    return edges


def ring_edges(hierarchy: Hierarchy, levels: tuple[int, ...]) -> list[tuple[int, int]]:
    """Every member to its successor in index order among the members that differ from it
    only at `levels`, the last to the first (the rings of `partition.collectives`)."""
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for member in range(hierarchy.members):
        coords = hierarchy.coords(member)
        groups[tuple(c for h, c in enumerate(coords) if h not in levels)].append(member)
    return [(a, b) for group in groups.values()
            for a, b in zip(group, group[1:] + group[:1], strict=True)]


def level_link_loads(topology: Topology, levels: int) -> np.ndarray:
    """[level, link]: cycles on each link per byte of every message of the level partners'
    exchange (`level_edges`), for the top `levels` levels."""
    loads = np.zeros((levels, len(topology.links)))
    for level in range(levels):
        for src, dst in level_edges(topology.hierarchy, level):
            for link in topology.route(src, dst).links:
                loads[level, link.index] += 1 / link.bandwidth_bytes_per_cycle
    return loads
