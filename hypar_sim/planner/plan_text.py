"""A plan the user writes (`--plan`), as text or a file (the text, or the JSON `plan --json`
prints): for a chain, rows of kinds per level; for a graph, a column of kinds per node.

Graph plans name their nodes: `name: kind kind ...` (one kind per level, top first), entries
separated by ';' or new lines, `*: ...` for every node not named, e.g.
`--plan "*: batch batch; fc1: in in"`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from hypar_sim.errors import InputError, closest
from hypar_sim.partition.kinds import resolve_kind
from hypar_sim.partition.shares import Column
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


def _is_file(path: Path) -> bool:
    """Whether a --plan value names a file (a plan's text can be longer than a file name
    may be: then it is not one)."""
    try:
        return path.is_file()
    except OSError:
        return False


def read_plan_argument(value: str, network: Network, levels: int) -> Choices:
    """A --plan value: a path to a file holding a plan, or the plan text itself."""
    path = Path(value)
    if _is_file(path):
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


def parse_node_plan(text: str, names: Sequence[str], levels: int,
                    where: str = "--plan") -> list[Column]:
    """A graph plan: `name: kinds` entries (or `*: kinds` for every node not named), in the
    order of `names`; every node must be covered, with one kind per level."""
    given: dict[str, Column] = {}
    for raw in text.replace(";", "\n").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if ":" not in line:
            raise InputError(f"{where}: '{line[:40]}' is not 'node: kinds' (a graph's plan names "
                             "its nodes, e.g. '*: batch batch; fc1: in in')")
        name, kinds = (part.strip() for part in line.rsplit(":", 1))
        if name != "*" and name not in names:
            raise InputError(f"{where}: no node named '{name[:40]}'{closest(name, names)}")
        column = tuple(resolve_kind(word, f"{where}: {name}")
                       for word in kinds.replace(",", " ").split())
        if len(column) != levels:
            raise InputError(f"{where}: {name} has {len(column)} kind(s), expected {levels} "
                             "(one per level, top first)")
        if name in given:
            raise InputError(f"{where}: {name[:40]} is given twice")
        given[name] = column
    missing = [name for name in names if name not in given]
    if missing and "*" not in given:
        raise InputError(f"{where}: no kinds for node(s) {', '.join(missing[:5])}"
                         f"{' ...' if len(missing) > 5 else ''}; name them or add '*: kinds'")
    return [given.get(name, given.get("*", ())) for name in names]


def read_node_plan(value: str, names: Sequence[str], levels: int) -> list[Column]:
    """A graph's --plan value: a file (its text, or `plan --json`'s JSON with 'nodes') or the
    text itself."""
    path = Path(value)
    if not _is_file(path):
        if path.suffix in (".json", ".txt", ".plan") and ":" not in value:
            raise InputError(f"{value}: plan file not found")
        return parse_node_plan(value, names, levels)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the plan file ({exc})") from None
    if text.lstrip().startswith("{"):
        text = _node_plan_json(text, str(path))
    return parse_node_plan(text, names, levels, str(path))


def _node_plan_json(text: str, where: str) -> str:
    """The entries of a graph's `plan --json` file, as plan text."""
    problem = f"{where}: not a graph plan file (JSON of `plan --json` with 'nodes', a list of " \
        "objects each with 'name' and a list of 'kinds')"
    try:
        nodes = json.loads(text)["nodes"]
    except (ValueError, KeyError, TypeError):
        raise InputError(problem) from None
    if not isinstance(nodes, list) or not all(
            isinstance(node, dict) and isinstance(node.get("name"), str)
            and isinstance(node.get("kinds"), list) for node in nodes):
        raise InputError(problem)
    return ";".join(f"{node['name']}: {' '.join(map(str, node['kinds']))}" for node in nodes)
