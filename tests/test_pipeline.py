"""Pipeline parallelism (issue "Training large models", item 1): stages on the array's top
level, micro-batches, GPipe and 1F1B, simulated."""

from __future__ import annotations

import pytest

from hypar_sim.errors import InputError
from hypar_sim.partition.steps import Phase, TransferKind
from hypar_sim.planner.pipeline import balanced, in_flight
from hypar_sim.planner.training import Training
from hypar_sim.request import make_request, plan_request
from hypar_sim.runner import simulate_request
from hypar_sim.sim.options import SimOptions
from hypar_sim.sim.pipeline_schedule import passes
from hypar_sim.sim.schedule import build_schedule
from hypar_sim.workload.builder import Builder
from hypar_sim.workload.graph import parse_graph

#: Links and DRAM fast enough that messages take no time to speak of.
FAST = {"link_bandwidth_gbps": 1e4, "link_latency_ns": 0.0, "switch_latency_ns": 0.0,
        "cube_bandwidth_gb_per_s": 1e4}


def equal_fc(layers: int = 8, width: int = 2048):
    """A relu (no backward pass of its own input) then `layers` equal fc layers: stages of
    two fc layers each do the same work, the first included."""
    b = Builder("equal_fc", {"x": [width]}, "test", "equal fc layers")
    b.add("relu", "act", function="relu")
    for i in range(layers):
        b.add(f"fc{i}", "fc", out_features=width, bias=False)
    return parse_graph(b.data(), "equal_fc")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("micro", [4, 8, 16])
def test_the_bubble_is_the_closed_form(schedule, micro):
    """S = 4 equal stages, no communication to speak of: each stage idles (S - 1)/(M + S - 1)
    of the pipelined passes (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2021), within
    2% in the event-driven engine."""
    run = simulate_request(make_request(equal_fc(), accelerators=4, batch=16 * micro,
                                        pipeline=4, microbatches=micro, schedule=schedule,
                                        strategy="data", overrides=FAST,
                                        stages="fc2,fc4,fc6"))
    assert run.pipeline_idle_fraction == pytest.approx(3 / (micro + 3), rel=0.02)


def test_a_pipeline_without_stages_is_a_plain_step():
    """One stage and one micro-batch is the plain step (`--pipeline 1`)."""
    plain = simulate_request(make_request(equal_fc(4), accelerators=4, batch=16))
    one = simulate_request(make_request(equal_fc(4), accelerators=4, batch=16, pipeline=1))
    assert one.latency_cycles == plain.latency_cycles and one.pipeline_idle_fraction == 0


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_stages_exchange_activations_and_errors_as_planned(schedule):
    """Two members per stage (data parallel within it), 4 stages, 4 micro-batches: every
    planned byte is sent and received, a stage's activation goes to the next stage once per
    micro-batch and its error comes back, gradients are exchanged once; the result is the
    same with and without symmetry classes."""
    runs = []
    for symmetry in (True, False):
        req = make_request("gpt2_small", dims={"layers": 4}, seq=64, batch=8, accelerators=8,
                           pipeline=4, microbatches=4, schedule=schedule, strategy="data",
                           sim=SimOptions(symmetry=symmetry))
        runs.append(simulate_request(req))
    assert runs[0].latency_cycles == runs[1].latency_cycles
    plan = plan_request(req)
    assert runs[0].traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)
    steps = build_schedule(req.workload(), plan, req.hardware).steps
    kinds = {key[1] for key in steps}
    assert {TransferKind.STAGE_FEATURE, TransferKind.STAGE_ERROR, TransferKind.GRADIENT} <= kinds
    crossing = [key for key in steps if key[1] is TransferKind.STAGE_FEATURE]
    producers = {key[0] for key in crossing}  # a tensor or two cross each of 3 boundaries
    assert 3 <= len(producers) <= 6 and len(crossing) == 4 * len(producers)  # 4 micro-batches
    assert sum(1 for key in steps if key[1] is TransferKind.GRADIENT) == \
        sum(1 for key in steps if key[1] is TransferKind.GRADIENT and len(key) == 2)
    stage_of = {member: member // 2 for member in range(8)}
    for key in crossing:
        messages = steps[key]
        assert all(stage_of[d] == stage_of[s] + 1 for s, d in zip(messages.src, messages.dst,
                                                                     strict=True))


def test_1f1b_keeps_fewer_micro_batches_than_gpipe():
    """GPipe keeps all M micro-batches' activations on every stage, 1F1B at most S - s
    (Narayanan et al. 2021, section 2): less memory for the same step."""
    t = Training(stages=4, microbatches=8, schedule="1f1b")
    assert [in_flight(t, s) for s in range(4)] == [4, 3, 2, 1]
    assert in_flight(Training(stages=4, microbatches=8, schedule="gpipe"), 3) == 8
    kept = {s: dict(plan_request(make_request(
        "gpt2_small", dims={"layers": 4}, seq=64, batch=16, accelerators=4, pipeline=4,
        microbatches=8, schedule=s)).footprint_parts)["activations"] for s in ("gpipe", "1f1b")}
    assert kept["1f1b"] < kept["gpipe"]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_every_stage_runs_every_micro_batch_forward_then_backward(schedule):
    t = Training(stages=4, microbatches=6, schedule=schedule)
    for s in range(4):
        order = passes(t, s)
        assert sorted(order) == sorted([(p, u) for p in (Phase.FORWARD, Phase.BACKWARD)
                                        for u in range(6)])
        for u in range(6):
            assert order.index((Phase.FORWARD, u)) < order.index((Phase.BACKWARD, u))
    assert passes(t, 3)[:2] == ([(Phase.FORWARD, 0), (Phase.BACKWARD, 0)] if schedule == "1f1b"
                                else [(Phase.FORWARD, 0), (Phase.FORWARD, 1)])


def test_balanced_stages_minimise_the_largest():
    """Contiguous, non-empty, the largest stage's work least (checked against every way to
    cut small lists)."""
    import itertools
    import random

    rng = random.Random(7)
    lists = [[5, 5, 5, 5, 5, 5, 5, 5], [1, 0, 0, 10, 1, 1, 1, 10], [9, 1, 1, 1, 1, 1],
             [0, 0, 0, 0], [3, 8, 1, 1, 7, 2, 2]]
    lists += [[rng.choice([0, 1, 2, 5, 9, 20]) for _ in range(rng.randint(4, 9))]
              for _ in range(150)]
    for work in lists:
        for count in (c for c in (2, 3, 4) if c <= len(work)):
            stages = balanced(work, count)
            assert sorted(set(stages)) == list(range(count))
            assert list(stages) == sorted(stages)
            best = min(max(sum(work[a:b]) for a, b in zip((0, *cut), (*cut, len(work)),
                                                            strict=True))
                       for cut in itertools.combinations(range(1, len(work)), count - 1))
            largest = max(sum(w for w, s in zip(work, stages, strict=True) if s == t)
                          for t in range(count))
            assert largest == best


def test_stage_boundaries_cut_where_little_crosses():
    """On a transformer the balanced boundaries move to a block's residual stream, not
    through its attention scores."""
    plan = plan_request(make_request("gpt2_small", dims={"layers": 8}, seq=128, batch=8,
                                     accelerators=4, pipeline=4, microbatches=2))
    names = plan.node_names
    firsts = [names[plan.stages.index(s)] for s in range(1, 4)]
    assert all(name.endswith(("_ln1", "_ln2", "ln_f", "lm_head")) for name in firsts), firsts


@pytest.mark.parametrize(("options", "message"), [
    (dict(pipeline=3, accelerators=4), "--pipeline 3: does not divide the 4 accelerators"),
    (dict(pipeline=2, accelerators=4, hierarchy="2x2", microbatches=3),
     "--microbatches 3: does not divide the batch 16"),
    (dict(pipeline=2, accelerators=4, hierarchy="4"), "--pipeline 2: the array's top level"),
    (dict(pipeline=2, accelerators=4, zero=2), "--zero 2: shards gradients"),
    (dict(pipeline=2, accelerators=4, stages="fc9"), "--stages: no node 'fc9'"),
    (dict(pipeline=3, accelerators=6, stages="fc1"), "--stages: 1 names for --pipeline 3"),
    (dict(pipeline=2, accelerators=4, schedule="zb"), "--schedule: unknown 'zb'"),
])
def test_bad_pipeline_options_are_one_line(options, message):
    with pytest.raises(InputError, match=message):
        plan_request(make_request(equal_fc(4), batch=16, **options))


def test_the_analytic_engine_refuses_a_pipeline():
    with pytest.raises(InputError, match="--engine analytic: a pipeline"):
        simulate_request(make_request(equal_fc(4), accelerators=4, batch=16, pipeline=2,
                                      microbatches=2, sim=SimOptions(engine="analytic")))


def test_run_json_reports_the_idle_fraction(cli):
    found = cli("run", "gpt2_small", "--layers", "2", "--seq", "64", "--batch", "8",
                "--accelerators", "4", "--pipeline", "2", "--microbatches", "4",
                "--schedule", "gpipe", "--json")
    assert found.returncode == 0, found.stderr
    import json

    data = json.loads(found.stdout)
    assert 0 < data["pipeline_idle_fraction"] < 1
    assert data["config"]["stages"] == 2 and data["config"]["schedule"] == "gpipe"
    assert data["plan"][0][0] == "stage1"


def test_a_tied_projection_in_another_stage_keeps_a_copy_and_sums_its_gradients():
    """GPT-2's output projection shares the token embedding's weights. With the two in
    different stages, the last stage keeps a copy (weights, gradients, state) and the two
    copies' gradients are summed before either is updated, one message each way per member
    pair (as Megatron-LM all-reduces the embedding between its first and last stage)."""
    req = make_request("gpt2_small", dims={"layers": 2}, seq=64, batch=8, accelerators=4,
                       pipeline=2, microbatches=2, strategy="data", stages="lm_head")
    plan = plan_request(req)
    steps = build_schedule(req.workload(), plan, req.hardware).steps
    tied = [key for key in steps if key[1] is TransferKind.TIED_GRADIENT]
    assert len(tied) == 2  # one key each way
    embedding = 50257 * 768 * 4
    assert sum(float(steps[key].sent_bytes.sum()) for key in tied) == 2 * 2 * embedding
    lm_head = plan.node_names.index("lm_head")
    assert {key[0] for key in steps if key[1] is TransferKind.GRADIENT} >= {lm_head}
    run = simulate_request(req)
    assert run.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)
    assert dict(plan.footprint_parts)["weights"] >= embedding


def test_a_pipeline_plan_reads_back_from_plan_json(cli, tmp_path):
    """`plan --json` of a pipeline plan, given to --plan with the same --pipeline: the same
    stages (each node's 'stage'), kinds and bytes; a file whose stages do not match
    --pipeline is refused in one line."""
    import json

    args = ("gpt2_small", "--layers", "2", "--seq", "64", "--batch", "8", "--accelerators",
            "4", "--microbatches", "2", "--json")
    first = cli("plan", *args, "--pipeline", "2", "--stages", "h2_ln1")
    assert first.returncode == 0, first.stderr
    saved = tmp_path / "plan.json"
    saved.write_text(first.stdout)
    again = cli("plan", *args, "--pipeline", "2", "--plan", str(saved))
    assert again.returncode == 0, again.stderr
    old, new = json.loads(first.stdout), json.loads(again.stdout)
    assert [n["stage"] for n in new["nodes"]] == [n["stage"] for n in old["nodes"]]
    assert [n["kinds"] for n in new["nodes"]] == [n["kinds"] for n in old["nodes"]]
    assert new["traffic_bytes"] == old["traffic_bytes"]
    wrong = cli("plan", *args[:-1], "--hierarchy", "4", "--pipeline", "4",
                "--plan", str(saved))
    assert wrong.returncode == 2 and "are not 4 contiguous runs" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1


def test_a_tensor_read_in_two_later_stages_and_a_stage_reading_two_earlier_ones_run():
    """Stage 2 reads the residual stream from stage 1 and stage 3 reads it too: the
    messages to both go out under one key, yet every member runs only its own stage's tasks
    (the review found this deadlocked); bytes sent are the planned ones."""
    req = make_request("gpt2_small", dims={"layers": 2}, seq=64, batch=8, accelerators=6,
                       pipeline=3, microbatches=4, stages="h1_ln1,h1_attn_add")
    run = simulate_request(req)
    assert run.traffic_bytes == pytest.approx(plan_request(req).traffic_bytes, rel=1e-12)


def test_a_tied_copy_is_updated_and_a_fused_bucket_adds_no_buffer():
    """The last stage's copy of the tied embedding is updated (its update costs what the
    owner's does, split alike); and the run accepts the plan at the capacity the plan was
    checked against (fused gradient buckets run in place)."""
    req = make_request("gpt2_small", dims={"layers": 2}, seq=64, batch=8, accelerators=4,
                       pipeline=2, microbatches=2, strategy="data", stages="lm_head",
                       optimizer="adam")
    run = simulate_request(req)
    update = {layer.name: layer.update_cycles for layer in run.per_layer}
    assert update["lm_head"] == update["wte"] > 0
    plan = plan_request(make_request("resnet18", batch=16, accelerators=8, pipeline=2,
                                     microbatches=2, strategy="data"))
    tight = {"cube_capacity_gib": plan.footprint_bytes / 2**30 * 1.001}
    simulate_request(make_request("resnet18", batch=16, accelerators=8, pipeline=2,
                                  microbatches=2, strategy="data", overrides=tight))
