"""How a sweep's cases run: one after another, in a local process pool, or on a Dask
cluster. Each finished row goes to a callback as it finishes; a worker that dies costs
only its own case (after a retry); Ctrl-C reaches the sweep, not its workers."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

from hypar_sim import __version__
from hypar_sim.errors import InputError, clip_value
from hypar_sim.resources import process_settings

if TYPE_CHECKING:
    from hypar_sim.sweep import Case

Runner = Callable[[Any, Any], dict[str, Any]]  # (case, options) -> its row


def _run_isolated(case: Case, options, runner: Runner, attempts: int = 2) -> dict[str, Any]:
    """Run one case in a process of its own; a dying worker is retried, then recorded."""
    for _ in range(attempts):
        with _pool(1) as pool:
            try:
                return pool.submit(runner, case, options).result()
            except BrokenProcessPool:
                continue
    return case.inputs() | {"error": f"worker process died {attempts} times",
                            "version": __version__}


def _leave_interrupts_to_the_parent(parent: int | None = None) -> None:
    """Ctrl-C (and a SIGTERM sent to the group) reaches every process: workers ignore them,
    the sweep itself stops (a worker killed mid-case would be recorded as a failed row). A
    worker dies with the process that started it, even one killed by SIGKILL (Linux's
    PR_SET_PDEATHSIG; elsewhere a worker ends when it next finds its pipe closed)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:  # it died before prctl took effect
        os._exit(1)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _start_worker(parent: int | None) -> None:
    """A pool worker's settings: interrupts left to `parent`, the command line's process
    settings (a forked worker has them already, a spawned one not)."""
    process_settings()
    _leave_interrupts_to_the_parent(parent)


def _pool(workers: int) -> ProcessPoolExecutor:
    """A process pool whose workers leave interrupts to this process and die with it (a
    worker started by a fork server, whose parent is the server, is not checked against
    this process)."""
    forked = multiprocessing.get_start_method() == "fork"
    return ProcessPoolExecutor(workers, initializer=_start_worker,
                               initargs=(os.getpid() if forked else None,))


def in_worker() -> bool:
    """Whether this process was started by another (a pool's or a cluster's worker), where a
    pool of its own would multiply the processes (or, in a daemonic worker, cannot start)."""
    return multiprocessing.parent_process() is not None


def parallel_map(function: Callable[[Any], Any], items: Sequence[Any],
                 workers: int | None = None, progress: bool = False, unit: str = "run"
                 ) -> list[Any]:
    """`function` over `items` in a process pool (Ctrl-C left to the caller), results in
    order; one after another with one worker or one item. With `progress`, a bar on stderr
    (counting `unit`s) once the whole has taken 2 s."""
    workers = min(workers or os.cpu_count() or 1, len(items))
    if workers <= 1 and not progress:
        return [function(item) for item in items]
    from tqdm import tqdm

    with tqdm(total=len(items), unit=unit, delay=2, disable=not progress) as bar:
        if workers <= 1:
            results = []
            for item in items:
                results.append(function(item))
                bar.update(1)
            return results
        with _pool(workers) as pool:
            results = []
            try:
                for result in pool.map(function, items):
                    results.append(result)
                    bar.update(1)
            except BaseException:  # Ctrl-C or a failed item: no worker finishes its item
                _stop(pool)
                raise
            return results


def _stop(pool: ProcessPoolExecutor) -> None:
    """End `pool`'s workers now (its shutdown would wait for their items to finish: 19 s
    after Ctrl-C in optimal's search of GPT-3 2.7B), the items not started cancelled."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):  # CPython's
        process.kill()  # (they ignore SIGTERM: `_leave_interrupts_to_the_parent`)
    queue = getattr(pool, "_call_queue", None)
    if queue is not None:  # items it was still writing to the workers are dropped
        queue.cancel_join_thread()
    pool.shutdown(wait=False, cancel_futures=True)


def _run_pool(cases: list[Case], workers: int, options, on_row, runner: Runner) -> list[Case]:
    """Run `cases` in one process pool; returns the cases lost when a worker died."""
    lost = []
    pool = _pool(workers)
    try:
        futures: dict[Future, Case] = {pool.submit(runner, c, options): c for c in cases}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                try:
                    row = future.result()
                except BrokenProcessPool:
                    lost.append(futures[future])
                    continue
                on_row(row)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # an error in on_row stops the sweep now
    return lost


def _run_local(todo: list[Case], workers: int, options, on_row: Callable[[dict], None],
               runner: Runner) -> None:
    """Run cases in a process pool. A worker that dies takes the pool and every case not yet
    finished with it: those get a second pool; what that one loses too is rerun one process
    each, so only the culprit fails (after one retry)."""
    lost = _run_pool(todo, workers, options, on_row, runner)
    if lost:
        lost = _run_pool(sorted(lost, key=todo.index), workers, options, on_row, runner)
    for case in sorted(lost, key=todo.index):
        on_row(_run_isolated(case, options, runner))


def _run_dask(todo: list[Case], scheduler: str | None, options, on_row, runner: Runner,
              workers: int | None = None) -> None:
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise InputError("--executor dask: dask.distributed is not installed; "
                         "pip install -e '.[dask]'") from None
    cluster = None if scheduler else LocalCluster(
        n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
        dashboard_address=None)
    try:
        try:
            client = Client(scheduler or cluster, timeout=30)
        except (OSError, ValueError) as exc:  # unreachable, or an unknown address scheme
            raise InputError(f"--scheduler: cannot reach the Dask scheduler at "
                             f"{clip_value(scheduler)} ({clip_value(str(exc))})") from None
        with client:
            futures = [client.submit(runner, case, options, pure=False, retries=1)
                       for case in todo]
            for future in as_completed(futures):
                try:
                    on_row(future.result())
                except Exception as exc:  # noqa: BLE001 - e.g. the worker died twice
                    case = todo[futures.index(future)]
                    on_row(case.inputs() | {"error": f"{type(exc).__name__}: {exc}",
                                            "version": __version__})
    finally:
        if cluster is not None:
            cluster.close()


def check_scheduler(executor: str, scheduler: str | None) -> None:
    """Refuse a --scheduler address Dask cannot read (its scheme, e.g. foo://) or one given
    without --executor dask, before the sweep starts."""
    if scheduler is None:
        return
    if executor != "dask":
        raise InputError(f"--scheduler: only with --executor dask, not --executor {executor}")
    try:
        from distributed.comm import get_address_host, registry
        from distributed.comm.addressing import parse_address
        registry.get_backend(parse_address(scheduler)[0])
        get_address_host(scheduler)
    except ImportError:
        return  # _run_dask names the missing package
    except (ValueError, TypeError) as exc:
        raise InputError(f"--scheduler: {clip_value(scheduler)} is not a Dask scheduler "
                         f"address ({clip_value(str(exc))}); e.g. tcp://HOST:8786") from None


def execute(todo: Sequence[Case], on_row: Callable[[dict], None], runner: Runner,
            executor: str = "process", workers: int | None = None, scheduler: str | None = None,
            options: Mapping[str, Any] | None = None) -> None:
    """Run `todo` with `runner` (sweep.run_case; a picklable stand-in in tests), handing each
    finished row to `on_row` in the order they finish."""
    todo = list(todo)
    if executor == "serial" or (executor == "process" and (workers == 1 or len(todo) <= 1)):
        for case in todo:
            on_row(runner(case, options))
    elif executor == "process":
        _run_local(todo, workers or os.cpu_count() or 1, options, on_row, runner)
    else:
        _run_dask(todo, scheduler, options, on_row, runner, workers)
