"""The Python API (`hypar_sim.simulate`, `plan`, `compare`, `hardware`)."""

from __future__ import annotations

import pytest

import hypar_sim
from hypar_sim.errors import InputError
from hypar_sim.planner.plan import Plan


def test_simulate_is_the_command_lines_run_and_takes_config_keys():
    result = hypar_sim.simulate("sfc", accelerators=4, batch=64, engine="analytic")
    faster = hypar_sim.simulate("sfc", accelerators=4, batch=64, engine="analytic",
                                link_bandwidth_gbps=16.0)
    assert result.config["link_bandwidth_gbps"] != faster.config["link_bandwidth_gbps"] == 16.0
    assert faster.latency_s < result.latency_s and faster.traffic_bytes == result.traffic_bytes
    row = result.to_frame()
    assert row.shape[0] == 1 and row["latency_s"].iloc[0] == result.latency_s
    assert row["config.accelerators"].iloc[0] == 4


def test_plan_and_compare_take_chains_and_graphs():
    assert isinstance(hypar_sim.plan("vgg_a", traffic_model="paper"), Plan)  # HyPar's reading
    assert isinstance(hypar_sim.plan("vgg_a"), Plan)
    assert isinstance(hypar_sim.plan("resnet18", accelerators=4, batch=16), Plan)
    runs = hypar_sim.compare("lenet_c", accelerators=4, batch=64, engine="analytic")
    assert [r.strategy for r in runs] == ["data", "model", "trick", "hypar"]
    graphs = hypar_sim.compare("resnet18", accelerators=4, batch=16, engine="analytic")
    assert [r.strategy for r in graphs] == ["data", "model", "trick", "hypar"]  # one default


def test_bad_input_raises_the_command_lines_message():
    with pytest.raises(InputError, match="unknown network 'vgg_z'"):
        hypar_sim.simulate("vgg_z")
    with pytest.raises(InputError, match="unknown key 'clock'"):
        hypar_sim.simulate("sfc", clock=1)
    with pytest.raises(AttributeError):
        hypar_sim.simulat  # noqa: B018 - a typo is an AttributeError, as for any module


def test_frames_of_a_result():
    result = hypar_sim.simulate("lenet_c", accelerators=4, batch=64, engine="analytic")
    links = result.per_link_frame()
    assert list(links.columns) == ["link", "bytes", "busy_fraction"]
    assert links.bytes.sum() == sum(link.bytes for link in result.per_link)
    assert len(result.per_layer_frame()) == len(result.per_layer)


def test_a_result_prints_short():
    """`print(result)` dumped 11,800 characters (every field of every layer and link): now
    the summary a person reads, and `repr` one line."""
    import hypar_sim

    result = hypar_sim.simulate("resnet50", accelerators=4, batch=8, engine="analytic")
    assert str(result) == result.summary() and len(str(result)) <= 2000
    assert repr(result).startswith("SimResult(network='resnet50'") and len(repr(result)) <= 300
    assert "\n" not in repr(result)


def test_a_misspelt_argument_is_named_with_the_right_one():
    with pytest.raises(InputError, match="trafic_model: unknown argument \\(did you mean "
                                         "'traffic_model'\\?\\)"):
        hypar_sim.plan("lenet_c", trafic_model="paper")
