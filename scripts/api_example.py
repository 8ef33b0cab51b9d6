"""The Python API in one script: simulate, compare, plan, and a small sweep in a loop.

Run `python scripts/api_example.py` (writes nothing; prints tables).
"""

from __future__ import annotations

import argparse

import pandas as pd

import hypar_sim


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    # one training step of VGG-A on 16 cubes, HyPar's plan, a torus with faster links
    result = hypar_sim.simulate("vgg_a", topology="torus", link_bandwidth_gbps=3.2)
    print(f"VGG-A, torus at 3.2 Gb/s: {result.latency_s * 1e3:.1f} ms, "
          f"{result.energy_j:.2f} J, {result.traffic_bytes / 1e9:.3f} GB")

    # every strategy side by side, as one DataFrame
    runs = pd.concat([r.to_frame() for r in hypar_sim.compare("alexnet", engine="analytic")])
    print(runs[["strategy", "latency_s", "energy_j", "traffic_bytes"]].to_string(index=False))

    # a graph network's plan with AccPar's and Megatron's kinds
    plan = hypar_sim.plan("bert_base", accelerators=8, batch=8,
                          kinds=("batch", "in", "out", "heads"))
    print(f"BERT-base on 8: {plan.traffic_bytes / 1e9:.3f} GB per step")

    # how HyPar scales: a loop is a sweep
    rows = [hypar_sim.simulate("resnet18", accelerators=n, batch=64, engine="analytic")
            .to_frame() for n in (4, 8, 16)]
    print(pd.concat(rows)[["accelerators", "latency_s", "traffic_bytes"]].to_string(index=False))


if __name__ == "__main__":
    main()
