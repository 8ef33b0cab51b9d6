"""Sweeps: many simulations, one CSV row each, in parallel, resumable.

A sweep is the cartesian product of networks, strategies, topologies,
accelerator counts, batch sizes, hierarchies, kind sets, searches, traffic
models, objectives, engines, overlap, phases (training or forward), optimizers, precisions,
ZeRO stages, recomputation and hardware
overrides (`--set key=v1,v2`).
Each case becomes one row with every input and every scalar output of
`run --json` (dicts flattened to `name.key` columns; lists, the plan, the
per-layer and per-link tables as JSON text). A failed simulation becomes a
row with its error in the `error` column.

Rows are written as they finish: each is appended to the output CSV with a
single write of one whole line, so a killed sweep leaves whole rows (a torn
last line, if the file system ever leaves one, is dropped on resume).
Rerunning the same sweep skips the cases already in the file. When all cases
are done the file is rewritten in the sweep's canonical order (to a temporary
file, then renamed), so a resumed sweep and an uninterrupted one give the
same CSV row for row, whatever the number of workers.

Executors: local processes (default, all cores), `serial` (in this process),
or a dask.distributed cluster (`executor="dask"`, `scheduler="tcp://HOST:8786"`;
without a scheduler address a LocalCluster is started).
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import os
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypar_sim import __version__
from hypar_sim.atomic import atomic_write_text, check_writable
from hypar_sim.errors import InputError, clip_value
from hypar_sim.executors import Runner, execute
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import DEFAULT_KINDS
from hypar_sim.planner.strategies import STRATEGIES, objective_for
from hypar_sim.planner.traffic import DEFAULT_TRAFFIC_MODEL
from hypar_sim.planner.training import AUTO
from hypar_sim.request import RunRequest, chooses_training, make_request
from hypar_sim.results import flatten
from hypar_sim.runner import SimOptions, simulate_request
from hypar_sim.sim.defaults import DEFAULT_DES_MESSAGES, ENGINES
from hypar_sim.workload.network import available_networks

EXECUTORS = ("process", "serial", "dask")
#: Input columns, in order; then the outputs.
INPUT_COLUMNS = ("network", "strategy", "topology", "accelerators", "batch", "hierarchy", "kinds",
                 "search", "traffic_model", "objective", "engine", "overlap", "overrides",
                 "plan_input", "config_file", "config_digest", "phases", "optimizer",
                 "precision", "zero", "recompute", "pipeline", "microbatches", "schedule",
                 "des_messages")


@dataclass(frozen=True)
class Case:
    """The inputs of one simulation of a sweep."""

    network: str
    strategy: str
    topology: str
    accelerators: int
    batch: int
    engine: str = "des"
    overrides: tuple[tuple[str, Any], ...] = ()  # hardware keys changed for this case
    plan_text: str | None = None  # for the explicit strategy
    config_file: str | None = None
    config_digest: str = ""  # of the config file's contents: a changed file is a new case
    hierarchy: str = ""  # level sizes such as 4x3x2; "" = the count's prime factors
    kinds: str = ",".join(DEFAULT_KINDS)
    search: str = "greedy"
    traffic_model: str = DEFAULT_TRAFFIC_MODEL  # the figures of HyPar's evaluation ask for paper
    objective: str = "bytes"  # what the searching strategies minimise
    overlap: bool = True  # gradient exchange overlapped with the backward pass
    phases: str = "training"  # a whole training step, or forward (inference)
    optimizer: str = "sgd"  # the update rule and its state per parameter
    precision: str = "fp32"  # the number format (`planner.training`)
    zero: int | str = 0  # the ZeRO stage, or auto (optimal chooses)
    recompute: str = "none"  # activation recomputation
    pipeline: int | str = 1  # pipeline stages (1: none), or auto
    microbatches: int = 1  # a pipeline's micro-batches
    schedule: str = "1f1b"  # a pipeline's schedule
    des_messages: int = DEFAULT_DES_MESSAGES  # the DES's budget of messages one by one

    def key(self) -> str:
        """What identifies the case in a CSV (its input columns as text)."""
        return json.dumps([str(self.inputs()[column]) for column in INPUT_COLUMNS])

    def overrides_text(self) -> str:
        return json.dumps(dict(self.overrides), sort_keys=True)

    def inputs(self) -> dict[str, Any]:
        return {"network": self.network, "strategy": self.strategy, "topology": self.topology,
                "accelerators": self.accelerators, "batch": self.batch,
                "hierarchy": self.hierarchy, "kinds": self.kinds, "search": self.search,
                "traffic_model": self.traffic_model, "objective": self.objective,
                "engine": self.engine, "overlap": self.overlap,
                "overrides": self.overrides_text(), "plan_input": self.plan_text or "",
                "config_file": self.config_file or "", "config_digest": self.config_digest,
                "phases": self.phases, "optimizer": self.optimizer,
                "precision": self.precision, "zero": self.zero, "recompute": self.recompute,
                "pipeline": self.pipeline, "microbatches": self.microbatches,
                "schedule": self.schedule, "des_messages": self.des_messages}


#: Input columns added after sweeps were first written, with the value a row without them
#: ran with, its Case default (so an older CSV resumes instead of running again).
ADDED_COLUMNS = {column: Case.__dataclass_fields__[column].default
                 for column in ("phases", "optimizer", "precision", "zero", "recompute",
                                "pipeline", "microbatches", "schedule", "des_messages")}


def row_key(row: Mapping[str, Any]) -> str:
    """The key of a CSV row (values as read back from the file)."""
    values = [row.get(column, ADDED_COLUMNS.get(column)) for column in INPUT_COLUMNS]
    return json.dumps(["" if value is None else str(value)
                       if column not in ("accelerators", "batch") else str(int(value))
                       for column, value in zip(INPUT_COLUMNS, values, strict=True)])


def file_digest(path: str | None) -> str:
    """A short digest of a file's bytes ('' without a file)."""
    if not path:
        return ""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise InputError(f"{path}: cannot read config file ({exc.strerror})") from None


@dataclass(frozen=True)
class SweepSpec:
    """The axes of a sweep; `cases()` is their cartesian product in a fixed order."""

    networks: tuple[str, ...]
    strategies: tuple[str, ...] = ("data", "model", "hypar")
    topologies: tuple[str, ...] = ("htree",)
    accelerators: tuple[int, ...] = (16,)
    batches: tuple[int, ...] = (256,)
    overrides: tuple[tuple[str, tuple[Any, ...]], ...] = ()  # key -> values to sweep
    engines: tuple[str, ...] = ("des",)
    config_file: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    hierarchies: tuple[str, ...] = ("",)
    kinds: tuple[str, ...] = (",".join(DEFAULT_KINDS),)
    searches: tuple[str, ...] = ("greedy",)
    traffic_models: tuple[str, ...] = ("layout",)
    objectives: tuple[str, ...] = ("bytes",)  # for strategies that take them (else bytes)
    overlaps: tuple[bool, ...] = (True,)
    phases: tuple[str, ...] = ("training",)
    optimizers: tuple[str, ...] = ("sgd",)
    precisions: tuple[str, ...] = ("fp32",)
    zeros: tuple[int | str, ...] = (0,)
    recomputes: tuple[str, ...] = ("none",)
    pipelines: tuple[int | str, ...] = (1,)
    microbatches: tuple[int, ...] = (1,)
    schedules: tuple[str, ...] = ("1f1b",)
    des_messages: int = DEFAULT_DES_MESSAGES  # every case's (`--des-messages`)

    def cases(self) -> list[Case]:
        keys = [key for key, _ in self.overrides]
        value_lists = [values for _, values in self.overrides]
        digest = file_digest(self.config_file)
        result = []
        for (network, strategy, topology, count, batch, hierarchy, kinds, search, model,
             objective, engine, overlap, phases, optimizer, precision, zero,
             recompute, stages, micro, schedule) in itertools.product(
                self.networks, self.strategies, self.topologies, self.accelerators,
                self.batches, self.hierarchies, self.kinds, self.searches, self.traffic_models,
                self.objectives, self.engines, self.overlaps, self.phases, self.optimizers,
                self.precisions, self.zeros, self.recomputes, self.pipelines,
                self.microbatches, self.schedules):
            if not chooses_training(strategy, objective_for(strategy, objective)):
                # the defaults where the strategy does not choose
                zero, recompute, stages = (Case.zero if zero == AUTO else zero,
                                           Case.recompute if recompute == AUTO else recompute,
                                           Case.pipeline if stages == AUTO else stages)
            if stages in (1, AUTO):  # no pipeline, or optimal's choice: no micro-batches given
                micro, schedule = 1, "1f1b"
            for values in itertools.product(*value_lists):
                result.append(Case(network, strategy, topology, count, batch, engine,
                                   tuple(zip(keys, values, strict=True)),
                                   config_file=self.config_file, config_digest=digest,
                                   hierarchy=hierarchy, kinds=kinds, search=search,
                                   traffic_model=model,
                                   objective=objective_for(strategy, objective)
                                   if strategy in STRATEGIES else objective, overlap=overlap,
                                   phases=phases, optimizer=optimizer, precision=precision,
                                   zero=zero, recompute=recompute, pipeline=stages,
                                   microbatches=micro, schedule=schedule,
                                   des_messages=self.des_messages))
        return list(dict.fromkeys(result))  # a strategy that takes no objective runs once


def parse_list(text: str, allowed: Sequence[str] | None, what: str) -> tuple[str, ...]:
    """A comma-separated list without repeats; 'all' means every allowed value."""
    items = tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))
    if allowed is not None:
        if items == ("all",):
            return tuple(allowed)
        for item in items:
            if item not in allowed:
                raise InputError(f"{what}: unknown '{item}'; allowed: {', '.join(allowed)} or all")
    if not items:
        raise InputError(f"{what}: give at least one value")
    return items


def parse_ints(text: str, what: str, most: int, auto: bool = False) -> tuple[int | str, ...]:
    """Comma-separated integers, each from 1 to `most` (checked before any case runs); with
    `auto`, `auto` among them (optimal chooses)."""
    items = parse_list(text, None, what)
    try:
        values = tuple(item if auto and item == AUTO else int(item) for item in items)
    except ValueError:
        kind = "integers or auto" if auto else "integers"
        raise InputError(f"{what}: must be comma-separated {kind}, got "
                         f"{clip_value(text)}") from None
    for value in values:
        if value != AUTO and not 1 <= value <= most:
            raise InputError(f"{what}: each must be an integer from 1 to {most:,}, got "
                             f"{clip_value(value)}")
    return values


def case_request(case: Case, options: Mapping[str, Any] | None = None) -> RunRequest:
    """The run's request of one case (`hypar_sim.request`, as the command line builds it)."""
    sim = SimOptions(**{"topology": case.topology, "engine": case.engine,
                        "overlap_gradients": case.overlap,
                        "des_messages": int(case.des_messages), **(options or {})})
    return make_request(case.network, accelerators=case.accelerators, batch=case.batch,
                        hierarchy=case.hierarchy or None, config=case.config_file,
                        overrides=case.overrides, strategy=case.strategy,
                        plan_text=case.plan_text, kinds=case.kinds, search=case.search,
                        traffic_model=case.traffic_model,
                        objective=objective_for(case.strategy, case.objective),
                        phases=case.phases, optimizer=case.optimizer,
                        precision=case.precision, zero=_int_or_auto(case.zero),
                        recompute=case.recompute, pipeline=_int_or_auto(case.pipeline),
                        microbatches=int(case.microbatches), schedule=case.schedule, sim=sim)


def _int_or_auto(value: int | str) -> int | str:
    """A case's ZeRO stage or stage count (read back from a CSV: text), or `auto`."""
    return AUTO if value == AUTO else int(value)


def run_case(case: Case, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Simulate one case; never raises: a failure is a row with its error message."""
    row: dict[str, Any] = case.inputs()
    try:
        result = simulate_request(case_request(case, options))
        data = result.to_dict()
        for key in INPUT_COLUMNS:
            data.pop(key, None)
        row.update(flatten(data))
        row["error"] = ""
    except InputError as exc:
        row["error"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a sweep records failures and goes on
        last = traceback.extract_tb(exc.__traceback__)[-1]
        row["error"] = f"{type(exc).__name__}: {exc} ({Path(last.filename).name}:{last.lineno})"
    row["version"] = __version__
    return row


def _csv_line(row: Mapping[str, Any], columns: Sequence[str]) -> str:
    buffer = io.StringIO()
    csv.DictWriter(buffer, columns, extrasaction="ignore", lineterminator="\n").writerow(row)
    return buffer.getvalue()


class CsvJournal:
    """The sweep's output CSV: whole rows appended one write each; read back to resume."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: list[str] | None = None
        self.rows: dict[str, dict[str, Any]] = {}
        check_writable(path, "--out")
        if path.exists():
            self._load()

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{self.path}: cannot read it as a sweep CSV ({exc})") from None
        if text and not text.endswith("\n"):  # a torn last line: keep whole rows only
            text = text[: text.rfind("\n") + 1]
            atomic_write_text(self.path, text)
        reader = csv.DictReader(io.StringIO(text))
        self.columns = list(reader.fieldnames or [])
        missing = set(INPUT_COLUMNS) - set(self.columns) - set(ADDED_COLUMNS)
        if self.columns and missing:
            raise InputError(f"{self.path}: not a sweep CSV of this version (no column "
                             f"{sorted(missing)[0]}); choose another --out")
        try:
            for row in reader:
                row = {column: value for column, value in ADDED_COLUMNS.items()
                       if row.get(column) is None} | row
                self.rows[row_key(row)] = row
        except (ValueError, KeyError) as exc:
            raise InputError(f"{self.path}: not a sweep CSV ({exc}); choose another --out") from None

    def append(self, row: dict[str, Any]) -> None:
        if self.columns is None or not set(row) <= set(self.columns):
            self._rewrite_with(row)
        else:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(_csv_line(row, self.columns))  # one write of one whole line
                handle.flush()
                os.fsync(handle.fileno())
        self.rows[row_key(row)] = row

    def _rewrite_with(self, row: Mapping[str, Any]) -> None:
        """New columns (the first row, or a row with more outputs): rewrite the whole file."""
        self.columns = ordered_columns([*(self.columns or []), *row])
        self.write_all([*self.rows.values(), row])

    def write_all(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self.columns = ordered_columns([*(self.columns or INPUT_COLUMNS),
                                        *(c for row in rows for c in row)])
        text = "".join([_csv_line({c: c for c in self.columns}, self.columns),
                        *(_csv_line(row, self.columns) for row in rows)])
        atomic_write_text(self.path, text)


def ordered_columns(columns: Iterable[str]) -> list[str]:
    """A fixed order whatever row came first: inputs, outputs (sorted), error, version."""
    names = set(columns)
    last = ("error", "version")
    outputs = sorted(names - set(INPUT_COLUMNS) - set(last))
    return [*INPUT_COLUMNS, *outputs, *(c for c in last if c in names)]


def _progress(total: int, initial: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="run", disable=not enabled, dynamic_ncols=True,
                desc="sweep", smoothing=0.1)


def run_cases(cases: Sequence[Case], workers: int | None = None, progress: bool = False,
              options: Mapping[str, Any] | None = None,
              cache: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Rows of `cases` in their order, without a file; `cache` (key -> row) is reused and filled."""
    cache = {} if cache is None else cache
    todo = list(dict.fromkeys(case for case in cases if case.key() not in cache))
    bar = _progress(len(todo), 0, progress)

    def on_row(row: dict[str, Any]) -> None:
        cache[row_key(row)] = row
        bar.update(1)

    try:
        execute(todo, on_row, run_case, "process", workers, None, options)
    finally:
        bar.close()
    return [cache[case.key()] for case in cases]


def run_sweep(
    cases: Sequence[Case],
    out: str | Path,
    executor: str = "process",
    workers: int | None = None,
    scheduler: str | None = None,
    options: Mapping[str, Any] | None = None,
    progress: bool = True,
    runner: Runner = run_case,
) -> list[dict[str, Any]]:
    """Run every case not yet in `out`, append rows as they finish, then write `out` in order."""
    if executor not in EXECUTORS:
        raise InputError(f"executor: unknown '{executor}'; allowed: {', '.join(EXECUTORS)}")
    if scheduler and executor != "dask":
        raise InputError("--scheduler: only with --executor dask")
    journal = CsvJournal(Path(out))
    todo = [case for case in cases if case.key() not in journal.rows]
    bar = _progress(len(cases), len(cases) - len(todo), progress)

    def on_row(row: dict[str, Any]) -> None:
        journal.append(row)
        bar.update(1)

    try:
        execute(todo, on_row, runner, executor, workers, scheduler, options)
    finally:
        bar.close()
    keys = [case.key() for case in cases]
    ordered = [journal.rows[key] for key in keys if key in journal.rows]
    others = [row for key, row in journal.rows.items() if key not in set(keys)]
    journal.write_all(ordered + others)  # rows of earlier, different sweeps stay, after these
    return ordered


def all_networks() -> tuple[str, ...]:
    return tuple(available_networks())


def check_axes(spec: SweepSpec) -> None:
    """Refuse unknown strategies and engines, and `auto` that no case would choose, up front
    (the rest is checked per case)."""
    chooses = any(chooses_training(strategy, objective) for strategy in spec.strategies
                  for objective in spec.objectives)
    for flag, values in (("--zeros", spec.zeros), ("--recomputes", spec.recomputes),
                         ("--pipelines", spec.pipelines)):
        if AUTO in values and not chooses:
            raise InputError(f"{flag} auto: only optimal chooses it, for the time objective; "
                             "add optimal to --strategies and time to --objectives")
    if AUTO in spec.pipelines and any(spec.hierarchies):
        raise InputError("--pipelines auto: optimal puts the stages on the array's top level "
                         "and the default hierarchy of the rest below them; drop --hierarchies "
                         "or give stage counts")
    for strategy in spec.strategies:
        if strategy not in STRATEGIES or STRATEGIES[strategy].takes_plan:
            raise InputError(f"--strategies: unknown '{strategy}'; allowed: "
                             f"{', '.join(s for s, v in STRATEGIES.items() if not v.takes_plan)}")
    for engine in spec.engines:
        if engine not in ENGINES:
            raise InputError(f"--engine: unknown '{engine}'; allowed: {', '.join(ENGINES)}")
    for text in spec.hierarchies:
        if text:
            sizes = Hierarchy.parse(text, None, "--hierarchies")
            if sizes.members not in spec.accelerators:
                raise InputError(f"--hierarchies: {text} has {sizes.members} members, which is "
                                 f"not one of --accelerators {','.join(map(str, spec.accelerators))}")
