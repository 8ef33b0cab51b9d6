"""A Plan: the dp/mp choice of every layer at every level, and the traffic it implies.

Level h (h = 0 .. H-1, level 0 at the top, the paper's H1) splits each of its
2**h groups into two halves; the halves of each group form one pair. A
plan's traffic at level h is 2**h times the cost of one pair, and the total
is the sum over levels, i.e. Algorithm 2's com = com_h + 2 * com_n unrolled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypar_sim.errors import InputError
from hypar_sim.planner.comm_model import LayerSplit, Parallelism, pair_costs
from hypar_sim.workload.network import Network

Choices = tuple[tuple[Parallelism, ...], ...]


@dataclass(frozen=True)
class LayerTraffic:
    """Bytes one layer moves at one level, all pairs of the level, both directions."""

    intra_bytes: float
    inter_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.intra_bytes + self.inter_bytes


@dataclass(frozen=True)
class Plan:
    """Levels x layers of dp/mp choices with their traffic (bytes)."""

    network: str
    strategy: str
    batch: int
    layer_names: tuple[str, ...]
    choices: Choices
    traffic: tuple[tuple[LayerTraffic, ...], ...]  # [level][layer]
    word_bytes: int = 4

    @property
    def levels(self) -> int:
        return len(self.choices)

    @property
    def accelerators(self) -> int:
        return 2**self.levels

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
            "accelerators": self.accelerators,
            "batch": self.batch,
            "layers": list(self.layer_names),
            "plan": [[c.value for c in level] for level in self.choices],
            "traffic_bytes": self.traffic_bytes,
            "traffic_bytes_per_level": list(self.traffic_bytes_per_level),
            "traffic_bytes_per_layer": [
                [{"intra": t.intra_bytes, "inter": t.inter_bytes} for t in level]
                for level in self.traffic
            ],
        }


def top_splits(network: Network, batch: int, word_bytes: int = 4) -> tuple[LayerSplit, ...]:
    """Every layer whole: what the full array holds before any split."""
    return tuple(LayerSplit(layer, float(batch), 1.0, word_bytes) for layer in network.layers)


def split_all(splits: Sequence[LayerSplit], choices: Sequence[Parallelism]) -> tuple[LayerSplit, ...]:
    """The shares each half holds after one level's choices (the sub-problem of Algorithm 2)."""
    return tuple(s.split(c) for s, c in zip(splits, choices, strict=True))


def level_pair_costs(
    splits: Sequence[LayerSplit], choices: Sequence[Parallelism]
) -> list[tuple[float, float]]:
    """Per layer (intra, inter) bytes of one pair at one level."""
    costs = []
    previous: Parallelism | None = None
    for split, choice in zip(splits, choices, strict=True):
        costs.append(pair_costs(split, previous, choice))
        previous = choice
    return costs


def level_splits(network: Network, batch: int, choices: Choices, word_bytes: int = 4):
    """The shares held at each level under `choices` (one tuple of LayerSplit per level)."""
    splits = top_splits(network, batch, word_bytes)
    result = []
    for level_choices in choices:
        result.append(splits)
        splits = split_all(splits, level_choices)
    return result


def check_batch_split(network: Network, batch: int, choices: Choices) -> None:
    """Refuse a plan that splits some layer's batch below one whole sample."""
    for index, name in enumerate(network.layer_names):
        dp_levels = sum(1 for level in choices if level[index] is Parallelism.DP)
        if batch % (2**dp_levels):
            raise InputError(
                f"batch: {batch} cannot be split by data parallelism at {dp_levels} levels "
                f"(layer {name}); use a batch divisible by {2**dp_levels}"
            )


def evaluate_plan(
    network: Network, batch: int, choices: Choices, strategy: str, word_bytes: int = 4
) -> Plan:
    """The traffic of a fixed plan (choices[level][layer])."""
    check_batch_split(network, batch, choices)
    traffic = []
    for level, (splits, level_choices) in enumerate(
        zip(level_splits(network, batch, choices, word_bytes), choices, strict=True)
    ):
        pairs = 2**level
        traffic.append(tuple(
            LayerTraffic(pairs * intra, pairs * inter)
            for intra, inter in level_pair_costs(splits, level_choices)
        ))
    return Plan(network.name, strategy, batch, network.layer_names, tuple(choices),
                tuple(traffic), word_bytes)
