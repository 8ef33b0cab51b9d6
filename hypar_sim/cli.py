"""The command line: parse, call, print. Bad input exits 2 with one line on stderr."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from hypar_sim import __version__
from hypar_sim.errors import InputError
from hypar_sim.hardware.config import derived, describe, load_hardware
from hypar_sim.planner.strategies import STRATEGIES, make_plan
from hypar_sim.report import hardware_table, layers_table, networks_table, plan_summary
from hypar_sim.workload.network import available_networks, load_network

PROG = "hypar-sim"
DEFAULT_LEVELS = 4
DEFAULT_BATCH = 256


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def levels_from_args(args: argparse.Namespace) -> int:
    """Hierarchy levels from --levels or --accelerators (a power of two)."""
    if args.accelerators is None:
        return DEFAULT_LEVELS if args.levels is None else args.levels
    count = args.accelerators
    if count < 1 or count & (count - 1):
        raise InputError(
            f"--accelerators: {count} is not a power of two; allowed: 1, 2, 4, 8, 16, ..."
        )
    return count.bit_length() - 1


def _add_array_arguments(parser: argparse.ArgumentParser) -> None:
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--levels", type=int, default=None,
                      help=f"hierarchy levels H, 2**H accelerators (default {DEFAULT_LEVELS})")
    size.add_argument("--accelerators", type=int, default=None,
                      help="number of accelerators, a power of two (default 16)")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH,
                        help=f"samples per training step (default {DEFAULT_BATCH})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=(
        "Simulate DNN training on an array of HMC accelerators split by HyPar "
        "(Song et al., HPCA 2019)."))
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    nets = commands.add_parser("networks", help="list the networks, or the layers of one")
    nets.add_argument("network", nargs="?", help="a network name or a path to a .yaml file")
    nets.add_argument("--json", action="store_true", help="print JSON instead of a table")

    plan = commands.add_parser("plan", help="the dp/mp plan of a strategy and its traffic")
    plan.add_argument("network", help="a network name (see `networks`) or a .yaml path")
    plan.add_argument("--strategy", default="hypar", choices=STRATEGIES, metavar="STRATEGY",
                      help=f"one of {', '.join(STRATEGIES)} (default hypar; explicit needs --plan)")
    plan.add_argument("--plan", dest="plan_text", default=None,
                      help="with --strategy explicit (implied when given): a file or a string, "
                           "one row of dp/mp per level, rows separated by ';' or new lines")
    _add_array_arguments(plan)
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    hardware = commands.add_parser("hardware", help="the effective hardware configuration")
    hardware.add_argument("--config", default=None,
                          help="a YAML file whose keys change the defaults (configs/hypar_paper.yaml)")
    hardware.add_argument("--accelerators", type=int, default=None, help="override accelerators")
    hardware.add_argument("--batch", type=int, default=None, help="override batch")
    hardware.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def hardware_overrides(args: argparse.Namespace) -> dict[str, int]:
    """The common parameters given on the command line."""
    return {key: getattr(args, key) for key in ("accelerators", "batch")
            if getattr(args, key, None) is not None}


def cmd_hardware(args: argparse.Namespace) -> str:
    config = load_hardware(args.config, hardware_overrides(args))
    rows = describe(config, args.config)
    if args.json:
        return json.dumps({row["key"]: row["value"] for row in rows}, indent=2)
    return hardware_table(rows, derived(config))


def cmd_networks(args: argparse.Namespace) -> str:
    if args.network:
        net = load_network(args.network)
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
    if args.json:
        return json.dumps([{"network": n.name, "layers": len(n.layers), "weights": n.weights,
                            "macs_per_sample": n.macs_per_sample} for n in nets], indent=2)
    return networks_table(nets)


def cmd_plan(args: argparse.Namespace) -> str:
    network = load_network(args.network)
    strategy = "explicit" if args.plan_text is not None else args.strategy
    plan = make_plan(network, strategy, levels_from_args(args), args.batch, args.plan_text)
    if args.json:
        return json.dumps(plan.to_dict(), indent=2)
    return plan_summary(plan)


COMMANDS = {"networks": cmd_networks, "plan": cmd_plan, "hardware": cmd_hardware}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        output = COMMANDS[args.command](args)
    except InputError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    print(output)
    return 0
