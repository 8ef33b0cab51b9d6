"""The layout model's cost tables in cycles or pJ: what `--objective time|energy` minimises
on a graph network.

`layout_costs.Costs` gives the bytes of a node's own steps under a column and of an edge
under a pair of columns; the searches of `planner.plan` add them up. `TimedCosts`
gives the same tables in step time or energy, from the simulator's own models:

- a node's own cost: its compute, every phase (forward, backward, gradient, update) on its
  slowest member (`hardware.node_costs.node_cost`: the PE array and the vault DRAM, as the
  schedule charges it; no backward pass for a node that reads only graph inputs), plus its
  own steps (the gradient all-reduce, the loss);
- an edge's: its steps (partial sums, the gather of the input, the error's reduction and
  gather).

A step is sent as the simulator sends it (`planner.plan_messages.sent`): the
stages of one transfer kind summed, then the `ring` collective, timed as the analytic engine
times a step (`hardware.transfer.step_cycles`: rounds one after another, each as long as its
slowest message, its busiest link or its busiest cube's DRAM). Energy: the pJ of every
compute action on every member (`hardware.energy`), DRAM at both ends of every message and
its link and switch bits, plus the array's static power over the cost's cycles.

On the top levels of the array (the greedy search's upper hierarchy) a group of `sub`
members computes its share together (its cycles / `sub`), and what one group sends another
goes between their members pairwise (member i of one to member i of the other, 1/`sub` each).

The sum is a serial step: the simulator runs independent nodes side by side and overlaps
the gradient all-reduces with the backward pass, which this estimate does not; where a plan
overlaps much, the estimate is above the simulated step (`tests/test_timed_costs.py`
measures it).
"""

from __future__ import annotations

import numpy as np

from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.energy import Action, EnergyTable
from hypar_sim.hardware.node_costs import node_cost
from hypar_sim.hardware.topology import Topology
from hypar_sim.hardware.transfer import Routed, step_cycles
from hypar_sim.partition import layout_costs, node_layout
from hypar_sim.partition.axes import Site
from hypar_sim.partition.collectives import COLLECTIVES
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.moved import Moved
from hypar_sim.partition.shares import Column
from hypar_sim.partition.steps import STEP_PHASES, Phase, StepMessages, TransferKind
from hypar_sim.planner.plan_messages import EDGE_STAGES, OWN_STAGES
from hypar_sim.planner.training import DEFAULT_TRAINING, Training
from hypar_sim.sim.defaults import DEFAULT_CHUNK_BYTES, DEFAULT_MAX_CHUNKS

_KIND_OF = {**{stage: kind for stage, (kind, _) in EDGE_STAGES.items()}, **OWN_STAGES}


class TimedCosts(layout_costs.Costs):
    """`layout_costs.Costs` in cycles (`objective` time) or pJ (energy) on `topology`;
    `fed`: the names of the nodes that read another node's output (the others have no
    backward pass); `training`'s update (its optimizer, ZeRO's shards) and the forward pass
    of the `recomputed` nodes again (their forward steps sent again: `edge`), ZeRO 3's
    second gather of the weights (`own`)."""

    closed_forms = False  # its steps are timed one by one

    def __init__(self, batch: int, word_bytes: int, forward_only: bool, objective: str,
                 config: HardwareConfig, topology: Topology, fed: set[str],
                 training: Training = DEFAULT_TRAINING,
                 recomputed: set[str] | frozenset[str] = frozenset()) -> None:
        super().__init__(batch, word_bytes, forward_only)
        self.objective, self.config, self.topology, self.fed = objective, config, topology, fed
        self.training, self.recomputed = training, recomputed
        self._rule = training.update_rule(config.word_bytes)
        table = EnergyTable.from_config(config)
        self._pj = table
        self._static_pj = table.pj_per_action[Action.STATIC_PU_CYCLE] * config.pus_per_cube \
            * topology.hierarchy.members
        self._dram_pj_per_byte = 2 * table.pj_per_action[Action.DRAM] / config.word_bytes
        self._bits = 8 / config.packet_efficiency
        self._compute: dict[tuple, float] = {}
        self._parts: dict[tuple, object] = {}
        self._steps: dict[tuple, float] = {}
        self.phases = (Phase.FORWARD,) if forward_only else STEP_PHASES

    def _value(self, cycles: float, dynamic_pj: float) -> float:
        """The objective's value of a piece of work: its cycles, or its pJ with the array's
        static power over its cycles."""
        return cycles if self.objective == "time" else dynamic_pj + self._static_pj * cycles

    def own(self, site: Site, column: Column, hierarchy: Hierarchy, is_output: bool) -> float:
        """The node's own steps (`_total`) and its compute under `column`; under ZeRO 3 its
        weights' gather once more (gathered before the forward and again before the
        backward pass, in place of the reduced gradients' gather), and a recomputed output's
        loss reduction again (with its partial sums: `plan_messages.training_matrices`)."""
        total = super().own(site, column, hierarchy, is_output) \
            + self.compute(site, column, hierarchy)
        zero_3 = self.training.zero >= 3 and not self.forward_only
        rebuilt = is_output and site.node.name in self.recomputed and not self.forward_only
        if zero_3 or rebuilt:  # (its parts apart only where they are sent again)
            parts = self.own_parts(site, column, hierarchy, is_output)
            total += parts["gather"] * zero_3 + parts["loss reduce"] * rebuilt
        return total

    def compute(self, site: Site, column: Column, hierarchy: Hierarchy) -> float:
        """Every phase of the node on its slowest member (cycles), or on all its members
        (pJ), as the schedule charges them (members with boxes of the same sizes cost
        alike)."""
        again = site.node.name in self.recomputed and not self.forward_only
        return self.phase_value(site, column, hierarchy,
                                (*self.phases, *((Phase.RECOMPUTE,) if again else ())))

    def phase_value(self, site: Site, column: Column, hierarchy: Hierarchy,
                    phases: tuple[Phase, ...], zero: int | None = None) -> float:
        """`phases` of the node (each on its slowest member), its update on the shards of
        ZeRO stage `zero` (None: the training's)."""
        needs_error = site.node.name in self.fed
        zero = self.training.zero if zero is None else zero
        key = (site.geometry, column, hierarchy, needs_error, phases, bool(zero))
        if key not in self._compute:
            own = self._layout(site, column, hierarchy)
            _, first, counts = np.unique(own.box_sizes(), axis=0, return_index=True,
                                         return_counts=True)
            cycles, pj = 0.0, 0.0
            shards = node_layout.weight_copies(own) if zero else None
            for phase in phases:
                pieces = [node_cost(own, int(m), phase, self.config, needs_error, self._rule,
                                    int(shards[m]) if shards is not None else 1)
                          for m in first]
                cycles += max(piece.cycles for piece in pieces)
                pj += sum(self._pj.energy(piece.counts).total_pj * int(n)
                          for piece, n in zip(pieces, counts, strict=True))
            sub = self.topology.hierarchy.members // hierarchy.members
            self._compute[key] = self._value(cycles / sub, pj)
        return self._compute[key]

    def _own_steps(self, site: Site, column: Column, hierarchy: Hierarchy,
                   is_output: bool) -> float:
        """The node's own steps timed (`_total` of its matrices)."""
        return self._total(self.own_matrices(site, column, hierarchy, is_output))

    def own_parts(self, site: Site, column: Column, hierarchy: Hierarchy, is_output: bool
                  ) -> dict[str, float]:
        """The node's own steps apart: "gradient" (its reduce and its gather, once a
        step), "gather" (the gather alone: what ZeRO 3 sends again before each pass),
        "loss" (per micro-batch) and "loss reduce" (of it, what a recomputed output sends
        again with its partial sums)."""
        key = ("parts", site.geometry, column, hierarchy, is_output)
        if key not in self._parts:
            matrices = self.own_matrices(site, column, hierarchy, is_output)
            loss = {s: m for s, m in matrices.items() if s.startswith("loss")}
            gathers = {s: m for s, m in matrices.items() if s.endswith("gather")
                       and s not in loss}
            self._parts[key] = {
                "gradient": self._total({s: m for s, m in matrices.items() if s not in loss}),
                "gather": self._total(gathers), "loss": self._total(loss),
                "loss reduce": self._total({s: m for s, m in loss.items()
                                            if s == "loss reduce"})}
        return self._parts[key]

    def edge(self, producer: Site, consumer: Site, index: int, producer_column: Column,
             column: Column, hierarchy: Hierarchy) -> float:
        """An edge's steps one after another (`edge_stages`, in the order they run), and
        its forward steps again where they are recomputed: its partial sums where the
        producer is, its gather where the consumer is (`plan_messages.training_matrices`)."""
        stages = self.edge_stages(producer, consumer, index, producer_column, column,
                                  hierarchy)
        total = sum(stages.values(), 0.0)
        if self.recomputed and not self.forward_only:
            if producer.node.name in self.recomputed:
                total += stages["forward reduce"]
            if consumer.node.name in self.recomputed:
                total += stages["forward gather"]
        return total

    def edge_stages(self, producer: Site, consumer: Site, index: int, producer_column: Column,
                    column: Column, hierarchy: Hierarchy) -> dict[str, float]:
        """Each stage of an edge apart (`node_layout.edge_matrices`' names: the producer's
        partial sums reduced, the input gathered into the consumer's layout, the error's
        reduce and gather back), each its own transfer kind, timed once."""
        key = ("edge", producer.geometry, consumer.geometry, index,
               producer_column, column, hierarchy)
        if key not in self._parts:  # (edges that move alike: timed once)
            alike = ("edge", *self.edge_key(producer, consumer, index, producer_column, column,
                                            hierarchy))
            if alike not in self._parts:
                matrices = node_layout.edge_matrices(
                    self._layout(producer, producer_column, hierarchy),
                    self._layout(consumer, column, hierarchy), index, self.batch,
                    self.word_bytes)
                self._parts[alike] = {stage: self._total({stage: matrix})
                                      for stage, matrix in matrices.items()}
            self._parts[key] = self._parts[alike]
        return self._parts[key]

    def _total(self, matrices: dict[str, Moved]) -> float:
        """The steps of `matrices` (stages by name), one after another: each kind's stages
        summed and sent by the ring collective, timed as the analytic engine times it."""
        kinds: dict[TransferKind, Moved] = {}
        for stage, matrix in matrices.items():
            if self.forward_only and stage not in node_layout.FORWARD_STAGES:
                continue
            if matrix.sum():
                kind = _KIND_OF[stage]
                kinds[kind] = kinds[kind] + matrix if kind in kinds else matrix
        return sum((self._step(kind, matrix) for kind, matrix in kinds.items()), 0.0)

    def _step(self, kind: TransferKind, matrix: Moved) -> float:
        """The objective's value of one step: `matrix` sent by the ring collective
        (remembered by the matrix: a transformer's edges repeat theirs; the kind only names
        the step)."""
        key = (matrix.members, matrix.src.tobytes(), matrix.dst.tobytes(),
               matrix.amount.tobytes(),
               tuple((block.members.tobytes(), block.amount) for block in matrix.blocks))
        if key not in self._steps:
            self._steps[key] = self._sent(kind, matrix)
        return self._steps[key]

    def _sent(self, kind: TransferKind, matrix: Moved) -> float:
        sent = COLLECTIVES["ring"](matrix)
        src, dst, sizes, rounds = sent.src, sent.dst, sent.bytes, sent.round
        repeats = sent.repeats
        sub = self.topology.hierarchy.members // matrix.members
        if sub > 1:  # a group's messages go between its members and the other group's
            offsets = np.tile(np.arange(sub), len(src))
            src, dst = np.repeat(src * sub, sub) + offsets, np.repeat(dst * sub, sub) + offsets
            sizes, rounds = np.repeat(sizes / sub, sub), np.repeat(rounds, sub)
            repeats = np.repeat(repeats, sub)
        spread = StepMessages(0, kind, src, dst, sizes, np.zeros_like(src), rounds,
                              repeats=repeats)
        routed = Routed.of(src, dst, self.topology)
        cycles = step_cycles(spread, self.topology, self.config, DEFAULT_CHUNK_BYTES,
                             DEFAULT_MAX_CHUNKS, routed)
        if self.objective == "time":
            return cycles
        pj = self._pj.pj_per_action
        per_byte = self._dram_pj_per_byte + self._bits * (
            routed.energy_links * pj[Action.LINK_BIT] + routed.switches * pj[Action.SWITCH_BIT])
        return self._value(cycles, float(np.dot(spread.sent_bytes, per_byte)))
