"""How a step trains beside its plan: the optimizer, the precision, activation recomputation
and ZeRO (`--optimizer`, `--precision`, `--recompute`, `--zero`); what a cube keeps per
parameter and per kept activation, and which forward computations the backward pass runs
again.

Bytes per parameter (Rajbhandari et al., "ZeRO", SC 2020, section 3.1: mixed-precision
Adam keeps 2 + 2 + K bytes per parameter, K = 12 for the fp32 weights, momentum and
variance):

- fp32: the weight and its gradient at the hardware's word (4 bytes), the optimizer's
  `state_words` at the same word.
- bf16, fp16 (Micikevicius et al., "Mixed precision training", ICLR 2018, section 3.1):
  weights, gradients, activations and messages at 2 bytes; an fp32 master copy of the
  weights and the optimizer state in fp32 (4 bytes a value), counted as optimizer state.

ZeRO stage s shards among the members that hold the same parameters (the node's
data-parallel copies, `node_layout.weight_copies`): stage 1 the optimizer state, stage 2
the gradients too, stage 3 the weights too (ZeRO section 5, Figure 1); stage 3 gathers a
node's whole weights before its forward and its backward pass (a buffer of its gathered
weights: counted with the communication buffers).

Recomputation (`recompute_plan`): `full` keeps only what enters each segment of the
graph's generations (cut where little crosses, as many as keep the least) and runs each
segment's forward again before its backward pass (Chen et al., "Training deep nets with
sublinear memory cost", 2016, section 4.1); `selective` recomputes only the attention core
(a softmax and the weightless products beside it) and drops only what grows with the
sequence squared: the softmax's output, kept by it and by the attention over the values;
the scores' inputs (q and k) and the values stay (Korthikanti et al., "Reducing activation
recomputation in large transformer models", 2022, section 5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hypar_sim.errors import InputError, clip_value, closest
from hypar_sim.hardware.costs import UpdateRule
from hypar_sim.planner.optimizers import DEFAULT_OPTIMIZER, optimizer
from hypar_sim.workload.graph import Graph

#: Bytes of an fp32 value (master weights and optimizer state under mixed precision).
FP32_BYTES = 4


@dataclass(frozen=True)
class Precision:
    """A number format for compute, activations and messages."""

    name: str
    word_bytes: int | None  # None: the hardware's word_bytes (fp32: 4 by default)
    master_weights: bool  # an fp32 copy of the weights, state kept in fp32
    summary: str


PRECISIONS = {p.name: p for p in (
    Precision("fp32", None, False, "32-bit floats throughout (the hardware's word_bytes)"),
    Precision("bf16", 2, True, "bfloat16 compute, activations and messages; fp32 master "
              "weights and optimizer state"),
    Precision("fp16", 2, True, "IEEE half compute, activations and messages; fp32 master "
              "weights and optimizer state"))}
RECOMPUTES = {"none": "keep every activation the backward pass reads",
              "full": "keep segment inputs, recompute every forward (Chen et al. 2016)",
              "selective": "recompute the attention core only (Korthikanti et al. 2022)"}
ZERO_STAGES = (0, 1, 2, 3)
#: The value of a training option that `optimal` chooses (`planner.stage_search`).
AUTO = "auto"
#: The training options `optimal` may choose (`--pipeline auto`, `--recompute auto`,
#: `--zero auto`).
FREE_OPTIONS = ("pipeline", "recompute", "zero")
#: Pipeline schedules (`sim.pipeline_schedule`): GPipe (Huang et al., NeurIPS 2019) runs every
#: micro-batch's forward, then every backward; 1F1B (PipeDream-Flush: Narayanan et al., ICML
#: 2021) alternates them once a stage is full, keeping at most S - s micro-batches in flight.
PIPELINE_SCHEDULES = {"gpipe": "every forward, then every backward (Huang et al. 2019)",
                      "1f1b": "one forward, one backward once full (Narayanan et al. 2021)"}


@dataclass(frozen=True)
class Training:
    """The training options of a step. Defaults: today's model (SGD, fp32, nothing
    recomputed, no sharding)."""

    optimizer: str = DEFAULT_OPTIMIZER
    precision: str = "fp32"
    recompute: str = "none"
    zero: int = 0
    #: Pipeline parallelism: the array's top level holds `stages` stages of contiguous nodes
    #: (`stage_names`: the first node of each stage after the first; none: balanced by the
    #: planner), the batch cut into `microbatches` run by `schedule`.
    stages: int = 1
    microbatches: int = 1
    schedule: str = "1f1b"
    stage_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        optimizer(self.optimizer)
        _allowed("--precision", self.precision, PRECISIONS)
        _allowed("--recompute", self.recompute, RECOMPUTES)
        _allowed("--schedule", self.schedule, PIPELINE_SCHEDULES)
        if isinstance(self.zero, bool) or self.zero not in ZERO_STAGES:
            raise InputError(f"--zero: unknown stage {clip_value(self.zero)}; allowed: "
                             f"{', '.join(map(str, ZERO_STAGES))}")
        for flag, value in (("--pipeline", self.stages), ("--microbatches", self.microbatches)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{flag}: must be a positive integer, got {clip_value(value)}")
        if self.stages > 1 and self.zero >= 2:
            raise InputError(f"--zero {self.zero}: shards gradients a pipeline stage sums over "
                             "its micro-batches (DeepSpeed refuses ZeRO 2 and 3 with pipeline "
                             "parallelism); use --zero 0 or 1 with --pipeline")
        if self.stages == 1:
            for flag, given in (("--microbatches", self.microbatches != 1),
                                ("--schedule", self.schedule != "1f1b"),
                                ("--stages", bool(self.stage_names))):
                if given:
                    raise InputError(f"{flag}: needs a pipeline (--pipeline S, S > 1)")
        if self.stage_names and len(self.stage_names) != self.stages - 1:
            raise InputError(f"--stages: {len(self.stage_names)} names for --pipeline "
                             f"{self.stages}; give the first node of each stage after the "
                             f"first: {self.stages - 1} names")

    @property
    def mixed(self) -> bool:
        return PRECISIONS[self.precision].master_weights

    def word_bytes(self, hardware_word_bytes: int) -> int:
        """Bytes of a value computed, kept or sent."""
        return PRECISIONS[self.precision].word_bytes or hardware_word_bytes

    def state_bytes(self, word_bytes: int) -> int:
        """Optimizer bytes per parameter: its state values and, in mixed precision, the
        fp32 master weight."""
        values = optimizer(self.optimizer).state_words
        return values * FP32_BYTES + FP32_BYTES if self.mixed else values * word_bytes

    def update_state_words(self, word_bytes: int) -> int:
        """Words of `word_bytes` the update streams per parameter beside the weight and
        gradient (`hardware.pe_array.update_cost`)."""
        return math.ceil(self.state_bytes(word_bytes) / word_bytes)

    def update_rule(self, word_bytes: int) -> UpdateRule:
        """What the update streams and computes per parameter (`hardware.costs`)."""
        return UpdateRule(self.update_state_words(word_bytes),
                          optimizer(self.optimizer).macs_per_param)

    def member_bytes(self, params: np.ndarray, copies: np.ndarray, kept: np.ndarray,
                     word_bytes: int, training: bool) -> dict[str, np.ndarray]:
        """Bytes a member keeps per part for `params` parameters held in `copies` copies
        (ZeRO shards by them) and `kept` activations it keeps (those recomputation keeps):
        weights, gradients and optimizer state (none in an inference), activations."""
        def sharded(stage: int) -> np.ndarray:
            return params / copies if self.zero >= stage else params * 1.0

        return {"weights": sharded(3) * word_bytes,
                "gradients": sharded(2) * word_bytes * training,
                "optimizer_state": sharded(1) * self.state_bytes(word_bytes) * training,
                "activations": kept * float(word_bytes)}

    def parts(self) -> list[str]:
        """['optimizer adam', 'bf16', 'ZeRO 3', 'recompute full', ...]: the options that are
        not the defaults."""
        parts = [f"optimizer {self.optimizer}" if self.optimizer != DEFAULT_OPTIMIZER else "",
                 self.precision if self.precision != "fp32" else "",
                 f"ZeRO {self.zero}" if self.zero else "",
                 f"recompute {self.recompute}" if self.recompute != "none" else "",
                 f"pipeline {self.stages} stages x {self.microbatches} micro-batches "
                 f"({self.schedule})" if self.stages > 1 else ""]
        return [part for part in parts if part]

    def note(self) -> str:
        """', optimizer adam, bf16, ZeRO 3, recompute full' where not the defaults."""
        return "".join(f", {part}" for part in self.parts())

    def to_dict(self) -> dict[str, object]:
        return {"optimizer": self.optimizer, "precision": self.precision,
                "recompute": self.recompute, "zero": self.zero, "stages": self.stages,
                "microbatches": self.microbatches, "schedule": self.schedule,
                "stage_names": list(self.stage_names)}

    @property
    def pipelined(self) -> bool:
        return self.stages > 1


def _allowed(flag: str, value: object, allowed: dict) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise InputError(f"{flag}: unknown {clip_value(value)}{closest(str(value), allowed)}; "
                         f"allowed: {', '.join(allowed)}")


#: Today's model: SGD, fp32, nothing recomputed, nothing sharded.
DEFAULT_TRAINING = Training()


@dataclass(frozen=True)
class Recompute:
    """Which nodes' kept activations stay through the step, and the segments whose forward
    the backward pass runs again (nodes in forward order)."""

    segments: tuple[tuple[int, ...], ...]  # every node, in segments of generations
    recomputed: frozenset[int]  # nodes whose forward runs again in the backward pass
    kept: frozenset[int]  # nodes whose kept activations stay through the step
    #: (node, input index): the segment inputs full recomputation keeps (what the node reads
    #: of a tensor made in an earlier segment, or of a graph input)
    inputs: frozenset[tuple[int, int]] = frozenset()
    #: (node, input index): reads a kept node does not keep (selective recomputation: the
    #: attention over the values keeps its values, not the softmax it rebuilds)
    dropped: frozenset[tuple[int, int]] = frozenset()

    def segment_of(self) -> dict[int, int]:
        return {i: s for s, nodes in enumerate(self.segments) for i in nodes}


def recompute_plan(graph: Graph, mode: str, in_flight: int = 1) -> Recompute:
    """The nodes `mode` recomputes and keeps (see the module docstring). Segments are runs
    of whole generations (one per generation where nothing is recomputed), cut where the
    fewest elements cross (`_cuts`), as many as keep the least (`in_flight`: the
    micro-batches whose segment inputs a pipeline stage keeps at once). Under `full` only
    the inputs that come from an earlier segment (or the graph's inputs) are kept."""
    generations = graph.generations()
    everything = frozenset(range(len(graph.nodes)))
    if mode == "none":
        return Recompute(tuple(tuple(g) for g in generations), frozenset(), everything)
    bounds = [0, *_cuts(graph, in_flight), len(generations)]
    segments = tuple(tuple(i for generation in generations[a:b] for i in generation)
                     for a, b in zip(bounds, bounds[1:], strict=False))
    if mode == "selective":
        core = attention_core(graph)
        index = {node.name: i for i, node in enumerate(graph.nodes)}
        softmax = frozenset(i for i in core if graph.nodes[i].op == "softmax")
        dropped = frozenset((i, k) for i in core - softmax
                            for k, name in enumerate(graph.nodes[i].inputs)
                            if index.get(name) in softmax)
        return Recompute(segments, core, everything - softmax, frozenset(), dropped)
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    segment = {i: s for s, nodes in enumerate(segments) for i in nodes}
    inputs = frozenset((i, k) for i, node in enumerate(graph.nodes)
                       for k, name in enumerate(node.inputs)
                       if name not in index or segment[index[name]] < segment[i])
    return Recompute(segments, everything, frozenset(), inputs)


def crossing_elements(graph: Graph, position: Sequence[int]) -> np.ndarray:
    """[c]: elements (per sample) of the tensors made before a cut before position c and
    read at or after it, the nodes at `position` (their generation, or their index) and the
    graph's inputs before every node; one entry more than the last position."""
    born = {name: -1 for name in graph.inputs} | {n.name: position[i]
                                                  for i, n in enumerate(graph.nodes)}
    size = dict(graph.inputs) | {node.name: node.shape for node in graph.nodes}
    last = dict.fromkeys(born, -1)
    for i, node in enumerate(graph.nodes):
        for name in node.inputs:
            last[name] = max(last[name], position[i])
    crossing = np.zeros(max(position, default=-1) + 2)
    for name, first in born.items():
        if last[name] > first:
            crossing[first + 1:last[name] + 1] += math.prod(size[name])
    return crossing


def _cuts(graph: Graph, in_flight: int = 1) -> list[int]:
    """Where full recomputation cuts the graph's G generations (before which generations):
    for k segments, near each of the k - 1 even cuts, within half a segment, the boundary
    the fewest elements (per sample) cross, the nearest on a tie; k from 1 to 2 sqrt(G)
    (Chen et al. 2016, section 4.1: sqrt(n) segments of a chain of n equal layers), the one
    whose kept inputs (times `in_flight`) and largest segment's outputs add up to the least
    elements."""
    depth = graph.generation_of()
    count = max(depth, default=-1) + 1
    if count < 2:
        return []
    crossing = crossing_elements(graph, depth)  # [b]: across a cut before generation b
    made = np.concatenate([[0.0], np.cumsum(np.bincount(
        depth, [math.prod(n.shape) for n in graph.nodes], minlength=count))])

    def cuts_of(segments: int) -> list[int]:
        cuts: list[int] = []
        half = count / segments / 2
        for j in range(1, segments):
            target = j * count / segments
            near = [b for b in range(max(1, math.ceil(target - half)),
                                     min(count - 1, math.floor(target + half)) + 1)
                    if b not in cuts]
            if near:
                cuts.append(min(near, key=lambda b: (crossing[b], abs(b - target))))
        return sorted(cuts)

    def kept(cuts: list[int]) -> float:
        bounds = [0, *cuts, count]
        largest = max(made[b] - made[a] for a, b in zip(bounds, bounds[1:], strict=False))
        return in_flight * sum(crossing[c] for c in cuts) + largest

    options = [cuts_of(k) for k in range(1, 2 * math.ceil(math.sqrt(count)) + 1)]
    return min(options, key=lambda cuts: (kept(cuts), len(cuts)))


def attention_core(graph: Graph) -> frozenset[int]:
    """Each softmax node and the weightless products (matmul, einsum) that feed it or read
    it: the attention scores, their softmax and the attention over the values."""
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    readers = graph.consumers()
    core: set[int] = set()
    for i, node in enumerate(graph.nodes):
        if node.op != "softmax":
            continue
        core.add(i)
        beside = [index[name] for name in node.inputs if name in index] + \
            [index[name] for name in readers.get(node.name, ())]
        core.update(j for j in beside if graph.nodes[j].op in ("matmul", "einsum")
                    and not graph.nodes[j].params)
    return frozenset(core)
