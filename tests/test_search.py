"""Min-sum variable elimination (planner.search) against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypar_sim.errors import InputError
from hypar_sim.planner import search
from hypar_sim.planner.search import Factor, minimise


@st.composite
def problems(draw):
    count = draw(st.integers(1, 6))
    domains = [draw(st.integers(1, 3)) for _ in range(count)]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    factors = [Factor((v,), rng.integers(0, 20, domains[v]).astype(float))
               for v in range(count) if draw(st.booleans())]
    for a, b in itertools.combinations(range(count), 2):
        if draw(st.booleans()):
            factors.append(Factor((b, a), rng.integers(0, 20, (domains[b], domains[a]))
                                  .astype(float)))
    order = draw(st.permutations(range(count)))
    return domains, factors, order


def total(factors, assignment):
    return sum(f.table[tuple(assignment[v] for v in f.variables)] for f in factors)


@settings(max_examples=150, deadline=None)
@given(problems())
def test_elimination_equals_brute_force(problem):
    domains, factors, order = problem
    cost, assignment = minimise(domains, factors, order)
    best = min(total(factors, a) for a in itertools.product(*(range(d) for d in domains)))
    assert cost == best == total(factors, assignment)  # integer costs: exact sums


def test_too_many_states_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(search, "MAX_STATES", 8)
    factors = [Factor((0, v), np.zeros((3, 3))) for v in (1, 2)]
    with pytest.raises(InputError, match="--search greedy"):
        minimise([3, 3, 3], factors, [0, 1, 2])


@settings(max_examples=80, deadline=None)
@given(problems())
def test_local_search_is_never_below_the_optimum_and_counts_its_own_cost(problem):
    domains, factors, order = problem
    best, _ = minimise(domains, factors, order)
    cost, assignment = search.local_search(domains, factors, order)
    assert cost >= best and cost == total(factors, assignment)


def test_a_graph_too_entangled_for_the_exact_plan_gets_a_local_search(monkeypatch):
    """DenseNet-like: every layer's output feeds every later concatenation."""
    from hypar_sim.partition.hierarchy import Hierarchy
    from hypar_sim.planner.plan import plan_graph
    from hypar_sim.workload.graph import parse_graph

    nodes = [{"name": "c0", "type": "conv", "out_channels": 4, "kernel": 1}]
    for i in range(1, 6):
        nodes.append({"name": f"cat{i}", "type": "concat",
                      "inputs": ["c0", *(f"c{j}" for j in range(1, i))]})
        nodes.append({"name": f"c{i}", "type": "conv", "out_channels": 4, "kernel": 1})
    graph = parse_graph({"inputs": {"x": [4, 4, 4]}, "nodes": nodes}, "dense")
    exact = plan_graph(graph, "hypar", Hierarchy.binary(2), 8)
    monkeypatch.setattr(search, "MAX_STATES", 4)
    local = plan_graph(graph, "hypar", Hierarchy.binary(2), 8)
    assert "local search" in local.search and "local search" not in exact.search
    assert local.traffic_bytes >= exact.traffic_bytes
    with pytest.raises(InputError, match="--search greedy"):
        plan_graph(graph, "hypar", Hierarchy.binary(2), 8, search="joint")
