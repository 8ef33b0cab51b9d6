"""HyPar's communication model (Song et al., HPCA 2019, section 3), as transfers.

At one level of the hierarchy a group of accelerators is split into two halves
(sub-arrays) and every weighted layer is split between them by data
parallelism (dp: the batch is halved, the kernel is replicated) or model
parallelism (mp: the layer's input channels are halved -- F_l, E_l and the
rows of W_l and dW_l, as in the paper's Figure 1(b); the output F_{l+1} is
never split by mp).

The amounts, for the two halves of one pair, both directions counted (the
factor 2 of the paper's worked examples in 3.4):

==============  ==========  ===================================  ==========
what            phase       bytes each half sends to the other   paper
==============  ==========  ===================================  ==========
dp layer        gradient    A(dW_l) of the kernel it holds       Table 1
mp layer        forward     A(F_{l+1}), output after pooling     Table 1
dp -> mp        forward     0.25 A(F_l), the mp layer's input    Table 2
dp -> mp        backward    0.25 A(E_l) (same size as F_l)       Table 2
dp->dp, mp->mp, mp->dp      nothing
==============  ==========  ===================================  ==========

This is the reading of Table 1, Table 2 and Algorithm 2 that reproduces the
Data Parallelism and HyPar columns of the paper's Figure 8 within 1%. It is
the same total as the literal Table 2 form (mp intra 1 x A(F_{l+1}), mp->mp
and mp->dp 2 x 0.5 A(E_{l+1}) on the previous output, one more mp boundary
after the last layer), grouped by the phase in which the bytes are needed.

Amounts are in bytes, kept as floats: every amount is an integer number of
elements divided by a power of two, which a float holds exactly (below 2**53),
so sums are exact whatever their order and the simulator's message bytes add
up to the planner's traffic bit for bit.

Under `--traffic-model paper` this module is the single source of traffic: the
planner's costs and the simulator's messages both come from `layer_transfers`
(through `planner.traffic.PaperTraffic`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from hypar_sim.partition.steps import Phase, TransferKind
from hypar_sim.workload.layers import Layer

__all__ = ["LayerSplit", "Parallelism", "Phase", "Transfer", "TransferKind", "layer_transfers",
           "pair_costs"]


class Parallelism(StrEnum):
    """How one layer is split between the two halves at one level."""

    DP = "dp"
    MP = "mp"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class LayerSplit:
    """The share of one layer's tensors that one sub-array holds at some level.

    `batch` is the number of samples held, `in_fraction` the fraction of the
    layer's input channels held; both are the full values divided by powers
    of two. `word_bytes` is the size of one element (4 for fp32).
    """

    layer: Layer
    batch: float
    in_fraction: float = 1.0
    word_bytes: int = 4

    @property
    def input_bytes(self) -> float:
        """A(F_l) = A(E_l): the input feature map (or its error) held, bytes."""
        return self.batch * self.layer.input.size * self.in_fraction * self.word_bytes

    @property
    def output_bytes(self) -> float:
        """A(F_{l+1}): the layer's output after pooling, bytes (never split by mp)."""
        return self.batch * self.layer.output.size * self.word_bytes

    @property
    def gradient_bytes(self) -> float:
        """A(dW_l): the weight gradient of the kernel rows held, bytes."""
        return self.layer.weights * self.in_fraction * self.word_bytes

    def split(self, choice: Parallelism) -> LayerSplit:
        """What each half holds after splitting this share by `choice`."""
        if choice is Parallelism.DP:
            return LayerSplit(self.layer, self.batch / 2, self.in_fraction, self.word_bytes)
        return LayerSplit(self.layer, self.batch, self.in_fraction / 2, self.word_bytes)


class Transfer(NamedTuple):
    """Bytes each half of a pair sends to the other, for one layer at one level."""

    kind: TransferKind
    bytes_per_direction: float

    @property
    def phase(self) -> Phase:
        return self.kind.phase


def layer_transfers(
    split: LayerSplit, previous: Parallelism | None, choice: Parallelism
) -> tuple[Transfer, ...]:
    """The transfers one layer causes between the two halves of a pair.

    `previous` is the choice of the layer before (None for the first layer,
    which has no inter-layer boundary).
    """
    if choice is Parallelism.DP:
        transfers = [Transfer(TransferKind.GRADIENT, split.gradient_bytes)]
    else:
        transfers = [Transfer(TransferKind.PARTIAL_SUM, split.output_bytes)]
        if previous is Parallelism.DP:
            quarter = 0.25 * split.input_bytes
            transfers.append(Transfer(TransferKind.RELAYOUT_FEATURE, quarter))
            transfers.append(Transfer(TransferKind.RELAYOUT_ERROR, quarter))
    return tuple(transfers)


def pair_costs(
    split: LayerSplit, previous: Parallelism | None, choice: Parallelism,
    forward_only: bool = False,
) -> tuple[float, float]:
    """(intra, inter) bytes exchanged by one pair for one layer, both directions: the sums
    of `layer_transfers` in closed form (the planner calls this in its inner loop; a test
    checks the two agree): dp 2 A(dW_l) intra; mp 2 A(F_{l+1}) intra, and after a dp layer
    2 x (0.25 + 0.25) A(F_l) = A(F_l) inter (exact: the factors are powers of two). With
    `forward_only` (inference) the forward transfers alone: dp nothing, mp its partial
    sums, and after a dp layer the features' half of Table 2, A(F_l) / 2."""
    if choice is Parallelism.DP:
        return (0.0 if forward_only else 2 * split.gradient_bytes), 0.0
    inter = split.input_bytes if previous is Parallelism.DP else 0.0
    return 2 * split.output_bytes, inter / 2 if forward_only else inter
