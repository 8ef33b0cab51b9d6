"""GPT-3 2.7B at sequence 2048, batch 64, Adam, bf16, on 64 cubes of 8 GiB: every strategy
with full recomputation, a Megatron-LM plan by hand, and `optimal` choosing how to train
(issue "Training large models", the must-show).

Each row: whether the plan fits a cube, its peak memory per cube (GiB), its simulated step
(s), and the seconds to plan and to simulate it. Prints a markdown table (progress on
stderr); with --out, writes the rows as CSV (atomically).

    python scripts/large_model_table.py [--strategies hypar,data] [--out results/x.csv]
"""

from __future__ import annotations

import argparse
import sys
import time

import pandas as pd

from hypar_sim.atomic import atomic_write_text
from hypar_sim.errors import InputError
from hypar_sim.request import make_request, plan_request
from hypar_sim.runner import simulate

SHAPE = {"network": "gpt3_2_7b", "seq": 2048, "batch": 64, "accelerators": 64,
         "optimizer": "adam", "precision": "bf16"}
#: Megatron-LM's split of a block (Shoeybi et al. 2019, section 3): q, k, v and fc1 by output
#: columns, attention by heads, attn_out and fc2 by input rows, the rest replicated; a
#: pipeline of 8 stages across the 8 groups of 8 cubes (Narayanan et al. 2021), 1F1B.
MEGATRON_PLAN = (
    "*: replicate; wte: out; h*_attn_[qkv]: out; h*_attn_[qkv]_heads: heads; "
    "h*_attn_[qkv]_t: heads; h*_attn_scores: heads; h*_attn_softmax: heads; "
    "h*_attn_context: heads; h*_attn_merge: heads; h*_attn_concat_heads: out; "
    "h*_attn_out: in; h*_mlp_fc1: out; h*_mlp_gelu: out; h*_mlp_fc2: in")
ROWS = {
    "megatron (by hand)": {"plan_text": MEGATRON_PLAN, "hierarchy": "8x8", "pipeline": 8,
                           "microbatches": 16, "recompute": "full"},
    "optimal (auto)": {"strategy": "optimal", "objective": "time", "pipeline": "auto",
                       "recompute": "auto", "zero": "auto"},
}
STRATEGIES = ("data", "hypar", "accpar", "soybean", "grid", "tofu")
GIB = 2**30


def row(name: str, given: dict) -> dict:
    """Plan and simulate one way to train; a refusal is a row with its reason."""
    started = time.perf_counter()
    found = {"plan": name, "fits": False, "footprint_gib": None, "step_s": None,
             "plan_s": None, "run_s": None, "options": "", "reason": ""}
    try:
        request = make_request(**(SHAPE | given))
        plan = plan_request(request)
        found["plan_s"] = time.perf_counter() - started
        found.update(fits=True, footprint_gib=plan.footprint_bytes / GIB,
                     options=plan.training.note().lstrip(", "))
        started = time.perf_counter()
        result = simulate(request.workload(), plan, request.hardware, request.sim)
        found.update(step_s=result.latency_s, run_s=time.perf_counter() - started)
    except InputError as error:
        found["plan_s"] = time.perf_counter() - started
        found["reason"] = str(error)
    print(f"  {name}: {found['plan_s']:.1f} s to plan", file=sys.stderr, flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        help="strategies planned with full recomputation beside the two rows")
    parser.add_argument("--out", default=None, help="write the rows here as CSV")
    args = parser.parse_args(argv)
    ways = {f"{s} (recompute full)": {"strategy": s, "recompute": "full"}
            for s in args.strategies.split(",") if s} | ROWS
    rows = [row(name, given) for name, given in ways.items()]
    print("| plan | options | fits 8 GiB | memory per cube (GiB) | step (s) | plan (s) | "
          "run (s) |")
    print("|---|---|---|---|---|---|---|")
    for found in rows:
        shown = {k: (f"{v:.2f}" if isinstance(v, float) else ("-" if v is None else v))
                 for k, v in found.items()}
        print(f"| {shown['plan']} | {shown['options'] or shown['reason'][:90]} | "
              f"{'yes' if found['fits'] else 'no'} | {shown['footprint_gib']} | "
              f"{shown['step_s']} | {shown['plan_s']} | {shown['run_s']} |")
    if args.out:
        atomic_write_text(args.out, pd.DataFrame(rows).to_csv(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
