"""Optimizer state in a cube's memory and its update's cost (issue "Training large models",
item 2: `--optimizer sgd|momentum|adam`)."""

from __future__ import annotations

import math

import pytest

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.hardware.costs import update_piece_cost
from hypar_sim.hardware.hmc import pe_array_spec
from hypar_sim.hardware.pe_array import update_cost
from hypar_sim.planner.optimizers import OPTIMIZERS
from hypar_sim.planner.training import Training
from hypar_sim.request import make_request, plan_request
from hypar_sim.runner import simulate_request

GPT = dict(accelerators=16, batch=16, strategy="data")


def parts(optimizer: str, **kwargs) -> dict[str, float]:
    plan = plan_request(make_request("gpt2_small", optimizer=optimizer, **(GPT | kwargs)))
    return dict(plan.footprint_parts)


@pytest.mark.parametrize(("name", "words"), [("sgd", 0), ("momentum", 1), ("adam", 2)])
def test_the_state_is_words_per_parameter_held(name, words):
    """Adam keeps its two moments per parameter (Kingma and Ba 2015; ZeRO's K = 12 counts
    them in fp32 beside the fp32 master copy), momentum one velocity, SGD nothing; the
    other parts do not change."""
    sgd, given = parts("sgd"), parts(name)
    assert given["optimizer_state"] == words * given["weights"]
    assert {k: v for k, v in given.items() if k != "optimizer_state"} == \
        {k: v for k, v in sgd.items() if k != "optimizer_state"}


def test_an_inference_keeps_no_state():
    assert parts("adam", phases="forward")["optimizer_state"] == 0.0


@pytest.mark.slow
def test_plan_and_run_refuse_the_same_plan():
    """Data parallelism on gpt2_small (16 samples, 16 cubes) needs 2.90 GiB a cube with SGD
    and 3.83 GiB with Adam: a 3.5 GiB cube takes the first, refuses the second in the plan
    and in the run; HyPar's search finds a plan that fits."""
    small = {"cube_capacity_gib": 3.5}
    assert sum(parts("sgd").values()) / 2**30 == pytest.approx(2.899, abs=1e-3)
    assert sum(parts("adam").values()) / 2**30 == pytest.approx(3.826, abs=1e-3)
    simulate_request(make_request("gpt2_small", optimizer="sgd", overrides=small,
                                  sim=None, **GPT | {"strategy": "data"}))
    with pytest.raises(InputError, match="strategy data's plan needs 3.83 GiB per cube"):
        plan_request(make_request("gpt2_small", optimizer="adam", overrides=small, **GPT))
    fitted = plan_request(make_request("gpt2_small", optimizer="adam", overrides=small,
                                       **GPT | {"strategy": "hypar"}))
    assert fitted.footprint_bytes <= 3.5 * 2**30
    assert dict(fitted.footprint_parts)["optimizer_state"] > 0


@pytest.mark.parametrize("weights", [1, 100, 168, 4096, 100_003])
def test_sgd_update_is_hypars_and_adam_streams_its_moments(weights):
    """SGD: one MAC, W and dW read, W written, bus-bound (the model before optimizers).
    Adam: 6 MACs, W, dW, m, v read over the two input buses, W, m, v written back."""
    spec = pe_array_spec(load_hardware())
    sgd, adam = update_cost(weights, spec), update_cost(weights, spec, 2, 6)
    assert sgd.cycles == max(math.ceil(weights / spec.pes), math.ceil(weights / spec.bus_words))
    assert (sgd.accesses.dram_read, sgd.accesses.dram_write) == (2 * weights, weights)
    assert (adam.accesses.dram_read, adam.accesses.dram_write) == (4 * weights, 3 * weights)
    assert adam.accesses.macs == 6 * weights
    assert adam.cycles == max(math.ceil(6 * weights / spec.pes),
                              math.ceil(4 * weights / (2 * spec.bus_words)),
                              math.ceil(3 * weights / spec.bus_words))


def test_a_run_with_adam_takes_longer_to_update():
    config = load_hardware()
    sgd, adam = (update_piece_cost(1_000_000, config, Training(name).update_rule(4))
                 for name in ("sgd", "adam"))
    assert adam.dram_bytes == pytest.approx(7 / 3 * sgd.dram_bytes)
    assert adam.cycles > sgd.cycles and adam.macs == 6 * sgd.macs
    runs = {name: simulate_request(make_request("lenet_c", optimizer=name))
            for name in OPTIMIZERS}
    updates = {name: sum(layer.update_cycles for layer in run.per_layer)
               for name, run in runs.items()}
    assert updates["sgd"] < updates["momentum"] < updates["adam"]


def test_an_unknown_optimizer_is_one_line():
    with pytest.raises(InputError, match="--optimizer: unknown 'adamw'.*allowed: sgd, "
                                         "momentum, adam"):
        make_request("lenet_c", optimizer="adamw")
