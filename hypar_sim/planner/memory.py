"""Plans that fit a cube's memory (`cube_capacity_gib`).

A member keeps, for every node of the step, the weights and weight gradients
of its box and what it keeps for the backward pass, and the largest receive
of the plan's messages (`plan.Plan.footprint_parts`, what the schedule checks).

The least memory any plan needs is at least the sum over nodes of each node's
leanest column (the nodes do not constrain each other's footprints). For
the strategies whose search runs on the planner's costs (`hypar`, `optimal`,
`exhaustive`), a plan that does not fit is searched again with a price per
byte of footprint added to every node's own cost (a Lagrangian relaxation
of the capacity constraint), the price bisected to the least that makes the
plan fit; the other strategies follow their papers and are refused with the
memory their plan needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hypar_sim.errors import InputError
from hypar_sim.partition.shares import Column

GIB = 2**30

#: Bisection steps on the price (each a search): the price ends within 2**-12 of the least.
_BISECTIONS = 12
#: Most times the starting price is multiplied by 8 to find one at which a plan fits.
_ESCALATIONS = 12


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
