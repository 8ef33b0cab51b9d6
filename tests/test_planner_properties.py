"""The planner's searches against brute force on random chains (hypothesis), under both
traffic models."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hypar_sim.errors import InputError
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.workload.layers import FeatureShape, make_conv, make_fc
from hypar_sim.workload.network import Network


@st.composite
def networks(draw, max_layers=8, max_channels=64, max_size=32, max_out=256):
    """Random chains of conv and fc layers whose shapes always fit."""
    channels = draw(st.integers(1, max_channels))
    size = draw(st.integers(1, max_size))
    shape = FeatureShape(channels, size, size)
    layers = []
    for index in range(draw(st.integers(1, max_layers))):
        if shape.height > 1 and draw(st.booleans()):
            kernel = draw(st.integers(1, min(5, shape.height)))
            layer = make_conv(f"conv{index}", shape, draw(st.integers(1, max_out)), kernel,
                              padding=draw(st.integers(0, (kernel - 1) // 2)))
        else:
            layer = make_fc(f"fc{index}", shape, draw(st.integers(1, 16 * max_out)))
        layers.append(layer)
        shape = layer.output
    return Network("random", FeatureShape(channels, size, size), tuple(layers))


def plan_cost(model, net, batch, hierarchy, columns, word_bytes=4):
    """Own plus boundary costs of one whole plan, as the searches add them."""
    last = len(net.layers) - 1
    total = sum(model.own_costs(layer, batch, [column], hierarchy, word_bytes, i == last)[0]
                for i, (layer, column) in enumerate(zip(net.layers, columns, strict=True)))
    for i in range(1, len(columns)):
        total += model.boundary_costs(net.layers[i - 1], net.layers[i], batch, [columns[i - 1]],
                                      [columns[i]], hierarchy, word_bytes)[0, 0]
    return total


def greedy_brute_force(model, net, batch, hierarchy, kinds):
    """Algorithm 2 with every assignment of a level tried in place of the DP."""
    columns = [() for _ in net.layers]
    for level in range(hierarchy.levels):
        upper = Hierarchy(hierarchy.sizes[:level + 1])
        best = None
        for row in itertools.product(kinds, repeat=len(net.layers)):
            candidate = [c + (k,) for c, k in zip(columns, row, strict=True)]
            if not all(model.offered(layer, batch, c, upper)
                       for layer, c in zip(net.layers, candidate, strict=True)):
                continue
            cost = plan_cost(model, net, batch, upper, candidate)
            if best is None or cost < best[0]:
                best = (cost, candidate)
        columns = best[1]
    return columns


def _plan(net, batch, hierarchy, kinds, model_name, strategy="hypar", search="greedy"):
    options = PlanOptions(tuple(kinds), search, model_name)
    return make_plan(net, strategy, hierarchy, batch, options=options)


@settings(max_examples=100, deadline=None)
@given(networks(), st.sampled_from([2, 16, 64, 256, 1024]), st.integers(1, 3))
def test_paper_greedy_equals_greedy_brute_force(net, batch, levels):
    """HyPar's Algorithm 2 (hypar's greedy search, on the graph's exact elimination) costs
    what trying every assignment of each level gives."""
    model, hierarchy = traffic_model("paper"), Hierarchy.binary(levels)
    assume(batch % hierarchy.members == 0)  # HyPar's reading halves the batch
    if len(net.layers) > 6:
        net = Network(net.name, net.input, net.layers[:6])
    found = _plan(net, batch, hierarchy, ("batch", "in"), "paper")
    expected = greedy_brute_force(model, net, batch, hierarchy, ("batch", "in"))
    assert plan_cost(model, net, batch, hierarchy, found.columns) == \
        plan_cost(model, net, batch, hierarchy, expected)
    assert found.traffic_bytes == pytest.approx(plan_cost(model, net, batch, hierarchy,
                                                          found.columns), rel=1e-12)


@pytest.mark.parametrize("model_name, kinds", [("paper", ("batch", "in")),
                                               ("layout", ("batch", "in", "out", "spatial"))])
@settings(max_examples=25, deadline=None)
@given(net=networks(max_layers=4, max_channels=8, max_size=8, max_out=16),
       sizes=st.sampled_from([(2,), (2, 2), (3,), (3, 2), (2, 3)]))
def test_joint_equals_brute_force_and_beats_greedy(model_name, kinds, net, sizes):
    """hypar's joint search finds the least bytes of every plan (exhaustive), never more than
    its greedy search, and its cost is the plan's reported traffic (the same transfers)."""
    model, hierarchy = traffic_model(model_name), Hierarchy(sizes)
    if model_name == "paper" and not hierarchy.is_binary:
        return
    try:
        joint = _plan(net, 8, hierarchy, kinds, model_name, search="joint")
    except InputError:  # no kind offered to some layer, or a batch HyPar cannot halve
        return
    best = _plan(net, 8, hierarchy, kinds, model_name, "exhaustive").traffic_bytes
    joint_cost = plan_cost(model, net, 8, hierarchy, joint.columns)
    assert joint_cost == pytest.approx(best, rel=1e-12, abs=1e-6)
    greedy = _plan(net, 8, hierarchy, kinds, model_name).columns
    assert joint_cost <= plan_cost(model, net, 8, hierarchy, greedy) * (1 + 1e-12) + 1e-6
    assert joint.traffic_bytes == pytest.approx(joint_cost, rel=1e-12, abs=1e-6)
