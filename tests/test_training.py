"""Training options beside the plan (issue "Training large models", items 2 and 3): ZeRO
stages, activation recomputation and mixed precision, in the planner's memory, the
messages and the simulated step."""

from __future__ import annotations

import json
import math
from collections import defaultdict

import pytest

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.hardware.energy import Action, EnergyTable
from hypar_sim.partition.steps import TransferKind
from hypar_sim.planner.training import Training, attention_core, recompute_plan
from hypar_sim.request import make_request, plan_request
from hypar_sim.runner import simulate_request
from hypar_sim.sim.options import SimOptions
from hypar_sim.sim.schedule import build_schedule

#: GPT-2 small cut to two blocks of 128 tokens: every kind of node, planned in a second.
GPT = dict(dims={"layers": 2}, seq=128, batch=8)


def request(accelerators: int = 4, strategy: str = "data", **options):
    return make_request("gpt2_small", accelerators=accelerators, strategy=strategy,
                        **GPT | options)


def bytes_by_kind(req) -> dict[TransferKind, float]:
    plan = plan_request(req)
    schedule = build_schedule(req.workload(), plan, req.hardware)
    kinds: dict[TransferKind, float] = defaultdict(float)
    for (_, kind), messages in schedule.steps.items():
        kinds[kind] += float(messages.sent_bytes.sum())
    assert sum(kinds.values()) == pytest.approx(plan.traffic_bytes, rel=1e-12)
    return kinds


def total_params(req) -> int:
    return sum(node.params for node in req.workload().nodes)


@pytest.mark.parametrize("strategy", ["data", "hypar"])
def test_zero_3_keeps_a_share_of_every_parameter_a_cube(strategy):
    """ZeRO 3 (Rajbhandari et al. 2020, Figure 1): weights, gradients and optimizer state
    (mixed-precision Adam: 2 + 2 + 12 bytes a parameter) are 1 / cubes of the total on the
    busiest cube, within 5%; without ZeRO, data parallelism keeps them whole."""
    cubes = 16
    req = request(cubes, strategy, optimizer="adam", precision="bf16", zero=3, batch=16)
    parts = dict(plan_request(req).footprint_parts)
    held = parts["weights"] + parts["gradients"] + parts["optimizer_state"]
    whole = total_params(req) * (2 + 2 + 12)
    assert held == pytest.approx(whole / cubes, rel=0.05)
    assert parts["gathered_weights"] > 0
    if strategy == "data":
        plain = dict(plan_request(request(cubes, optimizer="adam", precision="bf16", batch=16))
                     .footprint_parts)
        assert plain["weights"] + plain["gradients"] + plain["optimizer_state"] == whole
        assert plain["gathered_weights"] == 0


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_1_and_2_shard_state_and_gradients_without_more_bytes(stage):
    """Stages 1 and 2 send what data parallelism sends (ZeRO section 7.2.1), the gather
    now of the updated weights after the update, and each cube updates its shard."""
    base, zero = (request(zero=z, optimizer="adam") for z in (0, stage))
    before, after = bytes_by_kind(base), bytes_by_kind(zero)
    assert after[TransferKind.UPDATE_GATHER] == before[TransferKind.GRADIENT_GATHER] > 0
    assert after[TransferKind.GRADIENT] == before[TransferKind.GRADIENT]
    assert TransferKind.GRADIENT_GATHER not in after
    parts, plain = (dict(plan_request(r).footprint_parts) for r in (zero, base))
    assert parts["optimizer_state"] == pytest.approx(plain["optimizer_state"] / 4)
    assert parts["gradients"] == pytest.approx(plain["gradients"] / (4 if stage == 2 else 1))
    assert parts["weights"] == plain["weights"]
    runs = [simulate_request(r) for r in (base, zero)]
    updates = [sum(layer.update_cycles for layer in run.per_layer) for run in runs]
    assert updates[1] < updates[0] / 3  # a quarter of the parameters, rounded up per PU


def test_zero_3_messages_are_the_closed_form():
    """Data parallelism on k cubes: the gradients' reduce-scatter and each of ZeRO 3's two
    weight all-gathers move (k - 1) x P x word bytes (each member sends (k - 1) / k of
    its P words); nothing else moves, so ZeRO 3 sends 1.5 times data parallelism's bytes;
    the simulator sends the planned bytes."""
    k, word = 4, 4
    req = request(k, zero=3)
    kinds = bytes_by_kind(req)
    one = (k - 1) * total_params(req) * word
    assert kinds[TransferKind.GRADIENT] == pytest.approx(one, rel=1e-12)
    assert kinds[TransferKind.WEIGHT_GATHER] == pytest.approx(one, rel=1e-12)
    assert kinds[TransferKind.WEIGHT_REGATHER] == pytest.approx(one, rel=1e-12)
    assert sum(kinds.values()) == pytest.approx(3 * one, rel=1e-12)
    assert sum(bytes_by_kind(request(k)).values()) == pytest.approx(2 * one, rel=1e-12)
    run = simulate_request(req)
    assert run.traffic_bytes == pytest.approx(plan_request(req).traffic_bytes, rel=1e-12)


def test_bf16_halves_every_message_of_a_given_plan(tmp_path):
    """The same plan (given with --plan) at bf16: every message the same pair of members,
    half the bytes (gradients unfused: a 25 MB bucket holds twice the bf16 gradients, so
    fused buckets differ; their bytes halve all the same); MAC energy at Horowitz's 16-bit
    figures (1.1 + 0.4 pJ against 3.7 + 0.9), the MAC count unchanged."""
    saved = tmp_path / "plan.json"
    saved.write_text(json.dumps(plan_request(request(4, "hypar")).to_dict()))
    flats, runs = [], []
    for precision in ("fp32", "bf16"):
        req = request(4, "explicit", plan_text=str(saved), precision=precision,
                      kinds="batch,in,out,heads")
        plan = plan_request(req)
        flats.append(build_schedule(req.workload(), plan, req.hardware, bucket_bytes=0).flat)
        runs.append(simulate_request(req))
    fp32, bf16 = flats
    assert len(fp32.bytes) > 0
    assert (fp32.src == bf16.src).all() and (fp32.dst == bf16.dst).all()
    assert (bf16.bytes * 2 == fp32.bytes).all()
    assert runs[1].traffic_bytes * 2 == runs[0].traffic_bytes
    mac = [run.energy_breakdown_pj["mac"] for run in runs]
    assert mac[1] / mac[0] == pytest.approx((1.1 + 0.4) / (3.7 + 0.9), rel=1e-12)


def test_16_bit_words_cost_half_a_32_bit_access():
    """Memory energies are quoted per 32-bit word (HyPar 6.1's table); a 16-bit access
    moves half the bits."""
    fp32 = EnergyTable.from_config(load_hardware()).pj_per_action
    half = EnergyTable.from_config(load_hardware(overrides={"word_bytes": 2})).pj_per_action
    assert (fp32[Action.MAC], half[Action.MAC]) == (pytest.approx(4.6), pytest.approx(1.5))
    for action in (Action.DRAM, Action.BUFFER, Action.RF, Action.INTER_PE):
        assert half[action] == fp32[action] / 2
    assert half[Action.LINK_BIT] == fp32[Action.LINK_BIT]


def test_mixed_precision_memory_is_zeros_two_plus_two_plus_k():
    """Mixed-precision Adam keeps 2 + 2 + 12 bytes a parameter (ZeRO section 3.1), fp32
    Adam 4 + 4 + 8; activations at 2 bytes are half of fp32's."""
    fp32, bf16 = (dict(plan_request(request(4, optimizer="adam", precision=p))
                       .footprint_parts) for p in ("fp32", "bf16"))
    params = fp32["weights"] / 4
    assert (bf16["weights"], bf16["gradients"], bf16["optimizer_state"]) == \
        (2 * params, 2 * params, 12 * params)
    assert fp32["optimizer_state"] == 8 * params
    assert bf16["activations"] == fp32["activations"] / 2


def test_full_recomputation_adds_one_forward_pass_and_keeps_less():
    """On one cube (no messages) full recomputation runs every node's forward once more:
    the step grows by the forward pass exactly, and each layer reports it; the kept
    activations shrink to the segments' inputs and one segment's rebuilt ones (Chen et
    al. 2016)."""
    runs = {mode: simulate_request(request(1, "hypar", recompute=mode))
            for mode in ("none", "full")}
    forward = sum(layer.forward_cycles for layer in runs["none"].per_layer)
    assert runs["full"].latency_cycles - runs["none"].latency_cycles == \
        pytest.approx(forward, rel=1e-9)
    assert [layer.recompute_cycles for layer in runs["full"].per_layer] == \
        [layer.forward_cycles for layer in runs["full"].per_layer]
    kept = {mode: dict(plan_request(request(1, "hypar", recompute=mode)).footprint_parts)
            ["activations"] for mode in ("none", "full", "selective")}
    assert kept["full"] < kept["selective"] < kept["none"]


def test_recomputation_sends_the_forward_steps_again():
    """Under a split that moves bytes in the forward pass, recomputing every node sends
    each forward step once more (none in an inference)."""
    plain, full = (bytes_by_kind(request(4, "model", recompute=m)) for m in ("none", "full"))
    assert full[TransferKind.RECOMPUTE_FEATURE] == plain[TransferKind.RELAYOUT_FEATURE] > 0
    assert full[TransferKind.RECOMPUTE_SUM] == plain[TransferKind.PARTIAL_SUM]


def test_selective_recomputation_is_the_attention_core():
    """Korthikanti et al. 2022: the scores, their softmax and the attention over the
    values, per block; their kept tensors (sequence squared) are what it drops."""
    graph = request().workload()
    names = sorted(graph.nodes[i].name for i in attention_core(graph))
    assert names == sorted(f"h{b}_attn_{part}" for b in (1, 2)
                           for part in ("scores", "softmax", "context"))
    plan = recompute_plan(graph, "selective")
    assert plan.recomputed == attention_core(graph)
    full = recompute_plan(graph, "full")
    assert 2 <= len(full.segments) <= 2 * math.ceil(len(graph.generations()) ** 0.5) + 1
    assert full.recomputed == frozenset(range(len(graph.nodes)))
    # the cuts fall where a block's residual stream crosses, never its scores or its MLP
    shapes = {node.name: node.shape for node in graph.nodes}
    for i, k in full.inputs:
        name = graph.nodes[i].inputs[k]
        assert name in graph.inputs or math.prod(shapes[name]) <= 128 * 768, name


def test_zero_3_fits_where_data_parallelism_does_not_and_the_run_agrees():
    """A cube between the two footprints: plain data parallelism is refused in one line;
    under ZeRO 3 the plan fits and the simulator (which checks the same picture) runs it."""
    sharded = plan_request(request(16, batch=16, optimizer="adam", zero=3)).footprint_bytes
    plain = plan_request(request(16, batch=16, optimizer="adam")).footprint_bytes
    assert sharded < plain / 2
    small = {"cube_capacity_gib": (sharded + plain) / 2 / 2**30}
    with pytest.raises(InputError, match="capacity"):
        plan_request(request(16, batch=16, optimizer="adam", overrides=small))
    simulate_request(request(16, batch=16, optimizer="adam", zero=3, overrides=small,
                             sim=SimOptions(engine="analytic")))


@pytest.mark.parametrize(("options", "message"), [
    (dict(zero=4), "--zero: unknown stage 4; allowed: 0, 1, 2, 3"),
    (dict(precision="fp8"), "--precision: unknown 'fp8'.*allowed: fp32, bf16, fp16"),
    (dict(recompute="some"), "--recompute: unknown 'some'.*allowed: none, full, selective"),
    (dict(precision="bf16", overrides={"word_bytes": 4}),
     "--precision bf16: computes with 2-byte words, not word_bytes=4"),
    (dict(traffic_model="paper", zero=1, strategy="hypar"),
     "--traffic-model paper: HyPar's chain reading has no ZeRO"),
])
def test_bad_training_options_are_one_line(options, message):
    with pytest.raises(InputError, match=message):
        make_request("vgg_a", **options)


def test_the_options_are_in_the_headers_and_the_run_config(cli, tmp_path):
    found = cli("run", "lenet_c", "--accelerators", "4", "--optimizer", "adam",
                "--precision", "fp16", "--zero", "2", "--recompute", "full", "--json")
    assert found.returncode == 0, found.stderr
    config = json.loads(found.stdout)["config"]
    assert {k: config[k] for k in ("optimizer", "precision", "zero", "recompute")} == \
        {"optimizer": "adam", "precision": "fp16", "zero": 2, "recompute": "full"}
    assert Training(**{k: config[k] for k in ("optimizer", "precision", "zero", "recompute")}
                    ).note() == ", optimizer adam, fp16, ZeRO 2, recompute full"
    bad = cli("run", "lenet_c", "--zero", "5")
    assert bad.returncode == 2 and "--zero" in bad.stderr


def test_the_time_objective_costs_the_update_and_the_recomputation():
    """`--objective time` prices Adam's update (6 MACs and two moments a parameter) and a
    recomputed forward pass: the estimates grow with them, for a chain as for a graph."""
    def estimate(network, **options):
        return plan_request(make_request(network, accelerators=4, batch=16,
                                         strategy="hypar", objective="time",
                                         **options)).estimate

    for network in ("lenet_c", "workloads/examples/tiny_mlp.onnx"):
        plain = estimate(network)
        assert estimate(network, optimizer="adam") > plain
        assert estimate(network, recompute="full") > plain


def test_selective_recomputation_keeps_q_k_and_v():
    """Selective recomputation drops only the softmax's output (kept by it and read by the
    attention over the values): no more than twice the softmax outputs, the q, k and v the
    recomputation needs staying (Korthikanti et al. 2022, section 5)."""
    def kept(mode):
        return dict(plan_request(request(1, "hypar", recompute=mode)).footprint_parts)[
            "activations"]

    graph = request().workload()
    softmax = sum(math.prod(node.shape) for node in graph.nodes if node.op == "softmax")
    saved = kept("none") - kept("selective")
    assert 0 < saved <= 2 * softmax * 8 * 4  # batch 8, fp32
