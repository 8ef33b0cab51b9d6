"""`optimal`'s search over how a step trains, beside the split kinds: `--pipeline auto`
(stages and micro-batches), `--recompute auto` and `--zero auto`, within a cube's memory,
minimising the estimated step time.

As in Alpa (Zheng et al., "Alpa", OSDI 2022, section 5): an inter-operator search over
pipeline stages with an intra-operator plan on each stage's sub-array. For every stage
count S (a divisor of the accelerators, at most `MAX_STAGES`; the array's top level the
stages, the default hierarchy of the rest below), every node's kinds are searched on the
sub-array for one micro-batch (`own_strategies.greedy_columns`: exact level by level, on
`timed_costs.TimedCosts`, the simulator's compute and transfer models on the sub-array's
topology), again for a micro-batch those kinds cannot split; without a pipeline the other
strategies' plans are candidates too (`_seed_plans`). Every candidate (S, micro-batches
S, 2S or 4S, recomputation, ZeRO stage) is timed by `stage_times.step_estimate`; they are
built from the fastest down, and the first whose exact footprint (`planner.footprint`)
fits a cube wins. The precision stays the user's: it changes the arithmetic, not the
split.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from hypar_sim.errors import InputError
from hypar_sim.executors import in_worker, parallel_map
from hypar_sim.hardware.config import HardwareConfig, load_hardware
from hypar_sim.hardware.topology import make_topology
from hypar_sim.partition.axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.shares import Column
from hypar_sim.planner.footprint import memory_picture
from hypar_sim.planner.own_strategies import greedy_columns
from hypar_sim.planner.pipeline import pipeline_footprint
from hypar_sim.planner.plan_messages import fed_nodes, graph_layouts
from hypar_sim.planner.stage_times import node_times, step_estimate
from hypar_sim.planner.timed_costs import TimedCosts
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.planner.training import Training, attention_core, recompute_plan
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.network import is_chain

#: Most pipeline stages searched; micro-batch counts searched per S stages (times S).
MAX_STAGES = 16
MICROBATCH_FACTORS = (1, 2, 4)
#: Most nodes x accelerators on which every other strategy's plan is a seed (they plan in
#: seconds there); above it only HyPar's and data parallelism's (Tofu alone takes over a
#: minute on GPT-3 2.7B over 64 cubes).
SEED_LIMIT = 2**13
#: Most nodes x accelerators searched in this process alone; above it the stage counts are
#: searched side by side, a process per core (GPT-3 2.7B on 64 cubes, 709 nodes: 28-47 s
#: alone, 20-24 s side by side; its S = 1 takes 12-18 s with the seeds).
PARALLEL_ABOVE = 2**15
#: Strategies whose plans are never seeds: they need a plan or try every plan.
NOT_SEEDS = ("explicit", "exhaustive")


@dataclass(frozen=True)
class Search:
    """What a search over ways to train is given: the training options the user fixed
    (`base`) and those `optimal` chooses (`free`, of `training.FREE_OPTIONS`)."""

    graph: Graph
    hierarchy: Hierarchy
    batch: int
    kinds: tuple[str, ...]
    word_bytes: int
    base: Training
    free: tuple[str, ...]
    traffic_model: str
    topology: str
    config: HardwareConfig

    def stage_counts(self) -> list[int]:
        """S: the divisors of the accelerators up to `MAX_STAGES` (only 1 under ZeRO 2 or
        3, which a pipeline refuses), or the user's."""
        if "pipeline" not in self.free:
            return [self.base.stages]
        members = self.hierarchy.members
        most = min(MAX_STAGES, len(self.graph.nodes))
        if "zero" not in self.free and self.base.zero >= 2:
            most = 1
        return [s for s in range(1, members + 1) if members % s == 0 and s <= most]

    def microbatch_counts(self, stages: int) -> list[int]:
        if "pipeline" not in self.free or stages == 1:
            return [self.base.microbatches]
        return [stages * f for f in MICROBATCH_FACTORS if self.batch % (stages * f) == 0]

    def recomputes(self) -> list[str]:
        if "recompute" not in self.free:
            return [self.base.recompute]
        return ["none", "full", *(["selective"] if attention_core(self.graph) else [])]

    def zeros(self, stages: int) -> list[int]:
        if "zero" not in self.free:
            return [self.base.zero]
        return [z for z in range(4) if stages == 1 or z <= 1]

    def array(self, stages: int) -> Hierarchy:
        """The whole array of `stages` stages (the user's without a choice of stages)."""
        if stages == 1 or "pipeline" not in self.free:
            return self.hierarchy
        return Hierarchy((stages, *Hierarchy.for_count(self.hierarchy.members // stages).sizes))


@dataclass(frozen=True)
class Candidate:
    """One way to train, timed: its options, its stages, its estimated step."""

    training: Training
    stages: tuple[int, ...]  # every node's stage
    step_cycles: float
    hierarchy: Hierarchy  # the whole array (its top level the stages)
    micro_samples: int  # samples per micro-batch
    columns: tuple[Column, ...]  # every node's kinds on a stage's sub-array

    @property
    def sub_array(self) -> Hierarchy:
        return Hierarchy(self.hierarchy.sizes[1:]) if self.training.pipelined \
            else self.hierarchy


def candidates(search: Search, notes: list[str], errors: list[str],
               workers: int | None = None, progress: bool = False) -> list[Candidate]:
    """Every way to train that `search.free` leaves open, timed, fastest first (`notes`:
    what the kinds' searches gave up; `errors`: why a stage count has none). The stage
    counts are searched side by side in `workers` processes (default: one per core where
    the graph's nodes times the accelerators exceed `PARALLEL_ABOVE`, else one after
    another): each count's search is independent and their candidates are joined in the
    counts' order, so the result is the same either way. A process that is itself a worker
    (of a sweep, a comparison or a cluster) searches them one after another. With
    `progress`, a bar of the stage counts searched on stderr once it has taken 2 s."""
    if workers is None:
        big = len(search.graph.nodes) * search.hierarchy.members > PARALLEL_ABOVE
        workers = None if big and not in_worker() else 1
    recomputed = {mode: set(recompute_plan(search.graph, mode).recomputed)
                  for mode in search.recomputes()}
    found: list[Candidate] = []
    for counted, noted, failed in parallel_map(
            _count_candidates, [(search, count, recomputed) for count in search.stage_counts()],
            workers, progress, "stage count"):
        found += counted
        notes += noted
        errors += failed
    found.sort(key=lambda c: c.step_cycles)
    return found


def _count_candidates(work: tuple[Search, int, dict[str, set[int]]]
                      ) -> tuple[list[Candidate], list[str], list[str]]:
    """(candidates, notes, errors) of one stage count (`_stage_candidates`; a worker's)."""
    search, count, recomputed = work
    notes: list[str] = []
    errors: list[str] = []
    return _stage_candidates(search, count, recomputed, notes, errors), notes, errors


def _stage_candidates(search: Search, count: int, recomputed: dict[str, set[int]],
                      notes: list[str], errors: list[str]) -> list[Candidate]:
    """The candidates of `count` stages: every micro-batch count, recomputation and ZeRO
    stage, timed with every plan of kinds that splits its micro-batch."""
    graph, config = search.graph, search.config
    array = search.array(count)
    sub = Hierarchy(array.sizes[1:]) if count > 1 else array
    whole = make_topology(search.topology, config, array)
    local = make_topology(search.topology, config, sub)
    sites, fed = graph_sites(graph), fed_nodes(graph)
    # a recomputation the user fixed is in the kinds' costs (as a fixed ZeRO stage is)
    fixed_recomputed = frozenset() if "recompute" in search.free else frozenset(
        graph.nodes[i].name for i in recompute_plan(graph, search.base.recompute).recomputed)
    plans: list[tuple[Column, ...]] = []
    found = []
    for m in search.microbatch_counts(count):
        micro = search.batch // m
        costs = TimedCosts(micro, search.word_bytes, False, "time", config, local, fed,
                           search.base, fixed_recomputed)
        splitting = [columns for columns in plans if all(
            costs.offered(site, micro, column, sub)
            for site, column in zip(sites, columns, strict=True))]
        if not splitting:  # kinds for this micro-batch
            splitting = _kinds_plans(search, micro, sub, costs, notes, errors, count == 1)
            plans += splitting
        for columns in splitting:
            times = node_times(costs, graph, sites, columns, sub)
            for mode, zero in itertools.product(search.recomputes(), search.zeros(count)):
                training = dataclasses.replace(
                    search.base, recompute=mode, zero=zero, stages=count, microbatches=m,
                    **({"schedule": "1f1b", "stage_names": ()} if "pipeline" in search.free
                       else {}))
                stages, step = step_estimate(graph, times, training, recomputed[mode], whole,
                                             config, micro, search.word_bytes, sub.members)
                found.append(Candidate(training, stages, step, array, micro, columns))
    return found


def _kinds_plans(search: Search, batch: int, hierarchy: Hierarchy, costs: TimedCosts,
                 notes: list[str], errors: list[str], seeds: bool
                 ) -> list[tuple[Column, ...]]:
    """The plans of kinds a sub-array's candidates are timed with: the search over the
    kinds in time (`greedy_columns` on `costs`), and with `seeds` the other strategies'
    plans (`_seed_plans`); none where `batch` is too small to split as the kinds must."""
    plans = []
    try:
        plans.append(tuple(greedy_columns(search.graph, graph_sites(search.graph), batch,
                                          hierarchy, search.kinds, costs, notes)))
    except InputError as error:
        errors.append(str(error))
    if seeds:
        plans += _seed_plans(search, batch, hierarchy)
    return list(dict.fromkeys(plans))


def _seed_plans(search: Search, batch: int, hierarchy: Hierarchy) -> list[tuple[Column, ...]]:
    """Every other strategy's plan of the whole batch on the whole array that takes only
    the allowed kinds (their own costs, no capacity), so that `optimal` without a pipeline
    is never estimated slower than them; `optimal`'s own exact search over all levels for
    time only on a chain of conv and fc layers (`planner.estimate`'s closed forms: on
    other graphs its tables are timed cell by cell, slower than every other seed
    together). On a graph and array above `SEED_LIMIT`, HyPar's and data parallelism's
    alone."""
    from hypar_sim.planner.options import PlanOptions
    from hypar_sim.planner.plan import make_plan
    from hypar_sim.planner.strategies import STRATEGIES

    graph = search.graph
    unbounded = dataclasses.replace(search.config, cube_capacity_gib=2.0**20)
    names = [name for name in STRATEGIES if name not in NOT_SEEDS] \
        if len(graph.nodes) * hierarchy.members <= SEED_LIMIT else ["hypar", "data"]
    plans = []
    for name in names:
        options = PlanOptions(traffic_model=search.traffic_model, topology=search.topology)
        if name == "optimal":
            if not is_chain(graph):
                continue
            options = PlanOptions(search.kinds, traffic_model=search.traffic_model,
                                  objective="time", topology=search.topology)
        try:
            columns = make_plan(graph, name, hierarchy, batch, None, search.word_bytes,
                                options, unbounded).columns
        except InputError:
            continue  # it does not plan this graph on this array
        if all(kind in search.kinds for column in columns for kind in column):
            plans.append(tuple(columns))
    return plans


def least_footprint_bytes(graph: Graph, candidate: Candidate, layouts: Sequence,
                          word_bytes: int) -> float:
    """Bytes the busiest cube of `candidate` keeps without its communication buffers (a
    bound below its footprint: a candidate above the capacity is not built)."""
    training = candidate.training
    if training.pipelined:
        parts = pipeline_footprint(graph, layouts, candidate.stages, word_bytes, 0.0, training)
    else:
        parts = memory_picture(graph, layouts, word_bytes, True, 0.0, training).parts
    return float(sum(value for _, value in parts))


def search_training(graph: Graph, hierarchy: Hierarchy, batch: int, kinds: Sequence[str],
                    word_bytes: int, options, config: HardwareConfig | None):
    """The plan of the fastest candidate (`candidates`) that fits a cube: one line if none
    does."""
    from hypar_sim.planner.pipeline import pipeline_plan
    from hypar_sim.planner.plan import evaluate_plan

    config = config or load_hardware(overrides={"word_bytes": word_bytes})
    search = Search(graph, hierarchy, batch, tuple(kinds), word_bytes, options.training,
                    tuple(options.free_training), options.traffic_model, options.topology,
                    config)
    notes: list[str] = []
    errors: list[str] = []
    found = candidates(search, notes, errors, progress=options.progress)
    flags = ", ".join(f"--{name} auto" for name in search.free)
    if not found:
        raise InputError(errors[0] if errors else f"{flags}: no way to train {graph.name} on "
                         f"{hierarchy.members} accelerators with batch {batch}")
    model = traffic_model(options.traffic_model)
    layouts: dict[tuple, list] = {}
    capacity = config.cube_capacity_bytes
    for candidate in found:
        key = (candidate.hierarchy, candidate.micro_samples, candidate.columns)
        if key not in layouts:
            layouts[key] = graph_layouts(graph, candidate.micro_samples, candidate.sub_array,
                                         candidate.columns, model)
        if least_footprint_bytes(graph, candidate, layouts[key], word_bytes) > capacity:
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
            if not str(error).startswith("capacity:"):
                raise
            continue
        if plan.footprint_bytes <= capacity:
            return dataclasses.replace(plan, strategy="optimal", objective="time",
                                       search=_label(len(found), notes),
                                       estimate=candidate.step_cycles)
    raise InputError(f"capacity: none of the {len(found)} ways to train {graph.name} that "
                     f"optimal timed ({flags}) fits a cube of {config.cube_capacity_gib:g} "
                     "GiB; use " + ("" if search.base.mixed else "--precision bf16, ")
                     + "more accelerators or a larger --set cube_capacity_gib")


def _label(timed: int, notes: Sequence[str]) -> str:
    """The plan's search label: of how many ways to train it is the fastest that fits (what
    it chose prints with the training options)."""
    way = "way" if timed == 1 else "ways"
    return f"Alpa-like (the fastest that fits of {timed} {way} to train timed)" + (
        f"; {notes[0]}" if notes else "")
