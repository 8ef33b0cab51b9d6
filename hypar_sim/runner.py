"""Plan, then simulate: the one entry point above the planner and the simulator.

a run's request (`hypar_sim.request`) -> its plan -> its schedule -> SimResult.
"""

from __future__ import annotations

import dataclasses

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.topology import make_topology
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.plan import Plan
from hypar_sim.request import RunRequest, plan_request
from hypar_sim.resources import memory_checks
from hypar_sim.results import SimResult
from hypar_sim.sim.analytic import simulate_analytic
from hypar_sim.sim.des import simulate_des
from hypar_sim.sim.options import SimOptions
from hypar_sim.sim.schedule import Schedule, build_schedule
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.network import Network

__all__ = ["SimOptions", "simulate", "simulate_request"]


def simulate(workload: Network | Graph, plan: Plan, config: HardwareConfig,
             options: SimOptions = SimOptions()) -> SimResult:  # noqa: B008 - frozen, immutable
    """Simulate one training step of `workload` split by `plan` (its array and batch) on the
    hardware of `config`."""
    schedule = build_schedule(workload, plan, config, options.overlap_gradients,
                              options.bucket_mb * 2**20)
    return _run(schedule, plan.hierarchy, config, options,
                {"search": plan.search, **plan.training.to_dict()} | _network_sizes(workload))


def _network_sizes(workload: Network | Graph) -> dict:
    """What a run records of where its network came from: an imported model's file, and the
    sizes its named axes were bound to (--seq, --dim) or a generated transformer's (--seq,
    --layers, --dim). (A chain is never an import: no graph is built from it here.)"""
    if not isinstance(workload, Graph):
        return {}
    recorded: dict = {"network_file": workload.source} if workload.source.endswith(".onnx") \
        else {}
    if workload.axes:
        recorded["network_axes"] = dict(workload.axes)
    return recorded


def simulate_request(request: RunRequest, workload: Network | Graph | None = None) -> SimResult:
    """Plan the request (`request.plan_request`), then simulate its plan (`workload`: the
    request's network, when the caller has it loaded already)."""
    workload = workload if workload is not None else request.workload()
    plan = plan_request(request, workload)
    with memory_checks(not request.force_memory):
        return simulate(workload, plan, request.hardware, request.sim)


def _run(schedule: Schedule, hierarchy: Hierarchy, config: HardwareConfig, options: SimOptions,
         recorded: dict) -> SimResult:
    """The engine's result, its config recording the hardware, the options and `recorded`
    (the plan's search and training options, `_network_sizes`)."""
    topology = make_topology(options.topology, config, hierarchy)
    shown = {k: v for k, v in dataclasses.asdict(options).items()
             if k not in ("progress", "symmetry")}  # how fast, not what: the same result
    config_dict = {"accelerators": hierarchy.members, "batch": schedule.units.batch} \
        | dataclasses.asdict(config) | shown | {
        "hierarchy": str(hierarchy), "traffic_model": schedule.units.traffic_model} | recorded
    if options.engine == "des":
        return simulate_des(schedule, topology, options.chunk_bytes, options.max_chunks,
                            config_dict, options.trace, options.progress, options.symmetry,
                            options.trace_links, options.des_messages)
    if options.trace:
        raise InputError("--trace: needs --engine des (the analytic engine has no events)")
    if schedule.stage_tasks:
        raise InputError("--engine analytic: a pipeline's stages work at once on different "
                         "micro-batches, which the closed form does not follow; use --engine des")
    return simulate_analytic(schedule, topology, options.chunk_bytes, options.max_chunks,
                             config_dict)
