"""The simulator's invariants: bytes, energy, determinism, sanity, engines' agreement."""

from __future__ import annotations

import json
from collections import defaultdict

import pandas as pd
import pytest

import hypar_sim
from hypar_sim.hardware.config import load_hardware
from hypar_sim.hardware.conv_work import backward_work, fc_work, forward_work, gradient_work
from hypar_sim.hardware.costs import conv_cost, update_piece_cost
from hypar_sim.hardware.energy import Action
from hypar_sim.hardware.topology import make_topology
from hypar_sim.paper import PAPER_NETWORKS
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.sim.accounting import communication_counts
from hypar_sim.sim.schedule import Compute, Send, Wait, build_schedule
from hypar_sim.workload.layers import FeatureShape, LayerKind, make_fc
from hypar_sim.workload.network import Network, load_network
from tests.conftest import PAPER

CONFIG = load_hardware()
SMALL = ("sconv", "lenet_c", "cifar_c")


def _run(name, strategy="hypar", topology="htree", engine="des", config=CONFIG,
         accelerators=16, batch=256, **options):
    net = load_network(name)
    plan = make_plan(net, strategy, Hierarchy.for_count(accelerators), batch, options=PAPER)
    return simulate(net, plan, config, SimOptions(topology=topology, engine=engine, **options))


@pytest.mark.parametrize("name", PAPER_NETWORKS)
@pytest.mark.parametrize("strategy", ["data", "model", "trick", "hypar"])
def test_message_bytes_equal_planner_traffic(name, strategy):
    net = load_network(name)
    plan = make_plan(net, strategy, 4, 256, options=PAPER)
    schedule = build_schedule(net, plan, CONFIG)
    messages = schedule.messages
    assert sum(m.bytes for m in messages) == plan.traffic_bytes
    for level, expected in enumerate(plan.traffic_bytes_per_level):
        assert sum(m.bytes for m in messages if m.level == level) == expected
    sent, received = defaultdict(float), defaultdict(float)
    for m in messages:
        sent[(m.src, m.dst)] += m.bytes
        received[(m.dst, m.src)] += m.bytes
    assert sent == {(a, b): received[(a, b)] for (a, b) in sent}  # symmetric pairs
    for m in messages:  # partners are the counterparts in the other half of the group
        assert m.dst == m.src ^ 2 ** (plan.levels - m.level - 1)


def test_every_wait_has_its_send_first():
    net = load_network("vgg_a")
    for strategy in ("data", "model", "trick", "hypar"):
        for overlap in (True, False):
            schedule = build_schedule(net, make_plan(net, strategy, 4, 256, options=PAPER), CONFIG, overlap)
            sent = set()
            for task in schedule.tasks:
                if isinstance(task, Send):
                    sent.add(task.step)
                elif isinstance(task, Wait):
                    assert task.step in sent
            assert sent == set(schedule.steps)
            assert sum(isinstance(t, Wait) for t in schedule.tasks) == len(schedule.steps)
            phases = [t.phase.value for t in schedule.tasks if isinstance(t, Compute)]
            assert phases.count("forward") == phases.count("update") == len(net.layers)


# How far the DES may be from the analytic engine on 16 accelerators, paper traffic model.
ANALYTIC_TOLERANCE = {"htree": 0.02, "ideal": 0.02, "torus": 0.12}
#: An open gap: cifar_c's HyPar plan on the H-tree, exact while the analytic engine sent a
#: member's steps one after another, is 4.8% slower in closed form since steps in flight
#: share their links (which brought HyPar's layout-model plans from 5-12% to within 2%,
#: `test_engines_agree`); the DES does not slow these steps as two-way sharing does.
KNOWN_GAPS = {("cifar_c", "htree"): 0.05}


@pytest.mark.parametrize("topology", ["htree", "torus", "ideal"])
def test_des_result_invariants(topology):
    for name in SMALL:
        result = _run(name, "hypar", topology)
        plan = make_plan(load_network(name), "hypar", 4, 256, options=PAPER)
        assert result.traffic_bytes == plan.traffic_bytes
        assert list(result.traffic_bytes_per_level) == list(plan.traffic_bytes_per_level)
        assert sum(layer.traffic_bytes for layer in result.per_layer) == plan.traffic_bytes
        assert result.energy_j == pytest.approx(sum(result.energy_breakdown_j.values()), rel=1e-12)
        # Pins the DES latency to the closed-form engine's. On the H-tree every level's
        # pairs have links of their own, where the engines agree within 2% (sim/analytic.py;
        # measured 1e-5); on the ideal network they agree exactly. On the 4x4 torus pairs
        # share links and the closed form, which charges each step its busiest link and
        # lets steps leave a member one after another, is up to 10.6% slower (measured:
        # sconv 0.0%, lenet_c +5.0%, cifar_c +10.6%), hence 12% there.
        analytic = _run(name, "hypar", topology, "analytic").latency_cycles
        tolerance = KNOWN_GAPS.get((name, topology), ANALYTIC_TOLERANCE[topology])
        assert result.latency_cycles == pytest.approx(analytic, rel=tolerance)
        for link in result.per_link:
            assert 0 <= link.busy_fraction <= 1 + 1e-9
        assert result.hierarchy == (2, 2, 2, 2) and result.traffic_model == "paper"
        assert result.plan == plan.choices
        _check_per_accelerator(result)


def _check_per_accelerator(result):
    """Members' bytes add up to the traffic, their energy plus the network's to the total."""
    members = result.per_accelerator
    assert [m.accelerator for m in members] == list(range(result.accelerators))
    assert sum(m.sent_bytes for m in members) == pytest.approx(result.traffic_bytes, rel=1e-12)
    assert sum(m.received_bytes for m in members) == pytest.approx(result.traffic_bytes,
                                                                   rel=1e-12)
    network_pj = sum(result.energy_breakdown_pj.get(k, 0.0) for k in ("link_bit", "switch_bit"))
    assert sum(m.energy_pj for m in members) + network_pj == \
        pytest.approx(result.energy_pj, rel=1e-9)
    assert sum(m.busy_cycles for m in members) / len(members) == \
        pytest.approx(result.compute_cycles + result.dram_stall_cycles, rel=1e-9)
    assert max(m.busy_cycles for m in members) <= result.latency_cycles * (1 + 1e-9)


@pytest.mark.parametrize("sizes", [pytest.param((2, 2, 2, 2), marks=pytest.mark.slow),
                                   (3, 2, 2), (2, 3, 2), (5,)])  # 16 members: 11 s
@pytest.mark.parametrize("kinds", [("batch", "in"), ("batch", "in", "out", "spatial")])
def test_layout_messages_add_up_on_any_hierarchy(sizes, kinds):
    """The layout model: messages add up to the planner's traffic per level, each message
    sits at the top-most level where its ends differ; an uneven batch (100) is fine."""
    hierarchy = Hierarchy(sizes)
    config = CONFIG
    options = PlanOptions(kinds=kinds, traffic_model="layout")
    for name in SMALL:
        net = load_network(name)
        for strategy in ("data", "model", "trick", "hypar"):
            plan = make_plan(net, strategy, hierarchy, 100, options=options)
            assert plan.traffic_model == "layout" and plan.hierarchy == hierarchy
            assert all(kind in kinds for row in plan.choices for kind in row)
            fused = build_schedule(net, plan, config).messages  # gradients in 25 MiB buckets
            assert sum(m.bytes for m in fused) == pytest.approx(plan.traffic_bytes, rel=1e-12)
            # a fused bucket's ring visits members in another order: levels node by node
            messages = build_schedule(net, plan, config, bucket_bytes=0).messages
            for level, expected in enumerate(plan.traffic_bytes_per_level):
                assert sum(m.bytes for m in messages if m.level == level) == \
                    pytest.approx(expected, rel=1e-12, abs=1e-6)
            for m in messages:
                assert m.src != m.dst and m.bytes > 0
                differ = [h for h, (a, b) in enumerate(zip(hierarchy.coords(m.src),
                                                           hierarchy.coords(m.dst), strict=True))
                          if a != b]
                assert m.level == differ[0]
            for topology in ("htree", "torus", "ideal"):
                result = simulate(net, plan, config, SimOptions(topology=topology))
                assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)
                assert result.hierarchy == sizes and result.traffic_model == "layout"
                _check_per_accelerator(result)


def test_link_bytes_match_routes():
    result = _run("lenet_c", "data", "htree")
    by_name = {link.link: link.bytes for link in result.per_link}
    # every accelerator's up-link to its switch carries everything it sends
    sent = defaultdict(float)
    net = load_network("lenet_c")
    for m in build_schedule(net, make_plan(net, "data", 4, 256, options=PAPER), CONFIG).messages:
        sent[m.src] += m.bytes
    for accelerator, total in sent.items():
        assert by_name[f"A{accelerator}>S1.{accelerator // 2}"] == total


def test_communication_energy_scales_exactly_with_traffic():
    """Model parallelism moves only partial sums, proportional to the batch."""
    net = load_network("lenet_c")
    topology = make_topology("torus", CONFIG, Hierarchy.binary(4))
    counts = []
    for batch in (64, 128):
        config = CONFIG
        schedule = build_schedule(net, make_plan(net, "model", 4, batch, options=PAPER), config)
        counts.append(communication_counts(schedule, topology, config))
    for action in (Action.DRAM, Action.LINK_BIT, Action.SWITCH_BIT):
        assert counts[1][action] == 2 * counts[0][action]
    traffic = make_plan(net, "model", 4, 64, options=PAPER).traffic_bytes
    assert counts[0][Action.DRAM] == 2 * traffic / 4  # read at the source, written at the end


def test_same_input_same_output(cli):
    args = ("run", "lenet_c", "--topology", "torus", "--strategy", "data", "--json")
    first, second = (json.loads(cli(*args).stdout) for _ in range(2))
    first.pop("wall_s"), second.pop("wall_s")
    assert first == second


@pytest.mark.parametrize("name", SMALL + ("sfc",))
def test_ideal_is_never_slower(name):
    for strategy in ("data", "hypar"):
        ideal = _run(name, strategy, "ideal").latency_cycles
        assert ideal <= _run(name, strategy, "htree").latency_cycles
        assert ideal <= _run(name, strategy, "torus").latency_cycles


def layer_phase_cycles(layer, index, batch, config):
    """Cycles of one whole layer's training phases on one cube, from hardware/costs.py:
    forward, error-backward (not for the first layer), weight gradient, update."""
    if layer.kind is LayerKind.FC:
        work = fc_work(batch, layer.input.size, layer.output.channels)
    else:
        work = forward_work(batch, layer.input.channels, layer.conv_output.channels,
                            layer.input.height, layer.input.width, layer.kernel, layer.kernel,
                            layer.stride, layer.padding)
    phases = [work, gradient_work(work)] + ([backward_work(work)] if index > 0 else [])
    return sum(conv_cost(w, config).cycles for w in phases) + \
        update_piece_cost(layer.weights, config).cycles


@pytest.mark.parametrize("engine", ["des", "analytic"])
def test_one_accelerator_has_no_traffic(engine):
    config = CONFIG
    result = _run("lenet_c", "hypar", "htree", engine, accelerators=1)
    assert result.traffic_bytes == 0 and result.per_link == () and result.comm_wait_cycles == 0
    # Pins the latency to the hand sum of every layer's phase costs (nothing else on the one
    # cube's critical path): 1,658,744.6 cycles for lenet_c at batch 256.
    net = load_network("lenet_c")
    hand = sum(layer_phase_cycles(layer, i, 256, config) for i, layer in enumerate(net.layers))
    assert result.latency_cycles == pytest.approx(hand, rel=1e-12)
    assert result.latency_s == pytest.approx(hand / config.clock_hz, rel=1e-12)


def test_a_members_computations_between_messages_are_one_event():
    """The engine waits out a member's computations up to its next message task as one
    timeout, ending exactly where their one-by-one timeouts would: on one accelerator, the
    process's start, that timeout and its end are the step's only events (17 one by one on
    lenet_c), and the step ends at the float sum of the computations in order."""
    net = load_network("lenet_c")
    plan = make_plan(net, "hypar", Hierarchy.for_count(1), 16, options=PAPER)
    result = simulate(net, plan, CONFIG, SimOptions())
    schedule = build_schedule(net, plan, CONFIG)
    end = 0.0
    for task in schedule.tasks:
        if isinstance(task, Compute) and task.costs[0].cycles > 0:
            end += task.costs[0].cycles
    assert result.events == 3 and result.latency_cycles == end


# A lone message's route: (links, switches). The H-tree joins 2 accelerators through one
# switch (A0>S1.0>A1); the 1 x 2 torus by one direct link.
LONE_ROUTE = {"htree": (2, 1), "torus": (1, 0)}


@pytest.mark.parametrize("engine", ["des", "analytic"])
@pytest.mark.parametrize("topology", ["htree", "torus"])
def test_lone_message_takes_bytes_over_bandwidth_plus_latency(topology, engine):
    """One fc layer on two accelerators, data parallelism, paper traffic: each member sends
    its whole weight gradient (4 MiB) to the other, each direction on links of its own; the
    step is the members' computation plus that message alone on its route."""
    layer = make_fc("fc", FeatureShape(1024, 1, 1), 1024)
    net = Network("one_fc", layer.input, (layer,))
    config = CONFIG
    plan = make_plan(net, "data", Hierarchy((2,)), 64, options=PAPER)
    result = simulate(net, plan, config, SimOptions(topology=topology, engine=engine))
    message = layer.weights * config.word_bytes
    assert result.traffic_bytes == 2 * message
    payload = config.packet_payload_bytes / (config.packet_payload_bytes
                                             + config.packet_overhead_bytes)
    bandwidth = config.link_bandwidth_gbps * 1e9 / 8 / config.clock_hz * payload  # B/cycle
    links, switches = LONE_ROUTE[topology]
    latency = (links * config.link_latency_ns + switches * config.switch_latency_ns) \
        / config.cycle_ns
    compute = layer_phase_cycles(layer, 0, 32, config)  # each member's 32 samples
    # Pins the step to compute + bytes / bandwidth + route latency: 86,903.3 + 5,570,560
    # + 6.25 cycles on the H-tree (2.75 on the torus); a DRAM or chunking term, a lost
    # latency or a second trip would each break it.
    assert result.latency_cycles == pytest.approx(compute + message / bandwidth + latency,
                                                  rel=1e-12)
    assert result.comm_wait_cycles == pytest.approx(message / bandwidth + latency, rel=1e-12)


def test_data_traffic_does_not_depend_on_batch():
    small = _run("cifar_c", "data", batch=64)
    large = _run("cifar_c", "data", batch=512)
    assert small.traffic_bytes == large.traffic_bytes


def test_sfc_data_parallelism_is_dominated_by_communication():
    result = _run("sfc", "data", "htree")
    assert result.time_shares["communication"] > 0.9


@pytest.mark.parametrize("name", PAPER_NETWORKS)
def test_analytic_agrees_on_ideal(name):
    """Within 3%: the largest gap is SConv's model parallelism, whose first layer waits
    52,429 cycles in the simulation (its messages' chunks queue at the vaults' DRAM lanes)
    and 34,560 in closed form (the busiest cube's DRAM bytes at once): 17,869 cycles, 2.5%
    of the step since the vault split shares its tensors (1.7% before, the same cycles)."""
    for strategy in ("data", "model", "hypar"):
        des = _run(name, strategy, "ideal").latency_cycles
        analytic = _run(name, strategy, "ideal", "analytic").latency_cycles
        assert analytic == pytest.approx(des, rel=0.03)


@pytest.mark.parametrize("topology", ["htree", "torus"])
@pytest.mark.parametrize("name", ["lenet_c", "cifar_c", "alexnet_half", "sfc"])
def test_analytic_agrees_when_no_link_is_shared(name, topology):
    """Two accelerators: each direction of the one pair has its own links."""
    for strategy in ("data", "model", "hypar"):
        des = _run(name, strategy, topology, accelerators=2).latency_cycles
        analytic = _run(name, strategy, topology, "analytic", accelerators=2).latency_cycles
        assert analytic == pytest.approx(des, rel=0.02)


def test_overlap_helps_data_parallelism():
    overlapped = _run("cifar_c", "data", "htree").latency_cycles
    waiting = _run("cifar_c", "data", "htree", overlap_gradients=False).latency_cycles
    assert overlapped <= waiting


@pytest.mark.parametrize("args, fragment", [
    (("run", "lenet_c", "--topology", "ring"), "topology: unknown 'ring'"),
    (("run", "lenet_c", "--strategy", "best"), "invalid choice: 'best'"),
    (("run", "lenet_c", "--accelerators", "12", "--hierarchy", "4x4"),
     "--hierarchy: 4x4 has 16 members, but there are 12 accelerators"),
    (("run", "lenet_c", "--kinds", "batch,foo"), "--kinds: unknown split kind 'foo'"),
    (("run", "vgg_e", "--accelerators", "2", "--batch", "4096"),
     "capacity: no plan of kinds batch,in fits vgg_e"),
    (("run", "lenet_c", "--batch", "0"), "--batch: must be an integer from 1 to 16,777,216, got 0"),
    (("compare", "nonet"), "unknown network 'nonet'"),
    (("run", "lenet_c", "--chunk-kib", "0"), "--chunk-kib: must be an integer from 1 to 1,048,576"),
])
def test_bad_run_input(cli, args, fragment):
    result = cli(*args)
    assert result.returncode == 2 and result.stdout == ""
    assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # a default run on 2 cores stays under 5 minutes
def test_run_and_compare_commands(cli, tmp_path):
    result = cli("run", "lenet_c", "--topology", "torus", "--json", "--csv", str(tmp_path / "l.csv"))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    # Pins the printed numbers to the simulator's (Python API, same defaults: layout traffic
    # model, hypar, 16 accelerators, batch 256) and the seconds to cycles / 250 MHz.
    api = hypar_sim.simulate("lenet_c", topology="torus")
    assert data["latency_cycles"] == round(api.latency_cycles)  # whole cycles in JSON
    assert data["latency_s"] == pytest.approx(api.latency_cycles / CONFIG.clock_hz, rel=1e-12)
    assert data["energy_j"] == pytest.approx(api.energy_j, rel=1e-12)
    assert data["traffic_bytes"] == make_plan(
        load_network("lenet_c"), "hypar", 4, 256,
        options=PlanOptions(traffic_model="layout")).traffic_bytes
    for key in ("network", "strategy", "topology", "accelerators", "batch", "latency_s",
                "latency_cycles", "energy_j", "energy_breakdown_j", "traffic_bytes",
                "traffic_bytes_per_level", "per_layer", "per_link", "events", "wall_s",
                "per_accelerator", "hierarchy", "traffic_model"):
        assert key in data
    assert data["traffic_model"] == "layout" and data["hierarchy"] == [2, 2, 2, 2]
    assert len(data["per_accelerator"]) == 16
    assert data["per_accelerator"][0].keys() >= {"accelerator", "busy_cycles", "sent_bytes",
                                                 "received_bytes", "energy_pj"}
    paper = json.loads(cli("run", "lenet_c", "--traffic-model", "paper", "--json").stdout)
    assert paper["traffic_model"] == "paper"
    assert paper["traffic_bytes"] == make_plan(load_network("lenet_c"), "hypar", 4,
                                               256, options=PAPER).traffic_bytes
    twelve = json.loads(cli("run", "lenet_c", "--accelerators", "12", "--json").stdout)
    assert twelve["accelerators"] == 12 and twelve["hierarchy"] == [3, 2, 2]
    assert len(twelve["per_accelerator"]) == 12
    assert data["per_link"][0].keys() >= {"link", "bytes", "busy_fraction"}
    assert (tmp_path / "l.csv").read_text().startswith("name,forward_cycles")
    text = cli("run", "lenet_c").stdout
    assert "step latency" in text and "busiest links" in text
    compare = cli("compare", "lenet_c", "--engine", "analytic", "--csv", tmp_path / "c.csv",
                  "--json")
    assert compare.returncode == 0, compare.stderr
    runs = {run["strategy"]: run for run in json.loads(compare.stdout)}
    table = pd.read_csv(tmp_path / "c.csv").set_index("strategy")
    assert list(table.index) == ["data", "model", "trick", "hypar"]
    for strategy, run in runs.items():  # the CSV's numbers are the runs'
        row = table.loc[strategy]
        assert row.latency_cycles == run["latency_cycles"]
        assert row.traffic_bytes == run["traffic_bytes"]
        assert row.speedup_vs_baseline == pytest.approx(
            runs["data"]["latency_cycles"] / run["latency_cycles"], rel=1e-6)  # whole cycles
    assert table.loc["data"].speedup_vs_baseline == 1.0 and "per_layer" not in table
    compare = cli("compare", "lenet_c", "--engine", "analytic")
    assert compare.returncode == 0 and "hypar" in compare.stdout and "1.00x" in compare.stdout


@pytest.mark.parametrize("total", [1.0, 5.0, 1024.0, 1025.0, 118784.0, 3.3e7, 2.0**25 + 1])
@pytest.mark.parametrize("chunk", [1024, 4096, 2**20])
@pytest.mark.parametrize("most", [1, 2, 31, 32, 33])
def test_chunk_sizes(total, chunk, most):
    from hypar_sim.hardware.transfer import chunk_sizes

    sizes = chunk_sizes(total, chunk, most)
    assert 1 <= len(sizes) <= most and min(sizes) > 0
    assert sum(sizes) == pytest.approx(total, rel=1e-12)
    assert max(sizes) >= min(chunk, total) * (1 - 1e-12)
