"""Guard rails (issue "Scale", item 4): a case past the memory this process may use is refused
in one line naming the need and the limit, before it is built, not killed by the system."""

from __future__ import annotations

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


@pytest.mark.parametrize(("limit", "match"), [
    (5 * 2**20, "the plan's messages .* rows so far.* would need .* MiB of memory; this "
                "process may use"),
    (9 * 2**20, "the event-driven engine's 40,640 messages written out one by one would need "
                ".* MiB of memory; this process may use"),
    (25 * 2**20, "the event-driven engine's .* messages would need"),
])
def test_too_many_messages_are_refused_in_one_line(monkeypatch, limit, match):
    """vgg_a's HyPar plan on 64 accelerators sends 40,640 messages in far fewer rows (a
    ring's k - 1 rounds are a row per member; 20,320 messages simulated, in symmetry
    classes): with the process allowed 5 MiB the plan's rows (650 B each) are refused as
    the collectives make them; with 9 MiB the event-driven engine refuses to write the
    messages out one by one (300 B each); with 25 MiB it writes them out and refuses its
    objects for the classes (1.5 KB a message); the analytic engine runs the same case."""
    monkeypatch.setattr(resources, "memory_limit_bytes", lambda: limit)
    request = make_request("vgg_a", accelerators=64, batch=256)
    with pytest.raises(InputError, match=match) as refused:
        simulate_request(request)
    assert "\n" not in str(refused.value) and "MiB of memory" in str(refused.value)
    if limit > 10 * 2**20:
        plan_request(request)
        quick = make_request("vgg_a", accelerators=64, batch=256,
                             sim=SimOptions(engine="analytic"))
        assert simulate_request(quick).traffic_bytes > 0
