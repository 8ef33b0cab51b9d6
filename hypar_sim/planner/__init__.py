"""Planners: HyPar's communication model and search, the seed papers' planners, estimates
(pure functions, no simulation). Importing the package registers every strategy."""

from hypar_sim.planner import (  # noqa: F401 - register their strategies
    accpar,
    accpar_graph,
    grid,
    grid_graph,
    soybean,
    tofu,
    tofu_graph,
)
from hypar_sim.planner.comm_model import Parallelism
from hypar_sim.planner.plan import Plan, evaluate_plan
from hypar_sim.planner.strategies import STRATEGIES, make_plan

__all__ = ["STRATEGIES", "Parallelism", "Plan", "evaluate_plan", "make_plan"]
