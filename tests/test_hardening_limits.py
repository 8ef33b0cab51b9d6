"""Issue "Hardening", item 2: numbers too large to represent, wrong types and absurd
hardware values are one line naming the file, field or flag with its allowed range (exit 2,
no traceback, nothing written), checked before anything is allocated; quoted values are
cut (`errors.clip_value`). In-process (`cli.main`), so each case costs milliseconds."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hypar_sim.cli import main
from hypar_sim.errors import MAX_QUOTED, clip_value
from hypar_sim.hardware.config import HardwareConfig, describe, load_hardware
from hypar_sim.request import make_request
from hypar_sim.runner import simulate_request
from hypar_sim.workload.network import (
    available_graphs,
    available_networks,
    resolve_network_path,
)
from hypar_sim.workload.yaml_reader import read_yaml

CHAIN = "input: {channels: 1, height: 28, width: 28}\nlayers:\n" \
        "  - {type: conv, out_channels: %s, kernel: 5}\n  - {type: fc, out_features: 10}\n"

FILES = {
    "5,000-digit integer": ("net.yaml", CHAIN % ("9" * 5000), ("run", "{path}"),
                            "YAML error: Exceeds the limit (4300 digits)"),
    "graph inputs as a list of maps": (
        "g.yaml", "inputs:\n  - {x: [3, 8, 8]}\nnodes:\n  - {name: r, type: act, "
        "function: relu}\n", ("run", "{path}"), "inputs: must map each input's name to its"),
    "graph outputs as a map": (
        "g.yaml", "inputs: {x: [3, 8, 8]}\nnodes:\n  - {name: r, type: act, function: relu}\n"
        "outputs: {a: 1}\n", ("run", "{path}"), "outputs: must list node names"),
    "a tensor of 2^72 elements": (
        "g.yaml", "inputs: {x: [16777216, 16777216, 16777216]}\nnodes:\n  - {name: r, type: "
        "act, function: relu}\n", ("run", "{path}"),
        "inputs.x: [16777216, 16777216, 16777216] has 4,722,366,482,869,645,213,696 elements "
        "per sample; at most 4,294,967,296"),
    "a chain layer of 2^72 elements": (
        "net.yaml", CHAIN.replace("channels: 1, height: 28, width: 28",
                                  "channels: 16777216, height: 16777216, width: 16777216") % 4,
        ("run", "{path}"), "elements per sample; at most 4,294,967,296"),
    "a network named by a list": ("net.yaml", "name: [1, 2]\n" + CHAIN % 4, ("run", "{path}"),
                                  "name: must be a name (text), got [1, 2]"),
    "a node name with a terminal escape": (
        "g.yaml", "inputs: {x: [3, 8, 8]}\nnodes:\n  - {name: \"\\e[31mred\", type: act, "
        "function: relu}\n", ("run", "{path}"),
        "nodes[0].name: must be 1 to 200 printable characters (no control or escape "
        "characters), got '\\x1b[31mred'"),
    "a recursive YAML alias (found by the audit: it hung)": (
        "net.yaml", "input: {features: 10}\nlayers: &a\n  - *a\n", ("run", "{path}"),
        "YAML error at line 2, column 9: an alias refers to a node that contains it"),
    "a recursive alias in a hardware file": (
        "hw.yaml", "clock_mhz: &a [*a]\n", ("hardware", "--config", "{path}"),
        "an alias refers to a node that contains it"),
    "a plan file of lists nested 100,000 deep": (
        "p.json", "[" * 100_000 + "]" * 100_000, ("plan", "lenet_c", "--plan", "{path}"),
        "not a plan file (JSON of `plan --json`"),
    "a graph of no outputs": (
        "g.yaml", "inputs: {x: [3, 8, 8]}\nnodes:\n  - {name: r, type: act, function: relu}\n"
        "outputs: []\n", ("run", "{path}"), "outputs: give at least one node name"),
    "a topology of no levels": ("t.yaml", "topology: htree\nlevels: []\n",
                                ("run", "lenet_c", "--topology", "{path}"),
                                "levels: must be a non-empty list"),
    "a 1e30 KiB buffer": ("hw.yaml", "buffer_kib: 1e30\n", ("run", "lenet_c", "--config",
                                                            "{path}"),
                          "buffer_kib: 1e+30 is out of range; allowed: 1/1024 to 1,048,576 KiB"),
    "a 1e30 KiB buffer, shown": ("hw.yaml", "buffer_kib: 1e30\n", ("hardware", "--config",
                                                                   "{path}"),
                                 "buffer_kib: 1e+30 is out of range"),
}

FLAGS = {
    "batch of 10^30": (("run", "lenet_c", "--batch", str(10**30)),
                       "--batch: must be an integer from 1 to 16,777,216, got 1000000000000000"),
    "a link of 1e-300 Gb/s": (("run", "lenet_c", "--set", "link_bandwidth_gbps=1e-300"),
                              "link_bandwidth_gbps: 1e-300 is out of range; allowed: 0.001 to "
                              "10,000,000 Gb/s"),
    "sweep over 0 accelerators": (("sweep", "--networks", "lenet_c", "--accelerators", "0"),
                                  "--accelerators: each must be an integer from 1 to "
                                  "1,048,576, got 0"),
    "sweep over a batch of 10^30": (("sweep", "--networks", "lenet_c", "--batch", str(10**30)),
                                    "--batch: each must be an integer from 1 to 16,777,216"),
    "a Dask scheduler of an unknown scheme": (
        ("sweep", "--networks", "lenet_c", "--executor", "dask", "--scheduler", "foo://bar"),
        "--scheduler: 'foo://bar' is not a Dask scheduler address (\"unknown address scheme 'foo'"),
    "a Dask scheduler without a port": (
        ("sweep", "--networks", "lenet_c", "--executor", "dask", "--scheduler", "tcp://"),
        "is not a Dask scheduler address (\"missing port number"),
    "a scheduler for the process pool": (
        ("sweep", "--networks", "lenet_c", "--scheduler", "tcp://HOST:8786"),
        "--scheduler: only with --executor dask, not --executor process"),
    "a million accelerators, batch 256 (no ring note before the error)": (
        ("run", "lenet_c", "--accelerators", "1048576"), "use a batch of at least 512"),
    "--strategy beside --plan": (("plan", "lenet_c", "--strategy", "data", "--plan",
                                  "dp dp dp dp"),
                                 "--plan: the plan is given, so the strategy is explicit, "
                                 "not --strategy data"),
    "a size given twice": (("networks", "gpt2_small", "--layers", "1", "--dim", "layers=2"),
                           "--dim: 'layers' is given twice"),
    "a billion chunks": (("run", "lenet_c", "--max-chunks", "1000000000"),
                         "--max-chunks: must be an integer from 1 to 65,536"),
    "a negative message budget": (("run", "lenet_c", "--des-messages", "-1"),
                                  "--des-messages: must be an integer from 0 (every step a "
                                  "group operation) up, got -1"),
    "compare nothing": (("compare", "lenet_c", "--strategies", ","),
                        "--strategies: give at least one"),
    "reproduce with no workers": (("reproduce", "--quick", "--workers", "0"),
                                  "--workers: must be a positive integer, got 0"),
    "a retired hardware key": (("run", "lenet_c", "--set", "dram_row_bytes=256"),
                               "dram_row_bytes is no longer a hardware key: no model read it"),
}


def clean_failure(capsys, argv: list[str], fragment: str) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], lines


@pytest.mark.parametrize("case", sorted(FILES))
def test_bad_files(capsys, tmp_path, case):
    name, body, argv, fragment = FILES[case]
    path = tmp_path / name
    path.write_text(body)
    csv = tmp_path / "out.csv"
    args = [a.format(path=path) for a in argv]
    clean_failure(capsys, args + (["--csv", str(csv)] if args[0] == "run" else []), fragment)
    assert not csv.exists()


@pytest.mark.parametrize("case", sorted(FLAGS))
def test_bad_flags(capsys, tmp_path, case):
    argv, fragment = FLAGS[case]
    out = tmp_path / "sweep.csv"
    clean_failure(capsys, list(argv) + (["--out", str(out)] if argv[0] == "sweep" else []),
                  fragment)
    assert not out.exists()


def test_folders_and_long_names_are_named_not_missing(capsys, tmp_path):
    """The audit: a folder given as a network, config or topology file was "not found"; an
    output folder written with a slash was made, then refused after the run; a 300-character
    name was a traceback; `reproduce --out FILE` a traceback."""
    folder = tmp_path / "net.yaml"
    folder.mkdir()
    (tmp_path / "a.yaml").write_text("")
    for argv, fragment in [
            (["run", str(folder)], f"{folder}: network file is a folder, not a file"),
            (["run", "lenet_c", "--config", str(folder)], "config file is a folder"),
            (["run", "lenet_c", "--topology", str(folder)], "topology file is a folder"),
            (["run", "lenet_c", "--csv", f"{tmp_path}/new/"], "new/ is a folder, not a file"),
            (["run", "lenet_c", "--csv", str(tmp_path / ("x" * 300))], "File name too long"),
            (["reproduce", "--quick", "--only", "fig05_plans", "--out",
              str(tmp_path / "a.yaml")], "a.yaml is not a folder")]:
        clean_failure(capsys, argv, fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "net.yaml"]


def test_quoted_values_are_cut():
    assert clip_value("x" * 10) == "'xxxxxxxxxx'"
    long = clip_value(list(range(10_000)))
    assert len(long) <= MAX_QUOTED + 25 and long.endswith("... (58,890 characters)")
    assert clip_value(int("9" * 4000) * 10**400) == "an integer of more than 4,300 digits"


def test_every_hardware_key_has_a_finite_range_shown(capsys):
    """Each key has a stated range (issue: e.g. cube_capacity_gib from 1/1024 to 1,048,576),
    finite at both ends, shown by `hardware`."""
    rows = describe(load_hardware())
    assert len(rows) == len(dataclasses.fields(HardwareConfig)) + 2  # and accelerators, batch
    for row in rows:
        assert row["allowed"], row["key"]
        if " to " in row["allowed"]:
            assert "inf" not in row["allowed"], row["key"]
    assert main(["hardware"]) == 0
    assert "cube_capacity_gib                   8  GiB      1/1048576 to 1,048,576" in \
        capsys.readouterr().out


def test_a_config_file_repeating_defaults_keeps_their_citations(tmp_path):
    """`hardware --yaml > my_hw.yaml`, one value changed: the unchanged keys keep the
    default file's citation; the changed one says where it was set."""
    path = tmp_path / "my_hw.yaml"
    path.write_text("clock_mhz: 250\nbuffer_kib: 216\n")
    rows = {row["key"]: row["source"] for row in describe(load_hardware(path), str(path))}
    assert rows["clock_mhz"].startswith("HyPar 6.1") and rows["buffer_kib"] == \
        f"set in {path}"


@pytest.mark.slow
@pytest.mark.parametrize("name", available_networks() + available_graphs())
def test_time_shares_add_up_on_every_shipped_network(name):
    """Issue "Hardening", item 5: compute, DRAM stalls and communication are shares of the
    step that add up to 100% (graphs once summed to 116.6%), for HyPar's plan and data
    parallelism (a generated transformer's first two blocks: the same nodes, fewer)."""
    dims = {"layers": 2} if "transformer" in read_yaml(resolve_network_path(name)) else None
    for strategy in ("hypar", "data"):
        result = simulate_request(make_request(name, accelerators=4, batch=16, dims=dims,
                                               strategy=strategy,
                                               overrides={"cube_capacity_gib": 64}))
        assert sum(result.time_shares.values()) == pytest.approx(1.0, abs=1e-3)


def test_a_result_prints_in_a_screenful():
    """`print(result)` once dumped 11,800 characters; str and repr stay under 2,000 (the
    issue's bound) on a graph of 122 nodes too."""
    result = simulate_request(make_request("resnet50", accelerators=4, batch=16,
                                           overrides={"cube_capacity_gib": 64}))
    assert len(str(result)) <= 2000 and len(repr(result)) <= 2000


def test_an_interrupted_quick_reproduction_names_its_folder(capsys, monkeypatch, tmp_path):
    """Issue "Hardening", item 4: Ctrl-C during `reproduce --quick` says where the figures
    finished so far are (its scratch folder), then exits 130 as any interrupted command."""
    from hypar_sim.experiments import reproduce

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(reproduce, "reproduce", interrupted)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["reproduce", "--quick", "--only", "fig05_plans", "--no-progress"]) == 130
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("hypar-sim reproduce: the figures finished so far are in ")
    assert str(tmp_path) in err[0] and err[1] == "hypar-sim reproduce: interrupted"


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow  # real processes
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_pool_workers_die_with_a_killed_sweep(tmp_path):
    """Issue "Hardening", item 4: SIGKILL of a sweep's main process (not its group) ends its
    pool workers too (they ran on for a minute)."""
    out = tmp_path / "s.csv"
    process = subprocess.Popen(
        [sys.executable, "-m", "hypar_sim", "sweep", "--networks", "vgg_a,vgg_b,alexnet_half",
         "--strategies", "data,model", "--topologies", "htree,torus", "--no-progress",
         "--workers", "2", "--out", str(out)], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    children: list[int] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(children) < 2:
        time.sleep(0.05)
        text = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text()
        children = [int(pid) for pid in text.split()]
    assert len(children) >= 2
    process.kill()
    process.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in children)


def test_cycles_are_whole_in_json(capsys):
    """Issue "Hardening", item 5: `latency_cycles` was fractional in `run --json`; every
    `*_cycles` number is a whole number of cycles, seconds keep their fractions."""
    assert main(["run", "lenet_c", "--accelerators", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cycles = [data["latency_cycles"]] + [value for layer in data["per_layer"]
                                         for key, value in layer.items()
                                         if key.endswith("_cycles")]
    assert all(isinstance(value, int) for value in cycles)
    assert data["latency_s"] == pytest.approx(data["latency_cycles"] / 250e6, abs=1e-8)
