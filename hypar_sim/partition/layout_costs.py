"""The layout model's cost tables for the planner's searches: the bytes of a node's own
steps and of an edge under its columns (`node_layout`'s rule), and the bytes a node's
busiest member keeps, each remembered for one planning run by the node's geometry (a
network repeats its blocks) and, for edges and own steps, by what the members hold (nodes
of different geometries that hold their tensors alike share them).
`planner.timed_costs` gives the same tables in cycles or pJ, `planner.chain_costs` a
chain's from its closed forms."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hypar_sim.partition import totals
from hypar_sim.partition.axes import Site
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS
from hypar_sim.partition.moved import Moved
from hypar_sim.partition.node_layout import (
    FORWARD_STAGES,
    NodeLayout,
    edge_bytes,
    layout,
    member_footprint_bytes,
    offered,
    own_bytes,
    own_key,
    own_matrices,
    tensor_shape,
)
from hypar_sim.partition.shares import Column
from hypar_sim.workload.layers import Layer
from hypar_sim.workload.network import layer_of


class Costs:
    """Total bytes of edges and of nodes' own steps, and the bytes a node's busiest member
    keeps, remembered (module docstring) for one planning run (of a training step, or with
    `forward_only` of an inference)."""

    def __init__(self, batch: int, word_bytes: int, forward_only: bool = False) -> None:
        self.batch, self.word_bytes, self.forward_only = batch, word_bytes, forward_only
        self._edges: dict[tuple, float] = {}
        self._own: dict[tuple, float] = {}
        self._footprints: dict[tuple, np.ndarray] = {}
        self._reads: dict[tuple, tuple] = {}
        self._layouts: dict[tuple, NodeLayout] = {}
        self._edge_bytes: dict[tuple[int, int], float] = {}
        self._own_matrices: dict[tuple, dict[str, Moved]] = {}
        self._own_bytes: dict[tuple, float] = {}  # by `own_key`: `_own_steps`
        self._holdings: dict[tuple, int] = {}  # (geometry, column, hierarchy, index) -> id
        self._holding_ids: dict[tuple, int] = {}  # what the members hold -> id
        self._layers: dict[str, Layer | None] = {}  # node name -> its chain layer, if one
        self._footprint_rule: Callable[[NodeLayout], np.ndarray] = lambda own: \
            member_footprint_bytes(own, word_bytes, not forward_only)

    def priced_by(self, rule: Callable[[NodeLayout], np.ndarray]) -> Costs:
        """These costs with `rule` giving a node's bytes per member (the training options'
        memory: `planner.footprint.node_rule`); returns itself."""
        self._footprint_rule = rule
        self._footprints.clear()
        return self

    #: Whether edges and own steps between layers of a chain (conv, fc) take the closed
    #: forms of `partition.totals` (bytes only: a cost in time or energy sums its steps).
    closed_forms = True

    def offered(self, site: Site, batch: int, column: Column, hierarchy: Hierarchy) -> bool:
        """Whether a node may take `column` (the module's `offered`)."""
        return offered(site, batch, column, hierarchy)

    def node_layout(self, site: Site, column: Column, hierarchy: Hierarchy) -> NodeLayout:
        """The members' boxes a footprint is read from (the module's `layout`)."""
        return self._layout(site, column, hierarchy)

    def _layout(self, site: Site, column: Column, hierarchy: Hierarchy) -> NodeLayout:
        """The module's `layout`, once per geometry, column and hierarchy: an edge table
        reads each of its nodes' layouts once per column of the other node."""
        key = (site.geometry, column, hierarchy)
        if key not in self._layouts:
            self._layouts[key] = layout(site, self.batch, column, hierarchy)
        return self._layouts[key]

    def edge_table(self, producer: Site, consumer: Site, index: int,
                   producer_columns: Sequence[Column], columns: Sequence[Column],
                   hierarchy: Hierarchy) -> np.ndarray:
        """[producer column, consumer column] `edge` for every pair: between two layers of a
        chain all at once (`totals.boundary_costs`, checked cell by cell against this
        model's rule by the tests), else pair by pair."""
        layers = self.chained(producer, consumer, index, [*producer_columns, *columns])
        if layers is None:
            return np.array([[self.edge(producer, consumer, index, a, b, hierarchy)
                              for b in columns] for a in producer_columns])
        return totals.cached_boundary_costs(*layers, self.batch, tuple(producer_columns),
                                            tuple(columns), hierarchy, self.word_bytes,
                                            self.forward_only)

    def own_table(self, site: Site, columns: Sequence[Column], hierarchy: Hierarchy,
                  is_output: bool) -> np.ndarray:
        """`own` of every column: of a chain's layer all at once (`totals.own_costs`)."""
        layer = self.chained(site, None, 0, columns)
        if layer is None:
            return np.array([self.own(site, column, hierarchy, is_output)
                             for column in columns])
        return totals.own_costs(layer[0], self.batch, columns, hierarchy, self.word_bytes,
                                is_output, self.forward_only)

    def chained(self, producer: Site, consumer: Site | None, index: int,
                 columns: Sequence[Column]) -> tuple[Layer, ...] | None:
        """The layers of a producer and its one consumer (None: the producer alone) that are
        a chain's (conv or fc nodes without biases, the consumer reading the producer's
        output as its input), when the closed forms apply; else None."""
        if not self.closed_forms:
            return None
        sites = (producer,) if consumer is None else (producer, consumer)
        layers = tuple(self._layer_of(site) for site in sites)
        if None in layers or (consumer is not None and (
                index or consumer.node.inputs != (producer.node.name,))):
            return None  # (before scanning the columns: there can be tens of thousands)
        if any(KINDS[k].dim is None for c in columns for k in c):
            return None
        return layers

    def _layer_of(self, site: Site) -> Layer | None:
        name = site.node.name
        if name not in self._layers:
            self._layers[name] = layer_of(site.node)
        return self._layers[name]

    def edge(self, producer: Site, consumer: Site, index: int, producer_column: Column,
             column: Column, hierarchy: Hierarchy) -> float:
        if self.chained(producer, consumer, index, [producer_column, column]) is not None:
            return float(self.edge_table(producer, consumer, index, [producer_column],
                                         [column], hierarchy)[0, 0])
        key = (producer.geometry, consumer.geometry, index, producer_column, column,
               hierarchy)
        if key not in self._edges:  # (edges that move alike, in closed form once: 1,829
            # of ResNet-50's plan on 64 cubes are 556)
            alike = self.edge_key(producer, consumer, index, producer_column, column,
                                  hierarchy)
            if alike not in self._edge_bytes:
                self._edge_bytes[alike] = self._run(edge_bytes(
                    self._layout(producer, producer_column, hierarchy),
                    self._layout(consumer, column, hierarchy), index, self.batch,
                    self.word_bytes))
            self._edges[key] = self._edge_bytes[alike]
        return self._edges[key]

    def edge_key(self, producer: Site, consumer: Site, index: int, producer_column: Column,
                 column: Column, hierarchy: Hierarchy) -> tuple[int, int]:
        """What an edge's matrices and bytes depend on (`_holding` of its two ends)."""
        return (self._holding(producer, producer_column, hierarchy, None),
                self._holding(consumer, column, hierarchy, index))

    def _holding(self, site: Site, column: Column, hierarchy: Hierarchy,
                 index: int | None) -> int:
        """An id of everything `node_layout.edge_matrices` (and `edge_bytes`) reads of one
        end of an edge: every member's region of the node's output (`index` None) or of its
        input `index`, the members' replica classes, and of the output its tensor's shape
        and pooling."""
        key = (site.geometry, column, hierarchy, index)
        if key not in self._holdings:
            own = self._layout(site, column, hierarchy)
            replicas = None if own.replicas is None else own.replicas.tobytes()
            held = (own.holding_key(index), replicas, *(() if index is not None else (
                tensor_shape(site, self.batch), site.desc.pooled_ratio)))
            self._holdings[key] = self._holding_ids.setdefault(held, len(self._holding_ids))
        return self._holdings[key]

    def reads(self, consumer: Site, index: int, column: Column, hierarchy: Hierarchy) -> tuple:
        """The consumer's `NodeLayout.read_signature` of input `index` under `column`."""
        key = (consumer.geometry, index, column, hierarchy)
        if key not in self._reads:
            own = self._layout(consumer, column, hierarchy)
            self._reads[key] = own.read_signature(index)
        return self._reads[key]

    def footprint(self, site: Site, column: Column, hierarchy: Hierarchy,
                  member: int | None = None) -> float:
        """Bytes the busiest member (or `member`) keeps for the node
        (`priced_by`'s rule; default `member_footprint_bytes`)."""
        key = (site.geometry, column, hierarchy)
        if key not in self._footprints:
            own = self.node_layout(site, column, hierarchy)
            self._footprints[key] = self._footprint_rule(own)
        kept = self._footprints[key]
        return float(kept.max() if member is None else kept[member])

    def own(self, site: Site, column: Column, hierarchy: Hierarchy, is_output: bool) -> float:
        if self.chained(site, None, 0, [column]) is not None:
            return float(self.own_table(site, [column], hierarchy, is_output)[0])
        key = (site.geometry, column, hierarchy, is_output)
        if key not in self._own:
            self._own[key] = self._own_steps(site, column, hierarchy, is_output)
        return self._own[key]

    def _own_steps(self, site: Site, column: Column, hierarchy: Hierarchy,
                   is_output: bool) -> float:
        """Bytes of the node's own steps that a step runs (`_total` of `own_matrices`), in
        closed form (`node_layout.own_bytes`), once per `node_layout.own_key`."""
        own = self._layout(site, column, hierarchy)
        key = own_key(own, is_output)
        if key not in self._own_bytes:
            self._own_bytes[key] = self._run(own_bytes(own, self.batch, self.word_bytes,
                                                       is_output))
        return self._own_bytes[key]

    def own_matrices(self, site: Site, column: Column, hierarchy: Hierarchy,
                     is_output: bool) -> dict[str, Moved]:
        """`node_layout.own_matrices` of the node, once per `node_layout.own_key` (nodes
        of different geometries whose weights, vectors and outputs are held alike share
        them: 436 of ResNet-50's plan on 64 cubes are 194)."""
        own = self._layout(site, column, hierarchy)
        key = own_key(own, is_output)
        if key not in self._own_matrices:
            self._own_matrices[key] = own_matrices(own, self.batch, self.word_bytes,
                                                   is_output)
        return self._own_matrices[key]

    def matrices_value(self, matrices: dict[str, Moved]) -> float:
        """The cost of `matrices` (stages by name, as `own_matrices` names them)."""
        return self._total(matrices)

    def _total(self, matrices: dict[str, Moved]) -> float:
        """Bytes of the stages a step runs (an inference: `FORWARD_STAGES` alone)."""
        return self._run({stage: m.sum() for stage, m in matrices.items()})

    def _run(self, stages: dict[str, float]) -> float:
        """The bytes of the stages (by name) that a step runs (an inference: the
        `FORWARD_STAGES` alone)."""
        return float(sum(value for stage, value in stages.items()
                         if not self.forward_only or stage in FORWARD_STAGES))
