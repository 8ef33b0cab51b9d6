"""Topologies: links, lanes, routes and the pairs of the hierarchical partition."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.hardware.topology import HTree, Torus, make_topology


def config(accelerators):
    return load_hardware(overrides={"accelerators": accelerators})


def test_htree_is_a_fat_tree():
    tree = HTree(config(16))
    by_lanes = {}
    for link in tree.links:
        by_lanes.setdefault(link.lanes, []).append(link)
    # per direction: 16 leaf links, then 8, 4, 2 with 2, 4, 8 lanes
    assert {lanes: len(links) // 2 for lanes, links in by_lanes.items()} == {1: 16, 2: 8, 4: 4, 8: 2}
    base = tree.links[0].bandwidth_bytes_per_cycle
    for lanes, links in by_lanes.items():
        assert links[0].bandwidth_bytes_per_cycle == pytest.approx(lanes * base)


@pytest.mark.parametrize("accelerators", [2, 8, 16, 64])
def test_htree_pairs_meet_at_their_level_switch(accelerators):
    tree = HTree(config(accelerators))
    levels = tree.levels
    for level in range(levels):
        half = 2 ** (levels - level - 1)
        for src in range(accelerators):
            route = tree.route(src, src ^ half)
            height = levels - level  # the switch where the pair meets
            assert len(route.links) == 2 * height and route.switches == 2 * height - 1
            top = route.links[height - 1].name.split(">")[1]
            assert top == f"S{height}.{src >> height}"


@pytest.mark.parametrize("accelerators, shape", [(8, (2, 4)), (16, (4, 4)), (32, (4, 8)),
                                                 (64, (8, 8)), (2, (1, 2))])
def test_torus_shape(accelerators, shape):
    torus = Torus(config(accelerators))
    assert (torus.rows, torus.cols) == shape


@given(st.sampled_from([4, 8, 16, 64]), st.data())
def test_torus_routes_are_shortest_and_connected(accelerators, data):
    torus = Torus(config(accelerators))
    src = data.draw(st.integers(0, accelerators - 1))
    dst = data.draw(st.integers(0, accelerators - 1).filter(lambda d: d != src))
    route = torus.route(src, dst)
    (r0, c0), (r1, c1) = torus.position(src), torus.position(dst)
    dr, dc = abs(r1 - r0), abs(c1 - c0)
    hops = min(dr, torus.rows - dr) + min(dc, torus.cols - dc)
    assert len(route.links) == hops
    node = f"A{src}"
    for link in route.links:  # consecutive links join up
        start, end = link.name.split(">")
        assert start == node
        node = end
    assert node == f"A{dst}"


def test_ideal_and_unknown():
    assert make_topology("ideal", config(16)).route(0, 5).links == ()
    with pytest.raises(InputError, match="did you mean 'torus'"):
        make_topology("tours", config(16))
