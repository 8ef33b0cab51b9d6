"""The run's request (issue "One graph", item 5): one object, built the same way by every
entry point; `compare --baseline`."""

from __future__ import annotations

import json

import pytest

from hypar_sim.errors import InputError
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.plan import make_plan
from hypar_sim.request import make_request, plan_request
from hypar_sim.workload.network import load_network


def test_defaults_are_the_papers_array_and_the_layout_model():
    request = make_request("vgg_a")
    assert (request.accelerators, request.batch, request.hierarchy) == (16, 256,
                                                                       Hierarchy.binary(4))
    assert request.plan.traffic_model == "layout" and request.strategy == "hypar"


def test_one_default_traffic_model_everywhere():
    """`make_plan` defaulted to HyPar's reading and the command line to the layout model:
    VGG-A on 16 gave 1.4687 GB from one and 1.4367 GB from the other."""
    network = load_network("vgg_a")
    plan = make_plan(network, "hypar", 4, 256)
    assert plan.traffic_model == "layout"
    assert plan.traffic_bytes == plan_request(make_request("vgg_a")).traffic_bytes
    assert plan.traffic_bytes / 1e9 == pytest.approx(1.4367, abs=1e-4)


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"accelerators": 0}, "--accelerators: must be an integer from 1 to"),
    ({"batch": 0}, "--batch: must be an integer from 1 to 16,777,216, got 0"),
    ({"seq": -1}, "--seq: must be a positive number of tokens"),
    ({"levels": 2, "hierarchy": "2x2"}, "give --levels or --hierarchy, not both"),
    ({"levels": 2, "accelerators": 8}, "2 two-way levels make 4 accelerators"),
    ({"hierarchy": "4x3", "accelerators": 16}, "4x3 has 12 members, but there are 16"),
    ({"overrides": {"batch": 8}}, "batch is not a hardware key"),
    ({"overrides": {"clock_mhz": -1}}, "clock_mhz: -1.0 is out of range"),
])
def test_bad_requests_are_one_line(kwargs, fragment):
    with pytest.raises(InputError, match=fragment) as info:
        make_request("lenet_c", **kwargs)
    assert "\n" not in str(info.value)


def test_seq_on_a_yaml_network_is_refused_not_ignored(cli):
    """A YAML graph's shapes are fixed: --seq, which sets an ONNX model's dynamic sequence
    axis, used to be ignored there silently."""
    with pytest.raises(InputError, match=r"^--seq: bert_base is a YAML network, whose shapes "
                       r"are fixed in the file; --seq sets the tokens of an ONNX model's"):
        make_request("bert_base", seq=64).workload()
    result = cli("plan", "bert_base", "--seq", "64")
    assert result.returncode == 2 and "--seq: bert_base is a YAML network" in result.stderr


def test_the_hierarchy_gives_the_count_and_a_config_file_the_rest(tmp_path):
    assert make_request("lenet_c", hierarchy="4x3x2").accelerators == 24
    assert make_request("lenet_c", levels=3).hierarchy == Hierarchy.binary(3)
    path = tmp_path / "hw.yaml"
    path.write_text("accelerators: 12\nbatch: 48\n")
    request = make_request("lenet_c", config=str(path))
    assert (request.hierarchy, request.batch) == (Hierarchy((3, 2, 2)), 48)
    assert make_request("lenet_c", config=str(path), hierarchy="4x4").accelerators == 16
    assert make_request("lenet_c", config=str(path), levels=3).accelerators == 8  # flags win
    with pytest.raises(InputError, match="4x4 has 16 members, but there are 12"):
        make_request("lenet_c", config=str(path), hierarchy="4x4", accelerators=12)


@pytest.mark.slow
def test_compare_names_a_baseline_that_plans(cli):
    """At a batch smaller than the array data parallelism cannot plan: compare said "neither
    batch nor batch can split it" even when data was not asked for."""
    failed = cli("compare", "vgg_a", "--batch", "8", "--strategies", "hypar,model")
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1
    assert "compare: the baseline, data, cannot plan 8 samples on 16 accelerators" in \
        failed.stderr
    assert "with batch 8, fewer samples than the 16 groups" in failed.stderr
    assert "choose another with --baseline, e.g. hypar" in failed.stderr
    other = cli("compare", "alexnet", "--batch", "8", "--baseline", "model", "--strategies",
                "data", "--engine", "analytic")
    assert other.returncode == 2 and "strategy data:" in other.stderr
    done = cli("compare", "vgg_a", "--batch", "8", "--strategies", "hypar,model", "--baseline",
               "model", "--engine", "analytic", "--json")
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)
    assert [run["strategy"] for run in runs] == ["model", "hypar"]
    assert {run["baseline"] for run in runs} == {"model"}
    text = cli("compare", "lenet_c", "--strategies", "data", "--baseline", "hypar",
               "--engine", "analytic")
    assert "relative to hypar" in text.stdout and text.stdout.index("hypar ") < \
        text.stdout.index("data ")
    bad = cli("compare", "lenet_c", "--baseline", "fastest")
    assert bad.returncode == 2 and "--baseline: unknown or not comparable 'fastest'" in bad.stderr


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"accelerators": 0}, "accelerators: must be an integer from 1 to 1,048,576, got 0"),
    ({"batch": 2**30}, "batch: must be an integer from 1 to 16,777,216, got 1073741824"),
    ({"seq": 0}, "seq: must be a positive number of tokens, got 0"),
])
def test_api_errors_name_the_keyword_not_the_flag(kwargs, message):
    """The Python API's caller passed `batch=`, not `--batch`: its errors begin with the
    keyword (they began with the command line's flag)."""
    import hypar_sim
    with pytest.raises(InputError) as info:
        hypar_sim.simulate("lenet_c", **kwargs)
    assert str(info.value) == message


def test_no_progress_turns_the_bars_off_on_a_terminal(monkeypatch):
    """Issue "Scale", item 4: progress bars on stderr, off with --no-progress (and when
    stderr is not a terminal)."""
    import sys

    from hypar_sim.arguments import request_from_args
    from hypar_sim.cli import build_parser

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    for argv, shown in ((["run", "lenet_c"], True), (["run", "lenet_c", "--no-progress"], False),
                        (["plan", "lenet_c", "--no-progress"], False)):
        request = request_from_args(build_parser().parse_args(argv))
        assert request.plan.progress is shown and request.sim.progress is shown, argv
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert not request_from_args(build_parser().parse_args(["run", "lenet_c"])).sim.progress
