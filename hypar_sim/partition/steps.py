"""The phases of a training step, why bytes move, and the messages of one step.

Every transfer kind belongs to a phase and either reduces what members send or
gathers it; the schedule (`sim.schedule`) places each kind's sends and waits
around the computations of the node it is keyed to.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import numpy as np


class Phase(StrEnum):
    """The phases of one training step."""

    FORWARD = "forward"
    BACKWARD = "backward"
    GRADIENT = "gradient"
    UPDATE = "update"
    RECOMPUTE = "recompute"  # a forward computation run again in the backward pass


#: The four phases every training step has (recomputation is an option's: `planner.training`).
STEP_PHASES = (Phase.FORWARD, Phase.BACKWARD, Phase.GRADIENT, Phase.UPDATE)


class TransferKind(StrEnum):
    """Why bytes move (declaration order is the order within one slot)."""

    RELAYOUT_FEATURE = "relayout_feature"  # the layer's input into its layout (gather)
    PARTIAL_SUM = "partial_sum"  # the layer's partial outputs (paper: exchange; layout: reduce)
    RELAYOUT_ERROR = "relayout_error"  # paper: dp -> mp boundary, backward
    ERROR_REDUCE = "error_reduce"  # layout: partial input errors of the layer, reduced
    ERROR_GATHER = "error_gather"  # layout: the error of the layer's output into its layout
    GRADIENT = "gradient"  # partial weight gradients (paper: exchange; layout: reduce)
    GRADIENT_GATHER = "gradient_gather"  # layout: reduced gradients to every replica
    UPDATE_GATHER = "update_gather"  # ZeRO 1, 2: the updated weight shards to every copy
    WEIGHT_GATHER = "weight_gather"  # ZeRO 3: a node's weight shards, before its forward
    WEIGHT_REGATHER = "weight_regather"  # ZeRO 3: the same again, before its backward pass
    RECOMPUTE_FEATURE = "recompute_feature"  # recomputation: the input's relayout again
    RECOMPUTE_SUM = "recompute_sum"  # recomputation: the partial outputs reduced again
    STAGE_FEATURE = "stage_feature"  # pipeline: an input sent from its producer's stage
    STAGE_ERROR = "stage_error"  # pipeline: an output's error sent back to its stage
    TIED_GRADIENT = "tied_gradient"  # pipeline: a tied weight's two copies' gradients summed

    @property
    def phase(self) -> Phase:
        return _PHASES[self]

    @property
    def reduces(self) -> bool:
        """Whether the step sums what members send (a reduce-scatter), rather than
        gathering it (`partition.collectives` orders a collective's stages by this)."""
        return self in _REDUCING

    @property
    def is_intra(self) -> bool:
        """Intra-layer (HyPar's Table 1) rather than inter-layer (Table 2) communication."""
        return self in _INTRA


_INTRA = frozenset({TransferKind.PARTIAL_SUM, TransferKind.GRADIENT,
                    TransferKind.GRADIENT_GATHER, TransferKind.UPDATE_GATHER,
                    TransferKind.WEIGHT_GATHER, TransferKind.WEIGHT_REGATHER,
                    TransferKind.RECOMPUTE_SUM, TransferKind.TIED_GRADIENT})
_REDUCING = frozenset({TransferKind.PARTIAL_SUM, TransferKind.ERROR_REDUCE,
                       TransferKind.GRADIENT, TransferKind.RECOMPUTE_SUM})
_PHASES = {
    TransferKind.RELAYOUT_FEATURE: Phase.FORWARD, TransferKind.PARTIAL_SUM: Phase.FORWARD,
    TransferKind.RELAYOUT_ERROR: Phase.BACKWARD, TransferKind.ERROR_REDUCE: Phase.BACKWARD,
    TransferKind.ERROR_GATHER: Phase.BACKWARD, TransferKind.GRADIENT: Phase.GRADIENT,
    TransferKind.GRADIENT_GATHER: Phase.GRADIENT, TransferKind.UPDATE_GATHER: Phase.UPDATE,
    TransferKind.WEIGHT_GATHER: Phase.FORWARD, TransferKind.WEIGHT_REGATHER: Phase.BACKWARD,
    TransferKind.RECOMPUTE_FEATURE: Phase.RECOMPUTE, TransferKind.RECOMPUTE_SUM: Phase.RECOMPUTE,
    TransferKind.STAGE_FEATURE: Phase.FORWARD, TransferKind.STAGE_ERROR: Phase.BACKWARD,
    TransferKind.TIED_GRADIENT: Phase.GRADIENT,
}


def step_key(layer: int, kind: TransferKind, micro: int = 0) -> tuple:
    """A step's key: (layer, why), and a pipeline's micro-batch beyond the first (the
    first's steps keep the key of a step without micro-batches)."""
    return (layer, kind, micro) if micro else (layer, kind)


class Message(NamedTuple):
    """Bytes one member sends another for one layer's step; `level` is the top-most level
    at which the two differ (the switch where they meet in a fat tree)."""

    src: int
    dst: int
    bytes: float
    layer: int
    level: int
    kind: TransferKind
    round: int = 0  # a collective's round: sent once the sender received the round before
    micro: int = 0  # a pipeline's micro-batch

    @property
    def phase(self) -> Phase:
        return self.kind.phase

    @property
    def step(self) -> tuple:
        """The key of the message's step (`step_key`)."""
        return step_key(self.layer, self.kind, self.micro)


@dataclass(frozen=True, eq=False)
class StepMessages:
    """The messages of one step (one layer, one kind) as arrays, in their order: what the
    engines and the accounting read at once; iterating gives each as a `Message`. A row of
    `repeats` n stands for n equal messages in rounds `round` .. `round` + n - 1 (a ring's
    rounds; None: every row once)."""

    layer: int
    kind: TransferKind
    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray  # float64
    level: np.ndarray
    round: np.ndarray
    micro: int = 0  # a pipeline's micro-batch
    repeats: np.ndarray | None = None
    #: The collective each row is part of (numbered within the step; -1 or None: none).
    group: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.src)

    @property
    def groups(self) -> np.ndarray:
        """Each row's collective (-1: none)."""
        return np.full(len(self.src), -1, dtype=np.int64) if self.group is None else self.group

    @property
    def counts(self) -> np.ndarray:
        """How many messages each row stands for."""
        return np.ones(len(self.src), dtype=np.int64) if self.repeats is None else self.repeats

    @property
    def sent_bytes(self) -> np.ndarray:
        """Bytes of each row, all its rounds."""
        return self.bytes if self.repeats is None else self.bytes * self.repeats

    @property
    def messages(self) -> int:
        """Messages the step sends (rows' repeats added up)."""
        return len(self.src) if self.repeats is None else int(self.repeats.sum())

    def expanded(self) -> StepMessages:
        """The same messages a row each, sorted by round, then source, then destination."""
        if self.repeats is None or np.all(self.repeats == 1):
            return self
        rows = np.repeat(np.arange(len(self.src)), self.repeats)
        starts = np.cumsum(self.repeats) - self.repeats
        rounds = self.round[rows] + np.arange(len(rows)) - np.repeat(starts, self.repeats)
        order = np.lexsort((self.dst[rows], self.src[rows], rounds))
        rows = rows[order]
        return StepMessages(self.layer, self.kind, self.src[rows], self.dst[rows],
                            self.bytes[rows], self.level[rows], rounds[order], self.micro,
                            group=self.groups[rows])

    def __iter__(self) -> Iterator[Message]:
        layer, kind, micro = self.layer, self.kind, self.micro
        step = self.expanded()
        for src, dst, size, level, round_ in zip(step.src.tolist(), step.dst.tolist(),
                                                 step.bytes.tolist(), step.level.tolist(),
                                                 step.round.tolist(), strict=True):
            yield Message(src, dst, size, layer, level, kind, round_, micro)

    @property
    def key(self) -> tuple:
        return step_key(self.layer, self.kind, self.micro)


def largest_receive(steps: Mapping[tuple[int, TransferKind], StepMessages]) -> float:
    """The most bytes one member receives in one step: the communication buffer a cube
    must hold."""
    return max((float(np.bincount(messages.dst, messages.sent_bytes).max())
                for messages in steps.values() if len(messages)), default=0.0)
