"""The strategies a user can ask for (a registry); each gives every node's column of kinds.

- ``hypar``: HyPar's search over the allowed kinds (`--search greedy`, its
  Algorithm 2 generalised to graphs, by default; `--search joint` for the exact
  whole-plan search).
- ``data``: batch (dp) for every node at every level.
- ``model``: in (mp) for every node at every level.
- ``trick``: Krizhevsky's "one weird trick" (arXiv:1404.5997): fc nodes in,
  every other node batch, at every level.
- ``optimal``: the joint search over every kind the traffic model takes, for the
  objective asked (`--objective`).
- ``exhaustive``: every plan tried (small networks only).
- ``explicit``: a plan the user writes (`--plan`).
- the seed papers' planners (``accpar``, ``grid``, ``soybean``, ``tofu``), each
  in its own module, loaded when first asked for.

The planner's own strategies live in `planner.own_strategies`; a fixed
strategy's kind that a node cannot take at a level is replaced there by batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hypar_sim.errors import InputError
from hypar_sim.partition.axes import Site
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import BATCH
from hypar_sim.partition.shares import Column
from hypar_sim.registry import LazyRegistry
from hypar_sim.workload.graph import Node

if TYPE_CHECKING:
    from hypar_sim.partition.layout_costs import Costs
    from hypar_sim.planner.plan import PlanRequest

Columns = Callable[["PlanRequest"], list[Column]]


@dataclass(frozen=True)
class Strategy:
    """A way to plan: its columns, and what it needs."""

    columns: Columns  # every node's column of kinds (`planner.plan`)
    searches: bool = False  # picks kinds by a search over the allowed kinds
    honours_search: bool = False  # --search greedy/joint applies
    takes_plan: bool = False  # the user's --plan
    objectives: tuple[str, ...] = ("bytes",)  # what its search can minimise (--objective)
    default_kinds: tuple[str, ...] = ()  # its paper's kinds, when the user gives none
    own_cost: str = ""  # what it minimises when that is its paper's own cost (for tables)


#: The seed papers' planners register themselves in their own modules, loaded when one
#: of them is first asked for (listing the names loads none of them); the planner's own
#: in `planner.own_strategies`, loaded below.
STRATEGIES: LazyRegistry[Strategy] = LazyRegistry({
    name: f"hypar_sim.planner.{name}" for name in ("accpar", "grid", "soybean", "tofu")})


#: The search label of a seed strategy's plan under --phases forward: the strategy's plan of a
#: training step (its paper's cost is a training step's), whose forward pass is counted.
TRAINING_PLAN = "its paper's training-cost"


def register_strategy(name: str, searches: bool = False, honours_search: bool = False,
                      takes_plan: bool = False, objectives: tuple[str, ...] = ("bytes",),
                      default_kinds: tuple[str, ...] = (), own_cost: str = ""
                      ) -> Callable[[Columns], Columns]:
    """Add a strategy to the registry (the command line's choices come from it). A strategy
    whose search runs on the planner's costs (`PlanRequest.costs`) takes every objective;
    one that follows its paper's own cost (`own_cost`) takes bytes. `default_kinds`: the
    kinds it searches when the user names none (HyPar's batch and in otherwise), those the
    traffic model takes."""
    def add(function: Columns) -> Columns:
        STRATEGIES[name] = Strategy(function, searches, honours_search, takes_plan, objectives,
                                    default_kinds, own_cost)
        return function
    return add


def check_objective_of(strategy: str, objective: str, names: Iterable[str]) -> None:
    """One line if `strategy` does not minimise `objective`, naming those of `names` that
    do."""
    spec = STRATEGIES[strategy]
    if objective not in spec.objectives:
        takers = [n for n in names if objective in STRATEGIES[n].objectives]
        raise InputError(f"--objective: strategy '{strategy}' takes {', '.join(spec.objectives)}"
                         f" (its own cost), not {objective}; strategies that minimise "
                         f"{objective}: {', '.join(takers)}")


def objective_for(strategy: str, objective: str) -> str:
    """`objective` if `strategy` takes it, else bytes (`compare` runs every strategy with
    the objective the user asked where it applies)."""
    return objective if objective in STRATEGIES[strategy].objectives else "bytes"


def minimised(strategy: str, objective: str) -> str:
    """What `strategy` minimises when asked for `objective`: the objective, its paper's own
    cost, or nothing (a fixed strategy)."""
    spec = STRATEGIES[strategy]
    if objective in spec.objectives and spec.searches:
        return objective if len(spec.objectives) > 1 or not spec.own_cost else spec.own_cost
    return spec.own_cost or "- (fixed)"


def no_option_error(node: Node, kinds: Sequence[str], hierarchy: Hierarchy,
                    batch: int | None = None) -> InputError:
    """One line: no kind of `kinds` splits `node` on `hierarchy` (the levels decided so
    far), with the batch to try where batch is among them."""
    hint = ""
    if BATCH in kinds and batch is not None and batch < hierarchy.members:
        hint = (f"; with batch {batch}, fewer samples than the {hierarchy.members} groups of "
                f"these levels: use a batch of at least {hierarchy.members}, fewer "
                "accelerators, or more kinds")
    return InputError(f"--kinds: no kind of {','.join(dict.fromkeys(kinds))} can split node "
                      f"{node.name} ({node.op}, output {list(node.shape)}) on the top "
                      f"{hierarchy.levels} level(s) ({hierarchy}) of the array; allowed: kinds "
                      f"whose dimension has at least as many indices as a level has members{hint}")


def offered_columns(sites: Sequence[Site], batch: int, hierarchy: Hierarchy,
                    kinds: Sequence[str], costs: Costs) -> list[list[Column]]:
    """Every node's columns of `kinds` over all levels that `costs` offers (one line if a
    node has none), found once per node geometry (a transformer's blocks repeat theirs:
    gpt3_2_7b's 709 nodes on 64 accelerators took 2 minutes of 11 million checks)."""
    found: dict[tuple, list[Column]] = {}
    options = []
    for site in sites:
        key = site.geometry
        if key not in found:
            found[key] = [c for c in itertools.product(kinds, repeat=hierarchy.levels)
                          if costs.offered(site, batch, c, hierarchy)]
        if not found[key]:
            raise no_option_error(site.node, kinds, hierarchy, batch)
        options.append(list(found[key]))
    return options


# The planner's own strategies (hypar, optimal, exhaustive, data, model, trick, explicit)
# register themselves there.
from hypar_sim.planner import own_strategies  # noqa: E402, F401
