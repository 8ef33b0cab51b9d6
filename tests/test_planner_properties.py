"""The dynamic program equals brute force on random chains (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hypar_sim.planner.exhaustive import best_level, global_optimum, greedy_levels
from hypar_sim.planner.hypar import hierarchical_choices, partition_two
from hypar_sim.planner.plan import evaluate_plan, top_splits
from hypar_sim.workload.layers import FeatureShape, make_conv, make_fc
from hypar_sim.workload.network import Network


@st.composite
def networks(draw, max_layers=8):
    """Random chains of conv and fc layers whose shapes always fit."""
    channels = draw(st.integers(1, 64))
    size = draw(st.integers(1, 32))
    shape = FeatureShape(channels, size, size)
    layers = []
    for index in range(draw(st.integers(1, max_layers))):
        if shape.height > 1 and draw(st.booleans()):
            kernel = draw(st.integers(1, min(5, shape.height)))
            layer = make_conv(f"conv{index}", shape, draw(st.integers(1, 256)), kernel)
        else:
            layer = make_fc(f"fc{index}", shape, draw(st.integers(1, 4096)))
        layers.append(layer)
        shape = layer.output
    return Network("random", FeatureShape(channels, size, size), tuple(layers))


@settings(max_examples=150, deadline=None)
@given(networks(), st.sampled_from([2, 16, 64, 256, 1024]))
def test_level_dp_equals_brute_force(net, batch):
    splits = top_splits(net, batch)
    assert partition_two(splits) == best_level(splits)


@settings(max_examples=80, deadline=None)
@given(networks(max_layers=5), st.integers(1, 4))
def test_hierarchy_equals_greedy_brute_force(net, levels):
    splits = top_splits(net, 256)
    assert hierarchical_choices(splits, levels) == greedy_levels(splits, levels)


@settings(max_examples=40, deadline=None)
@given(networks(max_layers=4), st.integers(1, 3))
def test_global_optimum_bounds_hypar(net, levels):
    splits = top_splits(net, 256)
    hypar_cost, choices = hierarchical_choices(splits, levels)
    best_cost, _ = global_optimum(splits, levels)
    assert best_cost <= hypar_cost
    assert evaluate_plan(net, 256, choices, "hypar").traffic_bytes == hypar_cost
