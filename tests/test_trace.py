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


def test_a_summary_trace_keeps_the_classes_and_adds_up_to_every_links_bytes():
    """`--trace-links summary` on 64 accelerators: the symmetry classes stay (the step and
    its events as without a trace), one track per class of accelerators, one GB/s counter
    per class of links whose bins add up to the bytes of each of its links; the trace is
    bounded by the classes (at most 257 counter values a class), not the messages."""
    from hypar_sim.request import make_request
    from hypar_sim.runner import SimOptions, simulate_request

    def run(**sim):
        return simulate_request(make_request(
            "vgg_a", accelerators=64, batch=1024, sim=SimOptions(**sim),
            traffic_model="layout_levels"))

    plain, traced = run(), run(trace=True, trace_links="summary")
    assert traced.latency_cycles == plain.latency_cycles and traced.events == plain.events
    tracks = [e for e in traced.trace_events if e["ph"] == "M" and e["pid"] == 1
              and e["name"] == "thread_name"]
    alike = sum(1 + int(e["args"]["name"].split(" and ")[1].split()[0])
                if " and " in e["args"]["name"] else 1 for e in tracks)
    assert 1 < len(tracks) < 64 and alike == 64  # every accelerator in one class's track
    counters = defaultdict(list)
    for event in traced.trace_events:
        if event["ph"] == "C":
            counters[event["name"]].append((event["ts"], event["args"]["GB/s"]))
    by_name = {link.link: link.bytes for link in traced.per_link}
    total = 0.0
    for name, values in counters.items():
        assert len(values) <= 257
        width_s = (values[1][0] - values[0][0]) / 1e6
        carried = sum(rate for _, rate in values) * width_s * 1e9
        link, _, rest = name.partition(" and ")
        assert carried == pytest.approx(by_name[link], rel=1e-9)
        total += carried * (1 + (int(rest.split()[0]) if rest else 0))
    assert total == pytest.approx(sum(by_name.values()), rel=1e-9)


def test_trace_links_summary_needs_a_trace(cli):
    refused = cli("run", "lenet_c", "--trace-links", "summary")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "--trace-links summary: needs --trace FILE" in refused.stderr


def test_summary_counters_never_exceed_a_links_bandwidth_and_reach_the_last_bin(cli, tmp_path):
    """Equal chunks granted together share a link's lanes over their common holding time:
    no bin of a counter is above the link's bandwidth (they were, up to 2x, when each
    chunk's bytes were spread over its own service). A step whose last bytes fall in the
    last of the 256 bins is written (it was an IndexError)."""
    from hypar_sim.hardware.config import load_hardware
    from hypar_sim.hardware.topology import make_topology
    from hypar_sim.partition.hierarchy import Hierarchy
    from hypar_sim.request import make_request
    from hypar_sim.runner import SimOptions, simulate_request

    result = simulate_request(make_request("vgg_a", accelerators=16, batch=128,
                                           sim=SimOptions(trace=True, trace_links="summary")))
    topology = make_topology("htree", load_hardware(), Hierarchy(result.hierarchy))
    capacity = {link.name: link.bandwidth_bytes_per_cycle * result.clock_hz / 1e9
                for link in topology.links}  # GB/s
    peaks = defaultdict(float)
    for event in result.trace_events:
        if event["ph"] == "C":
            link = event["name"].partition(" and ")[0]
            peaks[link] = max(peaks[link], event["args"]["GB/s"])
    assert max(peaks.values()) > 0
    assert all(peak <= capacity[link] * (1 + 1e-9) for link, peak in peaks.items()), \
        {link: (peak, capacity[link]) for link, peak in peaks.items()}
    out = tmp_path / "t.json"
    run = cli("run", "lenet_c", "--accelerators", "4", "--set",
              "link_bandwidth_gbps=11.94915254237288", "--trace", str(out), "--trace-links",
              "summary")
    assert run.returncode == 0, run.stderr
    assert out.stat().st_size > 0
