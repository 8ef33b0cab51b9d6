"""A plan the user writes (`--plan`): rows of kinds per level, as text or a file (the text,
or the JSON `plan --json` prints)."""

from __future__ import annotations

import json
from pathlib import Path

from hypar_sim.errors import InputError
from hypar_sim.partition.kinds import resolve_kind
from hypar_sim.planner.plan import Choices
from hypar_sim.workload.network import Network


def parse_plan_text(text: str, network: Network, levels: int, where: str = "--plan") -> Choices:
    """Parse a user plan: levels separated by ';' or new lines, layers by ',' or spaces;
    kinds by name or alias (dp = batch, mp = in). Lines starting with '#' are comments."""
    rows = []
    for raw in text.replace(";", "\n").splitlines():
        line = raw.split("#", 1)[0].replace(",", " ").split()
        if line:
            rows.append(line)
    if len(rows) != levels:
        raise InputError(
            f"{where}: has {len(rows)} level(s), expected {levels} (one row of kinds per level)")
    layers = len(network.layers)
    plan = []
    for level, row in enumerate(rows):
        if len(row) != layers:
            raise InputError(
                f"{where}: level {level + 1} has {len(row)} choice(s), expected {layers} "
                f"(layers: {' '.join(network.layer_names)})")
        plan.append(tuple(resolve_kind(word, f"{where}: level {level + 1}") for word in row))
    return tuple(plan)


def read_plan_argument(value: str, network: Network, levels: int) -> Choices:
    """A --plan value: a path to a file holding a plan, or the plan text itself."""
    path = Path(value)
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: cannot read the plan file ({exc})") from None
        if text.lstrip().startswith("{"):
            text = _plan_json(text, network, str(path))
        return parse_plan_text(text, network, levels, str(path))
    return parse_plan_text(value, network, levels)


def _plan_json(text: str, network: Network, where: str) -> str:
    """The rows of kinds of a `plan --json` file, as plan text (its layers must be the
    network's)."""
    try:
        data = json.loads(text)
        rows, layers = data["plan"], data["layers"]
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{where}: not a plan file (JSON of `plan --json` with 'plan' and "
                         f"'layers', or rows of kinds): {exc}") from None
    if list(layers) != list(network.layer_names):
        raise InputError(f"{where}: the plan is for layers {' '.join(map(str, layers))}, not "
                         f"{network.name}'s ({' '.join(network.layer_names)})")
    return ";".join(" ".join(map(str, row)) for row in rows)
