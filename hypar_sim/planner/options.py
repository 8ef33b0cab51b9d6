"""How to plan, beside the strategy (`planner.strategies`): one frozen set of options that
the command line, the sweep and the Python API build alike (`hypar_sim.request`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypar_sim.errors import InputError, closest
from hypar_sim.hardware.topology import TOPOLOGIES
from hypar_sim.hardware.topology_file import is_topology_file
from hypar_sim.partition.kinds import DEFAULT_KINDS, resolve_kind
from hypar_sim.planner import search as searches
from hypar_sim.planner.objectives import check_objective
from hypar_sim.planner.traffic import DEFAULT_TRAFFIC_MODEL, traffic_model
from hypar_sim.planner.training import FREE_OPTIONS, Training


@dataclass(frozen=True)
class PlanOptions:
    """How to plan, beside the strategy: kinds, search, traffic model and what the searches
    minimise (bytes; or step time or energy as `planner.estimate` sees them on `topology`,
    gradients overlapped with the backward pass or not, as the simulator will run them)."""

    kinds: tuple[str, ...] = None  # type: ignore[assignment] # None: the strategy's own
    search: str = "greedy"
    traffic_model: str = DEFAULT_TRAFFIC_MODEL
    plan_text: str | None = field(default=None)
    objective: str = "bytes"
    topology: str = "htree"
    overlap_gradients: bool = True
    kinds_given: bool | None = None  # False: each strategy searches its own paper's kinds
    progress: bool = False  # a progress bar on stderr for long searches (exhaustive)
    phases: str = "training"  # or "forward": plan an inference (the forward pass alone)
    training: Training = Training()  # optimizer, precision, recompute, ZeRO (planner.training)
    #: The training options `optimal` chooses (`planner.stage_search`: pipeline, recompute,
    #: zero; given `auto` on the command line); the others are `training`'s.
    free_training: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kinds is None:  # HyPar's kinds, or the strategy's own (make_plan)
            object.__setattr__(self, "kinds", DEFAULT_KINDS)
            if self.kinds_given is None:
                object.__setattr__(self, "kinds_given", False)
        elif self.kinds_given is None:
            object.__setattr__(self, "kinds_given", True)
        for kind in self.kinds:
            resolve_kind(kind)
        check_objective(self.objective)
        if self.topology not in TOPOLOGIES and not is_topology_file(self.topology):
            raise InputError(f"--topology: unknown '{self.topology}'"
                             f"{closest(self.topology, TOPOLOGIES)}; allowed: "
                             f"{', '.join(TOPOLOGIES)} or a topology file (.yaml)")
        if self.search not in searches.SEARCHES:
            raise InputError(f"--search: unknown '{self.search}'"
                             f"{closest(self.search, searches.SEARCHES)}; "
                             f"allowed: {', '.join(searches.SEARCHES)}")
        if not isinstance(self.training, Training):
            raise InputError(f"training: must be a Training, got {type(self.training).__name__}")
        if traffic_model(self.traffic_model, self.phases).chains_only and (
                self.training.zero or self.training.recompute != "none"
                or self.training.pipelined):
            raise InputError(f"--traffic-model {self.traffic_model}: HyPar's chain reading has "
                             "no ZeRO, recomputation or pipeline steps; use --traffic-model "
                             "layout (the default) or layout_levels")
        if self.phases == "forward" and (self.training.zero or self.training.pipelined
                                         or self.training.recompute != "none"):
            raise InputError("--phases forward: an inference has no gradients to shard and no "
                             "backward pass to recompute for or to pipeline; drop --zero, "
                             "--recompute and --pipeline")
        for name in self.free_training:
            if name not in FREE_OPTIONS:
                raise InputError(f"free_training: unknown '{name}'; allowed: "
                                 f"{', '.join(FREE_OPTIONS)}")
        if self.free_training and (self.objective != "time" or self.phases == "forward"):
            flags = ", ".join(f"--{name} auto" for name in self.free_training)
            raise InputError(f"{flags}: --strategy optimal --objective time chooses them, for "
                             "the least estimated step time of a training step"
                             + ("; drop --phases forward" if self.phases == "forward" else
                                "; add --strategy optimal --objective time"))
        if self.training.pipelined and self.objective == "energy":
            raise InputError("--objective energy: a pipeline's step is estimated in time and "
                             "bytes; use --objective time or bytes with --pipeline")
        if self.phases == "forward" and self.objective != "bytes":
            raise InputError(f"--objective: {self.objective} is estimated for a training step; "
                             "with --phases forward the planner minimises bytes (--objective "
                             "bytes)")
