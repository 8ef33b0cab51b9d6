"""Plan, then simulate: the one entry point above the planner and the simulator.

network + strategy + plan options + hardware + simulation options -> SimResult.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hypar_sim.errors import InputError, closest
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.topology import TOPOLOGIES, make_topology
from hypar_sim.hardware.topology_file import is_topology_file
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.graph_plan import GraphPlan, make_graph_plan
from hypar_sim.planner.plan import Plan
from hypar_sim.planner.strategies import PlanOptions, make_plan
from hypar_sim.results import SimResult
from hypar_sim.sim.analytic import simulate_analytic
from hypar_sim.sim.defaults import (
    DEFAULT_BUCKET_MB,
    DEFAULT_CHUNK_BYTES,
    DEFAULT_MAX_CHUNKS,
    ENGINES,
)
from hypar_sim.sim.engine import simulate_des
from hypar_sim.sim.graph_schedule import build_graph_schedule
from hypar_sim.sim.schedule import Schedule, build_schedule
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.network import Network


@dataclass(frozen=True)
class SimOptions:
    """How to simulate (not what: that is the plan and the hardware)."""

    topology: str = "htree"
    engine: str = "des"  # "des": SimPy event by event; "analytic": closed form
    chunk_bytes: int = DEFAULT_CHUNK_BYTES  # a message crosses the network in chunks of this size
    max_chunks: int = DEFAULT_MAX_CHUNKS  # ... or in this many larger chunks, if that is fewer
    overlap_gradients: bool = True  # gradient exchange overlaps the rest of the backward pass
    bucket_mb: float = DEFAULT_BUCKET_MB  # graph networks: gradients fused in buckets (0: off)
    trace: bool = False  # the result carries a Chrome/Perfetto trace of the step (des only)
    symmetry: bool = True  # des: one accelerator per symmetry class (the same result, faster)
    progress: bool = False  # a bar on stderr for a simulation longer than 2 s (des)

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES and not is_topology_file(self.topology):
            raise InputError(f"topology: unknown '{self.topology}'{closest(self.topology, TOPOLOGIES)}"
                             f"; allowed: {', '.join(TOPOLOGIES)} or a topology file (.yaml)")
        if self.engine not in ENGINES:
            raise InputError(f"engine: unknown '{self.engine}'; allowed: {', '.join(ENGINES)}")
        if isinstance(self.chunk_bytes, bool) or not isinstance(self.chunk_bytes, int) \
                or self.chunk_bytes < 1:
            raise InputError(f"chunk_bytes: must be a positive integer, got {self.chunk_bytes!r}")
        if isinstance(self.max_chunks, bool) or not isinstance(self.max_chunks, int) \
                or self.max_chunks < 1:
            raise InputError(f"max_chunks: must be a positive integer, got {self.max_chunks!r}")
        if isinstance(self.bucket_mb, bool) or not isinstance(self.bucket_mb, int | float) \
                or not 0 <= self.bucket_mb <= 2**20:
            raise InputError(f"--bucket-mb: must be a number of MiB from 0 (off) to {2**20}, got "
                             f"{self.bucket_mb!r}")


def simulate(network: Network, plan: Plan, config: HardwareConfig,
             options: SimOptions = SimOptions()) -> SimResult:  # noqa: B008 - frozen, immutable
    """Simulate one training step of `network` split by `plan` on the array of `config`."""
    _check_matches(plan, config)
    schedule = build_schedule(network, plan, config, options.overlap_gradients)
    return _run(schedule, plan.hierarchy, config, options, plan.search)


def simulate_graph(graph: Graph, plan: GraphPlan, config: HardwareConfig,
                   options: SimOptions = SimOptions()) -> SimResult:  # noqa: B008 - frozen
    """Simulate one training step of a graph network split by `plan`."""
    _check_matches(plan, config)
    schedule = build_graph_schedule(graph, plan, config, options.overlap_gradients,
                                    options.bucket_mb * 2**20)
    return _run(schedule, plan.hierarchy, config, options, plan.search)


def _check_matches(plan: Plan | GraphPlan, config: HardwareConfig) -> None:
    if plan.accelerators != config.accelerators or plan.batch != config.batch:
        raise InputError(
            f"plan: made for {plan.accelerators} accelerators and batch {plan.batch}, but the "
            f"hardware has {config.accelerators} accelerators and batch {config.batch}")


def _run(schedule: Schedule, hierarchy: Hierarchy, config: HardwareConfig, options: SimOptions,
         search: str) -> SimResult:
    topology = make_topology(options.topology, config, hierarchy)
    shown = {k: v for k, v in dataclasses.asdict(options).items()
             if k not in ("progress", "symmetry")}  # how fast, not what: the same result
    config_dict = dataclasses.asdict(config) | shown | {
        "hierarchy": str(hierarchy), "traffic_model": schedule.units.traffic_model,
        "search": search}
    if options.engine == "des":
        return simulate_des(schedule, topology, options.chunk_bytes, options.max_chunks,
                            config_dict, options.trace, options.progress, options.symmetry)
    if options.trace:
        raise InputError("--trace: needs --engine des (the analytic engine has no events)")
    return simulate_analytic(schedule, topology, options.chunk_bytes, options.max_chunks,
                             config_dict)


def simulate_strategy(network: Network | Graph, strategy: str, config: HardwareConfig,
                      options: SimOptions = SimOptions(),  # noqa: B008 - frozen, immutable
                      plan_text: str | None = None, plan_options: PlanOptions | None = None,
                      hierarchy: Hierarchy | None = None) -> SimResult:
    """Plan `network` by `strategy` for the array of `config` (on `hierarchy`, by default
    the accelerator count's prime factors, largest first), then simulate that plan.
    `plan_options` default: HyPar's reading (`paper`, kinds batch and in) for a chain, the
    layout model for a graph."""
    hierarchy = hierarchy or Hierarchy.for_count(config.accelerators)
    if isinstance(network, Graph):
        graph_plan = make_graph_plan(network, strategy, hierarchy, config.batch, plan_text,
                                     config.word_bytes, plan_options, config)
        return simulate_graph(network, graph_plan, config, options)
    if plan_options is not None:  # a time or energy estimate sees what will be simulated
        plan_options = dataclasses.replace(plan_options, topology=options.topology,
                                           overlap_gradients=options.overlap_gradients)
    plan = make_plan(network, strategy, hierarchy, config.batch, plan_text, config.word_bytes,
                     plan_options, config)
    return simulate(network, plan, config, options)
