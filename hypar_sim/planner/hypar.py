"""HyPar's search: Algorithm 1 (two sub-arrays) and Algorithm 2 (hierarchy).

Algorithm 1 is a layer-wise dynamic program over two states (the layer is dp
or mp); the inter-layer cost depends only on two adjacent layers, so the
optimum is found in O(L). Ties go to dp, and the back-tracking prefers dp
from the last layer backwards, so the answer is the optimal assignment that
is smallest when read from the last layer to the first with dp < mp
(`exhaustive.py` uses the same rule, so the two can be compared choice for
choice).

Algorithm 2 applies Algorithm 1 at the top level, splits every layer's
tensors by the chosen parallelism, and recurses on one half (both halves are
the same problem): com = com_h + 2 * com_n. This is greedy per level, as in
the paper; `exhaustive.global_optimum` shows what a joint search would find.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hypar_sim.planner.comm_model import LayerSplit, Parallelism, pair_costs
from hypar_sim.planner.plan import Plan, evaluate_plan, split_all, top_splits
from hypar_sim.workload.network import Network

_BOTH = (Parallelism.DP, Parallelism.MP)


def partition_two(splits: Sequence[LayerSplit]) -> tuple[float, tuple[Parallelism, ...]]:
    """Algorithm 1: minimal bytes between two sub-arrays and the choice per layer."""
    if not splits:
        return 0.0, ()
    # best[c]: minimal cost of layers 0..l with layer l choosing c;
    # back[l][c]: the choice of layer l-1 on that best path.
    best = {c: sum(pair_costs(splits[0], None, c)) for c in _BOTH}
    back: list[dict[Parallelism, Parallelism]] = []
    for split in splits[1:]:
        new_best = {}
        pointers = {}
        for choice in _BOTH:
            options = [(best[p] + sum(pair_costs(split, p, choice)), p) for p in _BOTH]
            cost, previous = min(options, key=lambda option: option[0])  # first (dp) on ties
            new_best[choice], pointers[choice] = cost, previous
        best = new_best
        back.append(pointers)
    last = Parallelism.DP if best[Parallelism.DP] <= best[Parallelism.MP] else Parallelism.MP
    choices = [last]
    for pointers in reversed(back):
        choices.append(pointers[choices[-1]])
    return best[last], tuple(reversed(choices))


LevelSolver = Callable[[Sequence[LayerSplit]], tuple[float, tuple[Parallelism, ...]]]


def hierarchical_choices(
    splits: Sequence[LayerSplit], levels: int, solve: LevelSolver = partition_two
) -> tuple[float, tuple[tuple[Parallelism, ...], ...]]:
    """Algorithm 2: total bytes over `levels` levels and the choices per level.

    `solve` partitions one level (Algorithm 1; brute force in the tests).
    """
    total = 0.0
    choices = []
    pairs = 1
    for _ in range(levels):
        cost, level_choices = solve(splits)
        total += pairs * cost
        choices.append(level_choices)
        splits = split_all(splits, level_choices)
        pairs *= 2
    return total, tuple(choices)


def hypar_plan(network: Network, batch: int, levels: int, word_bytes: int = 4) -> Plan:
    """HyPar's plan for 2**levels accelerators."""
    _, choices = hierarchical_choices(top_splits(network, batch, word_bytes), levels)
    return evaluate_plan(network, batch, choices, "hypar", word_bytes)
