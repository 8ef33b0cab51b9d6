"""Plans that fit a cube's memory (`cube_capacity_gib`).

A member keeps, for every layer of the step, the weights and weight gradients
of its share and the input it keeps for the backward pass
(`hardware.capacity.footprint`, what the schedule checks). A plan fits when the
sum over layers of the busiest member's footprint is at most a cube's
capacity (the sum of the maxima: the same member is the busiest everywhere
when shares are even, and it can only overstate otherwise). The schedule
adds the communication buffers to that when it checks the plan again.

The least memory any plan needs is the sum over layers of each layer's
leanest column (the layers do not constrain each other's footprints). For
the strategies whose search runs on the planner's costs (`hypar`, `optimal`,
`exhaustive`), a plan that does not fit is searched again with a price per
byte of footprint added to every layer's own cost (a Lagrangian relaxation
of the capacity constraint), the price bisected to the least that makes the
plan fit; the other strategies follow their papers and are refused with the
memory their plan needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.hardware.capacity import footprint
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.shares import Column
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.workload.layers import Layer

GIB = 2**30

#: Bisection steps on the price (each a search): the price ends within 2**-12 of the least.
_BISECTIONS = 12
#: Most times the starting price is multiplied by 8 to find one at which a plan fits.
_ESCALATIONS = 12


@lru_cache(maxsize=65536)
def _footprint(model: str, layer: Layer, batch: int, column: Column, hierarchy: Hierarchy,
               word_bytes: int) -> float:
    shares = traffic_model(model).member_shares(layer, batch, column, hierarchy)
    distinct = {id(share): share for share in shares}.values()  # often one object for all
    return max(footprint(share, word_bytes).total_bytes for share in distinct)


def column_footprints(model: str, layer: Layer, batch: int, columns: Sequence[Column],
                      hierarchy: Hierarchy, word_bytes: int) -> np.ndarray:
    """Bytes the busiest member keeps for `layer` under each column."""
    return np.array([_footprint(model, layer, batch, tuple(column), hierarchy, word_bytes)
                     for column in columns])


def plan_footprint(model: str, layers: Sequence[Layer], batch: int,
                   columns: Sequence[Column], hierarchy: Hierarchy, word_bytes: int) -> float:
    """Bytes per cube of a plan (the busiest member's, layer by layer)."""
    return float(sum(_footprint(model, layer, batch, tuple(column), hierarchy, word_bytes)
                     for layer, column in zip(layers, columns, strict=True)))


@dataclass(frozen=True)
class MemoryPrice:
    """Costs with `price` per byte of a column's footprint added to each layer's own cost
    (the interface of a traffic model's `offered`, `own_costs`, `boundary_costs`). On the
    top levels of the array (the greedy search) a group's footprint is spread over its
    members."""

    costs: object  # a TrafficModel or an Estimator
    model: str
    price: float
    members: int

    #: The footprint of a column couples its levels.
    separable_by_level = False

    def offered(self, layer: Layer, batch: int, column: Column, hierarchy: Hierarchy) -> bool:
        return self.costs.offered(layer, batch, column, hierarchy)

    def offered_columns(self, layer: Layer, batch: int, hierarchy: Hierarchy,
                        kinds: Sequence[str]) -> Sequence[Column]:
        return self.costs.offered_columns(layer, batch, hierarchy, kinds)

    def own_costs(self, layer: Layer, batch: int, columns: Sequence[Column],
                  hierarchy: Hierarchy, word_bytes: int, last: bool) -> np.ndarray:
        spread = self.members / hierarchy.members
        return self.costs.own_costs(layer, batch, columns, hierarchy, word_bytes, last) \
            + self.price * column_footprints(self.model, layer, batch, columns, hierarchy,
                                             word_bytes) / spread

    def boundary_costs(self, producer: Layer, consumer: Layer, batch: int,
                       producer_columns: Sequence[Column], columns: Sequence[Column],
                       hierarchy: Hierarchy, word_bytes: int) -> np.ndarray:
        return self.costs.boundary_costs(producer, consumer, batch, producer_columns, columns,
                                         hierarchy, word_bytes)


Solution = tuple[float, Sequence[Column]]  # (the objective's value, columns)


def fit(solve: Callable[[float], Solution], footprint_of: Callable[[Sequence[Column]], float],
        capacity_bytes: float, scale: float) -> tuple[Solution | None, float]:
    """The best plan that fits: `solve(price)` searches with a price per byte of footprint.
    The price grows from `scale` (the objective's value of the unpriced plan per byte of
    capacity) until a plan fits, then is bisected down to the least that still fits.
    Returns that plan (None if none fits at any price: the leanest plans' buffers overflow
    the cube) and the least bytes per cube a searched plan needed."""
    high = scale
    best = solve(high)
    least = footprint_of(best[1])
    for _ in range(_ESCALATIONS):
        if least <= capacity_bytes:
            break
        high *= 8
        best = solve(high)
        least = min(least, footprint_of(best[1]))
    else:
        return None, least
    low = 0.0
    for _ in range(_BISECTIONS):
        price = (low + high) / 2
        candidate = solve(price)
        if footprint_of(candidate[1]) <= capacity_bytes:
            high = price
            if candidate[0] <= best[0]:
                best = candidate
        else:
            low = price
    return best, least


def too_big(network: str, strategy: str, needed: float, least: float,
            capacity_bytes: float, kinds: Sequence[str],
            fitters: Sequence[str] = ("hypar", "optimal")) -> InputError:
    """The one-line error of a plan (or of every plan) that does not fit a cube (`fitters`:
    the strategies that search for a plan that fits)."""
    if least > capacity_bytes:
        return InputError(
            f"capacity: no plan of kinds {','.join(kinds)} fits {network} in a cube: the leanest "
            f"needs at least {least / GIB:.3g} GiB per cube (weights, gradients, kept inputs and "
            f"the largest receive), the cube has {capacity_bytes / GIB:.3g} GiB; use more "
            "accelerators, a smaller batch, more kinds or --set cube_capacity_gib=...")
    return InputError(
        f"capacity: strategy {strategy}'s plan needs {needed / GIB:.3g} GiB per cube, more than "
        f"the cube's {capacity_bytes / GIB:.3g} GiB (it follows its own cost, not memory); "
        f"{' or '.join(fitters)} search{'es' if len(fitters) == 1 else ''} for a plan that fits "
        f"(none can need less than {least / GIB:.3g} GiB)")
