"""Planner speed: HyPar's search for VGG-E at 4 levels and a 1000-layer chain at 10 levels.

Targets (issue "Foundation"): VGG-E under 5 ms, the 1000-layer chain under 1 s.
Prints the best of several repeats, measured in this run.
"""

from __future__ import annotations

import time

from hypar_sim.planner.hypar import hypar_plan
from hypar_sim.workload.layers import FeatureShape, make_conv, make_fc
from hypar_sim.workload.network import Network, load_network


def synthetic_chain(layers: int) -> Network:
    """Alternating 3x3 convolutions on a 16x16 map and fc layers, `layers` long."""
    shape = FeatureShape(64, 16, 16)
    chain = []
    for index in range(layers):
        if index % 4 == 3:
            layer = make_fc(f"fc{index}", shape, 1024)
            shape = FeatureShape(64, 4, 4)  # the next conv sees a small map again
            chain.append(layer)
            continue
        layer = make_conv(f"conv{index}", shape if shape.height > 2 else FeatureShape(64, 16, 16),
                          64, 3, padding=1)
        chain.append(layer)
        shape = layer.output
    return Network(f"chain{layers}", chain[0].input, tuple(chain))


def best_time(function, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    vgg_e = load_network("vgg_e")
    chain = synthetic_chain(1000)
    vgg_s = best_time(lambda: hypar_plan(vgg_e, 256, 4), 50)
    chain_s = best_time(lambda: hypar_plan(chain, 2**10, 10), 3)
    print(f"planner, VGG-E at 4 levels:           {vgg_s * 1e3:8.3f} ms  (target < 5 ms: "
          f"{'met' if vgg_s < 5e-3 else 'MISSED'}, {5e-3 / vgg_s:.1f}x margin)")
    print(f"planner, 1000-layer chain at 10 levels: {chain_s * 1e3:8.1f} ms  (target < 1000 ms: "
          f"{'met' if chain_s < 1 else 'MISSED'}, {1 / chain_s:.1f}x margin)")


if __name__ == "__main__":
    main()
