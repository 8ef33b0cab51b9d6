"""What a plan costs in step time or energy, estimated per layer and per boundary.

The planner's DPs (`planner.search`) add a cost per layer column and a cost
per pair of adjacent columns. `--objective bytes` takes the traffic model's
bytes; this module gives the same two kinds of cost in cycles (`time`) or pJ
(`energy`), from the simulator's own hardware models, so the same DPs can
minimise step time or energy (HyPar's Section 4 minimises bytes; its Fig 10
search found a faster plan than its own).

Per layer column: the compute of every phase on its slowest member
(`hardware.costs.phase_cost`: the PE array and vault DRAM model the schedule
uses; the first layer has no error-backward phase) and the layer's own
transfers (weight-gradient reduce and gather, and the loss for the last
layer). Per boundary: the transfers of the layer's input and of its error.

A transfer's time follows the analytic engine (`hardware.transfer`): the
longest of its slowest message (rounds x (bytes / the slowest rate on its
route, the source vault's DRAM included) + the route's latency), its busiest
link and its busiest cube's DRAM. Patterns of messages are routed once on the
topology (`hardware.transfer.Pattern`):

- the `layout` model's gradient steps are rings among the members that hold
  the same weights (the levels whose kind does not split K or C): k - 1
  rounds of 1/k of a member's weights to reduce-scatter (overlapped), as many
  to all-gather (at the update, as `partition.steps` places it); under
  `layout_levels`, one stage per level of those (`partition.collectives`);
- other bytes (boundaries; every step of the `paper` model) are split by
  level: the bytes crossing level h are what the model moves between the
  groups of the top h + 1 levels minus what it moves between those of the
  top h (the plan's prefix on the truncated hierarchy), sent between level
  partners, all levels at once (a link carries every level that crosses it).
  Under `layout` on the whole array, `refine` then sends the messages of the
  boundaries a plan uses and the DP runs again with their times, until the
  plan's boundaries are all sent: the levels' figure spreads the bytes evenly
  and along the hierarchy, where the rule's reduce-scatter can land on half
  of the members (VGG-A, fc1 (in, in, in, out) to fc2 (out, in, in, out):
  13.9 M cycles sent, 7.0 M by levels).

Overlap as the simulator does it (`overlap_gradients`): a layer's gradient
reduce-scatter runs while the backward pass goes on. So the step takes

    T = X + max(Y_compute, Y_port)

with X the forward and update compute, every boundary transfer and the
gradient all-gathers, Y_compute the backward and gradient compute, Y_port the
gradient reduce-scatters (without overlap, T = X + Y_compute + Y_port). A sum
the DP can minimise is X + w Y_compute + (1 - w) Y_port for a weight w;
`weights` lists those `chain_costs.estimated_search` solves, keeping the plan with the least T
(a Lagrangian relaxation of the max). Energy: every action's pJ (compute,
DRAM words at both ends of a message, link and switch bits), plus static
power over T.

Where the simulator differs (the error `scripts/objective_table.py` reports):
a gradient exchange can start only once its layer's gradient is computed, and
steps leave an accelerator's port one after another, so an error transfer
sent after a large gradient exchange waits for it. The estimate charges that
wait where the error gather comes right after the consumer's reduce-scatter
(`boundary_parts`), not where a backlog of several exchanges delays a later
one (cifar_c: the estimate is 8% low); links shared by overlapped steps (the
torus) slow both, which the analytic engine does not model either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.energy import Action, EnergyTable
from hypar_sim.hardware.topology import Topology
from hypar_sim.hardware.transfer import (
    Pattern,
    level_edges,
    level_link_loads,
    ring_edges,
    step_cycles,
)
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS
from hypar_sim.partition.operators import OPERATORS
from hypar_sim.partition.shares import Column, Share
from hypar_sim.partition.steps import STEP_PHASES, Phase, TransferKind
from hypar_sim.planner.traffic import TrafficModel
from hypar_sim.sim.defaults import DEFAULT_CHUNK_BYTES, DEFAULT_MAX_CHUNKS
from hypar_sim.workload.layers import Layer

#: A boundary's steps in a two-layer chain (producer 0, consumer 1): the producer's partial
#: output reduced, the consumer's input gathered, its input error reduced, the producer's
#: output error gathered.
_BOUNDARY_STEPS = ((0, TransferKind.PARTIAL_SUM), (1, TransferKind.RELAYOUT_FEATURE),
                   (1, TransferKind.ERROR_REDUCE), (0, TransferKind.ERROR_GATHER))

_PHASES = STEP_PHASES

@dataclass(frozen=True)
class Parts:
    """A cost split as the overlap needs it (cycles; `dynamic_pj` for energy)."""

    serial: np.ndarray  # X: forward and update compute, boundary transfers
    backward: np.ndarray  # Y_compute: backward and gradient compute
    port: np.ndarray  # Y_port: gradient transfers
    dynamic_pj: np.ndarray


@dataclass
class Estimator:
    """Own and boundary costs in cycles or pJ for the planner's DPs: the interface of a
    traffic model's `offered`, `own_costs` and `boundary_costs`. `weight` is w above."""

    objective: str  # "time" (cycles) or "energy" (pJ)
    model: TrafficModel
    config: HardwareConfig
    topology: Topology
    overlap: bool = True
    first_layer: str = ""  # its name: the first layer computes no error backward
    weight: float = 0.5
    _patterns: dict = field(default_factory=dict, repr=False)
    _parts: dict = field(default_factory=dict, repr=False)
    _phases: dict = field(default_factory=dict, repr=False)
    _sent: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._table = EnergyTable.from_config(self.config)
        self._static_pj = self._table.pj_per_action[Action.STATIC_PU_CYCLE] \
            * self.config.pus_per_cube * self.topology.hierarchy.members

    @property
    def weights(self) -> tuple[float, ...]:
        """The w the `optimal` strategy solves for (one without overlap: nothing to weigh)."""
        return tuple(i / 8 for i in range(9)) if self.overlap else (0.5,)

    def offered(self, layer: Layer, batch: int, column: Column, hierarchy: Hierarchy) -> bool:
        return self.model.offered(layer, batch, column, hierarchy)

    # -- the planner's interface ---------------------------------------------------------

    def own_costs(self, layer: Layer, batch: int, columns: Sequence[Column],
                  hierarchy: Hierarchy, word_bytes: int, last: bool) -> np.ndarray:
        return self.combine(self.own_parts(layer, batch, tuple(columns), hierarchy, word_bytes,
                                           last))

    def boundary_costs(self, producer: Layer, consumer: Layer, batch: int,
                       producer_columns: Sequence[Column], columns: Sequence[Column],
                       hierarchy: Hierarchy, word_bytes: int) -> np.ndarray:
        return self.combine(self.boundary_parts(producer, consumer, batch,
                                                tuple(producer_columns), tuple(columns),
                                                hierarchy, word_bytes))

    def boundary_parts(self, producer: Layer, consumer: Layer, batch: int,
                       producer_columns: tuple[Column, ...], columns: tuple[Column, ...],
                       hierarchy: Hierarchy, word_bytes: int) -> Parts:
        """The transfers of a boundary for every pair of columns: by levels (cached), and
        where `refine` has sent a pair's messages, their time and energy instead.

        With overlap, the consumer's gradient reduce-scatter leaves the port just before the
        producer's output error is gathered (`partition.steps`: the gather is sent at the
        start of the producer's backward pass), so where that gather moves bytes it waits
        for the whole reduce-scatter: the boundary moves the consumer's gradient time from
        the overlapped Y_port into X."""
        key = (producer, consumer, batch, producer_columns, columns, hierarchy, word_bytes)
        if key not in self._parts:
            level_bytes = self._crossing(
                lambda sub, made, read: self.model.boundary_costs(producer, consumer, batch, made,
                                                                  read, sub, word_bytes),
                hierarchy, producer_columns, columns)
            cycles, pj = self._levels(level_bytes)
            self._parts[key] = (cycles, pj, level_bytes.sum(axis=-1) > 0)
        cycles, pj, blocked = self._parts[key]
        sent = self._sent.get((producer, consumer, batch, hierarchy, word_bytes))
        if sent:
            rows = {column: i for i, column in enumerate(producer_columns)}
            cols = {column: j for j, column in enumerate(columns)}
            cycles, pj, blocked = cycles.copy(), pj.copy(), blocked.copy()
            for (made, read), (time, moved, blocks) in sent.items():
                if made in rows and read in cols:
                    i, j = rows[made], cols[read]
                    cycles[i, j], pj[i, j], blocked[i, j] = time, moved, blocks
        waits = np.zeros_like(cycles)
        if self.overlap and self._sends(hierarchy):
            gradient = self.own_parts(consumer, batch, columns, hierarchy, word_bytes, False).port
            waits = blocked * gradient[None, :]
        return Parts(cycles + waits, np.zeros_like(cycles), -waits, pj)

    def refine(self, layers: Sequence[Layer], batch: int, columns: Sequence[Column],
               hierarchy: Hierarchy, word_bytes: int) -> bool:
        """Send the messages of every boundary of a plan whose pairs of columns have not
        been sent yet, and keep their time and energy for the DP; False if none was new.

        The levels' estimate spreads a boundary's bytes evenly over the members and sends
        them along the hierarchy; the layout rule's reduce-scatter can land on half of them
        and cross the top level more (VGG-A with fc1 on (in, in, in, out) and fc2 on (out,
        in, in, out): 13.9 M cycles sent, 7.0 M by levels). The levels' figure is (nearly) a
        lower bound on the sent one, so a DP re-run until its plan's boundaries are all sent
        ends at a plan no other beats by more than the bound's slack."""
        if not self._sends(hierarchy):
            return False
        new = False
        for index in range(1, len(layers)):
            pair = (columns[index - 1], columns[index])
            sent = self._sent.setdefault((layers[index - 1], layers[index], batch, hierarchy,
                                          word_bytes), {})
            if pair not in sent:
                sent[pair] = self._send_boundary(layers[index - 1], layers[index], batch, pair,
                                                 hierarchy, word_bytes)
                new = True
        return new

    def _sends(self, hierarchy: Hierarchy) -> bool:
        """Boundaries are sent as messages for the layout model on the whole array."""
        return getattr(self.model, "collective", None) is not None \
            and hierarchy == self.topology.hierarchy

    def _send_boundary(self, producer: Layer, consumer: Layer, batch: int,
                       pair: tuple[Column, Column], hierarchy: Hierarchy,
                       word_bytes: int) -> tuple[float, float, bool]:
        """(cycles, pJ) of a boundary's steps, one after another, each as the analytic engine
        times it (`hardware.transfer.step_cycles`); whether the producer's output error is
        gathered (a step that waits for the port)."""
        steps = self.model.steps([producer, consumer], batch, list(pair), hierarchy, word_bytes)
        cycles = pj = 0.0
        for key in _BOUNDARY_STEPS:
            messages = steps.get(key, ())
            cycles += step_cycles(messages, self.topology, self.config, DEFAULT_CHUNK_BYTES,
                                  DEFAULT_MAX_CHUNKS)
            for message in messages:
                route = self.topology.route(message.src, message.dst)
                pj += message.bytes * self._pj_per_byte(
                    Pattern(1, 0.0, 0.0, 0.0,
                            sum(link.spec.energy_scale for link in route.links), route.switches))
        return cycles, pj, bool(steps.get((0, TransferKind.ERROR_GATHER)))

    def combine(self, parts: Parts) -> np.ndarray:
        """The DP's cost: X + w Y_compute + (1 - w) Y_port (or the plain sum without
        overlap), in cycles or, with static power over those cycles, pJ."""
        if self.overlap:
            cycles = parts.serial + self.weight * parts.backward + (1 - self.weight) * parts.port
        else:
            cycles = parts.serial + parts.backward + parts.port
        return cycles if self.objective == "time" else parts.dynamic_pj + self._static_pj * cycles

    def total(self, layers: Sequence[Layer], batch: int, columns: Sequence[Column],
              hierarchy: Hierarchy, word_bytes: int) -> float:
        """The estimate of a whole plan: step cycles (T above) or pJ."""
        serial = backward = port = pj = 0.0
        last = len(layers) - 1
        for index, (layer, column) in enumerate(zip(layers, columns, strict=True)):
            own = self.own_parts(layer, batch, (column,), hierarchy, word_bytes, index == last)
            serial += float(own.serial[0])
            backward += float(own.backward[0])
            port += float(own.port[0])
            pj += float(own.dynamic_pj[0])
            if index:
                pair = (columns[index - 1], column)
                if self._sends(hierarchy):
                    self.refine(layers[index - 1:index + 1], batch, pair, hierarchy, word_bytes)
                parts = self.boundary_parts(layers[index - 1], layer, batch, pair[:1], pair[1:],
                                            hierarchy, word_bytes)
                serial += float(parts.serial[0, 0])
                port += float(parts.port[0, 0])
                pj += float(parts.dynamic_pj[0, 0])
        cycles = serial + (max(backward, port) if self.overlap else backward + port)
        return cycles if self.objective == "time" else pj + self._static_pj * cycles

    # -- parts ---------------------------------------------------------------------------

    def own_parts(self, layer: Layer, batch: int, columns: tuple[Column, ...],
                  hierarchy: Hierarchy, word_bytes: int, last: bool) -> Parts:
        """Compute and own transfers of every column (cached). On the top levels of the
        array (the greedy search's upper hierarchy) a group's share is computed by all
        its members: its cycles are divided by the group's size."""
        first = layer.name == self.first_layer
        key = (layer, batch, columns, hierarchy, word_bytes, last, first)
        if key in self._parts:
            return self._parts[key]
        spread = self.topology.hierarchy.members / hierarchy.members
        work = np.array([self._compute(layer, batch, column, hierarchy, first)
                         for column in columns]).reshape(len(columns), 3)
        gradient = np.asarray(self.model.own_costs(layer, batch, columns, hierarchy, word_bytes,
                                                   False), dtype=float)
        if self._sends(hierarchy):
            port, port_pj = self._collectives(layer, columns, hierarchy, gradient)
            gather, gather_pj = port / 2, port_pj / 2  # the all-gather: at the update
            port, port_pj = port / 2, port_pj / 2
        else:  # pairs per level (the paper model; the top levels of the greedy search)
            level_bytes = self._crossing(
                lambda sub, _, read: self.model.own_costs(layer, batch, read, sub, word_bytes,
                                                          False), hierarchy, [()], columns)[0]
            # a level whose kind replicates the weights exchanges gradients (overlapped); one
            # that splits them exchanges partial outputs (HyPar's mp, in the forward pass)
            weights = OPERATORS[layer.kind].weights
            replicated = np.array([[KINDS[kind].dim not in weights for kind in column]
                                   for column in columns], dtype=bool).reshape(level_bytes.shape)
            port, port_pj = self._levels(np.where(replicated, level_bytes, 0.0))
            gather, gather_pj = self._levels(np.where(replicated, 0.0, level_bytes))
        serial, serial_pj = gather, gather_pj  # at the update, or the paper's partial outputs
        if last:  # the loss: what the last layer's own steps move beyond its gradients
            loss = self._crossing(
                lambda sub, _, read: self.model.own_costs(layer, batch, read, sub, word_bytes,
                                                          True)
                - self.model.own_costs(layer, batch, read, sub, word_bytes, False),
                hierarchy, [()], columns)[0]
            loss_cycles, loss_pj = self._levels(loss)
            serial, serial_pj = serial + loss_cycles, serial_pj + loss_pj
        parts = Parts(work[:, 0] / spread + serial, work[:, 1] / spread, port,
                      work[:, 2] + port_pj + serial_pj)
        self._parts[key] = parts
        return parts

    def _compute(self, layer: Layer, batch: int, column: Column, hierarchy: Hierarchy,
                 first: bool) -> tuple[float, float, float]:
        """(forward + update cycles, backward + gradient cycles, pJ of every member), each
        phase as long as its slowest member."""
        counted: dict[tuple, list] = {}
        for share in self.model.member_shares(layer, batch, column, hierarchy):
            entry = counted.setdefault(_shape(share), [share, 0])
            entry[1] += 1
        phases = [self._phases_of(share, first) for share, _ in counted.values()]
        slowest = [max(column) for column in zip(*phases, strict=True)]  # per phase
        serial = slowest[_PHASES.index(Phase.FORWARD)] + slowest[_PHASES.index(Phase.UPDATE)]
        backward = slowest[_PHASES.index(Phase.BACKWARD)] + slowest[_PHASES.index(Phase.GRADIENT)]
        pj = sum(cost[-1] * n for cost, (_, n) in zip(phases, counted.values(), strict=True))
        return serial, backward, pj

    def _phases_of(self, share: Share, first: bool) -> tuple[float, ...]:
        """Cycles of every phase (`_PHASES` order) and the pJ of all four, of one share
        (cached by its shape: the members of many columns compute the same)."""
        key = (_shape(share), first)
        if key not in self._phases:
            from hypar_sim.hardware.costs import phase_cost  # loaded when first estimated

            costs = [phase_cost(share, phase, self.config, first) for phase in _PHASES]
            self._phases[key] = (*(cost.cycles for cost in costs),
                                 sum(self._table.energy(cost.counts).total_pj for cost in costs))
        return self._phases[key]

    def _crossing(self, costs, hierarchy: Hierarchy, producer_columns: Sequence[Column],
                  columns: Sequence[Column]) -> np.ndarray:
        """[producer column, column, level] bytes that cross each level: `costs(sub,
        producer prefixes, prefixes)` on the top d levels, minus the same on d - 1."""
        crossing = np.zeros((len(producer_columns), len(columns), hierarchy.levels + 1))
        for depth in range(1, hierarchy.levels + 1):
            made, made_index = _prefixes(producer_columns, depth)
            read, read_index = _prefixes(columns, depth)
            moved = np.asarray(costs(Hierarchy(hierarchy.sizes[:depth]), made, read), dtype=float)
            moved = moved.reshape(len(made), len(read)) if moved.ndim == 2 else moved[None, :]
            crossing[:, :, depth] = moved[np.ix_(made_index, read_index)]
        return np.diff(crossing, axis=2)

    def _levels(self, level_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(cycles, pJ) of [..., level] bytes sent between level partners, every level's
        messages in one round, all levels at once: as long as the slowest message, the
        busiest link (which may carry several levels: a tree's leaf links carry them all)
        or the busiest cube's DRAM."""
        levels = level_bytes.shape[-1]
        patterns = [self._pattern(("level", level)) for level in range(levels)]
        per_edge = level_bytes / np.array([p.edges for p in patterns])
        slowest = np.where(per_edge > 0, per_edge * np.array([p.message_cycles for p in patterns])
                           + np.array([p.latency_cycles for p in patterns]), 0.0).max(
                               axis=-1, initial=0.0)
        links = (per_edge @ self._link_loads(levels)).max(axis=-1, initial=0.0)
        cycles = np.maximum.reduce([slowest, links, self._dram_cycles(level_bytes.sum(axis=-1))])
        pj = (level_bytes * np.array([self._pj_per_byte(p) for p in patterns])).sum(axis=-1)
        return cycles, pj

    def _link_loads(self, levels: int) -> np.ndarray:
        key = ("loads", levels)
        if key not in self._patterns:
            self._patterns[key] = level_link_loads(self.topology, levels)
        return self._patterns[key]

    def _dram_cycles(self, moved: np.ndarray) -> np.ndarray:
        """The busiest cube's DRAM for `moved` bytes spread evenly (read and written)."""
        dram = self.config.vault_bandwidth_bytes_per_cycle * self.config.vaults_per_cube
        return 2 * moved / self.topology.hierarchy.members / dram

    def _pj_per_byte(self, pattern: Pattern) -> float:
        """DRAM at both ends, link and switch bits on the pattern's mean route, pJ."""
        pj = self._table.pj_per_action
        bits = 8 / self.config.packet_efficiency
        return 2 * pj[Action.DRAM] / self.config.word_bytes + bits * (
            pattern.links_per_edge * pj[Action.LINK_BIT]
            + pattern.switches_per_edge * pj[Action.SWITCH_BIT])

    def _collectives(self, layer: Layer, columns: Sequence[Column], hierarchy: Hierarchy,
                     gradient: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(cycles, pJ) of the gradient reduce-scatter and all-gather of each column among
        the members that hold the same weights, sent as the model's collective does
        (`partition.collectives`): a ring of k - 1 rounds of 1/k of a member's weights, or
        one stage per level, the stage at level l moving 1/P_l of them to each partner."""
        weights = OPERATORS[layer.kind].weights
        cycles, pj = np.zeros(len(columns)), np.zeros(len(columns))
        for i, column in enumerate(columns):
            ring = tuple(h for h, kind in enumerate(column) if KINDS[kind].dim not in weights)
            size = math.prod(hierarchy.sizes[h] for h in ring)
            if size < 2 or gradient[i] <= 0:
                continue
            if self.model.collective == "levels":
                held = gradient[i] / (2 * hierarchy.members) * size / (size - 1)  # a member's
                product = 1
                for level in reversed(ring):
                    product *= hierarchy.sizes[level]
                    time, energy = self._send(self._pattern(("level", level)), held / product, 1)
                    cycles[i], pj[i] = cycles[i] + 2 * time, pj[i] + 2 * energy
            else:
                per_message = gradient[i] / (2 * hierarchy.members * (size - 1))
                time, energy = self._send(self._pattern(("ring", ring)), per_message, size - 1)
                cycles[i], pj[i] = 2 * time, 2 * energy
        return cycles, pj

    def _send(self, pattern: Pattern, per_edge: float, rounds: int) -> tuple[float, float]:
        """(cycles, pJ) of `rounds` rounds of the pattern with `per_edge` bytes a message."""
        slowest = per_edge * pattern.message_cycles + pattern.latency_cycles
        moved = per_edge * pattern.edges
        time = max(slowest, per_edge * pattern.busiest_link_cycles,
                   float(self._dram_cycles(np.array(moved))))
        return rounds * time, rounds * moved * self._pj_per_byte(pattern)

    def _pattern(self, key: tuple[str, int | tuple[int, ...]]) -> Pattern:
        """("level", h): level partners; ("ring", levels): rings over those levels."""
        if key not in self._patterns:
            hierarchy = self.topology.hierarchy
            what, where = key
            edges = level_edges(hierarchy, where) if what == "level" else \
                ring_edges(hierarchy, where)
            self._patterns[key] = Pattern.measure(edges, self.topology, self.config)
        return self._patterns[key]


def _shape(share: Share) -> tuple:
    """What a share's cost depends on: its layer, its counts of samples, channels and kernels
    and its output rows and columns (whose place decides the halo at the map's edges)."""
    return (share.layer, share.batch, share.channels, share.kernels, share.out_rows,
            share.out_cols)


def _prefixes(columns: Sequence[Column], depth: int) -> tuple[list[Column], np.ndarray]:
    """The distinct prefixes of length `depth` of `columns`, and each column's prefix index."""
    distinct: dict[Column, int] = {}
    index = [distinct.setdefault(tuple(column[:depth]), len(distinct)) for column in columns]
    return list(distinct), np.array(index, dtype=np.intp)
