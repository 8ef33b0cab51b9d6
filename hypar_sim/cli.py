"""The command line: parse, call, print. Bad input exits 2 with one line on stderr."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from hypar_sim import __version__
from hypar_sim.arguments import DEFAULT_LEVELS
from hypar_sim.commands import COMMANDS
from hypar_sim.errors import InputError, Terminated, Unfinished
from hypar_sim.resources import memory_limit_bytes, process_settings
from hypar_sim.sim.defaults import (
    DEFAULT_BUCKET_MB,
    DEFAULT_CHUNK_BYTES,
    DEFAULT_DES_MESSAGES,
    DEFAULT_MAX_CHUNKS,
    ENGINES,
)
from hypar_sim.training_flags import add_training_arguments

PROG = "hypar-sim"
DEFAULT_BATCH = 256


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _add_seq_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seq", type=int, default=None, metavar="TOKENS",
                        help="tokens per sample: an ONNX model's dynamic sequence axis (default 128, "
                        "or the model's own if fixed) or a generated transformer's (default its "
                        "own)")
    parser.add_argument("--dim", action="append", default=None, metavar="NAME=SIZE",
                        help="size of another named dynamic axis of an ONNX model (repeat for "
                        "several, e.g. --dim height=384 --dim width=384), or a size of a "
                        "generated transformer (layers, hidden, heads, kv_heads, ffn, vocab, "
                        "positions)")
    parser.add_argument("--layers", type=int, default=None, metavar="N",
                        help="a generated transformer's first N blocks (gpt2_small, gpt2_xl, "
                        "gpt3_2_7b, llama_7b; default: all), for quick runs")


def _add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    from hypar_sim.partition.kinds import DEFAULT_KINDS
    from hypar_sim.partition.kinds import allowed_names as allowed_kind_names
    from hypar_sim.planner.objectives import OBJECTIVES
    from hypar_sim.planner.search import SEARCHES
    from hypar_sim.planner.traffic import DEFAULT_TRAFFIC_MODEL, PHASES, TRAFFIC_MODELS

    _add_seq_argument(parser)
    add_training_arguments(parser)
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bars on stderr (default: on a terminal, once a "
                             "search or a simulation has taken 2 s)")
    parser.add_argument("--force-memory", action="store_true",
                        help="plan and simulate even where the estimate of the memory needed "
                             "is more than this process may use (default: refuse up front in "
                             "one line; running out of memory then ends the command instead)")
    parser.add_argument("--hierarchy", default=None, metavar="SIZES",
                        help="level sizes, top first, e.g. 4x3x2 (product = accelerators; "
                             "default: the accelerator count's prime factors, largest first)")
    parser.add_argument("--kinds", default=None,
                        help=f"split kinds the planner may use, from {allowed_kind_names()} "
                             f"(default {','.join(DEFAULT_KINDS)}; optimal, soybean, tofu, grid "
                             "and accpar: their paper's own; replicate, not under --traffic-model "
                             "paper, trades computation for bytes: a bytes search may replicate "
                             "everything)")
    parser.add_argument("--search", default="greedy", choices=SEARCHES,
                        help="greedy: level by level, HyPar's Algorithm 2 (default); joint: "
                             "one DP over every level at once (exact)")
    parser.add_argument("--traffic-model", default=DEFAULT_TRAFFIC_MODEL,
                        choices=tuple(TRAFFIC_MODELS), metavar="MODEL",
                        help="; ".join(f"{m.name}: {m.summary}"
                                       + (" (default)" if m.name == DEFAULT_TRAFFIC_MODEL else "")
                                       for m in TRAFFIC_MODELS.values()))
    parser.add_argument("--phases", default="training", choices=PHASES,
                        help="training: a whole step, forward, backward, weight gradient, "
                             "update (default); forward: inference, the forward pass alone "
                             "(plan and simulation; chains and graphs, --objective bytes)")
    parser.add_argument("--objective", default="bytes", choices=OBJECTIVES,
                        help="what a searching strategy minimises: bytes between accelerators "
                             "(default, HyPar's), or the step's time or energy as the planner "
                             "estimates them on the topology")


def _add_array_arguments(parser: argparse.ArgumentParser) -> None:
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--levels", type=int, default=None,
                      help=f"hierarchy levels H, 2**H accelerators (default {DEFAULT_LEVELS})")
    size.add_argument("--accelerators", type=int, default=None,
                      help="number of accelerators (default: the config file's, else 16)")
    parser.add_argument("--batch", type=int, default=None,
                        help="samples per training step (default: the config file's, else "
                             f"{DEFAULT_BATCH})")


def _networks_arguments(nets: argparse.ArgumentParser) -> None:
    nets.add_argument("network", nargs="?",
                      help="a network name or a path to a .yaml or .onnx file")
    _add_seq_argument(nets)
    nets.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _plan_arguments(plan: argparse.ArgumentParser) -> None:
    from hypar_sim.hardware.topology import TOPOLOGIES
    from hypar_sim.planner.strategies import STRATEGIES

    plan.add_argument("network", help="a network name (see `networks`) or a path to a .yaml or .onnx file")
    plan.add_argument("--strategy", default=None, choices=STRATEGIES, metavar="STRATEGY",
                      help=f"one of {', '.join(STRATEGIES)} (default hypar; explicit needs --plan)")
    plan.add_argument("--plan", dest="plan_text", default=None,
                      help="with --strategy explicit (implied when given): a file or a string, "
                           "one row of kinds per level, rows separated by ';' or new lines")
    _add_array_arguments(plan)
    _add_plan_arguments(plan)
    plan.add_argument("--topology", default="htree", metavar="TOPOLOGY",
                      help=f"with --objective time or energy: the topology the estimate "
                           f"uses, one of {', '.join(TOPOLOGIES)} (default htree) or a "
                           "topology file (.yaml)")
    plan.add_argument("--config", default=None,
                      help="a YAML file of hardware keys (the estimate's hardware and the "
                           "cube's memory every plan must fit) and the run's accelerators and "
                           "batch (flags override them)")
    plan.add_argument("--set", dest="overrides", action="append", default=[],
                      metavar="KEY=VALUE", help="set a hardware key, e.g. --set "
                      "cube_capacity_gib=0.5; repeatable")
    plan.add_argument("--bound", action="store_true",
                      help="beside the plan, a lower bound on the bytes any plan of the allowed "
                           "kinds moves, per layer and in total, and the plan's ratio to it")
    plan.add_argument("--json", action="store_true", help="print one JSON object")


def _run_arguments(run: argparse.ArgumentParser) -> None:
    from hypar_sim.planner.strategies import STRATEGIES

    _add_simulation_arguments(run)
    run.add_argument("--strategy", default=None, choices=STRATEGIES, metavar="STRATEGY",
                     help=f"one of {', '.join(STRATEGIES)} (default hypar)")
    run.add_argument("--plan", dest="plan_text", default=None,
                     help="an explicit plan (file or string, one row of kinds per level)")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--csv", default=None, metavar="FILE", help="write the per-layer table as CSV")
    run.add_argument("--plot", default=None, metavar="FILE",
                     help="draw the step: time per layer by phase, and every link's busy "
                          "share by tier (PNG, PDF or SVG by the suffix)")
    run.add_argument("--trace", default=None, metavar="FILE",
                     help="write the step as a Chrome/Perfetto trace (JSON; open it in "
                          "ui.perfetto.dev): a track per accelerator and per link")
    run.add_argument("--trace-links", default="messages", choices=("messages", "summary"),
                     help="with --trace: every message on every link (default; every "
                          "accelerator simulated), or summary: a GB/s counter per class of "
                          "alike links and a track per class of accelerators (symmetry kept: "
                          "bounded, for large arrays)")


def _compare_arguments(compare: argparse.ArgumentParser) -> None:
    from hypar_sim.planner.strategies import STRATEGIES

    _add_simulation_arguments(compare)
    compare.add_argument("--strategies", default=None, metavar="LIST",
                         help=f"comma-separated, from {', '.join(s for s in STRATEGIES if s != 'explicit')}"
                              " (default data,model,trick,hypar); the "
                              "baseline is added if missing; --objective applies to those that "
                              "take it, the others minimise their own cost")
    compare.add_argument("--baseline", default="data", metavar="STRATEGY",
                         help="the strategy the ratios divide by (default data; where it cannot "
                              "plan, e.g. a batch smaller than the array, the error names one "
                              "that can)")
    compare.add_argument("--json", action="store_true", help="print a JSON list of the runs")
    compare.add_argument("--csv", default=None, metavar="FILE",
                         help="also write a row per strategy: its numbers (those of run "
                              "--json but the per-layer and per-link lists) and its ratios to "
                              "the baseline")
    compare.add_argument("--workers", type=int, default=None,
                         help="processes running the strategies side by side (default: all "
                              "cores; 1: one after another)")


def _sweep_arguments(sweep: argparse.ArgumentParser) -> None:
    from hypar_sim.partition.kinds import DEFAULT_KINDS
    from hypar_sim.planner.objectives import OBJECTIVES
    from hypar_sim.planner.search import SEARCHES
    from hypar_sim.planner.strategies import STRATEGIES
    from hypar_sim.planner.traffic import DEFAULT_TRAFFIC_MODEL, TRAFFIC_MODELS

    sweep.add_argument("--networks", default="all",
                       help="comma-separated network names or .yaml or .onnx paths, or all (default)")
    sweep.add_argument("--strategies", default="data,model,hypar",
                       help="comma-separated, from "
                            f"{', '.join(s for s, v in STRATEGIES.items() if not v.takes_plan)} "
                            "(default data,model,hypar)")
    sweep.add_argument("--topologies", default="htree", help="comma-separated (default htree)")
    sweep.add_argument("--accelerators", default=None,
                       help="comma-separated accelerator counts (default: the config file's, "
                            "else 16)")
    sweep.add_argument("--batch", default=None,
                       help="comma-separated batch sizes (default: the config file's, else "
                            f"{DEFAULT_BATCH})")
    sweep.add_argument("--hierarchies", default="",
                       help="comma-separated hierarchies such as 4x3x2 (default: each count's "
                            "prime factors, largest first)")
    sweep.add_argument("--kinds", default=",".join(DEFAULT_KINDS),
                       help="kind sets to sweep, separated by ';' (e.g. 'batch,in;batch,in,out'; "
                            f"default {','.join(DEFAULT_KINDS)})")
    sweep.add_argument("--searches", default="greedy", help="comma-separated, from "
                       f"{', '.join(SEARCHES)} (default greedy)")
    sweep.add_argument("--traffic-models", default=DEFAULT_TRAFFIC_MODEL,
                       help=f"comma-separated, from {', '.join(TRAFFIC_MODELS)} "
                            f"(default {DEFAULT_TRAFFIC_MODEL})")
    sweep.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUES",
                       help="a hardware parameter to change, one value or several to sweep "
                            "(e.g. link_bandwidth_gbps=1.6,3.2); repeatable")
    sweep.add_argument("--config", default=None, help="a hardware YAML file (base of every run)")
    sweep.add_argument("--engine", default="des",
                       help=f"comma-separated, from {', '.join(ENGINES)} (default des)")
    sweep.add_argument("--des-messages", type=int, default=DEFAULT_DES_MESSAGES, metavar="N",
                       help="des: every case's budget of messages simulated one by one, as "
                            "run's --des-messages (past it, group operations; 0: always; "
                            f"default {DEFAULT_DES_MESSAGES:,}); a column of the CSV")
    sweep.add_argument("--objectives", default="bytes",
                       help=f"comma-separated, from {', '.join(OBJECTIVES)} (default bytes); for "
                            "the strategies that take them, the others run once")
    sweep.add_argument("--overlap", default="on",
                       help="on, off or on,off: the gradient exchange overlapped with the "
                            "backward pass (default on)")
    sweep.add_argument("--optimizers", default="sgd",
                       help="comma-separated, from sgd, momentum, adam (default sgd): the "
                            "update rule and the state it keeps per parameter")
    sweep.add_argument("--precisions", default="fp32",
                       help="comma-separated, from fp32, bf16, fp16 (default fp32)")
    sweep.add_argument("--zeros", default="0",
                       help="comma-separated ZeRO stages, from 0, 1, 2, 3, auto (default 0; "
                            "auto: optimal chooses under --objectives time, other cases "
                            "take 0; the choice is the row's config.zero)")
    sweep.add_argument("--recomputes", default="none",
                       help="comma-separated, from none, full, selective, auto (default none; "
                            "auto as for --zeros: config.recompute)")
    sweep.add_argument("--pipelines", default="1",
                       help="comma-separated pipeline stage counts or auto (default 1: none; "
                            "auto as for --zeros: config.stages, config.microbatches)")
    sweep.add_argument("--microbatches", default="1",
                       help="comma-separated micro-batch counts of the pipelines (default 1)")
    sweep.add_argument("--schedules", default="1f1b",
                       help="comma-separated pipeline schedules, from 1f1b, gpipe (default 1f1b)")
    sweep.add_argument("--phases", default="training",
                       help="training, forward or training,forward: a whole training step "
                            "(default), or inference, the forward pass alone")
    sweep.add_argument("--out", required=True, help="the CSV to write (rows already there for the "
                                                    "same inputs are kept and not rerun)")
    sweep.add_argument("--executor", default="process", choices=("process", "serial", "dask"),
                       help="local processes (default), serial, or a dask.distributed cluster")
    sweep.add_argument("--workers", type=int, default=None,
                       help="local processes (default: all cores)")
    sweep.add_argument("--scheduler", default=None,
                       help="with --executor dask: the scheduler address, e.g. tcp://HOST:8786 "
                            "(default: start a local cluster)")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")


def _reproduce_arguments(reproduce: argparse.ArgumentParser) -> None:
    reproduce.add_argument("--out", default=None,
                           help="output folder (default: results/; with --quick, a new scratch "
                                "folder, never the committed results)")
    reproduce.add_argument("--quick", action="store_true",
                           help="reduced configuration (4 accelerators, small networks)")
    reproduce.add_argument("--only", default=None,
                           help="comma-separated figure names (default: all), e.g. fig11_scalability")
    reproduce.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    reproduce.add_argument("--formats", default="png,pdf",
                           help="figure formats, comma-separated among png, pdf, svg "
                                "(default png,pdf; png is always written)")
    reproduce.add_argument("--no-progress", action="store_true", help="no progress bar")


def _hardware_arguments(hardware: argparse.ArgumentParser) -> None:
    hardware.add_argument("--config", default=None,
                          help="a YAML file whose keys change the defaults (configs/hypar_paper.yaml)")
    hardware.add_argument("--accelerators", type=int, default=None, help="override accelerators")
    hardware.add_argument("--batch", type=int, default=None, help="override batch")
    hardware.add_argument("--set", dest="overrides", action="append", default=[],
                          metavar="KEY=VALUE", help="set any hardware key; repeatable")
    output = hardware.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON object")
    output.add_argument("--yaml", action="store_true",
                        help="print the configuration as a YAML file with comments (units, "
                             "meaning, source): `hardware --yaml > my_hw.yaml`, edit, then "
                             "--config my_hw.yaml")


#: Each command: its summary in --help, and the function adding its arguments.
_SUBCOMMANDS = {
    "networks": ("list the networks, or the layers of one", _networks_arguments),
    "plan": ("the dp/mp plan of a strategy and its traffic", _plan_arguments),
    "run": ("simulate one training step and report latency, energy and traffic",
            _run_arguments),
    "compare": ("strategies side by side (default data, model, trick, hypar), normalized to "
                "data parallelism", _compare_arguments),
    "sweep": ("many simulations (a cartesian product), one CSV row each; parallel, resumable",
              _sweep_arguments),
    "reproduce": ("every figure of the paper's evaluation into results/, with "
                  "results/README.md", _reproduce_arguments),
    "hardware": ("the effective hardware configuration", _hardware_arguments),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, that command's arguments and the others' names
    alone (what `main` needs: each command's registries load only when it runs)."""
    parser = _Parser(prog=PROG, description=(
        "Simulate DNN training on an array of HMC accelerators split by HyPar "
        "(Song et al., HPCA 2019)."))
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (summary, add_arguments) in _SUBCOMMANDS.items():
        command = commands.add_parser(name, help=summary)
        if only is None or only == name:
            add_arguments(command)
    return parser


def _add_simulation_arguments(parser: argparse.ArgumentParser) -> None:
    from hypar_sim.hardware.topology import TOPOLOGIES

    parser.add_argument("network", help="a network name (see `networks`) or a path to a .yaml or .onnx file")
    parser.add_argument("--topology", default="htree", metavar="TOPOLOGY",
                        help=f"one of {', '.join(TOPOLOGIES)} (default htree), or a topology "
                             "file (.yaml: links per level; see hardware/topology_file.py)")
    parser.add_argument("--accelerators", type=int, default=None,
                        help="accelerators (default: the config file's, else 16)")
    parser.add_argument("--batch", type=int, default=None,
                        help=f"samples per training step (default: the config file's, else "
                             f"{DEFAULT_BATCH})")
    parser.add_argument("--config", default=None,
                        help="a YAML file whose keys change configs/hypar_paper.yaml (hardware "
                             "keys, and the run's accelerators and batch)")
    parser.add_argument("--engine", default="des", choices=ENGINES,
                        help="des: event-driven SimPy simulation (default); analytic: closed form")
    parser.add_argument("--chunk-kib", type=int, default=DEFAULT_CHUNK_BYTES // 1024,
                        help="messages cross the network in chunks of this size, KiB "
                             f"(default {DEFAULT_CHUNK_BYTES // 1024})")
    parser.add_argument("--max-chunks", type=int, default=DEFAULT_MAX_CHUNKS,
                        help="at most this many chunks per message; larger messages get larger "
                             f"chunks (default {DEFAULT_MAX_CHUNKS})")
    parser.add_argument("--no-overlap", action="store_true",
                        help="wait for each layer's gradient exchange before going on with the "
                             "backward pass (default: overlap it, only the update waits; "
                             "configs/hypar_paper.yaml says why)")
    parser.add_argument("--des-messages", type=int, default=DEFAULT_DES_MESSAGES, metavar="N",
                        help="des: simulate messages one by one, chunk by chunk, where at "
                             "most N would be (one of each symmetry class); past that, every "
                             "communication step runs as one group operation (the analytic "
                             "engine's closed form, links shared two ways between "
                             "operations; 0: always) "
                             f"(default {DEFAULT_DES_MESSAGES:,})")
    parser.add_argument("--no-symmetry", action="store_true",
                        help="des: simulate every accelerator (default: one of each class of "
                             "accelerators that are relabellings of one another; the result "
                             "is the same to the last cycle, only slower)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="set any hardware key (see `hardware`), e.g. --set "
                             "link_bandwidth_gbps=3.2; repeatable")
    parser.add_argument("--bucket-mb", type=float, default=DEFAULT_BUCKET_MB, metavar="MIB",
                        help="graph networks: fuse gradient all-reduces in buckets of this many "
                             f"MiB, as PyTorch DDP does (default {DEFAULT_BUCKET_MB}; 0: one per "
                             "node)")
    _add_plan_arguments(parser)






def _terminate(signum: int, frame: object) -> None:
    """SIGTERM stops a command as Ctrl-C does (`errors.Terminated`)."""
    raise Terminated


def one_line(text: str) -> str:
    """`text` with every character that is not printable (a line break or a terminal escape
    inside a value the message quotes) written as its escape: an error stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def main(argv: Sequence[str] | None = None) -> int:
    process_settings()  # the command owns the process
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv and argv[0] in _SUBCOMMANDS else ""  # "": the names alone
    args = build_parser(only=command).parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        output = COMMANDS[args.command](args)
    except InputError as exc:
        print(f"{PROG} {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except Unfinished as exc:
        if exc.output:
            print(exc.output)
        print(f"{PROG} {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except MemoryError:  # past the estimates that refuse up front (`resources.check_memory`)
        print(f"{PROG} {args.command}: error: ran out of memory (this process may use "
              f"{memory_limit_bytes() / 2**30:,.1f} GiB); use --engine analytic, fewer "
              "accelerators or a smaller batch", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"{PROG} {args.command}: {'terminated' if terminated else 'interrupted'}",
              file=sys.stderr)
        return 143 if terminated else 130
    try:
        print(output, flush=True)
    except BrokenPipeError:  # e.g. piped into `head`: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as exc:  # e.g. a full disk or /dev/full: the output place, like --csv's
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        print(f"{PROG} {args.command}: error: standard output: cannot write "
              f"({exc.strerror or exc})", file=sys.stderr)
        return 2
    return 0
