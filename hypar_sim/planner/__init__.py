"""HyPar's communication model and partition search (pure functions, no simulation)."""

from hypar_sim.planner.comm_model import Parallelism
from hypar_sim.planner.plan import Plan, evaluate_plan
from hypar_sim.planner.strategies import STRATEGIES, make_plan

__all__ = ["STRATEGIES", "Parallelism", "Plan", "evaluate_plan", "make_plan"]
