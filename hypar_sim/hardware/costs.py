"""What one cube spends on one phase of one layer's share: cycles and actions.

The share is what the partition leaves one accelerator (`partition.shares.Share`):
its samples, input and output channels, and output rows and columns. The three training
computations are all convolution-shaped (conv_work.forward/backward/gradient
work); the weight update is element-wise. Costs are cached by shape, so the
same layer piece is mapped once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.conv_work import (
    ConvWork,
    backward_work,
    fc_work,
    forward_work,
    gradient_work,
)
from hypar_sim.hardware.energy import Action
from hypar_sim.hardware.hmc import (
    even_parts,
    pe_array_spec,
    pu_time,
    split_over_vaults,
    split_time,
)
from hypar_sim.hardware.pe_array import ArrayCost, update_cost
from hypar_sim.partition.shares import Share, conv_span
from hypar_sim.partition.steps import Phase
from hypar_sim.workload.layers import LayerKind


@dataclass(frozen=True)
class PieceCost:
    """One phase of one layer's share on one cube (all its PUs in parallel)."""

    cycles: float  # time on the cube, compute and DRAM overlapped, cycles
    compute_cycles: float  # PE-array time of the busiest PU, cycles
    memory_cycles: float  # DRAM transfer time of the busiest PU, cycles
    macs: int  # useful multiply-accumulates on the cube
    dram_bytes: float  # DRAM bytes read and written on the cube
    pus_used: int
    counts: Mapping[Action, float]  # energy actions on the whole cube (static power excluded)

    @property
    def stall_cycles(self) -> float:
        """Time the PUs wait on DRAM beyond their compute, cycles."""
        return self.cycles - self.compute_cycles


ZERO_COST = PieceCost(0.0, 0.0, 0.0, 0, 0.0, 0, MappingProxyType({}))


def forward_piece(share: Share) -> ConvWork:
    """The forward convolution of a share: its samples, channels, kernels and rows.

    A spatial share computes the pre-pooling rows its pooled rows need, reading the
    input rows those need (padding only at the map's real edges)."""
    layer = share.layer
    if layer.kind is LayerKind.FC:
        return fc_work(share.batch, share.channels, share.kernels)
    if share.whole_map:
        return forward_work(share.batch, share.channels, share.kernels, layer.input.height,
                            layer.input.width, layer.kernel, layer.kernel, layer.stride,
                            layer.padding)
    rows = conv_span(layer, share.out_rows, "rows")
    cols = conv_span(layer, share.out_cols, "cols")
    out_h, out_w = rows[1] - rows[0], cols[1] - cols[0]
    return ConvWork(share.batch, share.channels, share.kernels,
                    (out_h - 1) * layer.stride + layer.kernel,
                    (out_w - 1) * layer.stride + layer.kernel,
                    layer.kernel, layer.kernel, layer.stride, out_h, out_w)


def phase_work(forward: ConvWork, phase: Phase) -> ConvWork:
    """The convolution of `phase` (forward, backward or gradient) for a forward piece."""
    if phase is Phase.FORWARD:
        return forward
    if phase is Phase.BACKWARD:
        return backward_work(forward)
    if phase is Phase.GRADIENT:
        return gradient_work(forward)
    raise ValueError(f"phase_work: {phase} is not a convolution phase")


def _summed_counts(pieces: list[tuple[ArrayCost, int]], macs: int) -> dict[Action, float]:
    """Every PU's own access counts added up (pieces: (cost, PUs running it))."""
    def total(field: str) -> int:
        return sum(count * getattr(cost.accesses, field) for cost, count in pieces)

    return {Action.MAC: macs, Action.RF: total("rf"), Action.INTER_PE: total("inter_pe"),
            Action.BUFFER: total("buffer"), Action.DRAM: total("dram_read") + total("dram_write")}


def cube_cost(pieces: list[tuple[ArrayCost, int]], macs: int, config: HardwareConfig) -> PieceCost:
    """The cube's cost of PU pieces (cost, PUs running it), largest first: the time of the
    largest piece (all PUs run in parallel, each streaming its tiles from its vault), and
    every PU's own access counts added up."""
    slowest = pieces[0][0].accesses
    time = pu_time(pieces[0][0], slowest.dram_read + slowest.dram_write, config)
    counts = _summed_counts(pieces, macs)
    return PieceCost(time.total_cycles, time.compute_cycles, time.memory_cycles, macs,
                     counts[Action.DRAM] * config.word_bytes, sum(count for _, count in pieces),
                     MappingProxyType(counts))


@lru_cache(maxsize=65536)
def conv_cost(work: ConvWork, config: HardwareConfig) -> PieceCost:
    """Cost of a convolution-shaped piece on one cube: split over the PUs, DRAM overlapped.

    Time is the largest piece's (all PUs run in parallel) with its vault's DRAM words;
    access counts add up every PU's own piece, except that what the PUs share crosses
    DRAM once and the cube's network instead (`hmc.VaultSplit`).
    """
    split = split_over_vaults(work, config)
    time = split_time(split, config)
    counts = _summed_counts([(cost, count) for _, count, cost in split.pieces], work.macs)
    counts[Action.DRAM] = split.dram_words
    if split.noc_hop_words:
        counts[Action.VAULT_HOP_BIT] = split.noc_hop_words * config.word_bytes * 8
    if split.reduce_adds:
        counts[Action.PSUM_ADD] = split.reduce_adds
    return PieceCost(time.total_cycles, time.compute_cycles, time.memory_cycles, work.macs,
                     split.dram_words * config.word_bytes, split.pus_used,
                     MappingProxyType(counts))


@dataclass(frozen=True)
class UpdateRule:
    """What a weight update streams and computes per parameter: `state_words` words of
    state beside the weight and its gradient, `macs_per_param` MAC equivalents
    (`planner.optimizers`, `planner.training`)."""

    state_words: int = 0
    macs_per_param: int = 1


#: Plain SGD: no state, one MAC per parameter.
SGD_UPDATE = UpdateRule()


@lru_cache(maxsize=65536)
def update_piece_cost(weights: int, config: HardwareConfig, rule: UpdateRule = SGD_UPDATE
                      ) -> PieceCost:
    """Element-wise weight update of `weights` weights by `rule`, spread evenly over the
    cube's PUs."""
    if weights <= 0:
        return ZERO_COST
    spec = pe_array_spec(config)
    pus = min(config.pus_per_cube, weights)
    pieces = [(update_cost(size, spec, rule.state_words, rule.macs_per_param), count)
              for size, count in even_parts(weights, pus)]
    return cube_cost(pieces, rule.macs_per_param * weights, config)


def pool_comparisons(share: Share) -> float:
    """Comparisons of the share's max pooling in the forward pass: k x k - 1 per pooled
    output (whole windows; a padded edge window is counted whole, an upper bound). Members
    that split the input channels hold partial sums of the same outputs, which are reduced
    before pooling and pooled a part each: each counts its fraction of the channels, so
    the members' counts add up to the layer's."""
    layer = share.layer
    if layer.pool is None:
        return 0.0
    rows, cols = share.out_rows[1] - share.out_rows[0], share.out_cols[1] - share.out_cols[0]
    outputs = share.batch * share.kernels * rows * cols
    return outputs * (layer.pool.kernel ** 2 - 1) * share.channels / layer.input.channels


@lru_cache(maxsize=65536)
def forward_cost(work: ConvWork, comparisons: float, config: HardwareConfig) -> PieceCost:
    """`conv_cost` with the pooling after it: its comparisons count energy (`Action.POOL`);
    its time is left out (k x k - 1 comparisons an output against the convolution's
    C x R x S MACs an output: a few percent of the PEs' work at most)."""
    cost = conv_cost(work, config)
    if not comparisons:
        return cost
    return dataclasses.replace(cost, counts=MappingProxyType({**cost.counts,
                                                               Action.POOL: comparisons}))


def phase_cost(share: Share, phase: Phase, config: HardwareConfig,
               first_layer: bool = False) -> PieceCost:
    """Cost of one phase of a share on one cube.

    The first layer has no error-backward phase: nothing needs E_0. Max pooling costs
    its comparisons in the forward pass; its backward pass routes each error to the
    position that won (a selection, no arithmetic: not counted).
    """
    if phase is Phase.UPDATE:
        return update_piece_cost(share.weights, config)
    if phase is Phase.BACKWARD and first_layer:
        return ZERO_COST
    work = phase_work(forward_piece(share), phase)
    if phase is Phase.FORWARD:
        return forward_cost(work, pool_comparisons(share), config)
    return conv_cost(work, config)
