"""Interconnect topologies: directed links and routes between accelerators.

One small interface (`Topology`: its links, `route(src, dst)` -> the links a
message crosses in order, and the switches it passes) with three
implementations, each built as `cls(config, hierarchy)` from the registry
`TOPOLOGIES` (name -> class, filled by `@register_topology`):

- `FatTree` ("htree"): a fat tree over the hierarchy's levels; with every
  level of size 2 it is HyPar's Fig. 4(c), a binary fat tree. Accelerators are
  the leaves, a switch sits at every group of every level, and the link from a
  node to its parent is as many base links in parallel (lanes) as there are
  accelerators below the node, so every level carries the same bandwidth. The
  members of a level-h group (top = 0) of H levels meet at a switch of height H-h.
- `Torus` ("torus"): a 2-D torus of R x C accelerators, by default R the
  largest divisor of the count that is at most its square root (4x4 for 16,
  2x4 for 8, 3x4 for 12, 1x7 for 7). Row-major placement, one base link per
  link, dimension-order routing (X then Y) the shorter way round each ring.
- `Ideal` ("ideal"): no links at all; messages arrive at once (an upper bound).

Every link is one direction of a full-duplex pair; all messages crossing a
link share it (the simulator models the contention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from typing import TypeVar

import numpy as np

from hypar_sim.errors import InputError, closest
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.interconnect import LinkSpec, link_spec
from hypar_sim.hardware.topology_file import TopologyFile, is_topology_file, read_topology_file
from hypar_sim.partition.hierarchy import Hierarchy


@dataclass(frozen=True)
class Link:
    """One direction of one physical link."""

    index: int  # position in Topology.links
    name: str  # e.g. "A3>S1.1" (fat tree) or "A5>A6" (torus)
    spec: LinkSpec  # of one lane
    lanes: int = 1  # base links in parallel

    @property
    def bandwidth_bytes_per_cycle(self) -> float:
        """All lanes together."""
        return self.lanes * self.spec.bandwidth_bytes_per_cycle


@dataclass(frozen=True)
class Route:
    """The links a message crosses, in order, and the switches it passes."""

    links: tuple[Link, ...]
    switches: int

    @cached_property
    def indices(self) -> tuple[int, ...]:
        """The links' positions in `Topology.links`."""
        return tuple(link.index for link in self.links)

    @cached_property
    def energy_links(self) -> float:
        """Links crossed, each weighted by its energy per bit relative to the table's."""
        return sum(link.spec.energy_scale for link in self.links)


def take_runs(values: np.ndarray, lengths: np.ndarray,
              picks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the runs `picks` of `values`, one after another; their lengths), where `values` holds
    runs of `lengths` one after another (each message's links in a row of many)."""
    taken = lengths[picks]
    within = np.arange(int(taken.sum())) - np.repeat(np.cumsum(taken) - taken, taken)
    return values[np.repeat((np.cumsum(lengths) - lengths)[picks], taken) + within], taken


class Topology:
    """Links and routes between the accelerators of `config`, grouped by `hierarchy`.

    Subclasses build `links` in their constructor (after this one) and answer
    `_route`; `route` checks the ends and caches.
    """

    name = "abstract"

    def __init__(self, config: HardwareConfig, hierarchy: Hierarchy,
                 file: TopologyFile | None = None) -> None:
        self.hierarchy = hierarchy
        self.file = file
        if file is not None:
            file.check(self.hierarchy.levels)
            self.name = file.path  # results name the file
        self.accelerators = self.hierarchy.members
        self.links: tuple[Link, ...] = ()
        self._routes: dict[tuple[int, int], Route] = {}
        self._shapes: dict[tuple, int] = {}  # route shape -> a small number
        self._records: dict[int, tuple] = {}  # src * members + dst -> `pair_record`

    def _route(self, src: int, dst: int) -> Route:  # pragma: no cover - overridden
        raise NotImplementedError

    @cached_property
    def link_bandwidths(self) -> np.ndarray:
        """Each link's bandwidth, all lanes together, bytes per cycle (`links` order)."""
        return np.array([link.bandwidth_bytes_per_cycle for link in self.links])

    def symmetries(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Relabellings that leave the topology as it is: (accelerator permutation, link
        permutation) pairs, each mapping every route onto the route between the images of
        its ends, link by link (`sim.symmetry` checks that on the messages it simulates).
        None known by default."""
        return []

    def route(self, src: int, dst: int) -> Route:
        """The route from accelerator `src` to accelerator `dst` (cached)."""
        if not (0 <= src < self.accelerators and 0 <= dst < self.accelerators) or src == dst:
            raise ValueError(f"no route from {src} to {dst} among {self.accelerators}")
        key = (src, dst)
        if key not in self._routes:
            self._routes[key] = self._route(src, dst)
        return self._routes[key]

    def route_arrays(self, src: np.ndarray, dst: np.ndarray,
                     links: bool = True) -> tuple[np.ndarray, ...]:
        """Routes of many messages as arrays (`hardware.transfer.Routed`): each one's
        `shape_id`, the links all cross (message by message, in route order; with `links`
        False, None where a topology gives them and the bytes on them later:
        `link_loads`), how many each crosses, `Route.energy_links` and switches; each
        distinct pair routed once (`_pair_routes`)."""
        pairs, inverse = np.unique(src * self.accelerators + dst, return_inverse=True)
        shapes, flat, lengths, energy, switches = self._pair_routes(
            *np.divmod(pairs, self.accelerators))
        crossed, per_message = take_runs(flat, lengths, inverse)
        return shapes[inverse], crossed, per_message, energy[inverse], switches[inverse]

    def link_loads(self, src: np.ndarray, dst: np.ndarray, sizes: np.ndarray,
                   per_message: np.ndarray | None = None) -> np.ndarray | None:
        """Bytes on every link of messages `sizes` from `src` to `dst` (`per_message`: how
        many links each crosses, if known), without listing each message's links; None
        where the topology cannot (then `Routed` counts them from the links crossed)."""
        return None

    def _pair_routes(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, ...]:
        """For distinct pairs: `route_arrays`'s five arrays, route by route (`pair_record`);
        topologies may compute them directly."""
        records = [self.pair_record(pair) for pair in (src * self.accelerators + dst).tolist()]
        shapes = np.fromiter((r[0] for r in records), dtype=np.int64, count=len(records))
        lengths = np.fromiter((len(r[1]) for r in records), dtype=np.int64, count=len(records))
        energy = np.fromiter((r[2] for r in records), dtype=np.float64, count=len(records))
        switches = np.fromiter((r[3] for r in records), dtype=np.float64, count=len(records))
        flat = np.fromiter(chain.from_iterable(r[1] for r in records), dtype=np.intp,
                           count=int(lengths.sum()))
        return shapes, flat, lengths, energy, switches

    def pair_record(self, pair: int) -> tuple[int, tuple[int, ...], float, int]:
        """For the route of pair `src * members + dst`: (`shape_id`, the links' indices,
        `Route.energy_links`, switches), cached (what `hardware.transfer.Routed` reads)."""
        record = self._records.get(pair)
        if record is None:
            src, dst = divmod(pair, self.accelerators)
            route = self.route(src, dst)
            record = (self.shape_id(route), route.indices, route.energy_links, route.switches)
            self._records[pair] = record
        return record

    def shape_id(self, route: Route) -> int:
        """A number per route shape (each link's lanes and spec object in order, and the
        switches): what a message's time alone depends on besides its bytes."""
        shape = (tuple((link.lanes, id(link.spec)) for link in route.links), route.switches)
        return self._shapes.setdefault(shape, len(self._shapes))


#: Topology classes by name, in registration order (htree, torus, ideal).
TOPOLOGIES: dict[str, type[Topology]] = {}

T = TypeVar("T", bound=type[Topology])


def register_topology(cls: T) -> T:
    """Class decorator: make `cls` available to `make_topology` as `cls.name`."""
    if cls.name in TOPOLOGIES:
        raise ValueError(f"topology {cls.name!r} registered twice")
    TOPOLOGIES[cls.name] = cls
    return cls


#: Up to this many (message, height) pairs, a fat tree's link loads are added up over every
#: link crossed at once; beyond, height by height (in bounded memory).
_FEW_LINKS = 2**16


@register_topology
class FatTree(Topology):
    """Fat tree over the hierarchy, switches at every group (HyPar Fig. 4(c) if binary).

    With level sizes s_0..s_{H-1} (top first), the switch at height k (1..H,
    H the root) joins the accelerators that share their top H-k coordinates,
    i.e. prod(s_{H-k:}) consecutive ones: switch "S{k}.{j}" holds members
    j * that .. (j+1) * that - 1. The link from a node at height k to its
    parent is prod(s_{H-k:}) lanes wide (1 for an accelerator "A{i}"), so
    each level has `accelerators` lanes per direction. A route climbs to the
    lowest switch where src and dst meet and comes down: 2 * height links,
    2 * height - 1 switches. Links are listed bottom up, node by node, the up
    link before the down link; for a binary hierarchy this is HyPar's tree.
    """

    name = "htree"

    def __init__(self, config: HardwareConfig, hierarchy: Hierarchy,
                 file: TopologyFile | None = None) -> None:
        super().__init__(config, hierarchy, file)
        sizes = self.hierarchy.sizes
        self.levels = len(sizes)
        # below[k]: accelerators under a node of height k (below[0] = 1, below[H] = all)
        self.below = tuple(math.prod(sizes[len(sizes) - k:]) for k in range(self.levels + 1))
        links: list[Link] = []
        self._up: dict[tuple[int, int], Link] = {}
        self._down: dict[tuple[int, int], Link] = {}
        for height in range(self.levels):
            # the links above height `height` join the groups of level levels - 1 - height
            level = self.levels - 1 - height
            spec = link_spec(file.level_config(config, level) if file else config, base=config)
            lanes = self.below[height]
            fan_in = self.below[height + 1] // lanes  # children per parent
            for index in range(self.accelerators // lanes):
                child, parent = self.node(height, index), self.node(height + 1, index // fan_in)
                self._up[(height, index)] = Link(len(links), f"{child}>{parent}", spec, lanes)
                links.append(self._up[(height, index)])
                self._down[(height, index)] = Link(len(links), f"{parent}>{child}", spec, lanes)
                links.append(self._down[(height, index)])
        self.links = tuple(links)

    @staticmethod
    def node(height: int, index: int) -> str:
        return f"A{index}" if height == 0 else f"S{height}.{index}"

    def _pair_routes(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, ...]:
        """As `Topology._pair_routes`, computed for all pairs at once: a route is the up
        links of heights 0 .. top - 1 above `src`, then the down links of heights top - 1 .. 0
        above `dst` (links are listed height by height, node by node, up before down)."""
        if not len(src):
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, np.zeros(0), np.zeros(0)
        top = self.levels - self.hierarchy.meeting_levels(src, dst)  # meeting switch height
        return self._by_top(src, dst, top, self._crossed(src, dst, top))

    def _crossed(self, src: np.ndarray, dst: np.ndarray, top: np.ndarray) -> np.ndarray:
        """The links of every message, message by message, in route order, given each one's
        meeting height `top`."""
        heights = np.arange(self.levels)
        below = np.array(self.below[:self.levels])
        first = np.concatenate(([0], np.cumsum(2 * (self.accelerators // below))))[:-1]
        up = first + 2 * (src[:, None] // below)  # [message, height]
        down_height = np.maximum(top[:, None] - 1 - heights, 0)  # the i-th link down
        down = first[down_height] + 2 * (dst[:, None] // below[down_height]) + 1
        valid = heights < top[:, None]
        return np.concatenate([up, down], axis=1)[np.concatenate([valid, valid], axis=1)]

    def _by_top(self, src: np.ndarray, dst: np.ndarray, top: np.ndarray,
                crossed: np.ndarray | None) -> tuple[np.ndarray, ...]:
        """`route_arrays`'s five arrays from each route's meeting height `top` (a route's
        shape, energy and switches depend on it alone)."""
        by_top = {}  # top -> (shape_id, energy_links): equal for every route of a height
        for height in np.flatnonzero(np.bincount(top)).tolist():  # the heights in use
            at = int(np.argmax(top == height))
            route = self.route(int(src[at]), int(dst[at]))
            by_top[height] = (self.shape_id(route), route.energy_links)
        table = np.zeros((self.levels + 1, 2))
        for height, (shape, energy) in by_top.items():
            table[height] = shape, energy
        return (table[top, 0].astype(np.int64), crossed, 2 * top, table[top, 1],
                (2 * top - 1).astype(np.float64))

    def route_arrays(self, src: np.ndarray, dst: np.ndarray,
                     links: bool = True) -> tuple[np.ndarray, ...]:
        """As `Topology.route_arrays`; with `links` False without the links crossed (None:
        `link_loads` gives the bytes on them)."""
        if links or not len(src):
            return super().route_arrays(src, dst)
        return self._by_top(src, dst, self.levels - self.hierarchy.meeting_levels(src, dst),
                            None)

    def link_loads(self, src: np.ndarray, dst: np.ndarray, sizes: np.ndarray,
                   per_message: np.ndarray | None = None) -> np.ndarray:
        """Bytes on every link, height by height: a message crosses the up link above its
        source and the down link above its destination at every height below the switch
        where they meet (each link's bytes added in the messages' order, as from the links
        crossed)."""
        loads = np.zeros(len(self.links))
        if not len(src):
            return loads
        top = per_message // 2 if per_message is not None else \
            self.levels - self.hierarchy.meeting_levels(src, dst)
        if len(src) * self.levels <= _FEW_LINKS:  # few: every link crossed at once
            return np.bincount(self._crossed(src, dst, top), np.repeat(sizes, 2 * top),
                               minlength=len(self.links))
        first = 0  # the height's first link
        for height in range(self.levels):
            rows = np.flatnonzero(top > height)
            if not len(rows):
                break
            below, span = self.below[height], 2 * (self.accelerators // self.below[height])
            ups, downs, weights = src[rows] // below, dst[rows] // below, sizes[rows]
            loads[first:first + span] = np.bincount(2 * ups, weights, minlength=span) \
                + np.bincount(2 * downs + 1, weights, minlength=span)
            first += span
        return loads

    def symmetries(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The hierarchy's translations (`Hierarchy.translations`): one moves whole subtrees
        onto their siblings, so the node above a block of accelerators goes to the node
        above the block's image, and its links with it."""
        moved = []
        for members in self.hierarchy.translations():
            links = np.empty(len(self.links), dtype=np.int64)
            for (height, index), link in self._up.items():
                image = int(members[index * self.below[height]]) // self.below[height]
                links[link.index] = self._up[(height, image)].index
                links[self._down[(height, index)].index] = self._down[(height, image)].index
            moved.append((members, links))
        return moved

    def _route(self, src: int, dst: int) -> Route:
        top = self.levels - self.hierarchy.meeting_level(src, dst)  # the meeting switch
        up = [self._up[(h, src // self.below[h])] for h in range(top)]
        down = [self._down[(h, dst // self.below[h])] for h in reversed(range(top))]
        return Route(tuple(up + down), 2 * top - 1)



# The torus lives in its own module and registers here, between the fat tree and the ideal
# array (the registry's order is the command line's).
from hypar_sim.hardware.torus import Torus  # noqa: E402,F401


@register_topology
class Ideal(Topology):
    """Infinite bandwidth, zero latency: messages arrive as soon as they are sent."""

    name = "ideal"

    def symmetries(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Any relabelling keeps an array without links; the hierarchy's translations."""
        return [(members, np.zeros(0, dtype=np.int64))
                for members in self.hierarchy.translations()]

    def _route(self, src: int, dst: int) -> Route:
        return Route((), 0)


def make_topology(name: str, config: HardwareConfig, hierarchy: Hierarchy) -> Topology:
    """The topology called `name` (or described by the topology file `name`, .yaml) with
    the links of `config` between the members of `hierarchy`."""
    if is_topology_file(name):
        file = read_topology_file(name)
        return TOPOLOGIES[file.kind](config, hierarchy, file=file)
    cls = TOPOLOGIES.get(name)
    if cls is None:
        raise InputError(f"topology: unknown '{name}'{closest(name, TOPOLOGIES)}; "
                         f"allowed: {', '.join(TOPOLOGIES)} or a topology file (.yaml)")
    return cls(config, hierarchy)
