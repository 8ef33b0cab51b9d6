"""Plan searches over split kinds: HyPar's level-by-level DP and a joint DP over all levels.

Every cost a traffic model gives is either a layer's own (it depends on the
layer's column: its kind at every level) or a boundary's (it depends on two
adjacent columns), so a chain is solved by one DP over layers (`chain_dp`):

- `greedy` (HyPar's Algorithm 2, generalised): level by level from the top,
  a DP over layers whose state is the layer's kind at that level, the upper
  levels fixed and the lower ones not yet split (Algorithm 1 on the
  sub-arrays; with kinds batch and in on two-way levels it is exactly
  Algorithm 1 with com = com_h + 2 * com_n).
- `joint`: one DP whose state is the layer's whole column; exact over the
  plan (kinds^levels states a layer, a boundary is a matrix of them).
- `brute_force`: every plan, for the tests and the `exhaustive` strategy.

Ties go to the earlier kind (registry order: batch first), and back-tracking
prefers it from the last layer backwards, as HyPar's Algorithm 1 does here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.shares import Column
from hypar_sim.planner.traffic import TrafficModel
from hypar_sim.workload.layers import Layer

SEARCHES = ("greedy", "joint")

#: Most whole plans `brute_force` will enumerate.
MAX_BRUTE_FORCE_PLANS = 2**22


def chain_dp(own: Sequence[np.ndarray], boundary: Sequence[np.ndarray]) -> tuple[float, list[int]]:
    """Minimal sum of own[l][s_l] + boundary[l][s_{l-1}, s_l]; (cost, state per layer).
    Ties go to the earliest state. A few states a layer (HyPar's two) are solved with
    Python floats, many with numpy: the same sums in the same order either way."""
    if not own:
        return 0.0, []
    if max(len(costs) for costs in own) <= _FEW_STATES:
        return _chain_dp_floats(own, boundary)
    best = np.asarray(own[0], dtype=float)
    back = []
    for costs, matrix in zip(own[1:], boundary, strict=True):
        total = best[:, None] + matrix
        pointer = np.argmin(total, axis=0)  # the first (earliest state) on ties
        best = total[pointer, np.arange(total.shape[1])] + costs
        back.append(pointer)
    return _backtrack(best.tolist(), back)


#: Most states a layer for which `chain_dp` uses Python floats.
_FEW_STATES = 4


def _chain_dp_floats(own: Sequence[np.ndarray],
                     boundary: Sequence[np.ndarray]) -> tuple[float, list[int]]:
    best = [float(c) for c in own[0]]
    back = []
    for costs, matrix in zip(own[1:], boundary, strict=True):
        rows = matrix.tolist()
        pointer, new = [], []
        for j, cost in enumerate(costs.tolist()):
            column = [b + row[j] for b, row in zip(best, rows, strict=True)]
            i = column.index(min(column))
            pointer.append(i)
            new.append(column[i] + cost)
        best = new
        back.append(pointer)
    return _backtrack(best, back)


def _backtrack(best: list[float], back: list) -> tuple[float, list[int]]:
    state = best.index(min(best))
    states = [state]
    for pointer in reversed(back):
        states.append(int(pointer[states[-1]]))
    return float(best[state]), states[::-1]


def _no_kind(layer: Layer, kinds: Sequence[str], where: str) -> InputError:
    return InputError(f"--kinds: no kind of {','.join(kinds)} can split layer {layer.name} "
                      f"{where}; allowed: kinds whose dimension has at least as many "
                      "indices as the level has members (e.g. batch)")


def _costs(model: TrafficModel, layers: Sequence[Layer], batch: int,
           columns: Sequence[Sequence[Column]], hierarchy: Hierarchy,
           word_bytes: int, level: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Own and boundary costs; with `level` > 0 and a model whose levels separate, only
    that level's (the levels above are the same for every option)."""
    last = len(layers) - 1
    extra = {"from_level": level} if level and model.separable_by_level else {}
    own = [model.own_costs(layer, batch, cols, hierarchy, word_bytes, index == last, **extra)
           for index, (layer, cols) in enumerate(zip(layers, columns, strict=True))]
    boundary = [model.boundary_costs(layers[i - 1], layers[i], batch, columns[i - 1],
                                     columns[i], hierarchy, word_bytes, **extra)
                for i in range(1, len(layers))]
    return own, boundary


def _plan_terms(model: TrafficModel, layers: Sequence[Layer], batch: int,
                columns: Sequence[Column], hierarchy: Hierarchy,
                word_bytes: int) -> tuple[list[float], list[float]]:
    """One plan's terms of the DP's sum: every layer's own cost, every boundary's."""
    last = len(layers) - 1
    own = [float(model.own_costs(layer, batch, [column], hierarchy, word_bytes,
                                 index == last)[0])
           for index, (layer, column) in enumerate(zip(layers, columns, strict=True))]
    between = [float(model.boundary_costs(layers[i - 1], layers[i], batch, [columns[i - 1]],
                                          [columns[i]], hierarchy, word_bytes)[0, 0])
               for i in range(1, len(layers))]
    return own, between


def layer_costs(model: TrafficModel, layers: Sequence[Layer], batch: int,
                columns: Sequence[Column], hierarchy: Hierarchy, word_bytes: int) -> list[float]:
    """Every layer's own cost plus those of the boundaries on both its sides."""
    own, between = _plan_terms(model, layers, batch, columns, hierarchy, word_bytes)
    for i, cost in enumerate(between):
        own[i] += cost
        own[i + 1] += cost
    return own


def chain_cost(model: TrafficModel, layers: Sequence[Layer], batch: int,
               columns: Sequence[Column], hierarchy: Hierarchy, word_bytes: int) -> float:
    """The DP's sum for one plan: every layer's own cost and every boundary's."""
    own, between = _plan_terms(model, layers, batch, columns, hierarchy, word_bytes)
    return sum(own) + sum(between)


def greedy(model: TrafficModel, layers: Sequence[Layer], batch: int, hierarchy: Hierarchy,
           kinds: Sequence[str], word_bytes: int) -> list[Column]:
    """Level by level from the top: the best kinds at each level given those above."""
    columns: list[Column] = [() for _ in layers]
    for level in range(hierarchy.levels):
        upper = Hierarchy(hierarchy.sizes[:level + 1])
        options = []
        for layer, prefix in zip(layers, columns, strict=True):
            offered = [prefix + (kind,) for kind in kinds
                       if model.offered(layer, batch, prefix + (kind,), upper)]
            if not offered:
                raise _no_kind(layer, kinds, f"at level {level + 1}")
            options.append(offered)
        own, boundary = _costs(model, layers, batch, options, upper, word_bytes, level)
        _, states = chain_dp(own, boundary)
        columns = [opts[state] for opts, state in zip(options, states, strict=True)]
    return columns


def all_columns(model: TrafficModel, layer: Layer, batch: int, hierarchy: Hierarchy,
                kinds: Sequence[str]) -> list[Column]:
    """Every column of `kinds` the model offers `layer` (registry order, top level first)."""
    columns = list(model.offered_columns(layer, batch, hierarchy, kinds))
    if not columns:
        raise _no_kind(layer, kinds, f"on hierarchy {hierarchy}")
    return columns


def joint(model: TrafficModel, layers: Sequence[Layer], batch: int, hierarchy: Hierarchy,
          kinds: Sequence[str], word_bytes: int) -> list[Column]:
    """The cheapest plan over all levels at once (one DP, whole columns as states)."""
    options = [all_columns(model, layer, batch, hierarchy, kinds) for layer in layers]
    own, boundary = _costs(model, layers, batch, options, hierarchy, word_bytes)
    _, states = chain_dp(own, boundary)
    return [opts[state] for opts, state in zip(options, states, strict=True)]


def brute_force(model: TrafficModel, layers: Sequence[Layer], batch: int, hierarchy: Hierarchy,
                kinds: Sequence[str], word_bytes: int,
                progress: bool = False) -> tuple[float, list[Column]]:
    """Every plan tried (ties: the first in enumeration order, last layer varying fastest);
    with `progress`, a bar on stderr that starts by saying how many plans it will visit."""
    options = [all_columns(model, layer, batch, hierarchy, kinds) for layer in layers]
    count = math.prod(len(o) for o in options)
    if count > MAX_BRUTE_FORCE_PLANS:
        raise InputError(f"--strategy exhaustive: {count} plans to try, more than "
                         f"{MAX_BRUTE_FORCE_PLANS}; use a smaller network, fewer levels or kinds, "
                         "or --search joint")
    own, boundary = _costs(model, layers, batch, options, hierarchy, word_bytes)
    best: tuple[float, tuple[int, ...]] | None = None
    plans = itertools.product(*(range(len(o)) for o in options))
    if progress:
        from tqdm import tqdm

        plans = tqdm(plans, total=count, unit="plan", desc="exhaustive", mininterval=0.5)
    for states in plans:
        cost = sum(own[i][s] for i, s in enumerate(states)) + sum(
            boundary[i - 1][states[i - 1], states[i]] for i in range(1, len(states)))
        if best is None or cost < best[0]:
            best = (float(cost), states)
    assert best is not None
    return best[0], [opts[s] for opts, s in zip(options, best[1], strict=True)]
