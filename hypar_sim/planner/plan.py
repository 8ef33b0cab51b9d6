"""A Plan: the split kind of every layer at every level, and the traffic it implies.

Level h (0 at the top, the paper's H1) splits each of its groups into
`hierarchy.sizes[h]` sub-groups; a layer's kind at that level says which of
its loop dimensions is split (`partition.kinds`). The traffic comes from the
plan's traffic model (`planner.traffic`): per level and layer, the bytes
between members whose top-most differing level is that level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypar_sim.errors import InputError
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.shares import Column
from hypar_sim.planner.objectives import ESTIMATE_UNITS
from hypar_sim.planner.traffic import DEFAULT_TRAFFIC_MODEL, traffic_model
from hypar_sim.workload.network import Network

Choices = tuple[tuple[str, ...], ...]  # [level][layer] canonical kind names


@dataclass(frozen=True)
class LayerTraffic:
    """Bytes one layer moves at one level, all members, both directions."""

    intra_bytes: float
    inter_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.intra_bytes + self.inter_bytes


@dataclass(frozen=True)
class Plan:
    """Levels x layers of split kinds with their traffic (bytes)."""

    network: str
    strategy: str
    batch: int
    layer_names: tuple[str, ...]
    choices: Choices
    traffic: tuple[tuple[LayerTraffic, ...], ...]  # [level][layer]
    hierarchy: Hierarchy = Hierarchy(())
    traffic_model: str = DEFAULT_TRAFFIC_MODEL
    search: str = ""
    word_bytes: int = 4
    objective: str = "bytes"  # what the search minimised
    estimate: float = 0.0  # its value for this plan: bytes, cycles or pJ (planner.estimate)
    phases: str = "training"  # or "forward": inference, the forward pass alone

    @property
    def levels(self) -> int:
        return len(self.choices)

    @property
    def accelerators(self) -> int:
        return self.hierarchy.members

    @property
    def columns(self) -> tuple[Column, ...]:
        """Every layer's kinds over the levels, top first."""
        return tuple(zip(*self.choices, strict=True)) if self.choices else \
            tuple(() for _ in self.layer_names)

    @property
    def traffic_bytes_per_level(self) -> tuple[float, ...]:
        return tuple(sum(t.total_bytes for t in level) for level in self.traffic)

    @property
    def traffic_bytes(self) -> float:
        """Total bytes moved between accelerators in one training step."""
        return sum(self.traffic_bytes_per_level)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON; key names are read by other tools, keep them."""
        return {
            "network": self.network,
            "strategy": self.strategy,
            "levels": self.levels,
            "hierarchy": list(self.hierarchy.sizes),
            "accelerators": self.accelerators,
            "batch": self.batch,
            "traffic_model": self.traffic_model,
            "search": self.search,
            "objective": self.objective,
            "estimate": self.estimate,
            "estimate_unit": ESTIMATE_UNITS[self.objective],
            "layers": list(self.layer_names),
            "plan": [list(level) for level in self.choices],
            "traffic_bytes": self.traffic_bytes,
            "traffic_bytes_per_level": list(self.traffic_bytes_per_level),
            "traffic_bytes_per_layer": [
                [{"intra": t.intra_bytes, "inter": t.inter_bytes} for t in level]
                for level in self.traffic
            ],
        }


def evaluate_plan(network: Network, batch: int, choices: Choices | Sequence[Sequence[str]],
                  strategy: str, word_bytes: int = 4, hierarchy: Hierarchy | None = None,
                  model: str = DEFAULT_TRAFFIC_MODEL, search: str = "",
                  phases: str = "training") -> Plan:
    """The traffic of a fixed plan (choices[level][layer], canonical kind names) for a
    training step or, with `phases` "forward", the forward pass alone."""
    choices = tuple(tuple(row) for row in choices)
    hierarchy = hierarchy if hierarchy is not None else Hierarchy.binary(len(choices))
    traffic = traffic_model(model, phases)
    columns = tuple(zip(*choices, strict=True)) if choices else tuple(() for _ in network.layers)
    traffic.check_plan(network.layers, batch, columns, hierarchy)
    for layer, column in zip(network.layers, columns, strict=True):
        if not traffic.offered(layer, batch, column, hierarchy):
            raise InputError(f"plan: layer {layer.name} cannot take ({' '.join(column)}) on "
                             f"hierarchy {hierarchy} with batch {batch}: a kind splits a "
                             "dimension into more parts than it has")
    table = traffic.layer_traffic(network.layers, batch, columns, hierarchy, word_bytes)
    return Plan(network.name, strategy, batch, network.layer_names, choices,
                tuple(tuple(LayerTraffic(intra, inter) for intra, inter in row) for row in table),
                hierarchy, model, search, word_bytes, phases=phases)
