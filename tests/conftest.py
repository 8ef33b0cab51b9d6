"""Shared test helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import settings

from hypar_sim.planner.options import PlanOptions
from hypar_sim.resources import keep_freed_memory
from hypar_sim.workload.layers import FeatureShape, Layer, Pool, make_conv, make_fc

#: Property tests draw the same examples on every run (`derandomize`), so that a failure in
#: CI reproduces on any machine; `HYPOTHESIS_PROFILE=explore pytest` draws new ones.
settings.register_profile("fixed", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))

#: The test processes keep freed memory for the next arrays, as the command line does.
keep_freed_memory()

REPO = Path(__file__).resolve().parents[1]
#: HyPar's reading of its Tables 1 and 2, which the figures (and the tests of them) ask for.
PAPER = PlanOptions(traffic_model="paper")


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m hypar_sim ARGS` as a user would."""
    return subprocess.run([sys.executable, "-m", "hypar_sim", *args], capture_output=True,
                          text=True, cwd=cwd or REPO, timeout=300)


@pytest.fixture
def cli():
    return run_cli


def assert_sent_equals_received_equals(schedule, traffic_bytes: float) -> dict[int, float]:
    """The invariant: the bytes the members send, and those they receive, are the plan's
    traffic (every message between two distinct members, none empty). Returns the bytes
    each member sends."""
    sent, received = defaultdict(float), defaultdict(float)
    for message in schedule.messages:
        assert message.src != message.dst and message.bytes > 0
        sent[message.src] += message.bytes
        received[message.dst] += message.bytes
    assert sum(sent.values()) == pytest.approx(traffic_bytes, rel=1e-12, abs=1e-6)
    assert sum(received.values()) == pytest.approx(traffic_bytes, rel=1e-12, abs=1e-6)
    return sent


def small_chain() -> list[Layer]:
    """conv (4x8x8 -> 16 maps, 3x3, pooled 2x2) -> fc 24 -> fc 6: a chain small enough to
    check a planner's DP against every plan."""
    conv = make_conv("conv", FeatureShape(4, 8, 8), 16, 3, padding=1, pool=Pool(2, 2))
    fc1 = make_fc("fc1", conv.output, 24)
    return [conv, fc1, make_fc("fc2", fc1.output, 6)]
