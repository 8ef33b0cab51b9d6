"""The `grid` strategy: 2D/2.5D/3D grids per layer (Li et al., "Efficient distributed
algorithms for Convolutional Neural Networks", SPAA 2021), costs worked by hand, brute force,
the memory limit, and where its plan differs from hypar's."""

from __future__ import annotations

import itertools
import math

import pytest

import hypar_sim.planner.grid as grid  # registers the strategy
from hypar_sim.errors import InputError
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.shares import offered
from hypar_sim.planner.strategies import STRATEGIES, PlanOptions, PlanRequest, make_plan
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.workload.layers import FeatureShape, Pool, make_conv, make_fc
from hypar_sim.workload.network import Network, load_network

ALL = ("batch", "spatial", "out", "in")
MIB = 2 ** 20


def _request(network: Network, hierarchy: Hierarchy, batch: int, kinds=ALL,
             capacity: float | None = None) -> PlanRequest:
    options = PlanOptions(kinds=kinds, traffic_model="layout")
    return PlanRequest(network, batch, hierarchy, options, 4, traffic_model("layout"), capacity)


def _chain() -> Network:
    """Three layers: a padded conv with pooling, a conv, an fc."""
    first = make_conv("c1", FeatureShape(4, 8, 8), 8, 3, padding=1, pool=Pool(2, 2))
    second = make_conv("c2", first.output, 16, 3, padding=1)
    return Network("chain", first.input, (first, second, make_fc("f3", second.output, 8)))


def test_hand_worked_fc_grids():
    """fc 8 -> 4, batch 8, 2x2x2 cubes: |In| = 64, |Ker| = 32, |Out| = 32 words.

    data (b8): each member holds all 32 weights, owns 4: receives 28, 224 in all; Eq. 10 per
    member = Out block 4 + In slice 8 + Ker slice 32 + (64 + 32) / 8 = 56.
    b2 x k2 x c2 (3D): In slice 4x4 = 16 (x8 = 128, less 64 owned), Ker slice 2x4 = 8 (64 - 32),
    Out block 4x2 = 8, half of it reduced in from the other replica (32): 64 + 32 + 32 = 128;
    Eq. 10 = 8 + 16 + 8 + 12 = 44.
    model (c8): Out block 32 per member, 7/8 of it reduced in: 224; Eq. 10 = 32 + 8 + 4 + 12.
    k4 x c2: In slice 8x4 = 32 per member (256 - 64 = 192), Out block 8 half reduced in (32);
    Eq. 10 = 8 + 32 + 4 + 12 = 56.
    """
    layer = make_fc("fc", FeatureShape(8, 1, 1), 4)
    hierarchy = Hierarchy((2, 2, 2))
    cases = {("batch",) * 3: (0, 224, 0, 56), ("batch", "out", "in"): (64, 32, 32, 44),
             ("in",) * 3: (0, 0, 224, 56), ("out", "out", "in"): (192, 0, 32, 56)}
    for column, (inputs, weights, outputs, eq10) in cases.items():
        cost = grid.grid_cost(layer, 8, column, hierarchy)
        assert (cost.in_words, cost.weight_words, cost.out_words, cost.eq10_words) == (
            inputs, weights, outputs, eq10), column
        # the mapping: P cost_D - 2 (|In| + |Ker|) - |Out| on an even grid
        assert cost.received_words == 8 * eq10 - 2 * (64 + 32) - 32
        assert cost.training_words == 2 * cost.received_words
    first = grid.grid_cost(layer, 8, ("batch", "out", "in"), hierarchy, first=True)
    assert first.training_words == 2 * 128 - 64  # no input error for the first layer


def test_hand_worked_conv_halo():
    """conv 2 -> 2 channels, 4x4 map, 3x3 pad 1, batch 2, split in rows over two cubes: each
    reads 3 of the 4 input rows (one halo row): 2 x 2 x 3 x 4 = 48 words, 96 in all against
    |In| = 64, so 32 words of halo; the 36 weights are replicated once: 36."""
    layer = make_conv("conv", FeatureShape(2, 4, 4), 2, 3, padding=1)
    cost = grid.grid_cost(layer, 2, ("spatial",), Hierarchy((2,)))
    assert cost.grid == grid.Grid(rows=2)
    assert (cost.in_words, cost.weight_words, cost.out_words) == (32, 36, 0)
    # footprint of a member: 2 x 36 weights and gradients + 48 input + 2x2x2x4 = 32 output
    assert cost.footprint_words == 72 + 48 + 32


def test_eq8_attained_and_table1_bounds_every_grid():
    """Eq. 4 at tiles = partitions on b2 x k2 x c2 of fc 8 -> 4 (batch 8): W_k W_b = 8,
    W_k W_c = 8, W_c W_b = 16: 32 >= Eq. 8's 3 (4 x 8 x 8 / 8)^(2/3) = 30.24. Table 1 is a
    lower bound of Eq. 4 on every grid, for unbounded memory (Eq. 8) and for the grid's own
    Out block as M_L (Eq. 6 or Eq. 9)."""
    fc = make_fc("fc", FeatureShape(8, 1, 1), 4)
    balanced = grid.Grid(batch=2, out=2, inn=2)
    assert grid.eq4_words(fc, 8, balanced) == 32
    assert grid.table1_words(fc, 8, 8, math.inf) == pytest.approx(3 * 32 ** (2 / 3))
    # a cube fc (N_k = N_c = N_b = 4 on 8): the 3D grid meets Eq. 8 exactly, 3 x 4 = 12
    cube = make_fc("cube", FeatureShape(4, 1, 1), 4)
    assert grid.eq4_words(cube, 4, balanced) == pytest.approx(grid.table1_words(
        cube, 4, 8, math.inf)) == pytest.approx(12)
    hierarchy = Hierarchy((2, 2, 2, 2))
    for layer, batch in ((fc, 64), (_chain().layers[1], 4), (_chain().layers[0], 8)):
        for column in grid.grid_columns(hierarchy, ALL).values():
            g = grid.grid_of(column, hierarchy)
            words = grid.eq4_words(layer, batch, g)
            out = layer.conv_output
            block = out.channels / g.out * batch * out.height * out.width / (g.batch * g.rows)
            assert words >= grid.table1_words(layer, batch, 16, math.inf) * (1 - 1e-9)
            assert words >= grid.table1_words(layer, batch, 16, block) * (1 - 1e-9)


def test_cost_depends_on_the_grid_alone():
    """Every column realising one grid costs the same (so the search costs grids)."""
    hierarchy = Hierarchy((3, 2, 2))
    layer = _chain().layers[1]
    seen: dict[grid.Grid, grid.GridCost] = {}
    for column in itertools.product(ALL, repeat=3):
        if not offered(layer, 6, column, hierarchy):
            continue
        cost = grid.grid_cost(layer, 6, column, hierarchy)
        assert seen.setdefault(cost.grid, cost) == cost


@pytest.mark.parametrize("sizes", [(2, 2, 2), (3, 2)])
def test_plan_is_the_argmin_over_every_grid(sizes):
    """Brute force over every column of every layer of a 3-layer chain: the plan's paper cost
    per layer is the least; the paper ignores costs between layers, so the plan's sum is the
    least of every plan's."""
    hierarchy, network, batch = Hierarchy(sizes), _chain(), 6
    columns = grid.grid_strategy(_request(network, hierarchy, batch))
    plans_best = 0.0
    for index, (layer, chosen) in enumerate(zip(network.layers, columns, strict=True)):
        every = [grid.grid_cost(layer, batch, column, hierarchy, index == 0).training_words
                 for column in itertools.product(ALL, repeat=len(sizes))
                 if offered(layer, batch, column, hierarchy)]
        mine = grid.grid_cost(layer, batch, chosen, hierarchy, index == 0).training_words
        assert mine == min(every)
        plans_best += min(every)
    total = sum(grid.grid_cost(layer, batch, column, hierarchy, i == 0).training_words
                for i, (layer, column) in enumerate(zip(network.layers, columns, strict=True)))
    assert total == plans_best


def test_memory_limit_changes_the_grid():
    """VGG-A conv5_2 (512 -> 512, 3x3 on 14x14, batch 256, 16 cubes, all kinds): data
    parallelism (b16) moves the least, 2 x 15 x |Ker| = 70.8 M words, but each cube keeps
    2 x 2.36 M weights and gradients: 30.25 MiB. b8 x k2 and b8 x c2 move 84.4 M words
    (|Ker| x 7, and |In| or |Out| x 1, twice: |In| = |Out| here) and keep half the weights:
    27.4 MiB. With 28 MiB per cube the limit picks one of them: b8 x k2, whose column agrees
    with conv5_1's (conv5_1, the first layer, computes no input error, so k2 is cheapest for
    it). Below the leanest grid's 27.4 MiB no grid fits, and the error says what is needed.
    Without streamed tiles (Case 1a), memory here follows replication: the limit trades the
    replicated weights of data parallelism for a replicated input or partial output."""
    vgg = load_network("vgg_a")
    conv51, conv52 = vgg.layers[6], vgg.layers[7]
    assert conv52.name == "conv5_2"
    network = Network("conv5", conv51.input, (conv51, conv52))
    hierarchy = Hierarchy((2, 2, 2, 2))
    free = grid.grid_strategy(_request(network, hierarchy, 256))
    assert grid.grid_of(free[1], hierarchy) == grid.Grid(batch=16)
    costs = grid.layer_grids(_request(network, hierarchy, 256), conv52, False,
                             grid.grid_columns(hierarchy, ALL))
    data = next(c for c in costs if c.grid == grid.Grid(batch=16))
    assert data.training_words == 2 * 15 * conv52.weights
    assert data.footprint_words * 4 / MIB == pytest.approx(30.25)
    tied = grid.choose(costs, "layer conv5_2", 28 * MIB, 4)
    assert {c.grid for c in tied} == {grid.Grid(batch=8, out=2), grid.Grid(batch=8, inn=2)}
    assert tied[0].footprint_words * 4 / MIB == pytest.approx(27.375)
    limited = grid.grid_strategy(_request(network, hierarchy, 256, capacity=28 * MIB))
    assert limited == [("batch", "batch", "batch", "out")] * 2
    with pytest.raises(InputError, match=r"layer conv5_2 fits no grid.*needs 0\.0267 GiB"):
        grid.choose(costs, "layer conv5_2", 27 * MIB, 4)


def test_kinds_and_the_model_are_honoured():
    """Only allowed kinds appear; a layer no grid of them can split is refused; kinds with
    no grid dimension are refused."""
    hierarchy, network = Hierarchy((2, 2)), _chain()
    for kinds in (("batch", "in"), ("out", "in"), ("batch", "spatial")):
        columns = grid.grid_strategy(_request(network, hierarchy, 4, kinds))
        assert {kind for column in columns for kind in column} <= set(kinds)
    with pytest.raises(InputError, match="layer c1 cannot be split"):
        grid.grid_strategy(_request(network, hierarchy, 1, ("batch",)))
    with pytest.raises(InputError, match="--kinds: the grid strategy needs"):
        grid.grid_strategy(_request(network, hierarchy, 4, ("heads",)))


def test_equal_grids_follow_the_previous_layer():
    """b8 x c2 on 2x2x2x2 is four columns of one cost; the one agreeing with the layer
    before at the most levels is taken."""
    hierarchy = Hierarchy((2, 2, 2, 2))
    target = grid.Grid(batch=8, inn=2)
    assert grid.realise(target, hierarchy, ALL, None) == ("batch", "batch", "batch", "in")
    previous = ("in", "out", "batch", "batch")
    assert grid.realise(target, hierarchy, ALL, previous) == ("in", "batch", "batch", "batch")


def test_differs_from_hypar_on_sconv():
    """SCONV, kinds batch,in, 16 cubes, batch 256: hypar keeps every layer data parallel;
    grid splits conv3 b8 x c2 and conv4 b4 x c4. On conv3 the paper's count prefers b8 x c2
    (1.797 M words against 1.875 M for b16: replicating |Out| = 0.46 M once saves 0.5 M weight
    words), because the paper starts every layer from an input already spread as that layer
    needs it (its initial distribution, Sec. 2.2) and has no cost between layers. HyPar's
    count, the layout model, charges the batch -> in boundary (conv3's input F and error E
    re-split from samples to channels, its Table 2), which outweighs the saving: hypar's plan
    moves fewer real bytes, grid's plan has the lower paper cost."""
    network, hierarchy = load_network("sconv"), Hierarchy((2, 2, 2, 2))
    options = PlanOptions(kinds=("batch", "in"), search="joint", traffic_model="layout")
    mine = make_plan(network, "grid", hierarchy, 256, options=options)
    hypar = make_plan(network, "hypar", hierarchy, 256, options=options)
    assert all(column == ("batch",) * 4 for column in hypar.columns)
    assert mine.columns[2] == ("batch", "batch", "batch", "in")
    assert grid.grid_of(mine.columns[3], hierarchy) == grid.Grid(batch=4, inn=4)

    def paper(plan):
        return sum(grid.grid_cost(layer, 256, column, hierarchy, i == 0).training_words
                   for i, (layer, column) in enumerate(zip(network.layers, plan.columns,
                                                           strict=True)))

    assert paper(mine) < paper(hypar)
    assert hypar.traffic_bytes < mine.traffic_bytes


def test_plan_runs_and_is_registered():
    """The plan of VGG-A (all kinds, 16 cubes) evaluates under the layout model: fc layers
    get 2.5D grids (replication over in), conv layers data parallelism."""
    assert "grid" in STRATEGIES and STRATEGIES["grid"].searches
    hierarchy = Hierarchy((2, 2, 2, 2))
    options = PlanOptions(kinds=ALL, traffic_model="layout")
    plan = make_plan(load_network("vgg_a"), "grid", hierarchy, 256, options=options)
    assert plan.traffic_bytes > 0
    grids = [grid.grid_of(column, hierarchy) for column in plan.columns]
    assert grids[0] == grid.Grid(batch=16)
    assert grids[8] == grid.Grid(out=2, inn=8)  # fc1: 2.5D, replication factor 8
