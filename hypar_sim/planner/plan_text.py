"""A plan the user writes (`--plan`), as text or a file (the text, or the JSON `plan --json`
prints): a column of kinds per node, or rows of kinds per level (HyPar's chains' form).

Plans that name their nodes: `name: kind kind ...` (one kind per level, top first), entries
separated by ';' or new lines, `*: ...` for every node not named, e.g.
`--plan "*: batch batch; fc1: in in"`. Rows: one row per level (top first), separated by
';' or new lines, one kind per node in the network's order, e.g. `--plan "dp dp mp; dp mp
mp"` for three layers on two levels. Kinds by name or alias (dp = batch, mp = in); lines
starting with '#' are comments.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path

from hypar_sim.errors import InputError, closest
from hypar_sim.partition.kinds import resolve_kind
from hypar_sim.partition.shares import Column


def _lines(text: str) -> list[str]:
    """The plan's entries: separated by ';' or new lines, '#' comments and blanks dropped."""
    return [line for raw in text.replace(";", "\n").splitlines()
            if (line := raw.split("#", 1)[0].strip())]


def parse_plan_text(text: str, names: Sequence[str], levels: int,
                    where: str = "--plan") -> tuple[tuple[str, ...], ...]:
    """Rows of kinds ([level][node]): levels separated by ';' or new lines, nodes by ',' or spaces."""
    rows = [row for line in _lines(text) if (row := line.replace(",", " ").split())]
    if len(rows) != levels:
        raise InputError(
            f"{where}: has {len(rows)} level(s), expected {levels} (one row of kinds per level)")
    plan = []
    for level, row in enumerate(rows):
        if len(row) != len(names):
            raise InputError(
                f"{where}: level {level + 1} has {len(row)} choice(s), expected {len(names)} "
                f"(one per node: {' '.join(names[:12])}{' ...' if len(names) > 12 else ''})")
        plan.append(tuple(resolve_kind(word, f"{where}: level {level + 1}") for word in row))
    return tuple(plan)


def _is_file(path: Path) -> bool:
    """Whether a --plan value names a file (a plan's text can be longer than a file name
    may be: then it is not one)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _rows_json(data: dict, names: Sequence[str], where: str) -> str:
    """The rows of kinds of a chain's `plan --json` file ('plan' and 'layers'), as plan
    text (its layers must be the network's nodes)."""
    try:
        rows, layers = data["plan"], data["layers"]
    except (KeyError, TypeError) as exc:
        raise InputError(f"{where}: not a plan file (JSON of `plan --json` with 'nodes', or "
                         f"'plan' and 'layers'): missing {exc}") from None
    if list(layers) != list(names):
        raise InputError(f"{where}: the plan is for layers {' '.join(map(str, layers))}, not "
                         f"this network's ({' '.join(names)})")
    return _rows_text(rows)


def _rows_text(rows: Sequence[Sequence[object]]) -> str:
    """Rows of kinds (top level first) as plan text: one ';'-separated row per level."""
    return ";".join(" ".join(map(str, row)) for row in rows)


def parse_node_plan(text: str, names: Sequence[str], levels: int,
                    where: str = "--plan") -> list[Column]:
    """A graph plan: `name: kinds` entries, in the order of `names`; a name with * ? or [ ]
    is a pattern (`fnmatch`: `h*_fc1: out`) for the nodes no entry names exactly, the first
    pattern that matches winning (`*: kinds` last, for every other node); every node must be
    covered, with one kind per level."""
    given: dict[str, Column] = {}
    for line in _lines(text):
        if ":" not in line:
            raise InputError(f"{where}: '{line[:40]}' is not 'node: kinds' (a graph's plan names "
                             "its nodes, e.g. '*: batch batch; fc1: in in')")
        name, kinds = (part.strip() for part in line.rsplit(":", 1))
        pattern = any(c in name for c in "*?[")
        if pattern and not any(fnmatchcase(node, name) for node in names):
            raise InputError(f"{where}: the pattern '{name[:40]}' matches no node")
        if not pattern and name not in names:
            raise InputError(f"{where}: no node named '{name[:40]}'{closest(name, names)}")
        column = tuple(resolve_kind(word, f"{where}: {name}")
                       for word in kinds.replace(",", " ").split())
        if len(column) != levels:
            raise InputError(f"{where}: {name} has {len(column)} kind(s), expected {levels} "
                             "(one per level, top first)")
        if name in given:
            raise InputError(f"{where}: {name[:40]} is given twice")
        given[name] = column
    patterns = sorted((name for name in given if any(c in name for c in "*?[")),
                      key=lambda name: name == "*")  # the catch-all last
    found = {name: given[name] if name in given else
             next((given[p] for p in patterns if fnmatchcase(name, p)), None) for name in names}
    missing = [name for name, column in found.items() if column is None]
    if missing:
        raise InputError(f"{where}: no kinds for node(s) {', '.join(missing[:5])}"
                         f"{' ...' if len(missing) > 5 else ''}; name them or add '*: kinds'")
    return [found[name] for name in names]


def read_node_plan(value: str, names: Sequence[str], levels: int) -> list[Column]:
    """A --plan value: a file (its text, or `plan --json`'s JSON) or the text itself; entries
    that name nodes (`parse_node_plan`) or rows of kinds per level (`parse_plan_text`)."""
    path, where = Path(value), "--plan"
    if _is_file(path):
        try:
            value = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: cannot read the plan file ({exc})") from None
        where = str(path)
        if value.lstrip().startswith(("{", "[")):
            value = _node_plan_json(value, names, where)
    elif ("/" in value or path.suffix in (".json", ".txt", ".plan")) and ":" not in value:
        raise InputError(f"--plan: {value}: plan file not found (a plan's text has no '/')")
    if any(":" in line for line in _lines(value)):
        return parse_node_plan(value, names, levels, where)
    rows = parse_plan_text(value, names, levels, where)
    return [tuple(row[i] for row in rows) for i in range(len(names))]


def _node_plan_json(text: str, names: Sequence[str], where: str) -> str:
    """The entries of a `plan --json` file ('nodes'; or a chain's 'plan' and 'layers'; or its
    'plan' rows alone, a JSON list), as plan text."""
    problem = f"{where}: not a plan file (JSON of `plan --json` with 'nodes', a list of " \
        "objects each with 'name' and a list of 'kinds')"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: lists nested thousands deep
        raise InputError(problem) from None
    if isinstance(data, list):  # `plan --json`'s 'plan' alone: rows of kinds, top level first
        if not all(isinstance(row, list) for row in data):
            raise InputError(f"{where}: a JSON list of rows of kinds (`plan --json`'s 'plan') "
                             "holds lists of kind names, one list per level")
        return _rows_text(data)
    if isinstance(data, dict) and "nodes" not in data and "plan" in data:
        return _rows_json(data, names, where)
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, list) or not all(
            isinstance(node, dict) and isinstance(node.get("name"), str)
            and isinstance(node.get("kinds"), list) for node in nodes):
        raise InputError(problem)
    planned = [node["name"] for node in nodes]
    if "network" in data and planned != list(names):  # `plan --json` lists every node
        pairs = zip(planned, names, strict=False)  # the shorter list's length
        differ = next((i for i, (a, b) in enumerate(pairs) if a != b),
                      min(len(planned), len(names)))
        theirs = planned[differ] if differ < len(planned) else "(none)"
        ours = names[differ] if differ < len(names) else "(none)"
        raise InputError(f"{where}: the plan is for {data['network']}'s {len(planned)} nodes, "
                         f"not this network's {len(names)}: node {differ + 1} is {theirs} "
                         f"there, {ours} here")
    return ";".join(f"{node['name']}: {' '.join(map(str, node['kinds']))}" for node in nodes)


def plan_file_stages(value: str | None, names: Sequence[str]) -> tuple[int, ...] | None:
    """Every node's pipeline stage (from 0) as a `plan --json` file of a pipeline plan gives
    them (its nodes' 'stage', from 1), if `value` names such a file for these nodes; else
    None (the stages come from --stages or the planner)."""
    if value is None or not _is_file(Path(value)):
        return None
    try:
        data = json.loads(Path(value).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None  # not JSON: read_node_plan says what is wrong with it
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, list) or not nodes or not all(
            isinstance(node, dict) and isinstance(node.get("stage"), int) for node in nodes):
        return None
    if [node.get("name") for node in nodes] != list(names):
        return None  # read_node_plan names the mismatch
    return tuple(node["stage"] - 1 for node in nodes)
