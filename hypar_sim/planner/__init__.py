"""Planners: HyPar's communication model and search, the seed papers' planners (registered
by name in `strategies.STRATEGIES`, each loaded when first asked for), estimates, memory
fitting, bounds (pure functions, no simulation)."""

from hypar_sim.planner.comm_model import Parallelism
from hypar_sim.planner.plan import Plan, evaluate_plan, make_plan
from hypar_sim.planner.strategies import STRATEGIES

__all__ = ["STRATEGIES", "Parallelism", "Plan", "evaluate_plan", "make_plan"]
