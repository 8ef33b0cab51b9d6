"""`optimal --objective time` against `hypar` in the DES, with the planner's estimate error.

For each of HyPar's ten networks and each topology: the DES step time (or
energy, with --objective energy) of hypar's plan (kinds batch,in, bytes, the
layout model) and of the optimal plan (every kind, joint search, the
estimate), their ratio, and the estimate's error against the DES for the
optimal plan. Prints a markdown table; writes nothing.

    python scripts/objective_table.py [--networks vgg_a,vgg_e] [--topologies htree,torus]
"""

from __future__ import annotations

import argparse
import sys
import time

from hypar_sim.hardware.config import load_hardware
from hypar_sim.paper import PAPER_NETWORKS
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.workload.network import load_network


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default=",".join(PAPER_NETWORKS))
    parser.add_argument("--topologies", default="htree,torus")
    parser.add_argument("--accelerators", type=int, default=16)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--objective", default="time", choices=("time", "energy"))
    args = parser.parse_args(argv)
    config = load_hardware()
    unit = "ms" if args.objective == "time" else "J"
    print(f"| network | topology | hypar ({unit}) | optimal ({unit}) | optimal / hypar | "
          "estimate error | plan time (s) |")
    print("|---|---|---|---|---|---|---|")
    for name in args.networks.split(","):
        network = load_network(name)
        for topology in args.topologies.split(","):
            sim = SimOptions(topology=topology)
            hypar = make_plan(network, "hypar", args.accelerators.bit_length() - 1, args.batch,
                              options=PlanOptions(traffic_model="layout"), config=config)
            started = time.perf_counter()
            best = make_plan(network, "optimal", hypar.hierarchy, args.batch,
                             options=PlanOptions(traffic_model="layout", objective=args.objective,
                                                 topology=topology), config=config)
            seconds = time.perf_counter() - started
            base = simulate(network, hypar, config, sim)
            ours = simulate(network, best, config, sim)
            if args.objective == "time":
                theirs, measured, shown = base.latency_cycles, ours.latency_cycles, 1e3 / config.clock_hz
            else:
                theirs, measured, shown = base.energy_pj, ours.energy_pj, 1e-12
            print(f"| {name} | {topology} | {theirs * shown:.2f} | {measured * shown:.2f} | "
                  f"{measured / theirs:.3f} | {best.estimate / measured - 1:+.1%} | "
                  f"{seconds:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
