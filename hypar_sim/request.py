"""The run's request: what to plan (and simulate) on which array, one source of truth.

The command line (`plan`, `run`, `compare`, `sweep`) and the Python API build
a request with `make_request` alone, so every entry point reads its inputs
the same way:

- the array and the batch: flags (`--accelerators`, `--levels`,
  `--hierarchy`, `--batch`), else the config file's `accelerators` and
  `batch`, else the default config file's (16 and 256, HyPar 6.1);
- the hardware: the default config, the config file, then `--set` keys
  (`hardware.config`: hardware only);
- the plan's and the simulation's options, the traffic model `layout` unless
  another is asked for.

`plan_request` turns a request into its plan (it loads no simulator: `plan`
starts fast); `runner.simulate_request` plans and simulates it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hypar_sim.errors import InputError, clip_value
from hypar_sim.hardware.config import MAX_BATCH, HardwareConfig, load_config, run_keys
from hypar_sim.partition.hierarchy import MAX_MEMBERS, Hierarchy, as_hierarchy
from hypar_sim.partition.kinds import parse_kinds
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.traffic import DEFAULT_TRAFFIC_MODEL
from hypar_sim.planner.training import AUTO, PRECISIONS, Training
from hypar_sim.resources import memory_checks
from hypar_sim.sim.options import SimOptions
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.network import Network, as_graph, load_workload
from hypar_sim.workload.ops import MAX_SIZE

if TYPE_CHECKING:
    from hypar_sim.planner.plan import Plan

Overrides = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class RunRequest:
    """One run's inputs: the network, the array (`hierarchy`; its members are the
    accelerators), the batch, the hardware (the defaults, the config file, then the `--set`
    keys, loaded once), the strategy and its options, and how to simulate."""

    network: str | Network | Graph
    hierarchy: Hierarchy
    batch: int
    hardware: HardwareConfig
    strategy: str = "hypar"
    seq: int | None = None
    dims: tuple[tuple[str, int], ...] = ()  # an ONNX model's other named dynamic axes
    plan_text: str | None = None
    plan: PlanOptions = field(default_factory=PlanOptions)
    sim: SimOptions = field(default_factory=SimOptions)
    #: Plan and simulate past the memory estimates that refuse up front (`--force-memory`:
    #: `resources.check_memory`); running out of memory then ends it instead.
    force_memory: bool = False

    @property
    def accelerators(self) -> int:
        return self.hierarchy.members

    def workload(self) -> Graph:
        """The network as a graph (loaded from its name or path, a dynamic sequence taking
        `seq`; a chain given as a `Network` made a graph, `network.graph_of`)."""
        if isinstance(self.network, str):
            return load_workload(self.network, self.seq, dict(self.dims))
        return as_graph(self.network)


def check_seq(seq: Any) -> int | None:
    """`--seq`: None (the model's own) or a positive number of tokens."""
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 1):
        raise InputError(f"--seq: must be a positive number of tokens, got {clip_value(seq)}")
    return seq


def check_dims(given: Any) -> tuple[tuple[str, int], ...]:
    """`--dim NAME=SIZE` (given several times, or a mapping): named axis sizes."""
    if not given:
        return ()
    texts = [f"{k}={v}" for k, v in given.items()] if isinstance(given, Mapping) else \
        [str(text) for text in given]
    pairs = []
    for text in texts:
        name, _, size = text.partition("=")
        if not name.strip() or not size.strip().isdigit() or \
                not 1 <= int(size) <= MAX_SIZE:
            raise InputError(f"--dim: must be NAME=SIZE with SIZE from 1 to {MAX_SIZE:,}, "
                             f"got {clip_value(text)}")
        if name.strip() in dict(pairs):
            raise InputError(f"--dim: {clip_value(name.strip())} is given twice; give each "
                             "size once")
        pairs.append((name.strip(), int(size)))
    return tuple(pairs)


def _count(value: Any, flag: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise InputError(f"{flag}: must be an integer from 1 to {most:,}, got "
                         f"{clip_value(value)}")
    return value


def _hierarchy(accelerators: int | None, levels: int | None,
               hierarchy: str | Sequence[int] | Hierarchy | None, file_count: int | None,
               default_count: int) -> Hierarchy:
    """The array from --levels, --hierarchy or the accelerator count (the flag's, the config
    file's, or the default: its prime factors, largest first, 12 -> 3x2x2). A hierarchy
    given by flag sets the count (the config file's does not bind it; the flag's must
    match)."""
    if accelerators is not None:
        _count(accelerators, "--accelerators", MAX_MEMBERS)
    count = accelerators if accelerators is not None or levels is not None \
        or hierarchy is not None else file_count
    if levels is not None:
        if hierarchy is not None:
            raise InputError("--levels: give --levels or --hierarchy, not both")
        array = as_hierarchy(levels)
        if accelerators is not None and accelerators != array.members:
            raise InputError(f"--levels: {levels} two-way levels make {array.members} "
                             f"accelerators, not --accelerators {accelerators}")
        return array
    if isinstance(hierarchy, Hierarchy):
        array = hierarchy
    elif isinstance(hierarchy, str):
        return Hierarchy.parse(hierarchy, count)
    elif hierarchy is not None:
        array = Hierarchy(tuple(hierarchy))
    else:
        return Hierarchy.for_count(count if count is not None else default_count)
    if count is not None and array.members != count:
        raise InputError(f"--hierarchy: {array} has {array.members} members, but there are "
                         f"{count} accelerators; allowed: level sizes whose product is {count}")
    return array


def _pipeline_array(count: int, stages: int) -> Hierarchy:
    """The default array of a pipeline: its stages on top, the rest as the count's."""
    if count % stages:
        divisors = [d for d in range(2, count + 1) if count % d == 0][:8]
        raise InputError(f"--pipeline {stages}: does not divide the {count} accelerators; use "
                         f"a divisor of {count} ({', '.join(map(str, divisors))}) or "
                         f"--accelerators a multiple of {stages}")
    return Hierarchy((stages, *Hierarchy.for_count(count // stages).sizes))


def make_request(network: str | Network | Graph, *, accelerators: int | None = None,
                 batch: int | None = None, levels: int | None = None,
                 hierarchy: str | Sequence[int] | Hierarchy | None = None,
                 config: str | None = None,
                 overrides: Mapping[str, Any] | Overrides | None = None,
                 seq: int | None = None, dims: Any = None, strategy: str = "hypar",
                 plan_text: str | None = None,
                 kinds: str | Sequence[str] | None = None, search: str = "greedy",
                 traffic_model: str = DEFAULT_TRAFFIC_MODEL, objective: str = "bytes",
                 phases: str = "training", sim: SimOptions | None = None,
                 progress: bool = False, optimizer: str = "sgd", precision: str = "fp32",
                 recompute: str = "none", zero: int | str = 0, pipeline: int | str = 1,
                 microbatches: int = 1, schedule: str = "1f1b",
                 stages: Sequence[str] | str | None = None,
                 force_memory: bool = False) -> RunRequest:
    """The request of one run, every value checked (bad input: InputError, one line).
    `accelerators` and `batch` None: the config file's, else the defaults (16, 256);
    `kinds` None: HyPar's batch and in, or the strategy's paper's own; `plan_text` makes
    the strategy `explicit`; the plan's estimate sees the simulation's topology."""
    if isinstance(stages, str):
        stages = [name.strip() for name in stages.split(",") if name.strip()]
    free = tuple(name for name, value in (("pipeline", pipeline), ("recompute", recompute),
                                          ("zero", zero)) if value == AUTO)
    if "pipeline" in free and (hierarchy is not None or levels is not None):
        raise InputError("--pipeline auto: optimal puts the stages on the array's top level "
                         "and the default hierarchy of the rest below them; drop --hierarchy "
                         "and --levels, or give --pipeline S")
    if "pipeline" in free and (microbatches != 1 or stages or schedule != "1f1b"):
        raise InputError("--pipeline auto: optimal chooses the micro-batches and the stages "
                         "(1F1B); drop --microbatches, --stages and --schedule")
    training = Training(optimizer, precision, "none" if recompute == AUTO else recompute,
                        0 if zero == AUTO else zero, 1 if pipeline == AUTO else pipeline,
                        microbatches, schedule, tuple(stages or ()))
    overrides = dict(overrides or {})
    word = PRECISIONS[precision].word_bytes
    if word is not None:  # 16-bit values: the hardware's word follows
        if overrides.get("word_bytes", word) != word:
            raise InputError(f"--precision {precision}: computes with {word}-byte words, not "
                             f"word_bytes={overrides['word_bytes']}; drop one of them")
        overrides["word_bytes"] = word
    given, hardware = load_config(config, overrides)
    defaults = run_keys()
    array = _hierarchy(accelerators, levels, hierarchy, given.get("accelerators"),
                       defaults["accelerators"])
    if training.pipelined and hierarchy is None and levels is None:
        array = _pipeline_array(array.members, training.stages)
    batch = batch if batch is not None else given.get("batch", defaults["batch"])
    _count(batch, "--batch", MAX_BATCH)
    check_seq(seq)
    sim = sim or SimOptions()
    if isinstance(kinds, str):
        kinds = parse_kinds(kinds)
    elif kinds is not None:
        kinds = parse_kinds(",".join(kinds))
    plan = PlanOptions(kinds, search, traffic_model, objective=objective, topology=sim.topology,
                       overlap_gradients=sim.overlap_gradients, progress=progress,
                       phases=phases, training=training, free_training=free)
    return RunRequest(network, array, batch, hardware,
                      "explicit" if plan_text is not None else strategy, seq, check_dims(dims),
                      plan_text, plan, sim, bool(force_memory))


def chooses_training(strategy: str, objective: str) -> bool:
    """Whether `strategy` under `objective` chooses the training options given `auto`
    (`planner.stage_search`: optimal for time alone; the others take their defaults)."""
    return strategy == "optimal" and objective == "time"


def with_strategy(request: RunRequest, strategy: str, objective: str | None = None
                  ) -> RunRequest:
    """The same request under another strategy (and objective), no plan text; the training
    options given `auto` are chosen by optimal alone (another strategy takes their
    defaults)."""
    objective = request.plan.objective if objective is None else objective
    free = request.plan.free_training if chooses_training(strategy, objective) else ()
    plan = dataclasses.replace(request.plan, objective=objective, free_training=free)
    return dataclasses.replace(request, strategy=strategy, plan_text=None, plan=plan)


def plan_request(request: RunRequest, workload: Graph | None = None) -> Plan:
    """The plan of the request's strategy for its network and array, within a cube's memory
    (`workload`: the request's, when the caller has it loaded already)."""
    from hypar_sim.planner.plan import make_plan

    workload = workload if workload is not None else request.workload()
    with memory_checks(not request.force_memory):
        return make_plan(workload, request.strategy, request.hierarchy, request.batch,
                         request.plan_text, request.hardware.word_bytes, request.plan,
                         request.hardware)
