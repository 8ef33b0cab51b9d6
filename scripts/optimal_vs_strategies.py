"""`optimal` choosing how to train (`--pipeline auto --recompute auto --zero auto`, the time
objective) against every other strategy's plan, simulated (issue "Training large models",
item 4: never slower in the DES than the best plan of the others).

For each network and topology: the DES step of optimal's plan and of every other strategy
that plans it (the same optimizer, precision and array), the best other, and the ratio.
Prints a markdown table (progress on stderr); with --out, writes the rows as CSV
(atomically).

    python scripts/optimal_vs_strategies.py [--networks vgg_a,resnet18] [--out results/x.csv]
"""

from __future__ import annotations

import argparse
import sys
import time

import pandas as pd

from hypar_sim.atomic import atomic_write_text
from hypar_sim.errors import InputError
from hypar_sim.paper import PAPER_NETWORKS
from hypar_sim.planner.strategies import STRATEGIES
from hypar_sim.request import make_request
from hypar_sim.runner import simulate_request
from hypar_sim.sim.options import SimOptions

#: HyPar's ten chains and two graphs (a two-block GPT-2 at 128 tokens), batch 256 unless
#: given.
NETWORKS = (*PAPER_NETWORKS, "resnet18:batch=64",
            "gpt2_small:layers=2:seq=128:batch=64")
AUTO = {"strategy": "optimal", "objective": "time", "pipeline": "auto", "recompute": "auto",
        "zero": "auto"}
#: Strategies that need more than a network (a plan, or every plan tried).
NOT_COMPARED = ("optimal", "explicit", "exhaustive")


def _network(spec: str) -> dict:
    """'gpt2_small:layers=2:seq=128:batch=64' -> make_request's network, seq, dims, batch."""
    name, *given = spec.split(":")
    sizes = dict(item.split("=") for item in given)
    found: dict = {"network": name}
    for key in ("seq", "batch"):
        if key in sizes:
            found[key] = int(sizes.pop(key))
    if sizes:
        found["dims"] = {key: int(value) for key, value in sizes.items()}
    return found


def compare(spec: str, topology: str, accelerators: int, batch: int) -> dict:
    """One row: every strategy's simulated step (ms; None where it does not plan)."""
    steps: dict[str, float | None] = {}
    others = [name for name in STRATEGIES if name not in NOT_COMPARED]
    for strategy in ("optimal (auto)", *others):
        given = AUTO if strategy.startswith("optimal") else {"strategy": strategy}
        started = time.perf_counter()
        try:
            request = make_request(**({"batch": batch} | _network(spec)),
                                   accelerators=accelerators,
                                   sim=SimOptions(topology=topology), **given)
            result = simulate_request(request)
            steps[strategy] = result.latency_s * 1e3
        except InputError as error:
            print(f"  {strategy}: {error}", file=sys.stderr)
            steps[strategy] = None
        print(f"  {spec} {topology} {strategy}: {time.perf_counter() - started:.1f} s",
              file=sys.stderr, flush=True)
    ours = steps.pop("optimal (auto)")
    best = min((step, name) for name, step in steps.items() if step is not None)
    return {"network": spec, "topology": topology, "optimal_ms": ours, "best_other": best[1],
            "best_other_ms": best[0], "ratio": ours / best[0] if ours else None,
            **{f"{name}_ms": step for name, step in steps.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default=",".join(NETWORKS))
    parser.add_argument("--topologies", default="htree,torus")
    parser.add_argument("--accelerators", type=int, default=16)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--out", default=None, help="write the rows here as CSV")
    args = parser.parse_args(argv)
    rows = []
    print("| network | topology | optimal (ms) | best other | its step (ms) | ratio |")
    print("|---|---|---|---|---|---|")
    for spec in args.networks.split(","):
        for topology in args.topologies.split(","):
            row = compare(spec, topology, args.accelerators, args.batch)
            rows.append(row)
            print(f"| {spec} | {topology} | {row['optimal_ms']:.3f} | {row['best_other']} | "
                  f"{row['best_other_ms']:.3f} | {row['ratio']:.4f} |", flush=True)
    if args.out:
        atomic_write_text(args.out, pd.DataFrame(rows).to_csv(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
