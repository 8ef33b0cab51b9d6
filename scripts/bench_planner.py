"""Planner speed: HyPar's search for VGG-E at 4 levels and a 1000-layer chain at 10 levels
(traffic model paper, as the paper's planner), and the joint search with four kinds on VGG-E
at 4 levels (traffic model layout).

Targets: VGG-E under 5 ms, the 1000-layer chain under 1 s (issue "Foundation"); the joint
search under 50 ms (issue "Partition algebra": the search itself, columns to chosen plan;
the whole plan, which also recomputes the plan's traffic from its layouts and checks its
memory, is printed beside it); `compare` with every strategy on VGG-E at 16
accelerators under 5 s (issue "seeds' planners"; by bytes, and with --objective time, whose
optimal plan is timed alone too). Prints the best of several repeats, measured in this run.
"""

from __future__ import annotations

import argparse
import time

from hypar_sim.cli import build_parser
from hypar_sim.commands import cmd_compare
from hypar_sim.partition import shares, totals
from hypar_sim.planner import traffic
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan
from hypar_sim.workload.layers import FeatureShape, make_conv
from hypar_sim.workload.network import Network, load_network


def synthetic_chain(layers: int) -> Network:
    """`layers` convolutions on a 64-channel 16x16 map, 3x3 and 1x1 in turn (a valid chain:
    each reads its predecessor's output)."""
    shape, chain = FeatureShape(64, 16, 16), []
    for index in range(layers):
        kernel = 1 if index % 2 else 3
        chain.append(make_conv(f"conv{index}", shape, 64, kernel, padding=kernel // 2))
        shape = chain[-1].output
    return Network(f"chain{layers}", chain[0].input, tuple(chain))


PAPER = PlanOptions(traffic_model="paper")


def clear_planner_caches() -> None:
    """Every repeat starts cold: no share, box or boundary cost is remembered."""
    for cached in (totals._cached, traffic._paper_share, traffic._paper_pair_costs,
                   traffic._layout_steps, shares.level_intervals, shares.Columns.of):
        cached.cache_clear()


def best_time(function, repeats: int) -> float:
    """Best of `repeats` cold runs (caches cleared before each)."""
    best = float("inf")
    for _ in range(repeats):
        clear_planner_caches()
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def hypar_plan(network: Network, batch: int, levels: int, options: PlanOptions = PAPER):
    return make_plan(network, "hypar", levels, batch, options=options)


def main_cli(argv: list[str]) -> str:
    """A command's output, in this process (no interpreter start-up)."""
    return cmd_compare(build_parser().parse_args(argv))


def report(name: str, seconds: float, target_s: float) -> None:
    print(f"{name:<44} {seconds * 1e3:9.3f} ms  (target < {target_s * 1e3:g} ms: "
          f"{'met' if seconds < target_s else 'MISSED'}, {target_s / seconds:.2f}x margin)")


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    vgg_e = load_network("vgg_e")
    chain = synthetic_chain(1000)
    vgg_s = best_time(lambda: hypar_plan(vgg_e, 256, 4), 50)
    chain_s = best_time(lambda: hypar_plan(chain, 2**10, 10), 3)
    kinds = ("batch", "in", "out", "spatial")
    joint = PlanOptions(kinds, "joint", "layout")
    joint_s = best_time(lambda: hypar_plan(vgg_e, 256, 4, joint), 5)
    report("planner, VGG-E at 4 levels (paper)", vgg_s, 5e-3)
    report("planner, 1000-layer chain at 10 levels (paper)", chain_s, 1.0)
    report("joint search and plan, VGG-E, 4 kinds, 4 levels (layout)", joint_s, 50e-3)
    timed = PlanOptions(objective="time")
    optimal_s = best_time(lambda: make_plan(vgg_e, "optimal", 4, 256, options=timed), 1)
    report("optimal --objective time, VGG-E, 16 accelerators", optimal_s, 5.0)
    every = "data,model,trick,hypar,accpar,soybean,tofu,grid,optimal"
    for extra in ((), ("--objective", "time")):
        compare_s = best_time(lambda extra=extra: main_cli(["compare", "vgg_e", "--strategies",
                                                            every, *extra]), 1)
        report(f"compare vgg_e, 9 strategies, DES {' '.join(extra) or '(bytes)'}", compare_s, 5.0)


if __name__ == "__main__":
    main()
