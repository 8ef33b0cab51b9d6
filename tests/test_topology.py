"""Topologies: links, lanes, routes and the groups of the hierarchical partition."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import HardwareConfig, load_hardware
from hypar_sim.hardware.interconnect import link_spec
from hypar_sim.hardware.topology import (
    TOPOLOGIES,
    FatTree,
    Ideal,
    Topology,
    Torus,
    make_topology,
)
from hypar_sim.hardware.transfer import Routed
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.request import make_request
from tests.conftest import REPO

CONFIG = load_hardware()


def array(accelerators: int) -> tuple[HardwareConfig, Hierarchy]:
    """The default hardware and the default hierarchy of `accelerators` (a topology's
    arguments)."""
    return CONFIG, Hierarchy.for_count(accelerators)


def height_of(node: str) -> int:
    """0 for an accelerator "A3", k for a switch "Sk.j"."""
    return 0 if node.startswith("A") else int(node[1:].split(".")[0])


def assert_connected(route, src: int, dst: int) -> None:
    node = f"A{src}"
    for link in route.links:  # consecutive links join up
        start, end = link.name.split(">")
        assert start == node
        node = end
    assert node == f"A{dst}"


# --- fat tree ("htree") ---

def old_binary_htree(accelerators: int):
    """Reference: the binary H-tree as built before the hierarchy generalisation.

    Returns (names, lanes, route) where route(src, dst) -> (link indices, switches).
    """
    levels = accelerators.bit_length() - 1

    def node(height: int, index: int) -> str:
        return f"A{index}" if height == 0 else f"S{height}.{index}"

    names: list[str] = []
    lanes: list[int] = []
    up: dict[tuple[int, int], int] = {}
    down: dict[tuple[int, int], int] = {}
    for height in range(levels):
        for index in range(accelerators >> height):
            child, parent = node(height, index), node(height + 1, index >> 1)
            up[(height, index)] = len(names)
            names.append(f"{child}>{parent}")
            lanes.append(2**height)
            down[(height, index)] = len(names)
            names.append(f"{parent}>{child}")
            lanes.append(2**height)

    def route(src: int, dst: int) -> tuple[list[int], int]:
        top = (src ^ dst).bit_length()
        path = [up[(h, src >> h)] for h in range(top)]
        path += [down[(h, dst >> h)] for h in reversed(range(top))]
        return path, 2 * top - 1

    return names, lanes, route


@pytest.mark.parametrize("accelerators", [2, 8, 16, 64])
def test_fat_tree_is_the_old_htree_for_binary_hierarchies(accelerators):
    tree = make_topology("htree", *array(accelerators))
    assert tree.hierarchy == Hierarchy.binary(accelerators.bit_length() - 1)
    names, lanes, route = old_binary_htree(accelerators)
    assert [link.name for link in tree.links] == names
    assert [link.lanes for link in tree.links] == lanes
    assert [link.index for link in tree.links] == list(range(len(names)))
    assert {link.spec for link in tree.links} == {link_spec(CONFIG)}
    for src in range(accelerators):
        for dst in range(accelerators):
            if src != dst:
                got = tree.route(src, dst)
                assert ([link.index for link in got.links], got.switches) == route(src, dst)


def test_htree_is_a_fat_tree():
    tree = FatTree(*array(16))
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
    tree = FatTree(*array(accelerators))
    levels = tree.levels
    for level in range(levels):
        half = 2 ** (levels - level - 1)
        for src in range(accelerators):
            route = tree.route(src, src ^ half)
            height = levels - level  # the switch where the pair meets
            assert len(route.links) == 2 * height and route.switches == 2 * height - 1
            top = route.links[height - 1].name.split(">")[1]
            assert top == f"S{height}.{src >> height}"


MIXED = [(3, 2), (3, 2, 2), (4, 3, 2), (2, 3), (4, 4)]


@pytest.mark.parametrize("sizes", MIXED, ids=lambda s: "x".join(map(str, s)))
def test_fat_tree_lanes_over_any_hierarchy(sizes):
    hierarchy = Hierarchy(sizes)
    count, levels = hierarchy.members, hierarchy.levels
    tree = FatTree(CONFIG, hierarchy)
    lanes_per_height = [0] * levels
    for link in tree.links:
        start, end = link.name.split(">")
        going_up = height_of(start) < height_of(end)
        height = min(height_of(start), height_of(end))  # of the child end
        assert abs(height_of(start) - height_of(end)) == 1
        assert link.lanes == math.prod(sizes[levels - height:])  # accelerators below the child
        if going_up:
            lanes_per_height[height] += link.lanes
    assert lanes_per_height == [count] * levels  # every level carries the same bandwidth
    assert len({link.name for link in tree.links}) == len(tree.links)


@pytest.mark.parametrize("sizes", MIXED, ids=lambda s: "x".join(map(str, s)))
def test_fat_tree_groups_meet_at_their_level_switch(sizes):
    hierarchy = Hierarchy(sizes)
    levels = hierarchy.levels
    tree = make_topology("htree", CONFIG, hierarchy)
    for level in range(levels):
        height = levels - level
        for group in hierarchy.groups(level):
            switch = f"S{height}.{group[0] // math.prod(sizes[level:])}"
            for src in group:
                for dst in group:
                    if src == dst:
                        continue
                    route = tree.route(src, dst)
                    assert len(route.links) == 2 * height and route.switches == 2 * height - 1
                    assert route.links[height - 1].name.endswith(f">{switch}")
                    assert_connected(route, src, dst)


# --- torus ---

@pytest.mark.parametrize("accelerators, shape", [
    (2, (1, 2)), (6, (2, 3)), (7, (1, 7)), (8, (2, 4)), (12, (3, 4)), (16, (4, 4)),
    (24, (4, 6)), (32, (4, 8)), (64, (8, 8))])
def test_torus_shape(accelerators, shape):
    torus = Torus(*array(accelerators))
    assert (torus.rows, torus.cols) == shape


def test_torus_rows_given():
    torus = Torus(*array(12), rows=2)
    assert (torus.rows, torus.cols) == (2, 6)
    with pytest.raises(InputError, match="rows = 5 does not divide 12"):
        Torus(*array(12), rows=5)


@given(st.sampled_from([4, 8, 16, 64, 6, 7, 12, 18, 24]), st.data())
def test_torus_routes_are_shortest_and_connected(accelerators, data):
    torus = Torus(*array(accelerators))
    src = data.draw(st.integers(0, accelerators - 1))
    dst = data.draw(st.integers(0, accelerators - 1).filter(lambda d: d != src))
    route = torus.route(src, dst)
    (r0, c0), (r1, c1) = torus.position(src), torus.position(dst)
    dr, dc = abs(r1 - r0), abs(c1 - c0)
    hops = min(dr, torus.rows - dr) + min(dc, torus.cols - dc)
    assert len(route.links) == hops
    assert_connected(route, src, dst)


# --- registry, ideal, errors ---

def test_registry():
    assert list(TOPOLOGIES) == ["htree", "torus", "ideal"]
    assert TOPOLOGIES["htree"] is FatTree
    hierarchy = Hierarchy((4, 3))
    for name in TOPOLOGIES:
        topology = make_topology(name, CONFIG, hierarchy)
        assert topology.name == name and topology.hierarchy == hierarchy
        assert topology.accelerators == 12
    assert make_topology("htree", *array(12)).hierarchy == Hierarchy((3, 2, 2))


def test_ideal_and_unknown():
    assert make_topology("ideal", *array(16)).route(0, 5).links == ()
    assert Ideal(*array(12)).route(11, 0).switches == 0
    with pytest.raises(InputError, match="did you mean 'torus'.*allowed: htree, torus, ideal"):
        make_topology("tours", *array(16))


def test_hierarchy_must_match_the_accelerators():
    with pytest.raises(InputError, match="3x2x2 has 12 members, but there are 16 accelerators"):
        make_request("vgg_a", accelerators=16, hierarchy="3x2x2")


@pytest.mark.parametrize("sizes", [(2, 2, 2, 2), (3, 2, 2), (2, 3), (5,)])
@pytest.mark.parametrize("name", ["htree", "configs/topologies/htree_per_level.yaml"])
def test_fat_tree_routes_as_arrays_equal_the_routes_one_by_one(sizes, name):
    """The fat tree's vectorised `_pair_routes` gives, for every ordered pair in a shuffled
    order, the links, shapes, energy weights and switches of the generic per-route one, and
    `route_arrays` gives each message of a list with repeats its own pair's route."""
    hierarchy = Hierarchy(sizes)
    if name.endswith(".yaml") and hierarchy.levels != 4:
        pytest.skip("the file describes four levels")
    topology = make_topology(str(REPO / name) if name.endswith(".yaml") else name, CONFIG,
                             hierarchy)
    count = hierarchy.members
    pairs = np.array([(a, b) for a in range(count) for b in range(count) if a != b])
    pairs = pairs[np.random.default_rng(0).permutation(len(pairs))]
    fast = topology._pair_routes(pairs[:, 0], pairs[:, 1])
    generic = Topology._pair_routes(topology, pairs[:, 0], pairs[:, 1])
    for mine, theirs in zip(fast, generic, strict=True):
        assert np.array_equal(mine, theirs)
    # every message of a repeated, shuffled list gets its own pair's route, in order
    messages = np.concatenate([pairs, pairs[::-1], pairs[:3]])
    shapes, crossed, per_message, energy, switches = topology.route_arrays(messages[:, 0],
                                                                           messages[:, 1])
    ends = np.cumsum(per_message)
    for index, (src, dst) in enumerate(messages.tolist()):
        route = topology.route(src, dst)
        links = crossed[ends[index] - per_message[index]:ends[index]].tolist()
        assert links == [link.index for link in route.links]
        assert (shapes[index], energy[index], switches[index]) == (
            topology.shape_id(route), route.energy_links, route.switches)


@pytest.mark.parametrize("name", ["htree", "torus"])
def test_routes_of_a_part_equal_the_part_routed_alone(name):
    """`Routed.part` (how the analytic engine reads each step's routes from the whole
    step's) gives what routing the part's messages alone gives, for empty and end parts."""
    topology = make_topology(name, *array(16))
    rng = np.random.default_rng(1)
    src = rng.integers(0, 16, 200)
    dst = (src + rng.integers(1, 16, 200)) % 16
    whole = Routed.of(src, dst, topology)
    for first, last in [(0, 0), (0, 1), (3, 3), (17, 120), (120, 200), (0, 200)]:
        part, alone = whole.part(first, last), Routed.of(src[first:last], dst[first:last],
                                                         topology)
        for name in ("shapes", "per_message", "energy_links", "switches", "src", "dst",
                     "crossed"):
            assert np.array_equal(getattr(part, name), getattr(alone, name))
        sizes = rng.random(last - first)
        assert np.array_equal(part.loads(sizes, len(topology.links)),
                              alone.loads(sizes, len(topology.links)))


@given(st.lists(st.integers(2, 4), min_size=1, max_size=4), st.integers(0, 2**32 - 1),
       st.sampled_from([300, 40_000]))
def test_fat_tree_link_loads_are_the_links_crossed_added_up(sizes, seed, messages):
    """The fat tree's bytes per link without listing each message's links
    (`FatTree.link_loads`, what `Routed.loads` reads: few messages all at once, many height
    by height) equal, to the last bit, the bytes added up over the links every message
    crosses, in the messages' order."""
    hierarchy = Hierarchy(tuple(sizes))
    topology = make_topology("htree", CONFIG, hierarchy)
    rng = np.random.default_rng(seed)
    count = hierarchy.members
    src = rng.integers(0, count, messages)
    dst = (src + rng.integers(1, count, messages)) % count
    sizes_bytes = rng.random(messages) * 1e6
    routed = Routed.of(src, dst, topology)
    crossed = topology.route_arrays(src, dst)[1]
    by_links = np.bincount(crossed, np.repeat(sizes_bytes, routed.per_message),
                           minlength=len(topology.links))
    assert np.array_equal(routed.loads(sizes_bytes, len(topology.links)), by_links)
    assert np.array_equal(routed.crossed, crossed)


@pytest.mark.parametrize(("accelerators", "links"), [(16, 32), (8, 12), (6, 9)])
def test_torus_bandwidth_readings(accelerators, links):
    """HyPar 6.1's "1600 Mb/s (i.e. the total network bandwidth is 25.6 Gb/s)": per_link (the
    default) gives every torus link 1.6 Gb/s; total shares accelerators x 1.6 Gb/s among the
    torus's full-duplex links (4 x 4: 32 links, 0.8 Gb/s each; 2 x 4: 12; 2 x 3: 9)."""
    per_link = load_hardware()
    total = load_hardware(None, {"torus_bandwidth": "total"})
    assert per_link.torus_bandwidth == "per_link"
    hierarchy = Hierarchy.for_count(accelerators)
    one, shared = Torus(per_link, hierarchy), Torus(total, hierarchy)
    assert len(shared.links) == 2 * links
    base = link_spec(per_link).bandwidth_bytes_per_cycle
    assert {link.spec.bandwidth_bytes_per_cycle for link in one.links} == {base}
    share = accelerators * 1.6 / links  # Gb/s per link and direction
    for link in shared.links:
        assert link.spec.bandwidth_bytes_per_cycle == pytest.approx(base * share / 1.6, rel=1e-12)
    tree = FatTree(total, hierarchy)  # the fat tree keeps its links
    assert tree.links[0].spec.bandwidth_bytes_per_cycle == base


def test_torus_bandwidth_bad_value_is_one_line(cli, tmp_path):
    result = cli("run", "sfc", "--topology", "torus", "--set", "torus_bandwidth=half")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "torus_bandwidth: 'half' is not allowed; allowed: per_link, total" in result.stderr
    config = tmp_path / "hw.yaml"
    config.write_text("torus_bandwidth: 2\n")
    result = cli("hardware", "--config", str(config))
    assert result.returncode == 2 and "allowed: per_link, total" in result.stderr
    assert "Traceback" not in result.stderr
