"""Guard rails (issue "Scale", item 4): a case past the memory this process may use is refused
in one line naming the need and the limit, before it is built, not killed by the system."""

from __future__ import annotations

import json

import pytest

from hypar_sim import resources
from hypar_sim.errors import InputError
from hypar_sim.request import make_request, plan_request
from hypar_sim.runner import simulate_request
from hypar_sim.sim.options import SimOptions


def test_memory_limit_is_the_smaller_of_physical_memory_and_rlimit_as():
    import os
    import resource

    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    expected = physical if soft in (resource.RLIM_INFINITY, -1) else min(physical, soft)
    assert resources.memory_limit_bytes() == expected


@pytest.mark.parametrize(("limit", "symmetry", "match"), [
    (3 * 2**20, True, "the plan's messages .* rows so far.* would need .* MiB of memory; "
                      "this process may use"),
    (5 * 2**20, False, r"the event-driven engine's 5,312 messages \(routed, classified and "
                       r"simulated\) would need .* MiB of memory; this process may use"),
])
def test_too_many_messages_are_refused_in_one_line(monkeypatch, limit, symmetry, match):
    """vgg_a's HyPar plan on 64 accelerators sends 44,608 messages in 5,312 rows (a ring's
    k - 1 rounds are a row per member, which the event-driven engine sends as one message):
    with the process allowed 3 MiB the plan's rows (650 B each, 6,080 made on the way: 3.8
    MiB) are refused as the collectives make them; with 5 MiB the event-driven engine
    refuses to route, classify and simulate them (2.5 KB a message: 12.7 MiB); the analytic
    engine runs the same case."""
    monkeypatch.setattr(resources, "memory_limit_bytes", lambda: limit)
    request = make_request("vgg_a", accelerators=64, batch=256,
                           sim=SimOptions(symmetry=symmetry))
    with pytest.raises(InputError, match=match) as refused:
        simulate_request(request)
    assert "\n" not in str(refused.value) and "MiB of memory" in str(refused.value)
    assert str(refused.value).endswith("or --force-memory to try anyway")
    if limit > 4 * 2**20:
        plan_request(request)
        quick = make_request("vgg_a", accelerators=64, batch=256,
                             sim=SimOptions(engine="analytic"))
        assert simulate_request(quick).traffic_bytes > 0


def test_force_memory_plans_and_runs_past_the_estimates(monkeypatch, capsys):
    """`--force-memory` (a request's `force_memory`) turns the up-front refusals off for that
    request's planning and simulation, and for it alone: vgg_a on 64 refused at 3 MiB runs
    to the same step as with the memory it needs."""
    from hypar_sim import cli

    args = ["run", "vgg_a", "--accelerators", "64", "--json"]
    expected = simulate_request(make_request("vgg_a", accelerators=64)).latency_s
    monkeypatch.setattr(resources, "memory_limit_bytes", lambda: 3 * 2**20)
    assert cli.main(args) == 2 and "--force-memory" in capsys.readouterr().err
    assert cli.main([*args, "--force-memory"]) == 0
    assert json.loads(capsys.readouterr().out)["latency_s"] == expected
    forced = make_request("vgg_a", accelerators=64, force_memory=True)
    assert simulate_request(forced).latency_s == expected
    with pytest.raises(InputError, match="--force-memory"):  # the checks are back
        simulate_request(make_request("vgg_a", accelerators=64))


def test_running_out_of_memory_is_one_line(monkeypatch, capsys):
    """A MemoryError past the estimates (which refuse up front) ends the command with one
    line naming the memory the process may use and what to change, exit 2, no traceback."""
    from hypar_sim import cli

    def exhausted(args):
        raise MemoryError

    monkeypatch.setitem(cli.COMMANDS, "run", exhausted)
    assert cli.main(["run", "vgg_a"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "ran out of memory" in error and "GiB" in error
    assert "--engine analytic" in error and "Traceback" not in error


_REUSE = """
import resource, numpy as np
from hypar_sim.resources import keep_freed_memory
keep_freed_memory()
def faults(words, together):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        arrays = [np.ones(words) for _ in range(together)]
        del arrays
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults(2**17, 4)  # the heap grown once
print(faults(2**17, 4), faults(2**15, 16))
"""


@pytest.mark.skipif(not hasattr(__import__("ctypes").CDLL(None), "mallopt"),
                    reason="glibc's mallopt only")
def test_freed_memory_is_kept_for_the_next_arrays():
    """`keep_freed_memory`: 20 rounds of four 1 MiB arrays (or sixteen of 256 KiB) freed
    together take their pages again without faults. glibc's defaults give the heap's top
    back after each round and fault every page in again: 19,840 faults in each case."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _REUSE], capture_output=True, text=True,
                         check=True).stdout.split()
    assert max(int(x) for x in out) < 500, out
