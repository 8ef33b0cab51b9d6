"""The commands of the command line: each takes the parsed arguments, does the work and
returns the text to print (bad input raises InputError; `cli` prints it and exits 2)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from hypar_sim.arguments import (
    hardware_overrides,
    request_from_args,
    written_network,
)
from hypar_sim.atomic import check_folder, check_writable, write_together
from hypar_sim.comparison import cmd_compare
from hypar_sim.errors import InputError, Terminated, Unfinished, closest
from hypar_sim.report import (
    bound_total,
    graphs_table,
    hardware_table,
    hardware_yaml,
    layers_table,
    networks_table,
    nodes_table,
    plan_summary,
    plural,
)
from hypar_sim.sim.defaults import ENGINES
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.network import (
    available_graphs,
    available_networks,
    chain_of,
    load_network,
    load_workload,
)

# The planner, hardware and simulator load inside the commands that use them: `networks`
# and `--help` start without them (issue "Scale": start in a blink).


def cmd_run(args: argparse.Namespace) -> str:
    from hypar_sim.runner import simulate_request

    outputs = [(path, flag) for path, flag in ((args.csv, "--csv"), (args.csv and
               f"{args.csv}.config.json", "--csv"), (args.trace, "--trace"),
               (args.plot, "--plot")) if path]
    for path, flag in outputs:
        check_writable(path, flag)
    if len({os.path.realpath(path) for path, _ in outputs}) < len(outputs):
        raise InputError(f"{', '.join(dict.fromkeys(flag for _, flag in outputs))}: "
                         "give each output its own file")
    if args.plot:
        from hypar_sim.figure_style import figure_format

        figure_format(args.plot, "--plot")
    request = request_from_args(args)
    result = simulate_request(request, request.workload())
    files: dict[str, bytes] = {}  # written together at the end: all of them or none
    written = ""
    if args.csv:  # the layers, and the configuration once beside them (not on every row)
        table = result.per_layer_frame().assign(hypar_sim_version=result.version)
        settings = f"{args.csv}.config.json"
        files[settings] = (json.dumps(
            {"hypar_sim_version": result.version, "network": result.network,
             "strategy": result.strategy, "topology": result.topology, "engine": result.engine,
             "plan": [list(level) for level in result.plan],
             "config": dict(result.config or {})}, indent=2) + "\n").encode()
        files[args.csv] = table.to_csv(index=False).encode()
        written = f"\nper-layer table written to {args.csv}, its configuration to {settings}"
    if args.plot:
        from hypar_sim.plots import step_figure_bytes

        files[args.plot] = step_figure_bytes(result, args.plot)
        written += f"\nfigure written to {args.plot}"
    if args.trace:
        files[args.trace] = json.dumps(
            {"traceEvents": list(result.trace_events), "displayTimeUnit": "ms"}).encode()
        written += f"\ntrace written to {args.trace} (open it in ui.perfetto.dev)"
    write_together(files)
    if args.json:
        return json.dumps(result.to_dict(), indent=2)
    return result.summary() + written


def _counts_of(hierarchies: str) -> str:
    """The accelerator counts of `sweep --hierarchies` ('' without them): given alone, they
    set the counts (a config file's `accelerators` does not bind them)."""
    from hypar_sim.partition.hierarchy import Hierarchy

    texts = [h.strip() for h in hierarchies.split(",") if h.strip()]
    return ",".join(dict.fromkeys(str(Hierarchy.parse(t, None, "--hierarchies").members)
                                  for t in texts))


def _topologies(names: tuple[str, ...]) -> tuple[str, ...]:
    """Built-in topologies or topology files (read now: a bad file stops the sweep first)."""
    from hypar_sim.hardware.topology import TOPOLOGIES
    from hypar_sim.hardware.topology_file import is_topology_file, read_topology_file

    if names == ("all",):
        return tuple(TOPOLOGIES)
    for name in names:
        if is_topology_file(name):
            read_topology_file(name)
        elif name not in TOPOLOGIES:
            raise InputError(f"--topologies: unknown '{name}'{closest(name, TOPOLOGIES)}; "
                             f"allowed: {', '.join(TOPOLOGIES)}, all, or topology files (.yaml)")
    return names


def cmd_sweep(args: argparse.Namespace) -> str:
    from hypar_sim import sweep
    from hypar_sim.executors import check_scheduler
    from hypar_sim.hardware.config import MAX_BATCH, load_hardware, parse_overrides, run_keys
    from hypar_sim.partition.hierarchy import MAX_MEMBERS
    from hypar_sim.partition.kinds import parse_kinds
    from hypar_sim.planner.objectives import OBJECTIVES
    from hypar_sim.planner.optimizers import OPTIMIZERS
    from hypar_sim.planner.search import SEARCHES
    from hypar_sim.planner.traffic import PHASES, TRAFFIC_MODELS
    from hypar_sim.planner.training import AUTO, PIPELINE_SCHEDULES, PRECISIONS, RECOMPUTES
    from hypar_sim.sim.options import SimOptions

    networks = sweep.parse_list(args.networks, None, "--networks")
    if networks == ("all",):
        networks = sweep.all_networks()
    for network in networks:
        load_workload(network)  # a bad name or file stops the sweep before it starts
    run = run_keys() | (run_keys(args.config) if args.config else {})
    if args.config:
        load_hardware(args.config)
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers: must be a positive integer, got {args.workers}")
    spec = sweep.SweepSpec(
        networks=networks,
        strategies=sweep.parse_list(args.strategies, None, "--strategies"),
        topologies=_topologies(sweep.parse_list(args.topologies, None, "--topologies")),
        accelerators=sweep.parse_ints(args.accelerators or _counts_of(args.hierarchies)
                                      or str(run["accelerators"]), "--accelerators",
                                      MAX_MEMBERS),
        batches=sweep.parse_ints(args.batch or str(run["batch"]), "--batch", MAX_BATCH),
        overrides=parse_overrides(args.overrides),
        engines=sweep.parse_list(args.engine, ENGINES, "--engine"),
        objectives=sweep.parse_list(args.objectives, OBJECTIVES, "--objectives"),
        overlaps=tuple(value == "on" for value in sweep.parse_list(args.overlap, ("on", "off"),
                                                                    "--overlap")),
        config_file=args.config,
        hierarchies=tuple(h.strip() for h in args.hierarchies.split(",") if h.strip()) or ("",),
        kinds=tuple(",".join(parse_kinds(k)) for k in args.kinds.split(";") if k.strip()),
        searches=sweep.parse_list(args.searches, SEARCHES, "--searches"),
        traffic_models=sweep.parse_list(args.traffic_models, tuple(TRAFFIC_MODELS),
                                        "--traffic-models"),
        phases=sweep.parse_list(args.phases, PHASES, "--phases"),
        optimizers=sweep.parse_list(args.optimizers, tuple(OPTIMIZERS), "--optimizers"),
        precisions=sweep.parse_list(args.precisions, tuple(PRECISIONS), "--precisions"),
        zeros=tuple(z if z == AUTO else int(z) for z in sweep.parse_list(
            args.zeros, ("0", "1", "2", "3", AUTO), "--zeros")),
        recomputes=sweep.parse_list(args.recomputes, (*RECOMPUTES, AUTO), "--recomputes"),
        pipelines=sweep.parse_ints(args.pipelines, "--pipelines", MAX_MEMBERS, auto=True),
        microbatches=sweep.parse_ints(args.microbatches, "--microbatches", MAX_BATCH),
        schedules=sweep.parse_list(args.schedules, tuple(PIPELINE_SCHEDULES), "--schedules"),
        des_messages=SimOptions(des_messages=args.des_messages).des_messages,  # (checked)
    )
    sweep.check_axes(spec)
    check_scheduler(args.executor, args.scheduler)
    cases = spec.cases()
    try:
        rows = sweep.run_sweep(cases, args.out, args.executor, args.workers, args.scheduler,
                               progress=not args.no_progress)
    except KeyboardInterrupt as exc:
        saved = len(sweep.CsvJournal(Path(args.out)).rows)
        terminated = isinstance(exc, Terminated)
        raise Unfinished(f"{'terminated' if terminated else 'interrupted'}; {saved} of "
                         f"{len(cases)} rows saved in {args.out}, rerun to resume",
                         143 if terminated else 130) from None
    failed = [row for row in rows if row.get("error")]
    summary = f"{len(rows)} rows in {args.out} ({len(failed)} failed)"
    if failed:
        first = failed[0]
        raise Unfinished(f"{len(failed)} of {len(rows)} runs failed, e.g. {first['network']} "
                         f"{first['strategy']} on {first['accelerators']}: {first['error']}",
                         1, summary)
    return summary


def cmd_reproduce(args: argparse.Namespace) -> str:
    from hypar_sim.experiments import FIGURES
    from hypar_sim.experiments.common import RESULTS, figure_formats, output_folder
    from hypar_sim.experiments.reproduce import reproduce

    names = FIGURES
    if args.only:
        names = tuple(n.strip() for n in args.only.split(",") if n.strip())
        for name in names:
            if name not in FIGURES:
                raise InputError(f"--only: unknown figure '{name}'; allowed: {', '.join(FIGURES)}")
    formats = figure_formats(args.formats)
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers: must be a positive integer, got {args.workers}")
    out = output_folder(args.out, args.quick)
    if args.out is not None:
        check_folder(out, "--out")
    if (args.quick or args.only) and out.resolve() == RESULTS.resolve():
        raise InputError(f"--out: {out} holds the committed results of the full reproduction; "
                         f"{'--quick' if args.quick else '--only'} writes part of them (and "
                         "their README): choose another --out")
    try:
        path = reproduce(out, args.quick, args.workers, names, progress=not args.no_progress,
                         formats=formats)
    except KeyboardInterrupt:  # say where the figures written so far are, then stop
        print(f"hypar-sim reproduce: the figures finished so far are in {out}", file=sys.stderr)
        raise
    return f"wrote {plural(len(names), 'figure')} and {path}"


def cmd_hardware(args: argparse.Namespace) -> str:
    from hypar_sim.hardware.config import check_run_keys, derived, describe, load_hardware

    config = load_hardware(args.config, hardware_overrides(args))
    run = {key: value for key, value in (("accelerators", args.accelerators),
                                         ("batch", args.batch)) if value is not None}
    check_run_keys(run, "command line")
    rows = describe(config, args.config, run)
    if args.json:
        return json.dumps({row["key"]: row["value"] for row in rows}, indent=2)
    if args.yaml:
        return hardware_yaml(rows)
    accelerators = next(row["value"] for row in rows if row["key"] == "accelerators")
    return hardware_table(rows, derived(config, accelerators))


def cmd_networks(args: argparse.Namespace) -> str:
    if args.network:
        net = written_network(args)
        if isinstance(net, Graph):
            graph = net
            try:  # a chain of conv and fc layers is shown as its layers (with their poolings)
                net = chain_of(graph, args.network)
            except InputError:
                return json.dumps(graph_dict(graph), indent=2) if args.json else \
                    nodes_table(graph)
        if args.json:
            return json.dumps({
                "network": net.name, "weights": net.weights,
                "macs_per_sample": net.macs_per_sample,
                "layers": [{
                    "name": layer.name, "kind": layer.kind.value, "input": list(layer.input),
                    "conv_output": list(layer.conv_output), "output": list(layer.output),
                    "kernel": layer.kernel, "stride": layer.stride, "padding": layer.padding,
                    "weights": layer.weights, "macs_per_sample": layer.macs_per_sample,
                } for layer in net.layers],
            }, indent=2)
        return layers_table(net)
    nets = [load_network(name) for name in available_networks()]
    graphs = [load_workload(name) for name in available_graphs()]
    if args.json:
        return json.dumps([{"network": n.name, "layers": len(n.layers), "weights": n.weights,
                            "macs_per_sample": n.macs_per_sample} for n in nets]
                          + [{"network": g.name, "nodes": len(g.nodes), "parameters": g.params,
                              "macs_per_sample": g.macs_per_sample} for g in graphs], indent=2)
    return (f"Chain networks (HyPar's ten, and the standard AlexNet beside its half-width one; "
            f"plan, run, compare, sweep):\n{networks_table(nets)}"
            "\n\nGraph networks (plan, run, compare, sweep; kinds batch, in, out, heads, "
            f"groups, seq):\n{graphs_table(graphs)}\n\nGenerated from their sizes (--seq "
            f"TOKENS, --layers N, --dim hidden=...): "
            f"{', '.join(g.name for g in graphs if 'layers' in g.axes)}.")


def graph_dict(graph: Graph) -> dict:
    """A graph as plain data: totals and every node."""
    return {"network": graph.name, "parameters": graph.params,
            "macs_per_sample": graph.macs_per_sample, "inputs": {k: list(v) for k, v in
                                                                 graph.inputs.items()},
            "outputs": list(graph.outputs),
            "nodes": [{"name": n.name, "op": n.op, "inputs": list(n.inputs),
                       "output": list(n.shape), "parameters": n.params,
                       "macs_per_sample": n.macs} for n in graph.nodes]}


def cmd_plan(args: argparse.Namespace) -> str:
    from hypar_sim.planner.bound import node_bounds
    from hypar_sim.request import plan_request

    request = request_from_args(args)
    graph = request.workload()
    if args.bound and request.plan.phases != "training":
        raise InputError("--bound: the lower bound counts a training step's transfers; it is "
                         "not defined for --phases forward yet")
    if args.bound and request.plan.training.pipelined:
        raise InputError("--bound: the lower bound is of a plan without a pipeline (its stages "
                         "move activations the bound does not count); drop --pipeline or "
                         "--bound")
    plan = plan_request(request, graph)
    bounds = (node_bounds(graph, plan.batch, plan.hierarchy, request.plan.kinds,
                          plan.word_bytes) if args.bound else None)
    if args.json:
        data = plan.to_dict()
        if bounds is not None:
            data |= {"bound_bytes": sum(bounds), "bound_bytes_per_node": bounds}
        return json.dumps(data, indent=2)
    return plan_summary(plan, graph, request.hardware.clock_hz) + (
        bound_total(plan.traffic_bytes, sum(bounds)) if bounds is not None else "")


COMMANDS = {"networks": cmd_networks, "plan": cmd_plan, "hardware": cmd_hardware,
            "run": cmd_run, "compare": cmd_compare, "sweep": cmd_sweep, "reproduce": cmd_reproduce}


