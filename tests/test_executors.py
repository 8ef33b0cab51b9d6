"""`executors.parallel_map`: results in order, and a failure (or Ctrl-C) ends the workers at
once instead of waiting for the items they are working on."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from hypar_sim.executors import in_worker, parallel_map


def _square_or_stall(item: int) -> int:
    """Item 0 fails at once; item 1 would work for a minute."""
    if item == 0:
        raise ValueError("item 0 failed")
    if item == 1:
        time.sleep(60)
    return item * item


def _threshold(_: int) -> int:
    import gc

    return gc.get_threshold()[0]


def test_workers_take_the_command_lines_process_settings():
    """A pool's workers collect garbage as the command line does (`resources.process_settings`,
    whatever this process's own threshold)."""
    from hypar_sim.resources import GC_THRESHOLD

    assert parallel_map(_threshold, [0, 1], 2) == [GC_THRESHOLD, GC_THRESHOLD]


def test_results_come_in_order():
    assert parallel_map(_square_or_stall, [2, 3, 4, 5], 2) == [4, 9, 16, 25]


def test_a_failure_ends_the_workers_at_once():
    """The pool's own shutdown waited for item 1's minute (after Ctrl-C in optimal's search
    of GPT-3 2.7B, 19 s); the workers are killed now."""
    started = time.perf_counter()
    with pytest.raises(ValueError, match="item 0 failed"):
        parallel_map(_square_or_stall, [0, 1], 2)
    assert time.perf_counter() - started < 30


def _probe(_: int) -> bool:
    return in_worker()


def test_a_worker_knows_it_is_one():
    """A pool's worker searches optimal's stage counts alone (a pool of its own would
    multiply the processes; in a daemonic cluster worker it cannot start)."""
    assert not in_worker()
    assert parallel_map(_probe, [0, 1], 2) == [True, True]


def test_pools_start_under_a_fork_server():
    """A fork server's workers have the server as parent; they were killed at start-up as
    if this process had died (Python 3.14's default start method on Linux)."""
    code = ("import multiprocessing as mp; mp.set_start_method('forkserver'); "
            "from hypar_sim.executors import parallel_map; print(parallel_map(abs, [-1, -2], 2))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[1, 2]", done.stderr
