"""`optimal`'s search over how a step trains, beside the split kinds: `--pipeline auto`
(stages and micro-batches), `--recompute auto` and `--zero auto`, within a cube's memory,
minimising the estimated step time.

As in Alpa (Zheng et al., "Alpa", OSDI 2022, section 5): an inter-operator search over
pipeline stages with an intra-operator plan on each stage's sub-array. For every stage
count S (a divisor of the accelerators, at most `MAX_STAGES`; the sub-array the rest), the
kinds of every node are searched on the sub-array for one micro-batch
(`own_strategies.greedy_columns`: exact level by level, on `timed_costs.TimedCosts`, the
simulator's compute and transfer models on the sub-array's topology); the same kinds serve
every micro-batch count M (S, 2S, 4S). Without a pipeline the other strategies' plans are
candidates too (`_seed_plans`). Each candidate (S, M, recomputation, ZeRO stage) is then
timed from its nodes' costs (`node_times`):

- per micro-batch, a node's forward, backward and gradient compute, its loss and its
  input's and error's transfers, again its forward compute and input transfers where it is
  recomputed, and (ZeRO 3) its weights gathered before both passes;
- per step, its update (on ZeRO's shards) and its gradient exchange; a tied projection in
  another stage than its owner, its copy's all-reduce and the two copies' sum.

Stages are contiguous runs balanced by their time per micro-batch (`pipeline.balanced`,
then `pipeline.cheap_cuts`), and the step is Alpa's eq. (2), T = sum_s t_s +
(M - 1) max_s t_s, plus the slowest stage's per-step work; t_s counts what the stage
receives from its neighbours (the crossing elements, member to member, timed on the whole
array's topology: `hardware.transfer.step_cycles`). Without a pipeline the gradient
reduce-scatters overlap the backward pass (`step_estimate`). The candidates are built
from the fastest down; the first whose exact footprint (`planner.footprint`) fits a cube
wins. The precision is the user's: it changes the arithmetic, not the split.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import HardwareConfig, load_hardware
from hypar_sim.hardware.topology import Topology, make_topology
from hypar_sim.hardware.transfer import Routed, step_cycles
from hypar_sim.partition import node_layout
from hypar_sim.partition.axes import Site
from hypar_sim.partition.axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.redistribute import redistribute
from hypar_sim.partition.regions import weight_shape
from hypar_sim.partition.shares import Column
from hypar_sim.partition.steps import Phase, StepMessages, TransferKind
from hypar_sim.planner.footprint import memory_picture
from hypar_sim.planner.own_strategies import greedy_columns
from hypar_sim.planner.pipeline import balanced, cheap_cuts, pipeline_footprint
from hypar_sim.planner.pipeline_messages import tied_apart
from hypar_sim.planner.plan_messages import (
    fed_nodes,
    graph_layouts,
    paying_edges,
    sharing_edges,
)
from hypar_sim.planner.timed_costs import TimedCosts
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.planner.training import Training, attention_core, crossing_elements
from hypar_sim.sim.defaults import DEFAULT_CHUNK_BYTES, DEFAULT_MAX_CHUNKS
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.network import is_chain

#: The value of a training option that `optimal` chooses.
AUTO = "auto"
#: The training options `optimal` may choose (`--pipeline auto`, `--recompute auto`,
#: `--zero auto`).
FREE_OPTIONS = ("pipeline", "recompute", "zero")
#: Most pipeline stages searched; micro-batch counts searched per S stages (times S).
MAX_STAGES = 16
MICROBATCH_FACTORS = (1, 2, 4)


@dataclass(frozen=True)
class NodeTimes:
    """Every node's cycles under one plan on a sub-array (arrays over the graph's nodes)."""

    forward: np.ndarray  # per micro-batch: forward compute, loss, its input's and error's steps
    backward: np.ndarray  # per micro-batch: backward and gradient compute
    forward_again: np.ndarray  # what recomputing it adds: its forward compute and input
    gathers: np.ndarray  # one gather of its weights (the gradient gather's; ZeRO 3's)
    reduces: np.ndarray  # per step: its gradient reduce-scatter
    update: dict[bool, np.ndarray]  # per step, by sharded (ZeRO >= 1) or not
    tied: dict[int, tuple[float, float]]  # tied projections: `tied_cycles`


@dataclass(frozen=True)
class Candidate:
    """One way to train, timed: its options, its stages, its estimated step."""

    training: Training
    stages: tuple[int, ...]  # every node's stage
    step_cycles: float
    hierarchy: Hierarchy  # the whole array (its top level the stages)
    micro: int  # samples per micro-batch
    columns: tuple[Column, ...]  # every node's kinds on a stage's sub-array


def node_times(costs: TimedCosts, graph: Graph, sites: Sequence[Site],
               columns: Sequence[Column], hierarchy: Hierarchy) -> NodeTimes:
    """Every node's cycles under `columns` (`costs` of one micro-batch on `hierarchy`):
    the parts a candidate adds up (module docstring). Consumers that read a tensor alike
    share one transfer (`plan_messages.paying_edges`), charged to the first of them."""
    n = len(sites)
    outputs = set(graph.outputs)
    forward, backward, again, gathers, reduces = (np.zeros(n) for _ in range(5))
    update = {False: np.zeros(n), True: np.zeros(n)}
    for i, (site, column) in enumerate(zip(sites, columns, strict=True)):
        own = costs.own_parts(site, column, hierarchy, site.node.name in outputs)
        forward[i] = costs.phase_value(site, column, hierarchy, (Phase.FORWARD,)) + own["loss"]
        backward[i] = costs.phase_value(site, column, hierarchy,
                                        (Phase.BACKWARD, Phase.GRADIENT))
        again[i] = costs.phase_value(site, column, hierarchy, (Phase.RECOMPUTE,))
        gathers[i], reduces[i] = own["gather"], own["gradient"] - own["gather"]
        for sharded in (False, True):
            update[sharded][i] = costs.phase_value(site, column, hierarchy, (Phase.UPDATE,),
                                                   zero=int(sharded))
    for edges in sharing_edges(graph):
        for p, c, k in paying_edges(costs, sites, edges, columns, hierarchy):
            sent, returned = costs.edge_parts(sites[p], sites[c], k, columns[p], columns[c],
                                              hierarchy)
            forward[c] += sent + returned
            again[c] += sent
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    tied = {i: tied_cycles(costs, sites[i], columns[i], hierarchy)
            for i, node in enumerate(graph.nodes) if node.attrs.get("tied_to") in index}
    return NodeTimes(forward, backward, again, gathers, reduces, update, tied)


def stage_to_stage_cycles(topology: Topology, config: HardwareConfig, members: int,
                          sent_bytes: float, source: int, target: int) -> float:
    """Cycles to send `sent_bytes` from stage `source` to stage `target` (each of their
    `members` to its counterpart, 1/`members` each), as the analytic engine times a step."""
    if sent_bytes <= 0:
        return 0.0
    src = source * members + np.arange(members)
    dst = target * members + np.arange(members)
    messages = StepMessages(0, TransferKind.STAGE_FEATURE, src, dst,
                            np.full(members, sent_bytes / members), np.zeros_like(src),
                            np.zeros_like(src))
    return step_cycles(messages, topology, config, DEFAULT_CHUNK_BYTES, DEFAULT_MAX_CHUNKS,
                       Routed.of(src, dst, topology))


def tied_cycles(costs: TimedCosts, site: Site, column: Column, hierarchy: Hierarchy
                ) -> tuple[float, float]:
    """A tied projection's copy in another stage than its owner
    (`pipeline_messages.tied_apart`): (cycles of its gradients' all-reduce within its
    stage, bytes of the whole copy, summed with the owner's and sent back)."""
    own = node_layout.layout(site, costs.batch, column, hierarchy)
    regions = node_layout.weight_regions(own)
    shape = weight_shape(site.desc)
    parts = redistribute(shape, regions, regions, own.replicas)
    word = costs.word_bytes
    within = costs.matrices_value({"gradient reduce": parts.reduce * word,
                                   "gradient gather": parts.gather * word})
    return within, float(np.prod(shape)) * word


def step_estimate(graph: Graph, times: NodeTimes, training: Training, recomputed: set[int],
                  topology: Topology, config: HardwareConfig, micro: int, word_bytes: int,
                  members: int) -> tuple[tuple[int, ...], float]:
    """(every node's stage, the estimated step in cycles) of `training` (module
    docstring: Alpa's eq. (2) over the stages' time per micro-batch). Without a pipeline,
    T = X + max(Y_compute, Y_port) as `planner.estimate` reads the simulator's overlap:
    the gradient reduce-scatters (Y_port) run beside the backward compute (Y_compute)."""
    per_micro = times.forward.copy()  # what the backward pass cannot overlap
    if recomputed:
        index = sorted(recomputed)
        per_micro[index] += times.forward_again[index]
    gathered = times.gathers  # the reduced gradients or (ZeRO 1, 2) the updated weights
    if training.zero >= 3:  # the weights before both passes, no gradient gathered
        per_micro += 2 * times.gathers
        gathered = np.zeros_like(gathered)
    count = training.stages
    if count == 1:  # the reduce-scatters overlap the backward pass, as the simulator runs them
        once = times.update[training.zero >= 1] + gathered
        return (0,) * len(graph.nodes), float(
            per_micro.sum() + once.sum() + max(times.backward.sum(), times.reduces.sum()))
    per_micro += times.backward
    per_step = times.update[training.zero >= 1] + gathered + times.reduces
    work = np.maximum(np.rint(per_micro), 1).astype(np.int64)
    stages = cheap_cuts(graph, balanced(work, count), work)
    crossing = crossing_elements(graph, range(len(graph.nodes)))
    stage_of = np.array(stages)
    t = np.bincount(stage_of, per_micro, minlength=count)
    for s in range(count - 1):
        first = int(np.searchsorted(stage_of, s + 1))
        sent = float(crossing[first]) * micro * word_bytes
        cycles = stage_to_stage_cycles(topology, config, members, sent, s, s + 1)
        t[s + 1] += cycles  # the activations into the next stage
        t[s] += cycles  # and the error back
    once = np.bincount(stage_of, per_step, minlength=count)
    for node, owner in tied_apart(graph, stages).items():
        within, copy_bytes = times.tied[node]
        there = stage_to_stage_cycles(topology, config, members, copy_bytes, stages[node],
                                      stages[owner])
        # the owner's gradients come in over the links of the copy's all-reduce, then the
        # sum goes back; with no all-reduce (a member per stage) the two ways overlap
        once[stages[node]] += within + there * (2 if within else 1)
        once[stages[owner]] += there
    return stages, float(t.sum() + (training.microbatches - 1) * t.max() + once.max())


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(graph: Graph, hierarchy: Hierarchy, batch: int, kinds: Sequence[str],
               word_bytes: int, base: Training, free: Sequence[str], options_model: str,
               topology_name: str, config: HardwareConfig, notes: list[str]
               ) -> list[Candidate]:
    """Every way to train that `free` leaves open, timed (module docstring), fastest
    first."""
    members = hierarchy.members
    counts = [s for s in _divisors(members) if s <= min(MAX_STAGES, len(graph.nodes))] \
        if "pipeline" in free else [base.stages]
    recomputes = ["none", "full", *(["selective"] if attention_core(graph) else [])] \
        if "recompute" in free else [base.recompute]
    recomputed = {mode: _recomputed(graph, mode) for mode in recomputes}
    sites = graph_sites(graph)
    fed = fed_nodes(graph)
    found: list[Candidate] = []
    for count in counts:
        array = Hierarchy((count, *Hierarchy.for_count(members // count).sizes)) \
            if count > 1 and "pipeline" in free else hierarchy
        sub = Hierarchy(array.sizes[1:]) if count > 1 else array
        whole = make_topology(topology_name, config, array)
        local = make_topology(topology_name, config, sub)
        micro_counts = [count * f for f in MICROBATCH_FACTORS if batch % (count * f) == 0] \
            if "pipeline" in free and count > 1 else [base.microbatches]
        plans: list[tuple[Column, ...]] | None = None
        for m in micro_counts:
            micro = batch // m
            costs = TimedCosts(micro, word_bytes, False, "time", config, local, fed, base)
            if plans is None:  # the plans of kinds of a sub-array, for every micro-batch
                plans = _kinds_plans(graph, sites, micro, sub, kinds, costs, word_bytes,
                                     options_model, topology_name, notes,
                                     seeds=count == 1)
            for columns in plans:
                times = node_times(costs, graph, sites, columns, sub)
                for mode in recomputes:
                    zeros = [z for z in range(4) if count == 1 or z <= 1] \
                        if "zero" in free else [base.zero]
                    for zero in zeros:
                        training = dataclasses.replace(
                            base, recompute=mode, zero=zero, stages=count, microbatches=m,
                            **({"schedule": "1f1b", "stage_names": ()} if "pipeline" in free
                               else {}))
                        stages, step = step_estimate(graph, times, training, recomputed[mode],
                                                     whole, config, micro, word_bytes,
                                                     sub.members)
                        found.append(Candidate(training, stages, step, array, micro, columns))
    found.sort(key=lambda c: c.step_cycles)
    return found


def _kinds_plans(graph: Graph, sites: Sequence[Site], batch: int, hierarchy: Hierarchy,
                 kinds: Sequence[str], costs: TimedCosts, word_bytes: int, model: str,
                 topology_name: str, notes: list[str], seeds: bool
                 ) -> list[tuple[Column, ...]]:
    """The plans of kinds a sub-array's candidates are timed with: the search over `kinds`
    in time (`greedy_columns` on `costs`), and with `seeds` the other strategies' plans
    (`_seed_plans`); none where the batch is too small to split as the kinds must."""
    plans = []
    with contextlib.suppress(InputError):  # a micro-batch too small to split as kinds must
        plans.append(tuple(greedy_columns(graph, sites, batch, hierarchy, kinds, costs, notes)))
    if seeds:
        plans += _seed_plans(graph, batch, hierarchy, kinds, word_bytes, model, topology_name,
                             costs.config)
    return list(dict.fromkeys(plans))


#: Most nodes x accelerators on which every other strategy's plan is a seed (they plan in
#: seconds there); above it only HyPar's and data parallelism's (Tofu alone takes over a
#: minute on GPT-3 2.7B over 64 cubes).
SEED_LIMIT = 2**13
#: Strategies whose plans are never seeds: they need a plan or try every plan.
NOT_SEEDS = ("explicit", "exhaustive")


def _seed_plans(graph: Graph, batch: int, hierarchy: Hierarchy, kinds: Sequence[str],
                word_bytes: int, model: str, topology_name: str, config: HardwareConfig
                ) -> list[tuple[Column, ...]]:
    """Every other strategy's plan of the whole batch on the whole array (their own kinds
    and costs, no capacity), so that `optimal` without a pipeline is never estimated slower
    than them; `optimal`'s own exact search over all levels for time only on a chain of
    conv and fc layers (`planner.estimate`'s closed forms: on other graphs its tables are
    timed cell by cell, slower than every other seed together). On a graph and array
    above `SEED_LIMIT`, HyPar's and data parallelism's alone."""
    from hypar_sim.planner.options import PlanOptions
    from hypar_sim.planner.plan import make_plan
    from hypar_sim.planner.strategies import STRATEGIES

    unbounded = dataclasses.replace(config, cube_capacity_gib=2.0**20)
    names = [name for name in STRATEGIES if name not in NOT_SEEDS] \
        if len(graph.nodes) * hierarchy.members <= SEED_LIMIT else ["hypar", "data"]
    plans = []
    for name in names:
        options = PlanOptions(traffic_model=model, topology=topology_name)
        if name == "optimal":
            if not is_chain(graph):
                continue
            options = PlanOptions(tuple(kinds), traffic_model=model, objective="time",
                                  topology=topology_name)
        try:
            plans.append(tuple(make_plan(graph, name, hierarchy, batch, None, word_bytes,
                                         options, unbounded).columns))
        except InputError:
            continue  # it does not plan this graph on this array
    return plans


def least_footprint(graph: Graph, candidate: Candidate, layouts: Sequence, word_bytes: int
                    ) -> float:
    """Bytes the busiest cube of `candidate` keeps without its communication buffers (a
    bound below its footprint: a candidate above the capacity is not built)."""
    training = candidate.training
    if training.pipelined:
        parts = pipeline_footprint(graph, layouts, candidate.stages, word_bytes, 0.0, training)
    else:
        parts = memory_picture(graph, layouts, word_bytes, True, 0.0, training).parts
    return float(sum(value for _, value in parts))


def _recomputed(graph: Graph, mode: str) -> set[int]:
    from hypar_sim.planner.training import recompute_plan

    return set(recompute_plan(graph, mode).recomputed)


def search_training(graph: Graph, hierarchy: Hierarchy, batch: int, kinds: Sequence[str],
                    word_bytes: int, options, config: HardwareConfig | None):
    """The plan of the fastest candidate (`candidates`) that fits a cube: one line if none
    does."""
    from hypar_sim.planner.pipeline import pipeline_plan
    from hypar_sim.planner.plan import evaluate_plan

    config = config or load_hardware(overrides={"word_bytes": word_bytes})
    notes: list[str] = []
    found = candidates(graph, hierarchy, batch, kinds, word_bytes, options.training,
                       options.free_training, options.traffic_model, options.topology, config,
                       notes)
    if not found:
        raise InputError(f"--pipeline auto: no stage count and micro-batch count splits "
                         f"batch {batch} on {hierarchy.members} accelerators; use a larger "
                         "--batch")
    model = traffic_model(options.traffic_model)
    layouts: dict[tuple, list] = {}
    capacity = config.cube_capacity_bytes
    for candidate in found:
        key = (candidate.hierarchy, candidate.micro, candidate.columns)
        if key not in layouts:
            sub = Hierarchy(candidate.hierarchy.sizes[candidate.training.pipelined:])
            layouts[key] = graph_layouts(graph, candidate.micro, sub, candidate.columns, model)
        if least_footprint(graph, candidate, layouts[key], word_bytes) > capacity:
            continue  # not even without its buffers
        training = candidate.training
        if training.pipelined and not training.stage_names:
            training = dataclasses.replace(training, stage_names=tuple(
                graph.nodes[candidate.stages.index(s)].name for s in range(1, training.stages)))
        chosen = dataclasses.replace(options, training=training, free_training=(),
                                     objective="time", search="greedy")
        try:
            if training.pipelined:
                plan = pipeline_plan(graph, "hypar", candidate.hierarchy, batch, None,
                                     word_bytes, chosen, config, candidate.columns)
            else:
                plan = evaluate_plan(graph, "optimal", "", batch, hierarchy, candidate.columns,
                                     word_bytes, "training", options.traffic_model, training)
        except InputError as error:
            if "capacity" not in str(error) and "GiB" not in str(error):
                raise
            continue
        if plan.footprint_bytes > capacity:
            continue
        label = (f"timed {len(found)} ways to train; the fastest that fits: "
                 f"{training.note().lstrip(', ') or 'no pipeline, nothing recomputed'}")
        return dataclasses.replace(plan, strategy="optimal", search=label, objective="time",
                                   estimate=candidate.step_cycles)
    raise InputError(f"capacity: none of the {len(found)} ways to train "
                     f"{graph.name} that optimal timed fits a cube of "
                     f"{config.cube_capacity_gib:g} GiB; use --precision bf16, more "
                     "accelerators or a larger --set cube_capacity_gib")

