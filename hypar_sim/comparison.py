"""The `compare` command: strategies side by side on one network, each simulated (in
parallel processes), with ratios to a baseline and the lower bound of the traffic."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING, Any

from hypar_sim.atomic import atomic_write_text, check_writable
from hypar_sim.errors import InputError, closest
from hypar_sim.report import comparison_table
from hypar_sim.workload.graph import Graph

if TYPE_CHECKING:
    from hypar_sim.request import RunRequest


def cmd_compare(args: argparse.Namespace) -> str:
    from hypar_sim.api import COMPARED
    from hypar_sim.arguments import request_from_args
    from hypar_sim.executors import parallel_map
    from hypar_sim.planner.bound import node_bounds
    from hypar_sim.planner.strategies import STRATEGIES, minimised, objective_for
    from hypar_sim.request import with_strategy

    if args.csv:
        check_writable(args.csv, "--csv")
    request = request_from_args(args)
    network = request.workload()
    allowed = tuple(s for s in STRATEGIES if s != "explicit")  # every one plans every network
    strategies = _compared(args.strategies, args.baseline, COMPARED, allowed)
    objectives = [objective_for(s, request.plan.objective) for s in strategies]
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers: must be a positive integer, got {args.workers}")
    quiet = dataclasses.replace(  # one bar here, not one per worker
        request, sim=dataclasses.replace(request.sim, progress=False),
        plan=dataclasses.replace(request.plan, progress=False))
    jobs = [(with_strategy(quiet, strategy, objective), network)
            for strategy, objective in zip(strategies, objectives, strict=True)]
    results = parallel_map(_simulate_job, jobs, args.workers, progress=request.sim.progress)
    for strategy, result in zip(strategies, results, strict=True):
        if isinstance(result, InputError):
            if strategy == args.baseline:
                raise _baseline_error(request, network, strategy, result, allowed)
            raise InputError(str(result) if strategy in str(result) else
                             f"strategy {strategy}: {result}")
    bound = None
    if request.plan.phases == "training" and not request.plan.training.pipelined:
        # the bound counts a training step, without a pipeline's stage-to-stage messages
        bound = sum(node_bounds(network, request.batch, request.hierarchy, request.plan.kinds,
                                request.hardware.word_bytes))
    minimises = [minimised(s, o) for s, o in zip(strategies, objectives, strict=True)]
    written = ""
    if args.csv:
        atomic_write_text(args.csv, comparison_frame(results, minimises, args.baseline,
                                                     bound).to_csv(index=False))
        written = f"\n\ncomparison written to {args.csv} (a row per strategy)"
    if args.json:
        return json.dumps([result.to_dict() | {"objective": objective,
                                               "baseline": args.baseline}
                           for result, objective in zip(results, objectives, strict=True)],
                          indent=2)
    return comparison_table(results, minimises, bound, request.plan.kinds,
                            args.baseline) + written


#: Columns of a result too long for a comparison row (`run --csv` and `--json` give them).
_DETAILS = ("per_layer", "per_link", "per_accelerator", "trace_events")


def comparison_frame(results: list, objectives: list[str], baseline: str,
                     bound_bytes: float | None):
    """`compare --csv`: a row per strategy, every number of `run --json` but the per-layer,
    per-link and per-accelerator lists, with what it minimised (`minimises`, as the table
    says it) and its ratios to the
    baseline (speedup = baseline cycles / cycles; energy efficiency likewise; bytes =
    bytes / baseline bytes) and the lower bound on bytes (empty for inference)."""
    import pandas as pd

    from hypar_sim.results import flatten

    base = next(r for r in results if r.strategy == baseline)
    rows = []
    for result, objective in zip(results, objectives, strict=True):
        data = {k: v for k, v in result.to_dict().items() if k not in _DETAILS}
        rows.append({"strategy": result.strategy, "minimises": objective,
                     "baseline": baseline,
                     "speedup_vs_baseline": base.latency_cycles / result.latency_cycles,
                     "energy_efficiency_vs_baseline": base.energy_pj / result.energy_pj,
                     "bytes_vs_baseline": result.traffic_bytes / base.traffic_bytes
                     if base.traffic_bytes else None,
                     "bound_bytes": bound_bytes} | flatten(data))
    return pd.DataFrame(rows)


def _simulate_job(job: tuple) -> Any:
    """One strategy of `compare` (a process pool's unit of work): its result, or the
    InputError it met (the caller says which strategy failed)."""
    from hypar_sim.runner import simulate_request

    request, network = job
    try:
        return simulate_request(request, network)
    except InputError as exc:
        return exc


def _baseline_error(request: RunRequest, network: Graph, baseline: str,
                    error: InputError, allowed: tuple[str, ...]) -> InputError:
    """The ratios divide by the baseline: where it cannot plan, one line saying why and
    naming a strategy that plans this case."""
    from hypar_sim.request import plan_request, with_strategy

    working = None
    for other in ("hypar", *allowed):
        if other == baseline:
            continue
        try:
            plan_request(with_strategy(request, other, "bytes"), network)
        except InputError:
            continue
        working = other
        break
    hint = f"; choose another with --baseline, e.g. {working}" if working else ""
    return InputError(f"compare: the baseline, {baseline}, cannot plan {request.batch} "
                      f"samples on {request.accelerators} accelerators ({error}){hint}")


def _compared(text: str | None, baseline: str, default: tuple[str, ...],
              allowed: tuple[str, ...]) -> list[str]:
    """The strategies of `compare --strategies`, the baseline first (the base of the
    ratios)."""
    names = [n.strip() for n in text.split(",") if n.strip()] if text is not None \
        else list(default)
    if not names:
        raise InputError(f"--strategies: give at least one, from {', '.join(allowed)}")
    for name, flag in [*((n, "--strategies") for n in names), (baseline, "--baseline")]:
        if name not in allowed:
            raise InputError(f"{flag}: unknown or not comparable '{name}'"
                             f"{closest(name, allowed)}; allowed: {', '.join(allowed)}")
    return list(dict.fromkeys([baseline, *names]))
