"""What a planner can minimise (`--objective`): bytes between accelerators, step time (cycles)
or step energy (pJ); `planner.estimate` gives the last two."""

from __future__ import annotations

from hypar_sim.errors import InputError, closest

OBJECTIVES = ("bytes", "time", "energy")
#: The unit of a plan's `estimate` under each objective.
ESTIMATE_UNITS = {"bytes": "bytes", "time": "cycles", "energy": "pJ"}


def check_objective(objective: str) -> str:
    """`objective`, or a one-line error naming the flag and the allowed values."""
    if objective not in OBJECTIVES:
        raise InputError(f"--objective: unknown '{objective}'{closest(objective, OBJECTIVES)}; "
                         f"allowed: {', '.join(OBJECTIVES)}")
    return objective
