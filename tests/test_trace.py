"""`run --trace`: a Chrome/Perfetto trace whose events add up to the result's totals."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import pytest


@pytest.mark.parametrize("network, accelerators", [("lenet_c", 4), ("resnet18", 4)])
def test_trace_events_add_up_to_the_results_totals(network, accelerators):
    result = _traced(network, accelerators)
    us = 1e6 / result.clock_hz
    busy, carried = defaultdict(float), defaultdict(float)
    names = {}
    for event in result.trace_events:
        if event["ph"] == "M" and event["name"] == "thread_name" and event["pid"] == 2:
            names[event["tid"]] = event["args"]["name"]
        elif event.get("cat") == "compute":
            busy[event["tid"]] += event["dur"]
            assert event["args"]["cycles"] * us == pytest.approx(event["dur"])
        elif event.get("cat") == "link":
            carried[event["tid"]] += event["args"]["bytes"]
            assert event["ts"] + event["dur"] <= result.latency_cycles * us * (1 + 1e-12)
    for member in result.per_accelerator:
        assert busy[member.accelerator] == pytest.approx(member.busy_cycles * us, rel=1e-9)
    by_name = {link.link: link.bytes for link in result.per_link}
    assert {names[t]: b for t, b in carried.items()} == pytest.approx(
        {name: b for name, b in by_name.items() if b})


def _traced(network, accelerators):
    from hypar_sim.request import make_request
    from hypar_sim.runner import SimOptions, simulate_request

    return simulate_request(make_request(network, accelerators=accelerators, batch=16,
                                         sim=SimOptions(trace=True)))


def test_cli_writes_a_trace_perfetto_can_load(tmp_path):
    path = tmp_path / "step.json"
    done = subprocess.run([sys.executable, "-m", "hypar_sim", "run", "lenet_c",
                           "--accelerators", "4", "--trace", str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "trace written to" in done.stdout
    trace = json.loads(path.read_text())
    assert {e["ph"] for e in trace["traceEvents"]} == {"M", "X"}
    assert any(e.get("name", "").endswith("forward") for e in trace["traceEvents"])
    refused = subprocess.run([sys.executable, "-m", "hypar_sim", "run", "lenet_c", "--engine",
                              "analytic", "--trace", str(tmp_path / "no.json")],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and not (tmp_path / "no.json").exists()
