"""The 2-D torus topology ("torus"; `topology.Topology`'s interface). `topology` imports it
between the fat tree and the ideal array, so the registry keeps its order: import it
through `hypar_sim.hardware.topology`."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.interconnect import link_spec
from hypar_sim.hardware.topology import Link, Route, Topology, register_topology
from hypar_sim.hardware.topology_file import TopologyFile
from hypar_sim.partition.hierarchy import Hierarchy


def default_rows(count: int) -> int:
    """The largest divisor of `count` that is at most sqrt(count) (16 -> 4, 12 -> 3, 7 -> 1)."""
    return next(rows for rows in range(math.isqrt(count), 0, -1) if count % rows == 0)


@register_topology
class Torus(Topology):
    """2-D torus of `rows` x cols, row-major placement, dimension-order routing (X then Y).

    Accelerator i sits at row i // cols, column i % cols; every link is one
    base link to a ring neighbour. A message goes along its row, then along
    its column, the shorter way round each ring (ties go the positive way),
    and passes the routers of the nodes between its ends.

    The hierarchy does not shape the torus; its groups land where row-major
    placement puts them. A level-h group's members are prod(sizes[h+1:])
    apart in index, so when cols is the product of the bottom levels' sizes,
    those levels pick the column and the levels above pick the row: for
    16 = 2x2x2x2 on 4x4 the two top levels choose the row pair and the row
    (a level-0 group is two nodes of one column, two hops apart), the two
    bottom levels the column pair and the column. Otherwise a group may span
    rows and columns (24 = 3x2x2x2 on 4x6: the level-0 group 0, 8, 16 sits at
    (0, 0), (1, 2), (2, 4)). The levels exchange at the same time, over the same
    links, and the simulator models their contention: HyPar's communication
    model (Algorithm 2) adds the levels' amounts without ordering them, and a
    layer's transfers at every level are ready at once (the paper model sends
    them as one step; the layout model's collectives order only their rounds).
    Link bandwidth: `HardwareConfig.torus_bandwidth` (per link, the default,
    or the total shared; configs/hypar_paper.yaml gives the reading and why).
    """

    name = "torus"

    def __init__(self, config: HardwareConfig, hierarchy: Hierarchy,
                 rows: int | None = None, file: TopologyFile | None = None) -> None:
        super().__init__(config, hierarchy, file)
        count = self.accelerators
        if rows is None and file is not None:
            rows = file.rows
        if rows is None:
            rows = default_rows(count)
        elif isinstance(rows, bool) or not isinstance(rows, int) or rows < 1 or count % rows:
            raise InputError(f"torus: rows = {rows!r} does not divide {count} accelerators; "
                             f"allowed: a divisor of {count}")
        self.rows, self.cols = rows, count // rows
        pairs = []
        for node in range(count):
            row, col = self.position(node)
            neighbours = []
            if self.cols > 1:
                neighbours += [self._at(row, col + 1), self._at(row, col - 1)]
            if self.rows > 1:
                neighbours += [self._at(row + 1, col), self._at(row - 1, col)]
            pairs += [(node, other) for other in dict.fromkeys(neighbours)]  # a ring of 2: one
        spec = link_spec(self._link_config(file.link_config(config) if file else config,
                                           len(pairs) // 2, count), base=config)
        self.links = tuple(Link(index, f"A{node}>A{other}", spec)
                           for index, (node, other) in enumerate(pairs))
        self._link = {pair: link for pair, link in zip(pairs, self.links, strict=True)}

    @staticmethod
    def _link_config(config: HardwareConfig, links: int, accelerators: int) -> HardwareConfig:
        """The links' keys under the config's `torus_bandwidth` reading: per_link, each link
        (each direction) has link_bandwidth_gbps; total, the array's accelerators x
        link_bandwidth_gbps (HyPar's 25.6 Gb/s for 16) is shared equally by the torus's
        `links` full-duplex links (0.8 Gb/s each on 4 x 4)."""
        if config.torus_bandwidth == "per_link" or not links:
            return config
        return dataclasses.replace(config,
                                   link_bandwidth_gbps=config.network_bandwidth_gbps(accelerators)
                                   / links)

    def position(self, accelerator: int) -> tuple[int, int]:
        """(row, column) of `accelerator`."""
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

    def symmetries(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Moving every node one row down, and one column right (routes go the same way
        round the same rings, ties the positive way, so they move along); and those of the
        hierarchy's translations that map neighbours to neighbours (moving half a ring, or
        mirroring a ring of four: `sim.symmetry` checks the routes they give)."""
        shifts = [np.array([self._at(row + rows, col + cols) for row, col in
                            map(self.position, range(self.accelerators))], dtype=np.int64)
                  for rows, cols in ((1, 0), (0, 1))
                  if (self.rows, self.cols)[0 if rows else 1] > 1]
        moved = []
        for members in shifts + self.hierarchy.translations():
            links = [self._link.get((int(members[a]), int(members[b]))) for a, b in self._link]
            if all(links):
                moved.append((members, np.array([link.index for link in links],
                                                dtype=np.int64)))
        return moved

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


