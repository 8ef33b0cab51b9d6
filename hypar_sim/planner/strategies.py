"""The strategies a user can ask for, all producing a Plan.

- ``hypar``: Algorithm 2's plan (the minimum traffic per level).
- ``data``: Data Parallelism, dp for every layer at every level.
- ``model``: Model Parallelism, mp for every layer at every level.
- ``trick``: Krizhevsky's "one weird trick" (arXiv:1404.5997): conv layers dp,
  fully-connected layers mp, at every level.
- ``exhaustive``: the joint optimum over all 2**(L*H) plans (small networks only).
- ``explicit``: a plan the user writes, one dp/mp word per layer per level.
"""

from __future__ import annotations

from pathlib import Path

from hypar_sim.errors import InputError, closest
from hypar_sim.planner.comm_model import Parallelism
from hypar_sim.planner.exhaustive import global_optimum
from hypar_sim.planner.hypar import hierarchical_choices
from hypar_sim.planner.plan import Choices, Plan, evaluate_plan, top_splits
from hypar_sim.workload.layers import LayerKind
from hypar_sim.workload.network import Network

STRATEGIES = ("hypar", "data", "model", "trick", "exhaustive", "explicit")

#: Most hierarchy levels accepted (2**20 accelerators).
MAX_LEVELS = 20


def check_levels(levels: int) -> None:
    if isinstance(levels, bool) or not isinstance(levels, int) or not 0 <= levels <= MAX_LEVELS:
        raise InputError(f"levels: must be an integer from 0 to {MAX_LEVELS}, got {levels!r}")


def parse_plan_text(text: str, network: Network, levels: int, where: str = "--plan") -> Choices:
    """Parse a user plan: levels separated by ';' or new lines, layers by ',' or spaces.

    Lines starting with '#' are comments.
    """
    rows = []
    for raw in text.replace(";", "\n").splitlines():
        line = raw.split("#", 1)[0].replace(",", " ").split()
        if line:
            rows.append(line)
    if len(rows) != levels:
        raise InputError(
            f"{where}: has {len(rows)} level(s), expected {levels} (one row of dp/mp per level)"
        )
    layers = len(network.layers)
    plan = []
    for level, row in enumerate(rows):
        if len(row) != layers:
            raise InputError(
                f"{where}: level {level + 1} has {len(row)} choice(s), expected {layers} "
                f"(layers: {' '.join(network.layer_names)})"
            )
        try:
            plan.append(tuple(Parallelism(word.lower()) for word in row))
        except ValueError:
            bad = next(w for w in row if w.lower() not in ("dp", "mp"))
            raise InputError(
                f"{where}: level {level + 1}: '{bad}' is not a parallelism; allowed: dp, mp"
            ) from None
    return tuple(plan)


def read_plan_argument(value: str, network: Network, levels: int) -> Choices:
    """A --plan value: a path to a file holding a plan, or the plan text itself."""
    path = Path(value)
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: cannot read the plan file ({exc})") from None
        return parse_plan_text(text, network, levels, str(path))
    return parse_plan_text(value, network, levels)


def uniform_choices(network: Network, levels: int, strategy: str) -> Choices:
    """The fixed per-layer choice of the data, model and trick strategies."""
    def pick(kind: LayerKind) -> Parallelism:
        if strategy == "data":
            return Parallelism.DP
        if strategy == "model":
            return Parallelism.MP
        return Parallelism.DP if kind is LayerKind.CONV else Parallelism.MP

    row = tuple(pick(layer.kind) for layer in network.layers)
    return tuple(row for _ in range(levels))


def make_plan(
    network: Network,
    strategy: str,
    levels: int,
    batch: int,
    plan_text: str | None = None,
    word_bytes: int = 4,
) -> Plan:
    """The plan of `strategy` for `network` on 2**levels accelerators."""
    check_levels(levels)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch: must be a positive integer, got {batch!r}")
    if strategy not in STRATEGIES:
        raise InputError(
            f"strategy: unknown '{strategy}'{closest(strategy, STRATEGIES)}; "
            f"allowed: {', '.join(STRATEGIES)}"
        )
    if (strategy == "explicit") != (plan_text is not None):
        raise InputError("plan: give --plan exactly when the strategy is 'explicit'")
    if strategy in ("hypar", "exhaustive") and batch % 2**levels:
        raise InputError(
            f"batch: {batch} is not divisible by 2**levels = {2**levels}, which data "
            f"parallelism at every level needs; choose a batch that is a multiple of {2**levels}"
        )
    splits = top_splits(network, batch, word_bytes)
    if strategy == "hypar":
        choices = hierarchical_choices(splits, levels)[1]
    elif strategy == "exhaustive":
        choices = global_optimum(splits, levels)[1]
    elif strategy == "explicit":
        choices = read_plan_argument(plan_text or "", network, levels)
    else:
        choices = uniform_choices(network, levels, strategy)
    return evaluate_plan(network, batch, choices, strategy, word_bytes)
