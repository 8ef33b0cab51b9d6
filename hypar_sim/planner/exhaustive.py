"""Brute force over dp/mp assignments: the check on the dynamic program.

`best_level` tries all 2**L assignments of one level; `greedy_levels` applies
it level by level as Algorithm 2 does; `global_optimum` tries all 2**(L*H)
whole plans. Ties are broken as in `hypar.partition_two`: among the cheapest,
the assignment smallest when read from the last layer backwards, dp < mp.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from hypar_sim.errors import InputError
from hypar_sim.planner.comm_model import LayerSplit, Parallelism
from hypar_sim.planner.hypar import hierarchical_choices
from hypar_sim.planner.plan import Choices, level_pair_costs, split_all

_BOTH = (Parallelism.DP, Parallelism.MP)

#: Largest number of choices (layers x levels) `global_optimum` will enumerate.
MAX_GLOBAL_CHOICES = 22


def _tie_key(choices: Sequence[Parallelism]) -> tuple[int, ...]:
    return tuple(0 if c is Parallelism.DP else 1 for c in reversed(choices))


def level_cost(splits: Sequence[LayerSplit], choices: Sequence[Parallelism]) -> float:
    """Bytes one pair exchanges at one level under `choices`."""
    return sum(intra + inter for intra, inter in level_pair_costs(splits, choices))


def all_assignments(layers: int) -> Iterator[tuple[Parallelism, ...]]:
    """Every dp/mp assignment of `layers` layers."""
    return itertools.product(_BOTH, repeat=layers)


def best_level(splits: Sequence[LayerSplit]) -> tuple[float, tuple[Parallelism, ...]]:
    """The cheapest assignment of one level, by trying all 2**L."""
    return min(
        ((level_cost(splits, choices), choices) for choices in all_assignments(len(splits))),
        key=lambda item: (item[0], _tie_key(item[1])),
    )


def greedy_levels(splits: Sequence[LayerSplit], levels: int) -> tuple[float, Choices]:
    """Algorithm 2 with brute force in place of the dynamic program at each level."""
    return hierarchical_choices(splits, levels, best_level)


def plan_cost(splits: Sequence[LayerSplit], plan: Choices) -> float:
    """Total bytes of a whole plan over all levels."""
    total, pairs = 0.0, 1
    for choices in plan:
        total += pairs * level_cost(splits, choices)
        splits = split_all(splits, choices)
        pairs *= 2
    return total


def global_optimum(splits: Sequence[LayerSplit], levels: int) -> tuple[float, Choices]:
    """The cheapest whole plan, jointly over all levels (2**(L*H) plans)."""
    layers = len(splits)
    if layers * levels > MAX_GLOBAL_CHOICES:
        raise InputError(
            f"exhaustive search over {layers} layers x {levels} levels = 2**{layers * levels} "
            f"plans is too large; allowed: layers x levels <= {MAX_GLOBAL_CHOICES}"
        )
    best: tuple[float, Choices] | None = None
    for flat in all_assignments(layers * levels):
        plan = tuple(tuple(flat[h * layers:(h + 1) * layers]) for h in range(levels))
        cost = plan_cost(splits, plan)
        if best is None or cost < best[0]:
            best = (cost, plan)
    return best if best is not None else (0.0, ())
