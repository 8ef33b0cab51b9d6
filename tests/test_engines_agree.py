"""One truth for time (issue "Scale", item 3): the analytic engine and the event-driven one
agree where there is no contention between steps the analytic engine cannot see.

The analytic engine sends a collective's rounds one after another. The event-driven one
sent every round a member could send at once: behind a late member (one whose earlier
messages came last), the rounds it had already received left together, shared its link,
all arrived at the end, and the next member waited for the last of them. vgg_a under
HyPar's plan on 256 accelerators took 5.886 s in the DES and 1.204 s analytically; then a
member sent a collective's rounds in order (1.230 s against 1.204 s; a ring is now one
operation of its group, see `test_large_arrays_agree_within_three_percent`)."""

from __future__ import annotations

import pytest

from hypar_sim.request import make_request
from hypar_sim.runner import SimOptions, simulate_request

#: A message budget no case here reaches: every message simulated on its own.
MESSAGES_ALL = 10**9


def latencies(network: str, accelerators: int, batch: int, strategy: str = "hypar",
              topology: str = "htree", **options) -> tuple[float, float]:
    """(DES, analytic) step latency in seconds."""
    plan_text = options.pop("plan_text", None)
    return tuple(simulate_request(make_request(
        network, accelerators=accelerators, batch=batch, strategy=strategy,
        plan_text=plan_text,
        sim=SimOptions(engine=engine, topology=topology, **options))).latency_s
        for engine in ("des", "analytic"))


def test_a_ring_behind_a_late_member_runs_its_rounds_in_order():
    """fc1 split by input channels at the top level makes half the members late into the
    backward pass of the convolutions; every convolution's gradient ring then waited 36.7 ms
    in the DES against 2.9 ms (its rounds one after another), now 2.9 ms in both."""
    rows = ["batch " * 8 + "in batch batch"] + ["batch " * 11] * 3
    des, analytic = latencies("vgg_a", 16, 256, plan_text="; ".join(rows),
                              overlap_gradients=False, bucket_mb=0)
    assert des == pytest.approx(analytic, rel=0.01)
    assert des == pytest.approx(3.762, rel=0.01)  # was 4.452 s


@pytest.mark.parametrize(("network", "accelerators", "batch"), [
    ("lenet_c", 16, 256), ("vgg_a", 16, 256), ("alexnet_half", 16, 256),
    ("resnet18", 16, 256), ("sfc", 64, 1024)])
@pytest.mark.parametrize("topology", ["htree", "torus"])
def test_data_parallelism_agrees_within_a_tenth_of_a_percent(network, accelerators, batch,
                                                              topology):
    des, analytic = latencies(network, accelerators, batch, "data", topology)
    assert des == pytest.approx(analytic, rel=1e-3)


@pytest.mark.parametrize(("network", "accelerators", "batch", "topology"), [
    ("vgg_a", 16, 256, "htree"), ("vgg_a", 16, 256, "torus"),
    ("alexnet_half", 16, 256, "torus"), ("resnet18", 16, 256, "htree"),
    pytest.param("resnet18", 16, 256, "torus", marks=pytest.mark.slow),
    pytest.param("bert_base", 16, 64, "torus", marks=pytest.mark.slow), ("sfc", 64, 1024, "htree"),
    ("sfc", 64, 1024, "torus"), ("lenet_c", 16, 256, "torus")])
def test_hypar_plans_agree_within_two_percent(network, accelerators, batch, topology):
    """HyPar's plans send steps of several kinds that overlap with the backward pass; both
    engines let steps in flight share their links (the analytic engine as two-way sharing):
    within 2% here (measured: 1.6% at most, resnet18 on the H-tree; before steps shared
    links in closed form, 5-12% on alexnet_half and resnet18; lenet_c on the torus, 28%
    once, is 1.0% apart)."""
    des, analytic = latencies(network, accelerators, batch, "hypar", topology)
    assert des == pytest.approx(analytic, rel=0.02)


#: Open gap (issue "Scale", item 3): on 128 and 256 accelerators a ring's group goes on as
#: soon as its own members have their parts, and its next steps share the upper links with
#: rings still running elsewhere, contention the closed form does not see (DES/analytic:
#: 1.215/1.134 s at 128, 1.263/1.153 s at 256).
_CONTENDED = pytest.mark.xfail(strict=True, reason="contention between groups the closed "
                                                   "form does not see")


@pytest.mark.slow
@pytest.mark.parametrize("accelerators", [64, pytest.param(128, marks=_CONTENDED),
                                          pytest.param(256, marks=_CONTENDED)])
def test_large_arrays_agree_within_three_percent(accelerators):
    """vgg_a, 16 samples per accelerator, every message simulated on its own (past the
    default `--des-messages` the DES groups each step, `test_operations.py`): 1.116/1.098 s
    at 64 (DES/analytic)."""
    des, analytic = latencies("vgg_a", accelerators, 16 * accelerators,
                              des_messages=MESSAGES_ALL)
    assert des == pytest.approx(analytic, rel=0.03)
