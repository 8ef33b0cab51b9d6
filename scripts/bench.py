"""Benchmarks, each printing figures measured in this run.

Sections: the cost models (layer pieces costed per second) and, once the
simulator exists, SimPy and the simulator's events per second.
"""

from __future__ import annotations

import argparse
import time

from hypar_sim.hardware.config import load_hardware
from hypar_sim.hardware.costs import conv_cost, phase_cost, update_piece_cost
from hypar_sim.hardware.pe_array import map_conv
from hypar_sim.paper import PAPER_NETWORKS
from hypar_sim.planner.comm_model import Phase
from hypar_sim.planner.plan import level_splits, split_all
from hypar_sim.planner.strategies import make_plan
from hypar_sim.workload.network import load_network

PHASES = (Phase.FORWARD, Phase.BACKWARD, Phase.GRADIENT, Phase.UPDATE)


def clear_cost_caches() -> None:
    for cache in (map_conv, conv_cost, update_piece_cost):
        cache.cache_clear()


def leaf_shares(network, strategy: str, levels: int, batch: int):
    """What one accelerator holds of every layer under a strategy's plan."""
    plan = make_plan(network, strategy, levels, batch)
    return split_all(level_splits(network, batch, plan.choices)[-1], plan.choices[-1])


def bench_costs() -> None:
    config = load_hardware()
    networks = {name: load_network(name) for name in PAPER_NETWORKS}
    shares = {name: leaf_shares(net, "hypar", 4, 256) for name, net in networks.items()}
    clear_cost_caches()
    start = time.perf_counter()
    pieces = 0
    for layers in shares.values():
        for index, share in enumerate(layers):
            for phase in PHASES:
                phase_cost(share, phase, config, index == 0)
                pieces += 1
    cold = time.perf_counter() - start
    print(f"costs: all {pieces} layer pieces (10 networks x 4 phases, HyPar plans, 16 accelerators) "
          f"costed cold in {cold:.3f} s (target < 0.5 s: {'met' if cold < 0.5 else 'MISSED'})")
    clear_cost_caches()
    vgg_e = shares["vgg_e"]
    start = time.perf_counter()
    for index, share in enumerate(vgg_e):
        for phase in PHASES:
            phase_cost(share, phase, config, index == 0)
    cold_vgg = time.perf_counter() - start
    start = time.perf_counter()
    repeats = 200
    for _ in range(repeats):
        for index, share in enumerate(vgg_e):
            for phase in PHASES:
                phase_cost(share, phase, config, index == 0)
    warm = (time.perf_counter() - start) / (repeats * len(vgg_e) * len(PHASES))
    print(f"costs: VGG-E layer pieces per second: {len(vgg_e) * 4 / cold_vgg:,.0f} cold (mapping), "
          f"{1 / warm:,.0f} cached")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    bench_costs()


if __name__ == "__main__":
    main()
