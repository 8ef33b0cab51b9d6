"""Benchmarks, each printing figures measured in this run.

Sections: the cost models (layer pieces costed per second); bare SimPy
(timeout events per second in a tight loop); the simulator on the ten
networks x {data, model, hypar} x {htree, torus} at 16 accelerators (wall
time, events, events per second), the 60 runs spread over all cores; graph
networks (ResNet-50 on 64 cubes, BERT-base on 16: plan and simulation times); scale (VGG-A
from 16 to 1,024 or 4,096 accelerators, both engines); large (issue "Scale"'s must-shows, whole
processes: seconds and peak GB beside their targets, and issue "Training large models"'s GPT-3 2.7B
plan and run); startup (whole processes: `--help`,
`networks`, `plan vgg_a`, `run vgg_a`, beside bare Python and `import numpy, yaml`); sweep (the
60-run paper set through `python -m hypar_sim sweep`, a whole process).
"""

from __future__ import annotations

import argparse
import compileall
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import simpy

import hypar_sim
from hypar_sim.hardware.config import load_hardware
from hypar_sim.hardware.costs import conv_cost, phase_cost, update_piece_cost
from hypar_sim.hardware.rs_mapper import map_conv
from hypar_sim.paper import PAPER_NETWORKS
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.steps import Phase
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.workload.network import load_network, load_workload

#: The cost-model and simulator timings run HyPar's reading (as they always have).
PAPER = PlanOptions(traffic_model="paper")

PHASES = (Phase.FORWARD, Phase.BACKWARD, Phase.GRADIENT, Phase.UPDATE)


def clear_cost_caches() -> None:
    for cache in (map_conv, conv_cost, update_piece_cost):
        cache.cache_clear()


def bench_costs() -> None:
    config = load_hardware()
    networks = {name: load_network(name) for name in PAPER_NETWORKS}
    model, hierarchy = traffic_model("paper"), Hierarchy.binary(4)
    shares = {name: [model.member_shares(layer, 256, column, hierarchy)[0] for layer, column in
                     zip(net.layers, make_plan(net, "hypar", 4, 256, options=PAPER).columns,
                         strict=True)]
              for name, net in networks.items()}
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


def bare_simpy_events_per_second(events: int = 500_000) -> float:
    """Timeout events per second of SimPy alone: one process yielding env.timeout(1)."""
    env = simpy.Environment()

    def ticker():
        for _ in range(events):
            yield env.timeout(1)

    env.process(ticker())
    start = time.perf_counter()
    env.run()
    return events / (time.perf_counter() - start)


def one_run(case: tuple[str, str, str]) -> tuple[str, str, str, float, int, int]:
    name, strategy, topology = case
    config = load_hardware()
    network = load_network(name)
    plan = make_plan(network, strategy, 4, 256, options=PAPER)
    result = simulate(network, plan, config, SimOptions(topology=topology))
    return name, strategy, topology, result.wall_s, result.events, result.lane_grants


def bench_simulator(workers: int) -> None:
    bare = bare_simpy_events_per_second()
    print(f"\nbare SimPy: {bare:,.0f} timeout events per second")
    cases = [(n, s, t) for n in PAPER_NETWORKS for s in ("data", "model", "hypar")
             for t in ("htree", "torus")]
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        rows = list(pool.map(one_run, cases))
    total = time.perf_counter() - start
    print(f"{'network':13} {'strategy':8} {'topology':8} {'wall s':>7} {'events':>9} "
          f"{'events/s':>9} {'vs bare':>7} {'grants':>8} {'actions/s':>10}")
    for name, strategy, topology, wall, events, grants in rows:
        rate = events / wall if wall else 0.0
        actions = (events + grants) / wall if wall else 0.0
        print(f"{name:13} {strategy:8} {topology:8} {wall:7.3f} {events:9,} {rate:9,.0f} "
              f"{rate / bare:7.2f} {grants:8,} {actions:10,.0f}")
    events = sum(r[4] for r in rows)
    grants = sum(r[5] for r in rows)
    busy = sum(r[3] for r in rows)
    vgg_e = next(r for r in rows if r[:3] == ("vgg_e", "hypar", "htree"))
    print(f"VGG-E, HyPar, H-tree: {vgg_e[3]:.2f} s (target < 3 s: {'met' if vgg_e[3] < 3 else 'MISSED'})")
    print(f"all {len(rows)} runs: {total:.1f} s wall on {workers} processes (target < 60 s: "
          f"{'met' if total < 60 else 'MISSED'}); simulator {events / busy:,.0f} events/s = "
          f"{events / busy / bare:.2f} of bare SimPy (target >= 0.5)")
    print(f"each SimPy event also serves {grants / events:.1f} link/vault requests on average "
          f"(lane reservations, which a Resource-based engine would process as events of their "
          f"own): {(events + grants) / busy:,.0f} scheduling actions/s = "
          f"{(events + grants) / busy / bare:.2f} of bare SimPy's event rate")


def bench_graphs() -> None:
    """Issue "Graph workloads": ResNet-50 on 64 cubes and BERT-base on 16 under 2 s each
    (planning and simulation timed apart; one run each, caches cold)."""
    print()
    for name, accelerators, batch, target in (("resnet50", 64, 256, 2.0),
                                              ("bert_base", 16, 32, 2.0)):
        graph = load_workload(name)
        config = load_hardware()
        start = time.perf_counter()
        plan = make_plan(graph, "hypar", Hierarchy.for_count(accelerators), batch)
        planned = time.perf_counter()
        result = simulate(graph, plan, config)
        simulated = time.perf_counter()
        print(f"graph {name} on {accelerators} cubes, batch {batch}: plan "
              f"{planned - start:.2f} s, simulation {simulated - planned:.2f} s (schedule and "
              f"DES; {result.events:,} events), together {simulated - start:.2f} s (target "
              f"< {target:g} s: {'met' if simulated - start < target else 'MISSED'}; "
              f"simulation alone {'met' if simulated - planned < target else 'MISSED'})")


def bench_scale(largest: int) -> None:
    """Issue "Scale to thousands of accelerators": VGG-A, HyPar, H-tree, batch max(256, N),
    under the paper's pairs and the layout rule's level-by-level collectives, both engines;
    planning and simulation timed apart (one process, caches warm after the first case)."""
    print(f"\n{'accelerators':>12} {'traffic model':14} {'engine':8} {'plan s':>7} "
          f"{'simulate s':>10} {'events':>10} {'step ms':>8}")
    counts = [n for n in (16, 64, 256, 1024, 4096) if n <= largest]
    for count in counts:
        batch = max(256, count)
        config = load_hardware()
        network = load_network("vgg_a")
        for model in ("paper", "layout_levels"):
            start = time.perf_counter()
            plan = make_plan(network, "hypar", Hierarchy.for_count(count), batch,
                             options=PlanOptions(traffic_model=model), config=config)
            planned = time.perf_counter() - start
            for shown, engine, symmetry in (("analytic", "analytic", True), ("des", "des", True),
                                            ("des-all", "des", False)):
                if engine != "analytic" and model == "layout_levels" and count > 1024:
                    continue  # minutes: see the closing note of issue 14
                if not symmetry and count > 256:
                    continue  # every accelerator simulated: for the ratio, up to 256
                start = time.perf_counter()
                result = simulate(network, plan, config,
                                  SimOptions(engine=engine, symmetry=symmetry))
                took = time.perf_counter() - start
                print(f"{count:12,} {model:14} {shown:8} {planned:7.2f} {took:10.2f} "
                      f"{result.events:10,} {result.latency_s * 1e3:8.1f}")
    print("des: one accelerator per symmetry class; des-all: every accelerator (--no-symmetry),"
          " the same step ms")
    print("targets (issue 14): DES 1,024 < 2 s, 4,096 < 10 s; analytic 1,024 < 0.2 s")


#: Issue "Scale"'s must-shows: (what, `python -m hypar_sim` arguments, target seconds, target
#: GB of the whole process's peak memory).
#: A GPT-3-shaped graph (Brown et al. 2020, Table 2.1, GPT-3 175B: 96 layers, d_model 12,288,
#: 96 heads, d_ff 4 d_model, n_ctx 2,048), written to a temporary file as the shipped
#: transformers are (`workload/transformer.py`).
GPT3_SHAPE = ("name: gpt3_shape\ntransformer: {family: gpt, layers: 96, hidden: 12288, heads: 96, "
              "ffn: 49152, vocab: 50257, seq: 2048, positions: 2048, tied: true}\n")
LARGE = (
    ("vgg_a b4096 on 1,024, des", ("run", "vgg_a", "--batch", "4096", "--accelerators", "1024"),
     2.0, 1.0),
    ("vgg_a b4096 on 4,096, des", ("run", "vgg_a", "--batch", "4096", "--accelerators", "4096"),
     10.0, 4.0),
    ("vgg_a b4096 on 1,024, analytic", ("run", "vgg_a", "--batch", "4096", "--accelerators",
                                        "1024", "--engine", "analytic"), None, None),
    ("vgg_a b4096 on 4,096, analytic", ("run", "vgg_a", "--batch", "4096", "--accelerators",
                                        "4096", "--engine", "analytic"), None, None),
    ("resnet50 b256 on 64, des", ("run", "resnet50", "--batch", "256", "--accelerators", "64"),
     2.0, None),
    ("resnet50 b1024 on 256, des", ("run", "resnet50", "--batch", "1024", "--accelerators",
                                    "256"), 5.0, None),
    ("gpt2_xl b256 on 256, des", ("run", "gpt2_xl", "--batch", "256", "--accelerators", "256",
                                  "--set", "cube_capacity_gib=1024"), 10.0, None),
    ("GPT-3 shape b64 on 1,024, des", ("run", "{gpt3}", "--batch", "64", "--accelerators",
                                       "1024", "--kinds", "batch,in,out,heads", "--set",
                                       "cube_capacity_gib=1024"), 60.0, 8.0),
)


@functools.cache
def installed_env() -> dict[str, str]:
    """The environment whole processes are timed in, as an installed tool runs: the
    package's bytecode written once (pip compiles an installed package; this machine's
    PYTHONDONTWRITEBYTECODE=1 would have every process compile every module again, 0.3 s
    of a `run`, which a user with that variable pays), and this environment without the
    variable that turns it off. The tree compiled is the one this script imported: run it
    from the repository root, where the timed processes import the same."""
    compileall.compile_dir(str(Path(hypar_sim.__file__).parent), quiet=1)
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _measured(args: list[str], timeout_s: float, out: Path | None = None
              ) -> tuple[float, float, str]:
    """A whole process (its standard output into `out`, if given), as an installed tool
    runs (`installed_env`): (wall seconds, its peak resident GB, its outcome: ok, the last
    line of its refusal, or killed at `timeout_s`)."""
    env = dict(installed_env())
    with tempfile.TemporaryFile("w+") as errors, \
            open(out or os.devnull, "w") as output:
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "hypar_sim", *args, "--no-progress"],
                                   stdout=output, stderr=errors, env=env)
        killed, seen = False, 0
        while True:  # reaped here, not by Popen, for this child's own peak memory
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            seen = max(seen, _peak_kib(process.pid) or 0)
            if time.perf_counter() - start > timeout_s and not killed:
                process.kill()
                killed = True
            time.sleep(0.02)
        took = time.perf_counter() - start
        errors.seek(0)
        lines = errors.read().strip().splitlines()
    code = os.waitstatus_to_exitcode(status)
    outcome = f"killed at {timeout_s:g} s" if killed else "ok" if code == 0 else \
        f"exit {code}: {(lines or [''])[-1][:100]}"
    # A child's ru_maxrss (KiB) starts from this process's peak, which it had until it ran
    # the command (read after the child ends: at least what it inherited); at or below that,
    # the peak its command reached as it was last seen running.
    own = _peak_kib(os.getpid()) or 0
    peak = usage.ru_maxrss if usage.ru_maxrss > own or not seen else seen
    return took, peak * 1024 / 1e9, outcome


def _peak_kib(pid: int) -> int | None:
    """A process's peak resident memory since it last ran a program (`VmHWM`, KiB), where
    /proc gives it."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def bench_large(timeout_s: float) -> None:
    """Issue "Scale"'s must-shows, each a whole process beside its target (seconds, peak GB
    of memory), cut off at `timeout_s`."""
    print(f"\n{'large case (whole process)':32} {'s':>7} {'GB':>6}  target  outcome")
    folder = tempfile.TemporaryDirectory()
    gpt3 = Path(folder.name) / "gpt3_shape.yaml"
    gpt3.write_text(GPT3_SHAPE)
    for name, args, seconds, gigabytes in LARGE:
        measured = _measured([str(gpt3) if a == "{gpt3}" else a for a in args], timeout_s)
        _print_large(name, measured, seconds, gigabytes)
    plan = Path(folder.name) / "plan.json"
    measured = _measured(["plan", *LARGE_MODEL, "--strategy", "optimal", "--objective", "time",
                          "--pipeline", "auto", "--recompute", "auto", "--zero", "auto",
                          "--json"], timeout_s, plan)
    _print_large("plan gpt3_2_7b optimal auto", measured, 30.0, None)
    if measured[2] == "ok":  # its plan run with the options it chose
        chosen = json.loads(plan.read_text())
        measured = _measured(["run", *LARGE_MODEL, "--plan", str(plan), "--recompute",
                              chosen["recompute"], "--zero", str(chosen["zero"]),
                              "--pipeline", str(chosen["stages"]), "--microbatches",
                              str(chosen["microbatches"])], timeout_s)
        _print_large("run gpt3_2_7b its plan", measured, 10.0, None)
    folder.cleanup()


#: Issue "Training large models"'s speed must-show: GPT-3 2.7B at sequence 2048, batch 64,
#: Adam, bf16 on 64 cubes (planned by optimal choosing how to train; then its plan run).
LARGE_MODEL = ("gpt3_2_7b", "--seq", "2048", "--batch", "64", "--accelerators", "64",
               "--optimizer", "adam", "--precision", "bf16")


def _print_large(name: str, measured: tuple[float, float, str], seconds: float | None,
                 gigabytes: float | None) -> None:
    """One row of the large section: seconds, peak GB, the target and whether it is met."""
    took, peak, outcome = measured
    met = outcome == "ok" and (seconds is None or took < seconds) and \
        (gigabytes is None or peak < gigabytes)
    target = "-" if seconds is None else f"< {seconds:g} s" + (
        f", {gigabytes:g} GB" if gigabytes else "")
    verdict = "" if seconds is None else (" met" if met else " MISSED")
    print(f"{name:32} {took:7.1f} {peak:6.2f}  {target}{verdict}  {outcome}")


#: Whole-process commands of the startup section, with their targets in seconds (issue 14).
STARTUP = (
    ("python -c pass", ["-c", "pass"], None),
    ("import numpy, yaml", ["-c", "import numpy, yaml"], None),
    ("--help", ["-m", "hypar_sim", "--help"], 0.2),
    ("networks", ["-m", "hypar_sim", "networks"], 0.2),
    ("plan vgg_a", ["-m", "hypar_sim", "plan", "vgg_a"], 0.2),
    ("run vgg_a", ["-m", "hypar_sim", "run", "vgg_a"], 0.5),
)


def _process_seconds(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, capture_output=True, check=True)
    return time.perf_counter() - start


def bench_startup(repeats: int) -> None:
    """Each command as a new process, `repeats` times after one warm-up, as an installed
    tool runs (`installed_env`): best and median wall seconds."""
    env = dict(installed_env())
    print(f"\n{'startup, whole process':24} {'best s':>7} {'median s':>8}  target")
    for name, args, target in STARTUP:
        _process_seconds(args, env)
        times = [_process_seconds(args, env) for _ in range(repeats)]
        best, median = min(times), statistics.median(times)
        verdict = "" if target is None else \
            f"< {target:g} s: {'met' if median < target else 'MISSED'} (median)"
        print(f"{name:24} {best:7.3f} {median:8.3f}  {verdict}")


def bench_sweep(workers: int) -> None:
    """The paper set (10 networks x data, model, hypar x htree, torus, 16 accelerators)
    through `sweep` on `workers` processes, a whole process with a fresh output file."""
    with tempfile.TemporaryDirectory() as folder:
        args = ["-m", "hypar_sim", "sweep", "--networks", ",".join(PAPER_NETWORKS),
                "--strategies", "data,model,hypar", "--topologies", "htree,torus",
                "--accelerators", "16", "--workers", str(workers), "--no-progress",
                "--out", f"{folder}/sweep.csv"]
        took = _process_seconds(args, dict(installed_env()))
    print(f"\nsweep of the 60-run paper set on {workers} processes: {took:.1f} s "
          f"(target < 10 s: {'met' if took < 10 else 'MISSED'})")


def _chain_text(layers: int) -> str:
    """A chain of `layers` 3x3 convolutions and an fc, one flow mapping per line."""
    lines = ["input: {channels: 8, height: 8, width: 8}", "layers:"]
    lines += [f"  - {{type: conv, out_channels: 8, kernel: 3, padding: 1, name: c{i}}}"
              for i in range(layers)]
    return "\n".join([*lines, "  - {type: fc, out_features: 10}", ""])


def bench_parse() -> None:
    """`networks FILE` on chains of 20,000 and 100,000 layers, a whole process under a
    4 GiB address-space limit, beside PyYAML's C loader alone on the same file (issue
    "Hardening": within 3 s and 10 s where the C loader alone takes about 6 s on 100,000;
    this machine's speed is the ratio)."""
    import resource

    import yaml

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))

    print(f"\n{'chain parse':24} {'networks s':>10} {'C loader s':>10}  target")
    with tempfile.TemporaryDirectory() as folder:
        for layers, target in ((20_000, 3.0), (100_000, 10.0)):
            path = Path(folder) / f"chain{layers}.yaml"
            path.write_text(_chain_text(layers))
            start = time.perf_counter()
            yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
            loader = time.perf_counter() - start
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "hypar_sim", "networks", str(path)],
                           capture_output=True, check=True, preexec_fn=limited)
            took = time.perf_counter() - start
            print(f"{layers:>7,} layers{'':9} {took:10.2f} {loader:10.2f}  < {target:g} s: "
                  f"{'met' if took < target else 'MISSED'} ({took / loader:.2f}x the C "
                  "loader)")


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (else a one-line error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                        help="processes for the 60 simulations and the sweep (default: all "
                             "cores)")
    parser.add_argument("--only", choices=("costs", "simulator", "graphs", "scale", "large",
                                           "startup", "sweep", "parse"),
                        default=None, help="run one section only")
    parser.add_argument("--scale-to", type=int, default=1024, metavar="N",
                        help="largest array of the scale section (default 1024; 4096 adds "
                             "about a minute)")
    parser.add_argument("--timeout", type=positive_int, default=120, metavar="S",
                        help="cut a large case off after S seconds (default 120)")
    parser.add_argument("--repeats", type=positive_int, default=11,
                        help="runs of each command in the startup section (default 11)")
    args = parser.parse_args(argv)
    if args.only in (None, "costs"):
        bench_costs()
    if args.only in (None, "simulator"):
        bench_simulator(args.workers)
    if args.only in (None, "graphs"):
        bench_graphs()
    if args.only in (None, "scale"):
        bench_scale(args.scale_to)
    if args.only in (None, "large"):
        bench_large(args.timeout)
    if args.only in (None, "startup"):
        bench_startup(args.repeats)
    if args.only in (None, "sweep"):
        bench_sweep(args.workers)
    if args.only in (None, "parse"):
        bench_parse()


if __name__ == "__main__":
    main()
