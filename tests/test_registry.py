"""Strategies registered in modules of their own load only when first asked for."""

from __future__ import annotations

import subprocess
import sys


def test_names_without_imports_and_every_lazy_module_registers_its_name():
    code = """
import sys
from hypar_sim.planner.strategies import STRATEGIES
lazy = ("accpar", "grid", "soybean", "tofu")
assert all(name in STRATEGIES for name in lazy) and "nothing" not in STRATEGIES
assert list(STRATEGIES)[-4:] == list(lazy) and len(STRATEGIES) == 11
assert not any(f"hypar_sim.planner.{name}" in sys.modules for name in lazy)
assert STRATEGIES.get("nothing") is None
assert STRATEGIES["tofu"].own_cost == "its bytes"  # loads its module
assert "hypar_sim.planner.tofu" in sys.modules and "hypar_sim.planner.grid" not in sys.modules
assert STRATEGIES["tofu"].columns.__module__ == "hypar_sim.planner.tofu"
assert STRATEGIES["hypar"].columns.__module__ == "hypar_sim.planner.own_strategies"
assert sorted(dict(STRATEGIES.items())) == sorted(STRATEGIES)  # each module registered its name
assert all(callable(s.columns) for s in STRATEGIES.values())  # one implementation each
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"


def test_help_and_networks_start_without_the_planner_or_numpy():
    """Each command builds only its own arguments, so `--help` and `networks` load neither the
    planner, the hardware models nor numpy (issue "Scale": start in a blink); `plan --help`
    still lists the registries' names."""
    code = """
import contextlib, io, sys
from hypar_sim.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    assert main(["networks"]) == 0
assert "vgg_e" in out.getvalue() and "resnet50" in out.getvalue()
try:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        main(["--help"])
except SystemExit as exc:
    assert exc.code == 0
assert "networks" in out.getvalue() and "reproduce" in out.getvalue()
heavy = [m for m in sys.modules if m == "numpy" or m.startswith(("hypar_sim.planner",
                                                                 "hypar_sim.hardware"))]
assert not heavy, heavy
try:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        main(["plan", "--help"])
except SystemExit as exc:
    assert exc.code == 0
assert "soybean" in out.getvalue() and "layout_levels" in out.getvalue()
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
