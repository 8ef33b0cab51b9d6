"""The Python API: plan, simulate and compare from a script or a notebook.

    import hypar_sim
    result = hypar_sim.simulate("vgg_a", strategy="hypar", topology="torus",
                                accelerators=16, batch=256, clock_mhz=500)
    result.latency_s, result.energy_j, result.traffic_bytes
    result.to_frame()                      # one row: every number of the result
    result.per_layer_frame()               # one row per layer (or graph node)
    result.per_link_frame()                # one row per directed link: bytes, busy share
    hypar_sim.plan("resnet50", accelerators=64, kinds=("batch", "in", "out"))
    hypar_sim.compare("vgg_a")             # data, model, trick, hypar (graphs: data, model, hypar)
    hypar_sim.simulate("vgg_a", strategy="optimal", objective="time")   # or "energy"

A network is a shipped name, a path to a YAML or ONNX file, or a `Network` or
`Graph` object. Keyword arguments beyond the named ones set hardware config
keys (`hypar-sim hardware` lists them, with units); `config` is a YAML file of
them. Bad input raises `hypar_sim.errors.InputError` with the same one-line
message the command line prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypar_sim.hardware.config import HardwareConfig, load_hardware
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import parse_kinds
from hypar_sim.planner.graph_plan import GraphPlan, make_graph_plan
from hypar_sim.planner.plan import Plan
from hypar_sim.planner.strategies import PlanOptions, make_plan
from hypar_sim.planner.traffic import DEFAULT_TRAFFIC_MODEL
from hypar_sim.results import SimResult
from hypar_sim.runner import SimOptions, simulate_strategy
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.network import Network, load_workload

#: What `compare` runs on a chain network, and on a graph network.
CHAIN_STRATEGIES = ("data", "model", "trick", "hypar")
GRAPH_COMPARED = ("data", "model", "hypar")


def _workload(network: str | Network | Graph, seq: int | None) -> Network | Graph:
    return network if isinstance(network, Network | Graph) else load_workload(str(network), seq)


def _options(kinds: str | Sequence[str] | None, search: str, traffic_model: str,
             objective: str = "bytes", phases: str = "training") -> PlanOptions:
    """Plan options; kinds None: HyPar's batch and in, or the strategy's paper's own."""
    names = None if kinds is None else parse_kinds(kinds) if isinstance(kinds, str) \
        else parse_kinds(",".join(kinds))
    return PlanOptions(names, search, traffic_model, objective=objective, phases=phases)


def _hierarchy(hierarchy: str | Sequence[int] | None, accelerators: int) -> Hierarchy:
    if hierarchy is None:
        return Hierarchy.for_count(accelerators)
    if isinstance(hierarchy, str):
        return Hierarchy.parse(hierarchy, accelerators, "hierarchy")
    return Hierarchy(tuple(hierarchy))


def hardware(accelerators: int = 16, batch: int = 256, config: str | None = None,
             **overrides: Any) -> HardwareConfig:
    """The effective hardware configuration (defaults, then `config`, then `overrides`)."""
    return load_hardware(config, {"accelerators": accelerators, "batch": batch, **overrides})


def plan(network: str | Network | Graph, strategy: str = "hypar", accelerators: int = 16,
         batch: int = 256, kinds: str | Sequence[str] | None = None, search: str = "greedy",
         traffic_model: str = DEFAULT_TRAFFIC_MODEL, hierarchy: str | Sequence[int] | None = None,
         plan_text: str | None = None, seq: int | None = None,
         objective: str = "bytes", phases: str = "training") -> Plan | GraphPlan:
    """The plan of `strategy` and its traffic (bytes per level and layer or node); `kinds`
    None: batch and in, or the strategy's paper's own; `objective` bytes, time or energy
    (estimated on the default hardware and the H-tree); `phases` "forward": an inference."""
    workload = _workload(network, seq)
    levels = _hierarchy(hierarchy, accelerators)
    options = _options(kinds, search, traffic_model, objective, phases)
    if isinstance(workload, Graph):
        return make_graph_plan(workload, strategy, levels, batch, plan_text, options=options)
    strategy = "explicit" if plan_text is not None else strategy
    return make_plan(workload, strategy, levels, batch, plan_text, options=options)


def simulate(network: str | Network | Graph, strategy: str = "hypar", topology: str = "htree",
             accelerators: int = 16, batch: int = 256, engine: str = "des",
             kinds: str | Sequence[str] | None = None, search: str = "greedy",
             traffic_model: str = DEFAULT_TRAFFIC_MODEL,
             hierarchy: str | Sequence[int] | None = None, plan_text: str | None = None,
             overlap_gradients: bool = True, seq: int | None = None, config: str | None = None,
             trace: bool = False, objective: str = "bytes", phases: str = "training",
             **config_overrides: Any) -> SimResult:
    """One training step of `network` split by `strategy`, simulated (see the module; with
    `trace`, `result.trace_events` holds its Chrome/Perfetto trace; `phases` "forward": an
    inference, the forward pass alone)."""
    workload = _workload(network, seq)
    hw = hardware(accelerators, batch, config, **config_overrides)
    strategy = "explicit" if plan_text is not None else strategy
    return simulate_strategy(workload, strategy, hw,
                             SimOptions(topology=topology, engine=engine,
                                        overlap_gradients=overlap_gradients, trace=trace),
                             plan_text, _options(kinds, search, traffic_model, objective, phases),
                             _hierarchy(hierarchy, hw.accelerators))


def compare(network: str | Network | Graph, strategies: Sequence[str] | None = None,
            **kwargs: Any) -> list[SimResult]:
    """`simulate` for each strategy (default: every strategy `compare` runs on the command
    line), the same keyword arguments for all."""
    workload = _workload(network, kwargs.pop("seq", None))
    if strategies is None:
        strategies = GRAPH_COMPARED if isinstance(workload, Graph) else CHAIN_STRATEGIES
    return [simulate(workload, strategy, **kwargs) for strategy in strategies]
