"""Interconnect topologies: directed links and routes between accelerators.

One small interface (`Topology`: its links, `route(src, dst)` -> the links a
message crosses in order, and the switches it passes) with three
implementations:

- `HTree`: HyPar's Fig. 4(c), a binary fat tree. Accelerators are the leaves,
  a switch sits at every parent node. The link from a node at height k to its
  parent is 2**k base links in parallel (lanes): half the links, twice the
  bandwidth, each level up. One chunk uses one lane. Accelerators i and j meet at the switch of height
  bit_length(i ^ j): the pair that Algorithm 2 forms at level h (top = 0) of
  H levels, i and i ^ 2**(H-h-1), meets at the switch of height H-h.
- `Torus`: a 2-D torus of R x C accelerators, R = 2**floor(H/2) rows and
  C = 2**ceil(H/2) columns (4x4 for 16, 8x8 for 64, 2x4 for 8). Accelerator i
  sits at row i // C, column i % C (row-major). Every link is one base link.
  Dimension-order routing: along the row (X) first, then the column (Y),
  the shorter way round each ring (ties go the positive way). A message
  passes the routers of the nodes between its ends.
- `Ideal`: no links at all; messages arrive at once (an upper bound).

Every link is one direction of a full-duplex pair; all messages crossing a
link share it (the simulator models the contention).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypar_sim.errors import InputError, closest
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.interconnect import LinkSpec, link_spec


@dataclass(frozen=True)
class Link:
    """One direction of one physical link."""

    index: int  # position in Topology.links
    name: str  # e.g. "A3>S1.1" (H-tree) or "A5>A6" (torus)
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


class Topology:
    """Links and routes between `accelerators` accelerators."""

    name = "abstract"

    def __init__(self, accelerators: int, links: tuple[Link, ...] = ()) -> None:
        self.accelerators = accelerators
        self.links = links
        self._routes: dict[tuple[int, int], Route] = {}

    def _route(self, src: int, dst: int) -> Route:  # pragma: no cover - overridden
        raise NotImplementedError

    def route(self, src: int, dst: int) -> Route:
        """The route from accelerator `src` to accelerator `dst` (cached)."""
        if not (0 <= src < self.accelerators and 0 <= dst < self.accelerators) or src == dst:
            raise ValueError(f"no route from {src} to {dst} among {self.accelerators}")
        key = (src, dst)
        if key not in self._routes:
            self._routes[key] = self._route(src, dst)
        return self._routes[key]


class Ideal(Topology):
    """Infinite bandwidth, zero latency: messages arrive as soon as they are sent."""

    name = "ideal"

    def _route(self, src: int, dst: int) -> Route:
        return Route((), 0)


class HTree(Topology):
    """Binary fat tree with switches at the parent nodes (HyPar Fig. 4(c))."""

    name = "htree"

    def __init__(self, config: HardwareConfig) -> None:
        self.levels = config.levels
        links: list[Link] = []
        self._up: dict[tuple[int, int], Link] = {}
        self._down: dict[tuple[int, int], Link] = {}
        spec = link_spec(config)
        for height in range(self.levels):
            lanes = 2**height
            for index in range(config.accelerators >> height):
                child, parent = self.node(height, index), self.node(height + 1, index >> 1)
                self._up[(height, index)] = Link(len(links), f"{child}>{parent}", spec, lanes)
                links.append(self._up[(height, index)])
                self._down[(height, index)] = Link(len(links), f"{parent}>{child}", spec, lanes)
                links.append(self._down[(height, index)])
        super().__init__(config.accelerators, tuple(links))

    @staticmethod
    def node(height: int, index: int) -> str:
        return f"A{index}" if height == 0 else f"S{height}.{index}"

    def _route(self, src: int, dst: int) -> Route:
        top = (src ^ dst).bit_length()  # height of the switch where they meet
        up = [self._up[(h, src >> h)] for h in range(top)]
        down = [self._down[(h, dst >> h)] for h in reversed(range(top))]
        return Route(tuple(up + down), 2 * top - 1)


class Torus(Topology):
    """2-D torus, row-major placement, dimension-order routing (X then Y)."""

    name = "torus"

    def __init__(self, config: HardwareConfig) -> None:
        self.rows = 2 ** (config.levels // 2)
        self.cols = config.accelerators // self.rows
        spec = link_spec(config)
        links: list[Link] = []
        self._link: dict[tuple[int, int], Link] = {}
        for node in range(config.accelerators):
            row, col = self.position(node)
            neighbours = []
            if self.cols > 1:
                neighbours += [self._at(row, col + 1), self._at(row, col - 1)]
            if self.rows > 1:
                neighbours += [self._at(row + 1, col), self._at(row - 1, col)]
            for other in dict.fromkeys(neighbours):  # a ring of 2 has one neighbour
                self._link[(node, other)] = Link(len(links), f"A{node}>A{other}", spec)
                links.append(self._link[(node, other)])
        super().__init__(config.accelerators, tuple(links))

    def position(self, accelerator: int) -> tuple[int, int]:
        return divmod(accelerator, self.cols)

    def _at(self, row: int, col: int) -> int:
        return (row % self.rows) * self.cols + (col % self.cols)

    @staticmethod
    def _ring_steps(start: int, end: int, size: int) -> list[int]:
        """Unit steps (+1 or -1) the shorter way round a ring; ties go +1."""
        forward = (end - start) % size
        if forward == 0:
            return []
        return [1] * forward if forward <= size - forward else [-1] * (size - forward)

    def _route(self, src: int, dst: int) -> Route:
        (row, col), (end_row, end_col) = self.position(src), self.position(dst)
        path, node = [], src
        for step in self._ring_steps(col, end_col, self.cols):
            col += step
            nxt = self._at(row, col)
            path.append(self._link[(node, nxt)])
            node = nxt
        for step in self._ring_steps(row, end_row, self.rows):
            row += step
            nxt = self._at(row, col)
            path.append(self._link[(node, nxt)])
            node = nxt
        return Route(tuple(path), len(path) - 1)


TOPOLOGIES = ("htree", "torus", "ideal")


def make_topology(name: str, config: HardwareConfig) -> Topology:
    """The topology called `name` for the array of `config`."""
    if name == "htree":
        return HTree(config)
    if name == "torus":
        return Torus(config)
    if name == "ideal":
        return Ideal(config.accelerators)
    raise InputError(f"topology: unknown '{name}'{closest(name, TOPOLOGIES)}; "
                     f"allowed: {', '.join(TOPOLOGIES)}")
