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

Recomputation (`recompute_plan`): `full` keeps only what enters each of about sqrt(G)
segments of the graph's G generations and runs each segment's forward again before its
backward pass (Chen et al., "Training deep nets with sublinear memory cost", 2016,
section 4.1); `selective` drops only the attention core's kept tensors (a softmax and the
weightless products beside it, whose size grows with the sequence squared) and recomputes
those (Korthikanti et al., "Reducing activation recomputation in large transformer
models", 2022, section 5).
"""

from __future__ import annotations

import math
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


@dataclass(frozen=True)
class Training:
    """The training options of a step. Defaults: today's model (SGD, fp32, nothing
    recomputed, no sharding)."""

    optimizer: str = DEFAULT_OPTIMIZER
    precision: str = "fp32"
    recompute: str = "none"
    zero: int = 0

    def __post_init__(self) -> None:
        optimizer(self.optimizer)
        _allowed("--precision", self.precision, PRECISIONS)
        _allowed("--recompute", self.recompute, RECOMPUTES)
        if isinstance(self.zero, bool) or self.zero not in ZERO_STAGES:
            raise InputError(f"--zero: unknown stage {clip_value(self.zero)}; allowed: "
                             f"{', '.join(map(str, ZERO_STAGES))}")

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

    def note(self) -> str:
        """', optimizer adam, bf16, ZeRO 3, recompute full' where not the defaults."""
        parts = [f"optimizer {self.optimizer}" if self.optimizer != DEFAULT_OPTIMIZER else "",
                 self.precision if self.precision != "fp32" else "",
                 f"ZeRO {self.zero}" if self.zero else "",
                 f"recompute {self.recompute}" if self.recompute != "none" else ""]
        return "".join(f", {part}" for part in parts if part)

    def to_dict(self) -> dict[str, object]:
        return {"optimizer": self.optimizer, "precision": self.precision,
                "recompute": self.recompute, "zero": self.zero}


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

    def segment_of(self) -> dict[int, int]:
        return {i: s for s, nodes in enumerate(self.segments) for i in nodes}


def recompute_plan(graph: Graph, mode: str) -> Recompute:
    """The nodes `mode` recomputes and keeps (see the module docstring). Segments are runs
    of whole generations, ceil(sqrt(G)) of them for G generations (one per generation
    where nothing is recomputed). Under `full` a node keeps its inputs where one of them
    comes from an earlier segment or is a graph input (all its inputs: an overstatement
    where only one crosses)."""
    generations = graph.generations()
    count = len(generations)
    per = math.ceil(count / math.ceil(math.sqrt(count))) if mode != "none" and count else 1
    segments = tuple(tuple(i for generation in generations[start:start + per]
                           for i in generation) for start in range(0, count, per))
    everything = frozenset(range(len(graph.nodes)))
    if mode == "none":
        return Recompute(segments, frozenset(), everything)
    if mode == "selective":
        core = attention_core(graph)
        return Recompute(segments, core, everything - core)
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    segment = {i: s for s, nodes in enumerate(segments) for i in nodes}
    crossing = frozenset(i for i, node in enumerate(graph.nodes)
                         if any(name not in index or segment[index[name]] < segment[i]
                                for name in node.inputs))
    return Recompute(segments, everything, crossing)


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
