"""Exact symmetry classes: accelerators and links whose work, messages and routes are the
same up to a relabelling are simulated once and counted as many times as they occur.

A symmetry is a pair of permutations (accelerators, links) from the topology
(`Topology.symmetries`: the hierarchy's translations on a fat tree, row and
column shifts on a torus) that also keeps the schedule: every computation
takes as long on a member as on its image, every message of a step has a
message of the same bytes and round from the image of its source to the
image of its destination, and every route maps link by link onto the image
messages' route. The symmetries that pass generate a group; its orbits are
the classes of accelerators, links and messages.

Under the engine's rules (`sim.engine`: requests a lane receives in the
same cycle are served in an order that depends only on their sizes, and
equal ones together) the step is invariant under the group, so every member
of a class does what its representative does at the same times. The engine
then simulates one message per message class, sent by a representative
member; at its source's vault channels, at each link of its route and at
its destination's channels it stands for as many simultaneous requests as
the class puts on one of them (the class's size over the size of that
channel's or link's class). Classes split wherever shares are uneven: a
symmetry that maps a member onto one with another share fails the check.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hypar_sim.hardware.topology import Route, Topology, take_runs
from hypar_sim.hardware.transfer import Routed
from hypar_sim.partition.steps import Message
from hypar_sim.sim.schedule import FlatMessages, Schedule, StepKey


@dataclass(frozen=True)
class Sent:
    """One simulated message standing for its class: how many of the class each vault
    channel and link it uses receives at once."""

    message: Message
    route: Route
    src_class: int
    dst_class: int
    src_count: int  # messages of the class one source member sends
    dst_count: int  # messages of the class one destination member receives
    hops: tuple[tuple[int, int], ...]  # per link of the route: (link class, messages on it)
    rounds: int = 1  # a ring's rounds the message stands for (`message.bytes`: all of them)
    group: int = -1  # its collective's class (collectives that are images of one another)


@dataclass(frozen=True)
class Classes:
    """Accelerators, links and messages in classes (with `symmetric` False: one each)."""

    member_class: np.ndarray  # [accelerator] -> class
    members: tuple[int, ...]  # each class's representative (its lowest accelerator)
    link_class: np.ndarray  # [link] -> class
    links: tuple[int, ...]  # each link class's representative
    outbox: dict[tuple[int, StepKey, int], list[Sent]]  # (class, step, round) -> its sends
    expected: dict[tuple[int, StepKey, int], int]  # messages one member of the class receives


def orbit_labels(count: int, maps: list[np.ndarray]) -> np.ndarray:
    """Each element's orbit under the group the permutations `maps` generate, named by its
    lowest element (labels move down along the maps until nothing changes)."""
    labels = np.arange(count)
    while True:
        before = labels
        for image in maps:
            labels = np.minimum(labels, labels[image])
        labels = labels[labels]
        if np.array_equal(labels, before):
            return labels


def _encode(flat: FlatMessages, src: np.ndarray, dst: np.ndarray, members: int) -> np.ndarray:
    """One number per message: its step, ends and round."""
    rounds = int(flat.round.max()) + 1 if len(flat.round) else 1
    return ((flat.step * members + src) * members + dst) * rounds + flat.round


def _message_images(flat: FlatMessages, members: np.ndarray,
                    count: int) -> np.ndarray | None:
    """Each message's image under the member permutation, or None if some message has no
    image of the same bytes and rounds. Messages that share a step, ends and round (two
    groups' rings through the same pair of members) are told apart by their rank in bytes
    and rounds: the image of the j-th is the j-th of the image's."""
    keys = _encode(flat, flat.src, flat.dst, count)
    order = np.lexsort((flat.repeats, flat.bytes, keys))
    ranked = keys[order]
    rank = np.zeros(len(keys), dtype=np.int64)
    if len(ranked) > 1 and not np.all(np.diff(ranked) > 0):
        rank[order] = np.arange(len(ranked)) - _run_firsts(ranked)
        width = int(rank.max()) + 1
        ranked = ranked * width + rank[order]
        wanted = _encode(flat, members[flat.src], members[flat.dst], count) * width + rank
    else:
        wanted = _encode(flat, members[flat.src], members[flat.dst], count)
    at = np.minimum(np.searchsorted(ranked, wanted), max(len(ranked) - 1, 0))
    if len(ranked) and not np.array_equal(ranked[at], wanted):
        return None
    image = order[at]
    same = np.array_equal(flat.bytes[image], flat.bytes) and \
        np.array_equal(flat.repeats[image], flat.repeats)
    return image if same and _keeps_collectives(flat, image) else None


def _keeps_collectives(flat: FlatMessages, image: np.ndarray) -> bool:
    """Whether `image` maps every collective's rows onto one collective's (rows of none onto
    rows of none): a tie told apart by rank can pair a row of one ring with another's."""
    span = int(flat.group.max()) + 2 if len(flat.group) else 1
    ids = flat.step * span + flat.group + 1  # a collective's rows alike; + 1: none is 0
    none = flat.group < 0
    if not np.array_equal(none[image], none):
        return False
    order = np.argsort(ids, kind="stable")
    mapped = ids[image][order]
    return bool(np.all(none[order] | (mapped == mapped[_run_firsts(ids[order])])))


def _run_firsts(ordered: np.ndarray) -> np.ndarray:
    """For each element of a sorted array, the position of the first of its equals."""
    starts = np.r_[True, np.diff(ordered) != 0]
    return np.maximum.accumulate(np.where(starts, np.arange(len(ordered)), 0))


class _Routes:
    """What checking a relabelling against the messages' routes needs, computed once: each
    crossed link's message and first position, and a key per link of its lanes and spec."""

    def __init__(self, routed: Routed, topology: Topology) -> None:
        self.routed = routed
        lengths = routed.per_message
        self.offsets = np.cumsum(lengths) - lengths
        self.owner = np.repeat(np.arange(len(lengths)), lengths)
        self.within = np.arange(len(routed.crossed)) - self.offsets[self.owner]
        self.used = np.flatnonzero(np.bincount(routed.crossed, minlength=len(topology.links)))
        kinds: dict[tuple, int] = {}
        self.kind = np.array([kinds.setdefault((link.lanes, link.spec), len(kinds))
                              for link in topology.links], dtype=np.int64)

    def kept(self, image: np.ndarray, links: np.ndarray) -> bool:
        """Whether every message's route, link by link under `links`, is its image's route
        and the links it maps onto one another are alike."""
        crossed = self.routed.crossed
        if not np.array_equal(self.routed.per_message[image], self.routed.per_message):
            return False
        if not len(crossed):
            return True
        return (np.array_equal(links[crossed], crossed[self.offsets[image][self.owner]
                                                       + self.within])
                and np.array_equal(self.kind[links[self.used]], self.kind[self.used]))


def group_labels(flat: FlatMessages, message_label: np.ndarray) -> np.ndarray:
    """Each message's collective's class (-1: none): the collectives of every step
    (`FlatMessages.group`) in orbits, two collectives alike where some message of one is in
    a message orbit with a message of the other, named by the lowest of them."""
    labels = np.full(len(flat.src), -1, dtype=np.int64)
    grouped = np.flatnonzero(flat.group >= 0)
    if not len(grouped):
        return labels
    span = int(flat.group.max()) + 1
    _, ids = np.unique(flat.step[grouped] * span + flat.group[grouped], return_inverse=True)
    ids = ids.reshape(-1)
    orbits = message_label[grouped]
    label = np.arange(int(ids.max()) + 1)
    while True:
        lowest = np.full(len(flat.src), len(label))
        np.minimum.at(lowest, orbits, label[ids])
        moved = label.copy()
        np.minimum.at(moved, ids, lowest[orbits])
        moved = moved[moved]
        if np.array_equal(moved, label):
            break
        label = moved
    labels[grouped] = label[ids]
    return labels


def _lowest_alike(columns: np.ndarray) -> np.ndarray:
    """Each column's label: the lowest column equal to it (columns told apart by their
    bytes: a thousand columns of thousands of rows at once, where sorting them costs
    seconds)."""
    rows = np.ascontiguousarray(columns.T)
    first: dict[bytes, int] = {}
    return np.array([first.setdefault(row.tobytes(), index) for index, row in enumerate(rows)],
                    dtype=np.int64)


def alike_classes(schedule: Schedule, topology: Topology,
                  kept: tuple[np.ndarray, np.ndarray] | None, alike: bool = True) -> Classes:
    """Classes where every message runs in a group operation (`sim.operations`) and none on
    its own: members alike in all the engine reads of them (their pipeline stage, their
    computations' cycles, the bytes each operation reads and writes at their cube:
    `kept`'s member rows) do the same at the same times, as do links of the same lanes and
    bandwidth that carry the same bytes in every operation (`kept`'s link rows; nothing
    else uses them). Exact without a symmetry of the topology (with `alike` False: every
    member and link its own)."""
    count, links = schedule.accelerators, len(topology.links)
    if alike:
        stages = max(len(schedule.stage_tasks), 1)
        stage = (np.arange(count) * stages // count)[None, :].astype(np.float64)
        member_rows = [stage, schedule.compute_cycles] + ([kept[0]] if kept else [])
        member_label = _lowest_alike(np.vstack(member_rows))
        alike_links = np.array([[link.lanes, link.spec.bandwidth_bytes_per_cycle]
                                for link in topology.links], dtype=np.float64).T
        link_label = _lowest_alike(np.vstack([alike_links] + ([kept[1]] if kept else [])))
    else:
        member_label, link_label = np.arange(count), np.arange(links)
    members, member_class = np.unique(member_label, return_inverse=True)
    links_kept, link_class = np.unique(link_label, return_inverse=True)
    return Classes(member_class.reshape(-1), tuple(members.tolist()), link_class.reshape(-1),
                   tuple(links_kept.tolist()), {}, {})


def classify(schedule: Schedule, topology: Topology, symmetric: bool = True,
             routed: Routed | None = None, flat: FlatMessages | None = None,
             most: int | None = None) -> Classes | None:
    """The classes of `schedule` on `topology` under the symmetries that keep both (with
    `symmetric` False, or none found: every accelerator, link and message its own);
    `flat`: the schedule's messages as the engine sends them (`Schedule.sent_flat`), and
    `routed` their routes, if already known. None where there are more than `most`
    message classes (the engine groups the steps instead: `sim.operations`)."""
    count = schedule.accelerators
    flat = flat if flat is not None else schedule.sent_flat()
    routed = routed or Routed.of(flat.src, flat.dst, topology)
    keys = list(schedule.steps)
    member_maps, link_maps, message_maps = [], [], []
    if symmetric:
        cycles = schedule.compute_cycles
        routes = _Routes(routed, topology)
        for members, links in topology.symmetries():
            if not np.array_equal(cycles[:, members], cycles):
                continue
            image = _message_images(flat, members, count)
            if image is None or not routes.kept(image, links):
                continue
            member_maps.append(members)
            link_maps.append(links)
            message_maps.append(image)
    member_label = orbit_labels(count, member_maps)
    link_label = orbit_labels(len(topology.links), link_maps)
    message_label = orbit_labels(len(flat.src), message_maps)
    members, member_class = np.unique(member_label, return_inverse=True)
    links, link_class = np.unique(link_label, return_inverse=True)
    member_sizes = np.bincount(member_class, minlength=len(members))
    link_sizes = np.bincount(link_class, minlength=len(links))
    message_sizes = np.bincount(message_label, minlength=len(flat.src))
    collective = group_labels(flat, message_label)

    # one message per class, sent by a representative member: the first in schedule order
    from_representative = member_label[flat.src] == flat.src
    chosen = np.flatnonzero(from_representative)
    _, first = np.unique(message_label[chosen], return_index=True)
    picked = np.sort(chosen[first])
    if most is not None and len(picked) > most:
        return None
    crossed, lengths = take_runs(routed.crossed, routed.per_message, picked)
    crossed = crossed.tolist()  # the picked messages' links, one after another
    # the loop reads Python lists of the picked messages alone: numpy scalar indexing costs
    # several times more, and converting every message costs more at thousands of members
    class_of_member, class_of_link = member_class.tolist(), link_class.tolist()
    member_count, link_count = member_sizes.tolist(), link_sizes.tolist()
    outbox: dict[tuple[int, StepKey, int], list[Sent]] = {}
    start = 0
    for size, src, dst, step, level, round_, nbytes, rounds, group, length in zip(
            message_sizes[message_label[picked]].tolist(),
            flat.src[picked].tolist(), flat.dst[picked].tolist(), flat.step[picked].tolist(),
            flat.level[picked].tolist(), flat.round[picked].tolist(),
            flat.sent_bytes[picked].tolist(), flat.repeats[picked].tolist(),
            collective[picked].tolist(), lengths.tolist(), strict=True):
        src_class, dst_class = class_of_member[src], class_of_member[dst]
        if size % member_count[src_class] or size % member_count[dst_class]:
            raise RuntimeError("symmetry: a message class does not spread evenly over its "
                               "ends' classes")
        key = keys[step]
        message = Message(src, dst, float(nbytes), key[0], level, key[1], round_,
                          key[2] if len(key) > 2 else 0)
        hops = tuple((class_of_link[link], size // link_count[class_of_link[link]])
                     for link in crossed[start:start + length])
        start += length
        sent = Sent(message, topology.route(src, dst), src_class, dst_class,
                    size // member_count[src_class], size // member_count[dst_class], hops,
                    rounds, group)
        outbox.setdefault((src_class, key, message.round), []).append(sent)

    # messages each representative receives, per (step, round)
    to_representative = np.flatnonzero(member_label[flat.dst] == flat.dst)
    expected: dict[tuple[int, StepKey, int], int] = {}
    for step, dst, round_ in zip(flat.step[to_representative].tolist(),
                                 flat.dst[to_representative].tolist(),
                                 flat.round[to_representative].tolist(), strict=True):
        key = (class_of_member[dst], keys[step], round_)
        expected[key] = expected.get(key, 0) + 1
    return Classes(member_class, tuple(members.tolist()), link_class, tuple(links.tolist()),
                   outbox, expected)
