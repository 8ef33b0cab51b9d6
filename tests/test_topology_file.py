"""Topology files (`--topology my_topo.yaml`): links per level of an H-tree or of a torus."""

from __future__ import annotations

import json

import pytest

from hypar_sim.api import simulate
from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.hardware.topology import make_topology
from hypar_sim.partition.hierarchy import Hierarchy
from tests.conftest import run_cli


def _write(tmp_path, text: str, name: str = "topo.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _run(topology: str, strategy: str = "data"):
    return simulate("lenet_c", strategy=strategy, topology=topology, engine="analytic",
                    accelerators=16, batch=64)


def _same_as_htree(path: str) -> bool:
    """Every number of the run equals the built-in H-tree's (its name and wall time aside)."""
    ours, built_in = _run(path).to_dict(), _run("htree").to_dict()
    for data in (ours, built_in):
        for key in ("wall_s", "topology", "config"):
            data.pop(key)
    return ours == built_in


def test_a_file_of_the_config_values_is_the_built_in_topology(tmp_path):
    """The hardware config's link keys written out give the built-in H-tree's numbers."""
    assert _same_as_htree(_write(tmp_path, "topology: htree\nlevels:\n  - {link_bandwidth_gbps: "
                                           "1.6, link_latency_ns: 11, energy_link_pj_per_bit: 5}\n"))


def test_levels_change_their_own_links(tmp_path):
    """Each level's links take their entry (top first). Data parallelism's gradient rings send
    every message one lane at a time, so a message is as fast as the slowest lane on its route:
    4x the bandwidth on every level speeds it up, 4x on the root links (H1) alone does not.
    Twice the energy per bit on every level doubles the link energy, nothing else."""
    leaves = _write(tmp_path, "topology: htree\nlevels: [{}, {}, {}, {link_bandwidth_gbps: 6.4}]\n")
    every = _write(tmp_path, "topology: htree\nlevels: [{link_bandwidth_gbps: 6.4}]\n",
                   "every.yaml")
    root = _write(tmp_path, "topology: htree\nlevels: [{link_bandwidth_gbps: 6.4}, {}, {}, {}]\n",
                  "root.yaml")
    energy = _write(tmp_path, "topology: htree\nlevels: [{energy_link_pj_per_bit: 10}]\n",
                    "energy.yaml")
    base = _run("htree")
    assert _run(every).latency_cycles < 0.5 * base.latency_cycles
    assert _run(root).latency_cycles == pytest.approx(base.latency_cycles, rel=1e-9)
    doubled = _run(energy).energy_breakdown_pj
    assert doubled["link_bit"] == pytest.approx(2 * base.energy_breakdown_pj["link_bit"])
    assert doubled["mac"] == base.energy_breakdown_pj["mac"]
    topology = make_topology(leaves, load_hardware(), Hierarchy.binary(4))
    per_lane = {link.lanes: link.spec.bandwidth_bytes_per_cycle for link in topology.links}
    assert per_lane[1] == pytest.approx(4 * per_lane[2])  # the leaf links (H4) 4x, H3's not


def test_a_torus_file_sets_rows_and_every_link(tmp_path):
    path = _write(tmp_path, "topology: torus\nrows: 2\nlinks: {link_bandwidth_gbps: 3.2}\n")
    topology = make_topology(path, load_hardware(), Hierarchy.binary(4))
    assert (topology.rows, topology.cols) == (2, 8) and topology.name == path
    assert _run(path).latency_cycles < _run("torus").latency_cycles


@pytest.mark.parametrize(("text", "fragment"), [
    ("topology: mesh\n", "topology: must be one of htree, torus, got 'mesh'"),
    ("topology: htree\nlevels: [{link_bandwidth_gbps: -1}]\n",
     "levels[0]: link_bandwidth_gbps: -1.0 is out of range; allowed: 0.001 to 10,000,000 Gb/s"),
    ("topology: htree\nlevels: [{clock_mhz: 1}]\n", "levels[0]: unknown key 'clock_mhz'; "
     "allowed: link_bandwidth_gbps, link_latency_ns, energy_link_pj_per_bit"),
    ("topology: htree\nlevels: [{}, {}]\n", "levels: 2 entries for a hierarchy of 4 levels"),
    ("topology: torus\nrows: 3\n", "torus: rows = 3 does not divide 16 accelerators"),
    ("topology: torus\nlevels: [{}]\n", "a torus takes 'links'"),
    ("topology: htree\nlinks: {}\n", "an htree takes 'levels'"),
    ("speed: 3\n", "unknown key 'speed'"),
])
def test_bad_files_one_line_exit_2(tmp_path, text, fragment):
    path = _write(tmp_path, text)
    result = run_cli("run", "lenet_c", "--topology", path, "--engine", "analytic")
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and fragment in result.stderr
    with pytest.raises(InputError):
        make_topology(path, load_hardware(), Hierarchy.binary(4))


def test_sweep_and_plan_take_topology_files(tmp_path):
    path = _write(tmp_path, "topology: htree\nlevels: [{link_bandwidth_gbps: 3.2}]\n")
    out = tmp_path / "s.csv"
    sweep = run_cli("sweep", "--networks", "lenet_c", "--strategies", "data", "--topologies",
                    f"htree,{path}", "--accelerators", "4", "--batch", "64", "--engine",
                    "analytic", "--out", str(out), "--no-progress")
    assert sweep.returncode == 0, sweep.stderr
    import pandas as pd

    assert sorted(pd.read_csv(out).topology) == sorted(["htree", path])
    plan = run_cli("plan", "lenet_c", "--strategy", "optimal", "--objective", "time",
                   "--topology", path, "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["objective"] == "time"


def test_the_shipped_example_is_the_built_in_htree():
    """configs/topologies/htree_per_level.yaml (the README's example) writes out the config's
    link values for the four levels of 16 accelerators: the built-in H-tree's numbers."""
    from pathlib import Path

    assert _same_as_htree(str(Path(__file__).resolve().parents[1] / "configs" / "topologies" /
                              "htree_per_level.yaml"))
