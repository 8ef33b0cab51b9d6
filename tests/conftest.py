"""Shared test helpers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m hypar_sim ARGS` as a user would."""
    return subprocess.run([sys.executable, "-m", "hypar_sim", *args], capture_output=True,
                          text=True, cwd=cwd or REPO, timeout=300)


@pytest.fixture
def cli():
    return run_cli
