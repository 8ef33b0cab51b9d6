"""The exact minimum of a sum of cost tables over a graph: min-sum variable elimination.

A plan of a graph network gives every unit (a variable) one of its options;
the cost is a sum of tables, each over one unit (its own costs) or two (an
edge's redistribution). On a chain this is HyPar's layer-wise DP; on a graph
a tensor read by several units (a residual's skip, an inception block's
input) couples them. Eliminating the variables one by one in a given order
(bucket elimination: Dechter, "Bucket elimination: a unifying framework for
reasoning", Artificial Intelligence 113, 1999) is exact; it costs the product
of the domains of the variables a step joins, so the order matters: a
topological order keeps that to the tensors alive at once (two in a
residual block, five in an inception block). Ties go to the lowest option.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hypar_sim.errors import InputError

#: The searches of the `hypar` strategy (`--search`): level by level, or all levels at once.
SEARCHES = ("greedy", "joint")

#: Most cells one elimination step may build (numpy arrays of float64).
MAX_STATES = 2**24


class StateLimit(InputError):
    """An exact elimination would need more than MAX_STATES cells in one step."""

    def __init__(self, message: str, cells: int) -> None:
        super().__init__(message)
        self.cells = cells


@dataclass(frozen=True)
class Factor:
    """A cost table with one axis per variable, in the order of `variables`."""

    variables: tuple[int, ...]
    table: np.ndarray


def _aligned(factor: Factor, variables: tuple[int, ...]) -> np.ndarray:
    """The factor's table broadcastable over `variables` (a superset of its own)."""
    order = sorted(range(len(factor.variables)), key=lambda i: variables.index(
        factor.variables[i]))
    table = np.transpose(factor.table, order)
    shape = [1] * len(variables)
    for axis, var in enumerate(sorted(factor.variables, key=variables.index)):
        shape[variables.index(var)] = table.shape[axis]
    return table.reshape(shape)


def minimise(domains: Sequence[int], factors: Sequence[Factor],
             order: Sequence[int]) -> tuple[float, list[int]]:
    """(least total cost, the option of every variable) over all assignments; `order` is
    the elimination order (every variable once)."""
    if sorted(order) != list(range(len(domains))):
        raise ValueError("order must list every variable once")
    pending = dict(enumerate(factors))  # by key: the order factors were made in
    touching: list[set[int]] = [set() for _ in domains]  # each variable's pending factors
    for key, factor in pending.items():
        for v in factor.variables:
            touching[v].add(key)
    steps = []  # (variable, the variables its choice depends on, argmin table)
    for var in order:
        keys = sorted(touching[var])
        bucket = [pending.pop(key) for key in keys]
        for key, factor in zip(keys, bucket, strict=True):
            for v in factor.variables:
                touching[v].discard(key)
        others = tuple(sorted({v for f in bucket for v in f.variables} - {var}))
        joined = (var, *others)
        cells = int(np.prod([domains[v] for v in joined]))
        if cells > MAX_STATES:
            raise StateLimit(f"--search: an exact plan of this graph needs {cells:,} states in "
                             f"one step (more than {MAX_STATES:,}); use --search greedy, fewer "
                             "kinds or fewer levels", cells)
        total = np.zeros([domains[v] for v in joined])
        for factor in bucket:
            total = total + _aligned(factor, joined)
        choice = np.argmin(total, axis=0)
        steps.append((var, others, choice))
        made = Factor(others, np.take_along_axis(total, choice[None], axis=0)[0])
        key = len(factors) + len(steps)  # after every factor made so far
        pending[key] = made
        for v in others:
            touching[v].add(key)
    cost = float(sum(float(f.table) for f in pending.values()))
    assignment = [0] * len(domains)
    for var, others, choice in reversed(steps):
        assignment[var] = int(choice[tuple(assignment[v] for v in others)])
    return cost, assignment


def local_search(domains: Sequence[int], factors: Sequence[Factor],
                 order: Sequence[int], sweeps: int = 50) -> tuple[float, list[int]]:
    """A good assignment where the exact elimination is too wide (DenseNet's concatenations
    join every earlier layer): each variable in `order` takes its best option given those
    already chosen, then every variable in turn moves to its best option given all the
    others (iterated conditional modes, Besag, J. R. Stat. Soc. B 48, 1986) until none
    improves. Not exact; the caller says so."""
    touching: dict[int, list[Factor]] = {v: [] for v in range(len(domains))}
    for factor in factors:
        for v in factor.variables:
            touching[v].append(factor)
    assignment = [0] * len(domains)
    chosen: set[int] = set()

    def options(v: int, known: set[int] | None) -> np.ndarray:
        totals = np.zeros(domains[v])
        for factor in touching[v]:
            if known is not None and any(u not in known for u in factor.variables if u != v):
                continue
            index = tuple(slice(None) if u == v else assignment[u] for u in factor.variables)
            totals = totals + factor.table[index]
        return totals

    for v in order:
        assignment[v] = int(np.argmin(options(v, chosen)))
        chosen.add(v)
    for _ in range(sweeps):
        moved = False
        for v in order:
            totals = options(v, None)
            best = int(np.argmin(totals))
            if totals[best] < totals[assignment[v]]:
                assignment[v], moved = best, True
        if not moved:
            break
    cost = sum(float(f.table[tuple(assignment[u] for u in f.variables)]) for f in factors)
    return cost, assignment


def every_assignment(domains: Sequence[int], factors: Sequence[Factor],
                     progress: bool = False) -> tuple[float, list[int]]:
    """(least total cost, the option of every variable) by trying every assignment (ties:
    the first in enumeration order, the last variable varying fastest); with `progress`, a
    bar on stderr that starts by saying how many it will try."""
    assignments = itertools.product(*(range(size) for size in domains))
    if progress:
        from tqdm import tqdm

        assignments = tqdm(assignments, total=math.prod(domains), unit="plan",
                           desc="exhaustive", mininterval=0.5)
    best: tuple[float, tuple[int, ...]] | None = None
    for states in assignments:
        cost = sum(float(f.table[tuple(states[v] for v in f.variables)]) for f in factors)
        if best is None or cost < best[0]:
            best = (cost, states)
    assert best is not None
    return best[0], list(best[1])


def minimise_or_search(domains: Sequence[int], factors: Sequence[Factor], order: Sequence[int],
                       notes: list[str] | None = None, approximate: bool = True) -> list[int]:
    """The exact assignment (`minimise`), or where the graph is too entangled for it and
    `approximate` allows, the local search's, with a line in `notes` saying so."""
    try:
        return minimise(domains, factors, order)[1]
    except StateLimit as limit:
        if not approximate:
            raise
        if notes is not None:
            notes.append(f"local search where the exact elimination needed {limit.cells:,} states")
        return local_search(domains, factors, order)[1]
