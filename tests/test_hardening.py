"""Hardening: every bad input is one clear line and exit 2; nothing is lost; fuzzing."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS
from hypar_sim.planner.plan import evaluate_plan
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.sim.schedule import build_schedule
from hypar_sim.sweep import Case, run_case, run_sweep
from hypar_sim.workload.layers import FeatureShape, make_conv, make_fc
from hypar_sim.workload.network import Network
from tests.conftest import REPO

GOOD_NET = "input: {channels: 1, height: 28, width: 28}\nlayers:\n" \
           "  - {type: conv, out_channels: 4, kernel: 5, pool: {kernel: 2, stride: 2}}\n" \
           "  - {type: fc, out_features: 10}\n"

BAD_NETWORKS = {
    "syntax": ("input: {channels: 1\nlayers: [\n", "YAML syntax error at line"),
    "misspelled key": (GOOD_NET.replace("out_channels", "out_chanels"),
                       "unknown field 'out_chanels' (did you mean 'out_channels'?)"),
    "misspelled top key": (GOOD_NET.replace("layers:", "layer:"), "unknown field 'layer'"),
    "missing field": (GOOD_NET.replace("kernel: 5, ", ""), "missing field 'kernel'"),
    "zero size": (GOOD_NET.replace("out_features: 10", "out_features: 0"), "1 to 16777216, got 0"),
    "negative size": (GOOD_NET.replace("height: 28", "height: -28"), "1 to 16777216, got -28"),
    "non-integer size": (GOOD_NET.replace("kernel: 5", "kernel: 2.5"), "1 to 16777216, got 2.5"),
    "string size": (GOOD_NET.replace("kernel: 5", "kernel: five"), "1 to 16777216, got 'five'"),
    "kernel too large": (GOOD_NET.replace("kernel: 5", "kernel: 29"), "kernel 29 is larger"),
    "stride too large": (GOOD_NET.replace("kernel: 5,", "kernel: 5, stride: 40,"),
                         "stride 40 is larger"),
    "pool too large": (GOOD_NET.replace("pool: {kernel: 2", "pool: {kernel: 30"),
                       "pooling kernel 30 is larger"),
    "empty layers": ("input: {features: 4}\nlayers: []\n", "layers: must be a non-empty list"),
    "only pooling": ("input: {channels: 1, height: 8, width: 8}\nlayers:\n"
                     "  - {type: pool, kernel: 2, stride: 2}\n", "pooling is not a layer"),
    "not a mapping": ("- a\n- b\n", "expected a mapping"),
    "duplicate names": ("input: {features: 4}\nlayers:\n  - {type: fc, name: a, out_features: 3}\n"
                        "  - {type: fc, name: a, out_features: 3}\n", "duplicate layer name 'a'"),
    "bad ceil mode": (GOOD_NET.replace("stride: 2}", "stride: 2, ceil_mode: maybe}"),
                      "ceil_mode: must be true or false"),
    "duplicate key": (GOOD_NET + "input: {features: 4}\n",
                      "YAML error at line 5, column 1: key 'input' given twice in one mapping"),
    "alias bomb": ("a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                   + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
                             for i in range(7)) + GOOD_NET,
                   "its aliases expand it by more than 1,000,000 nodes"),
}

BAD_CONFIGS = {
    "unknown key": ("link_bw: 3\n", "unknown key 'link_bw'"),
    "misspelled key": ("clock_mhz2: 3\n", "did you mean 'clock_mhz'"),
    "wrong type": ("pe_rows: twelve\n", "pe_rows: must be an integer"),
    "wrong unit": ("link_bandwidth_gbps: 1.6 Gb/s\n", "must be a number in Gb/s"),
    "negative bandwidth": ("cube_bandwidth_gb_per_s: -320\n", "out of range; allowed: 0.001 to"),
    "zero PEs": ("pe_count: 0\n", "pe_count: 0 is out of range"),
    "infinite": ("clock_mhz: .inf\n", "clock_mhz: must be a number"),
    "array larger than PE count": ("pe_rows: 14\n", "differs from pe_count"),
    "buffer too small": ("buffer_kib: 0.1\n", "smaller than one PE set needs"),
    "more PUs than vaults": ("pus_per_cube: 64\n", "exceeds vaults_per_cube"),
    "syntax": ("clock_mhz: [\n", "YAML syntax error"),
    "duplicate key": ("clock_mhz: 250\nclock_mhz: 500\n", "key 'clock_mhz' given twice"),
}

BAD_RUNS = {
    "hierarchy not matching the accelerators": (("--accelerators", "24", "--hierarchy", "4x4"),
                                                "4x4 has 16 members, but there are 24"),
    "hierarchy not a list of sizes": (("--hierarchy", "4by4"), "'4by4' is not a list of level"),
    "hierarchy level of size one": (("--hierarchy", "16x1"), "every level size must be >= 2"),
    "unknown split kind": (("--kinds", "batch,xp"), "--kinds: unknown split kind 'xp'"),
    "paper model on a three-way level": (("--accelerators", "12", "--traffic-model", "paper"),
                                         "paper takes only kinds batch,in (dp, mp) on two-way"),
    "paper model with a third kind": (("--traffic-model", "paper", "--kinds", "batch,out"),
                                      "paper takes only kinds batch,in"),
    "unknown traffic model": (("--traffic-model", "exact"), "invalid choice: 'exact'"),
    "unknown search": (("--search", "best"), "invalid choice: 'best'"),
    "more levels than the batch allows": (("--accelerators", "64", "--batch", "32",
                                           "--traffic-model", "paper"),
                                          "batch: 32 is not divisible by the 64 accelerators"),
    "more members than samples": (("--accelerators", "64", "--batch", "32"),
                                  "no kind of batch,in can split node conv1 (conv, output "
                                  "[20, 12, 12]) on the top 6 level"),
    "data parallelism over more members than samples": (
        ("--accelerators", "64", "--batch", "32", "--strategy", "data"), "conv1"),
    "model parallelism over more members than channels and samples": (
        ("--accelerators", "64", "--batch", "32", "--strategy", "model"), "conv1"),
    "batch zero": (("--batch", "0"), "--batch: must be an integer from 1 to 16,777,216, got 0"),
    "unknown strategy": (("--strategy", "best"), "invalid choice: 'best'"),
    "unknown topology": (("--topology", "mesh"),
                         "topology: unknown 'mesh'; allowed: htree, torus, ideal or a topology"),
    "plan with too few layers": (("--accelerators", "2", "--plan", "dp dp"),
                                 "has 2 choice(s), expected 4"),
    "plan with too many levels": (("--accelerators", "2", "--plan", "dp dp dp dp; dp dp dp dp"),
                                  "has 2 level(s), expected 1"),
    "plan with a bad word": (("--accelerators", "2", "--plan", "dp dp xx dp"),
                             "unknown split kind 'xx'; allowed: batch (dp), in (mp), out"),
    "plan a layer cannot take": (("--accelerators", "2", "--plan", "in in in in"),
                                 "node conv1 (conv, output [20, 12, 12]) cannot take (in)"),
    "missing config file": (("--config", "nowhere.yaml"), "nowhere.yaml: config file not found"),
    "chunk zero": (("--chunk-kib", "0"), "--chunk-kib: must be an integer from 1 to 1,048,576"),
    "non-integer accelerators": (("--accelerators", "four"), "invalid int value: 'four'"),
}


def assert_clean_failure(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert fragment in lines[0], lines[0]


@pytest.mark.slow  # 19 processes, 10 s: with the slow ones (test_hardening_limits covers files)
@pytest.mark.parametrize("case", sorted(BAD_NETWORKS))
def test_bad_network_files(cli, tmp_path, case):
    body, fragment = BAD_NETWORKS[case]
    path = tmp_path / "net.yaml"
    path.write_text(body)
    out = tmp_path / "layers.csv"
    result = cli("run", str(path), "--accelerators", "2", "--csv", str(out))
    assert_clean_failure(result, fragment)
    assert str(path) in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_hardware_configs(cli, tmp_path, case):
    body, fragment = BAD_CONFIGS[case]
    path = tmp_path / "hw.yaml"
    path.write_text(body)
    out = tmp_path / "layers.csv"
    result = cli("run", "lenet_c", "--config", str(path), "--csv", str(out))
    assert_clean_failure(result, fragment)
    assert str(path) in result.stderr
    assert not out.exists()


@pytest.mark.slow  # 22 processes, 12 s: with the slow ones (test_cli_plan covers bad flags)
@pytest.mark.parametrize("case", sorted(BAD_RUNS))
def test_bad_run_parameters(cli, tmp_path, case):
    args, fragment = BAD_RUNS[case]
    out = tmp_path / "layers.csv"
    assert_clean_failure(cli("run", "lenet_c", *args, "--csv", str(out)), fragment)
    assert not out.exists()


def test_over_capacity_is_refused_with_numbers(cli, tmp_path):
    out = tmp_path / "layers.csv"
    result = cli("run", "vgg_e", "--accelerators", "2", "--batch", "4096", "--csv", str(out))
    assert_clean_failure(result, "capacity: no plan of kinds batch,in fits vgg_e in a cube")
    assert "needs at least 80 GiB per cube" in result.stderr and "8 GiB" in result.stderr
    assert not out.exists()


def test_unknown_network_name_and_missing_file(cli, tmp_path):
    assert_clean_failure(cli("run", "vgg_z"), "unknown network 'vgg_z'")
    assert_clean_failure(cli("networks", str(tmp_path / "gone.yaml")), "network file not found")


def test_version_and_config_are_recorded(cli, tmp_path):
    version = cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("hypar-sim ")
    data = json.loads(cli("run", "lenet_c", "--accelerators", "4", "--json").stdout)
    assert data["version"] and data["config"]["link_bandwidth_gbps"] == 1.6
    assert data["config"]["accelerators"] == 4 and "chunk_bytes" in data["config"]
    layers = pd.read_csv(cli("run", "lenet_c", "--csv", str(tmp_path / "l.csv")) and
                         tmp_path / "l.csv")
    assert layers.hypar_sim_version.iloc[0] == data["version"] and "config" not in layers
    settings = json.loads((tmp_path / "l.csv.config.json").read_text())
    assert settings["config"]["accelerators"] == 16 and settings["network"] == "lenet_c"
    figure = pd.read_csv(REPO / "results" / "fig06_performance.csv")
    assert figure.hypar_sim_version.iloc[0] and json.loads(figure.base_config.iloc[0])["batch"] == 256


# --- nothing lost -------------------------------------------------------------------------

@pytest.mark.slow  # real processes and sleeps
def test_killed_sweep_resumes_to_the_same_csv(tmp_path):
    """SIGKILL a sweep once some rows are written; resuming gives the uninterrupted CSV."""
    args = [sys.executable, "-m", "hypar_sim", "sweep", "--networks", "vgg_a,vgg_b,alexnet_half",
            "--strategies", "data,model", "--topologies", "htree,torus", "--no-progress",
            "--workers", "1"]
    killed = tmp_path / "killed.csv"
    process = subprocess.Popen([*args, "--out", str(killed)], cwd=REPO, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if killed.exists() and killed.read_text().count("\n") >= 3:  # header + 2 whole rows
            break
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    # A row is ~12 KB: SIGKILL can cut its write at a page boundary. The journal drops
    # such a torn tail when it resumes, so count the whole rows only.
    text = killed.read_text()
    partial = len(pd.read_csv(io.StringIO(text[: text.rfind("\n") + 1])))
    assert 2 <= partial < 12
    subprocess.run([*args, "--out", str(killed)], cwd=REPO, check=True, timeout=300)
    subprocess.run([*args, "--out", str(tmp_path / "full.csv")], cwd=REPO, check=True, timeout=300)
    resumed = pd.read_csv(killed).drop(columns=["wall_s"])
    full = pd.read_csv(tmp_path / "full.csv").drop(columns=["wall_s"])
    pd.testing.assert_frame_equal(resumed, full)


@pytest.mark.slow  # real processes and sleeps
def test_sigterm_stops_a_sweep_like_ctrl_c(tmp_path):
    """SIGTERM to a sweep: one line naming the rows saved, exit 143, the CSV whole rows
    that a rerun resumes."""
    out = tmp_path / "s.csv"
    args = [sys.executable, "-m", "hypar_sim", "sweep", "--networks", "vgg_a,vgg_b,alexnet_half",
            "--strategies", "data,model", "--topologies", "htree,torus", "--no-progress",
            "--workers", "1", "--out", str(out)]
    process = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out.exists() and
                                                out.read_text().count("\n") >= 3):
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "sweep: terminated; " in lines[0] and "rows saved" in lines[0]
    saved = len(pd.read_csv(out))
    assert f"{saved} of 12 rows saved" in lines[0] and 2 <= saved < 12


def crash_on_sconv(case: Case, options) -> dict:
    """A runner whose worker process dies on every sconv case (picklable: module level)."""
    if case.network == "sconv":
        os._exit(3)
    return run_case(case, options)


def test_dying_worker_is_retried_then_recorded(tmp_path):
    cases = [Case(n, "data", "htree", 4, 64) for n in ("lenet_c", "sconv", "cifar_c")]
    rows = run_sweep(cases, tmp_path / "s.csv", workers=2, progress=False, runner=crash_on_sconv)
    by_network = {row["network"]: row for row in rows}
    assert by_network["sconv"]["error"] == "worker process died 2 times"
    assert not by_network["lenet_c"]["error"] and not by_network["cifar_c"]["error"]
    assert len(pd.read_csv(tmp_path / "s.csv")) == 3


@pytest.mark.slow  # real processes and sleeps
def test_dask_worker_death_becomes_a_row(tmp_path):
    pytest.importorskip("dask.distributed")
    cases = [Case(n, "data", "htree", 4, 64) for n in ("lenet_c", "sconv")]
    rows = run_sweep(cases, tmp_path / "s.csv", executor="dask", progress=False,
                     runner=crash_on_sconv)
    by_network = {row["network"]: row for row in rows}
    assert by_network["sconv"]["error"] and not by_network["lenet_c"]["error"]


# --- fuzzing ------------------------------------------------------------------------------

@st.composite
def small_networks(draw):
    channels, size = draw(st.integers(1, 8)), draw(st.integers(4, 16))
    shape = FeatureShape(channels, size, size)
    layers = []
    for index in range(draw(st.integers(1, 4))):
        if shape.height >= 3 and draw(st.booleans()):
            layer = make_conv(f"conv{index}", shape, draw(st.integers(1, 32)),
                              draw(st.integers(1, 3)), padding=draw(st.integers(0, 1)))
        else:
            layer = make_fc(f"fc{index}", shape, draw(st.integers(1, 256)))
        layers.append(layer)
        shape = layer.output
    return Network("fuzz", layers[0].input, tuple(layers))


@pytest.mark.slow  # 500 fuzzed networks
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(net=small_networks(), levels=st.integers(0, 3), data=st.data(),
       link=st.sampled_from([0.4, 1.6, 12.8]), pus=st.sampled_from([1, 4, 32]),
       topology=st.sampled_from(["htree", "torus"]), batch_factor=st.sampled_from([1, 2, 4]))
def test_fuzz_random_networks_plans_and_hardware(net, levels, data, link, pus, topology,
                                                 batch_factor):
    batch = 2**levels * batch_factor
    config = load_hardware(overrides={"link_bandwidth_gbps": link, "pus_per_cube": pus})
    choices = tuple(tuple(data.draw(st.sampled_from(["batch", "in"]))  # HyPar's dp and mp
                          for _ in net.layers) for _ in range(levels))
    columns = tuple(zip(*choices, strict=True)) if choices else tuple(() for _ in net.layers)
    plan = evaluate_plan(net, "explicit", "", batch, Hierarchy.binary(levels), columns,
                         traffic_model="paper")
    schedule = build_schedule(net, plan, config)
    messages = schedule.messages
    assert sum(m.bytes for m in messages) == plan.traffic_bytes
    sent, received = {}, {}
    for m in messages:
        sent[(m.src, m.dst)] = sent.get((m.src, m.dst), 0) + m.bytes
        received[(m.src, m.dst)] = received.get((m.src, m.dst), 0) + m.bytes
    assert sent == received
    results = {}
    for name in (topology, "ideal"):
        result = simulate(net, plan, config, SimOptions(topology=name))
        assert result.traffic_bytes == plan.traffic_bytes
        assert 0 < result.latency_cycles < math.inf
        assert math.isclose(result.energy_pj, sum(result.energy_breakdown_pj.values()),
                            rel_tol=1e-9)
        assert all(value >= 0 for value in result.energy_breakdown_pj.values())
        results[name] = result
    assert results["ideal"].latency_cycles <= results[topology].latency_cycles * (1 + 1e-9)
    analytic = simulate(net, plan, config, SimOptions(topology=topology, engine="analytic"))
    assert 0 < analytic.latency_cycles < math.inf


@st.composite
def layout_plans(draw):
    """A random hierarchy (any level sizes, up to 12 members), batch and a plan of any
    kinds that every layer can take at every level."""
    net = draw(small_networks())
    sizes = tuple(draw(st.lists(st.sampled_from([2, 3]), min_size=0, max_size=3)
                       .filter(lambda s: math.prod(s) <= 12)))
    hierarchy = Hierarchy(sizes)
    batch = draw(st.integers(1, 16))
    model = traffic_model("layout")
    columns = []
    for layer in net.layers:
        column: tuple[str, ...] = ()
        for level in range(hierarchy.levels):
            upper = Hierarchy(sizes[:level + 1])
            kinds = [k for k in KINDS if model.offered(layer, batch, column + (k,), upper)]
            assume(kinds)
            column += (draw(st.sampled_from(kinds)),)
        columns.append(column)
    choices = tuple(zip(*columns, strict=True)) if sizes else ()
    return net, hierarchy, batch, choices


@pytest.mark.slow  # 300 simulations
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.filter_too_much])
@given(case=layout_plans(), link=st.sampled_from([0.4, 1.6, 12.8]),
       pus=st.sampled_from([1, 4, 32]), topology=st.sampled_from(["htree", "torus"]))
def test_fuzz_layout_model_on_any_hierarchy(case, link, pus, topology):
    net, hierarchy, batch, choices = case
    config = load_hardware(overrides={"link_bandwidth_gbps": link, "pus_per_cube": pus})
    columns = tuple(zip(*choices, strict=True)) if choices else tuple(() for _ in net.layers)
    plan = evaluate_plan(net, "explicit", "", batch, hierarchy, columns)
    schedule = build_schedule(net, plan, config)
    messages = schedule.messages
    assert math.isclose(sum(m.bytes for m in messages), plan.traffic_bytes, rel_tol=1e-12)
    assert all(m.src != m.dst and m.bytes > 0 and 0 <= m.level < hierarchy.levels
               for m in messages)
    for own in plan.layouts:  # every member holds at least one index of every loop
        assert (own.box_sizes() >= 1).all()
    results = {}
    for name in (topology, "ideal"):
        result = simulate(net, plan, config, SimOptions(topology=name))
        assert math.isclose(result.traffic_bytes, plan.traffic_bytes, rel_tol=1e-12)
        assert 0 < result.latency_cycles < math.inf
        assert math.isclose(result.energy_pj, sum(result.energy_breakdown_pj.values()),
                            rel_tol=1e-9)
        assert all(value >= 0 for value in result.energy_breakdown_pj.values())
        assert math.isclose(sum(a.sent_bytes for a in result.per_accelerator),
                            plan.traffic_bytes, rel_tol=1e-9, abs_tol=1e-9)
        results[name] = result
    assert results["ideal"].latency_cycles <= results[topology].latency_cycles * (1 + 1e-9)
    analytic = simulate(net, plan, config, SimOptions(topology=topology, engine="analytic"))
    assert 0 < analytic.latency_cycles < math.inf

def test_results_folder_untouched_by_failures(cli):
    before = {p.name: p.stat().st_mtime_ns for p in (REPO / "results").iterdir()}
    cli("reproduce", "--only", "nothing")
    cli("sweep", "--networks", "nonet", "--out", str(REPO / "results" / "never.csv"))
    after = {p.name: p.stat().st_mtime_ns for p in (REPO / "results").iterdir()}
    assert before == after and not Path(REPO / "results" / "never.csv").exists()


def test_more_bad_files(cli, tmp_path):
    binary = tmp_path / "net.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    assert_clean_failure(cli("run", str(binary)), "not a UTF-8 text file")
    huge = tmp_path / "huge.yaml"
    huge.write_text("input: {features: 4}\nlayers:\n  - {type: fc, out_features: 99999999999}\n")
    assert_clean_failure(cli("plan", str(huge)), "must be an integer from 1 to 16777216")
    empty_pool = tmp_path / "pool.yaml"
    empty_pool.write_text(GOOD_NET.replace("pool: {kernel: 2, stride: 2}", "pool: {}"))
    assert_clean_failure(cli("run", str(empty_pool)), "missing field")
    (tmp_path / "afile").write_text("x")
    assert_clean_failure(cli("run", "lenet_c", "--csv", str(tmp_path / "afile" / "l.csv")),
                         "is not a folder")
    plan = tmp_path / "plan.txt"
    plan.write_bytes(b"\xff\xfe")
    assert_clean_failure(cli("plan", "lenet_c", "--levels", "1", "--plan", str(plan)),
                         "cannot read the plan file")


@pytest.mark.parametrize("flags", [("--quick",), ("--only", "fig05_plans")])
def test_reproduce_never_writes_part_of_the_committed_results(cli, flags):
    """A quick or partial reproduction into results/ is refused up front; nothing is touched."""
    before = {p: p.stat().st_mtime_ns for p in (REPO / "results").iterdir()}
    result = cli("reproduce", *flags, "--out", str(REPO / "results"), "--no-progress")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "choose another --out" in result.stderr
    assert {p: p.stat().st_mtime_ns for p in (REPO / "results").iterdir()} == before


@pytest.mark.parametrize("target", ["/dev/full", "/proc/hypar.csv", "/sys/hypar.csv"])
@pytest.mark.parametrize("flag", ["--csv", "--trace"])
def test_an_output_on_a_device_or_system_folder_is_refused(cli, flag, target):
    """Writing replaced a device with a regular file (atomic rename onto /dev/full, as
    root); now refused up front, one line, the device left a device."""
    result = cli("run", "lenet_c", "--accelerators", "2", "--engine", "analytic", flag, target)
    assert_clean_failure(result, f"{flag}: {target} is ")
    assert not Path("/dev/full").is_file()


def test_a_sweep_never_reads_a_device_as_its_journal(cli):
    assert_clean_failure(cli("sweep", "--networks", "lenet_c", "--strategies", "data",
                             "--out", "/dev/full"), "--out: /dev/full is not a regular file")
