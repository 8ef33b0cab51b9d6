"""What one cube spends on one phase of its box of one graph node: cycles and actions.

Convolutions, fc layers and products of two activations are convolution-shaped
(`pe_array`; an fc layer on a token stream is a 1x1 convolution whose batch is
samples x positions, a product of activations one whose batch is samples x
heads x rows). The backward phase of a product of activations computes both
input errors (two products as large as the forward one); it has no weight
gradient. Every other operator is an element-wise pass (`pe_array.elementwise_cost`):
its inputs read from DRAM and its output written back, with this many operations
per output element (each operator's description says it: `workload.ops`). The
counts are a convention, not a measured figure: these operators are bound by data
movement (Ivanov et al., "Data Movement Is All You Need: A Case Study on Optimizing
Transformers", MLSys 2021, section 3: the
statistical normalizations and element-wise operators of a transformer;
Kaplan et al., "Scaling Laws for Neural Language Models", 2020, Table 1,
leave them out of the FLOP count as negligible), so their time here is the
buses' and DRAM's and the count changes little:

=====================================  ==========================================
operator                               operations per output element
=====================================  ==========================================
act, dropout, mul, add (per input)     1
batch_norm                             2 (scale and shift; statistics below)
layer_norm                             4 (mean, variance, normalise, scale-shift)
softmax                                3 (exponent, sum, divide)
lrn                                    its window size
pool                                   its window (kernel rows x columns)
global_pool                            the map's rows x columns
reshape, transpose, flatten, concat,   0 (a copy)
slice, identity, embedding, tensor_op
=====================================  ==========================================

The backward pass of an element-wise operator moves the same words the other
way (the output error in, the input errors out); batch norm and layer norm
statistics and their scale and shift gradients are counted in it. A node
whose inputs are all graph inputs has no backward pass (nothing needs their
error). The update is the element-wise update of the node's own parameters.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from types import MappingProxyType

from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.conv_work import ConvWork, backward_work, fc_work, gradient_work
from hypar_sim.hardware.costs import (
    SGD_UPDATE,
    ZERO_COST,
    PieceCost,
    UpdateRule,
    conv_cost,
    cube_cost,
    forward_cost,
    update_piece_cost,
)
from hypar_sim.hardware.energy import add_counts
from hypar_sim.hardware.hmc import even_parts, pe_array_spec
from hypar_sim.hardware.pe_array import elementwise_cost
from hypar_sim.partition.kinds import Dim
from hypar_sim.partition.node_layout import NodeLayout, member_params
from hypar_sim.partition.regions import Box, interval, region, volume
from hypar_sim.partition.steps import Phase
from hypar_sim.workload.tdl import Description, Window


def _extent(box: Box, dim: Dim) -> int:
    return box[dim][1] - box[dim][0]


def _work(desc: Description, box: Box) -> ConvWork | None:
    """The forward convolution-shaped work of a member's box of a node with a
    multiply-accumulate body (None if the box has none): a windowed one is a convolution
    over its output rows and columns; any other a 1x1 one whose batch is the samples times
    the output's other loops (an fc layer's positions, a product's heads and rows)."""
    n = _extent(box, Dim.N)
    k = _extent(box, desc.channel) * (_extent(box, Dim.G) if Dim.G in box else 1)
    c = _extent(box, desc.reduction) if desc.reduction is not None else 0
    if min(n, k, c) <= 0:
        return None
    windows = [expr for expr in desc.reads[0].axes if isinstance(expr, Window)]
    if windows:  # rows and columns (a one-dimensional window: one column)
        height, width = (*windows, None) if len(windows) == 1 else windows
        rows = _computed(height, box)
        cols = _computed(width, box) if width is not None else 1
        span_w, kernel_w = (width.span, width.kernel) if width is not None else (1, 1)
        stride = height.stride
        work = ConvWork(n, c, k, (rows - 1) * stride + height.span, (cols - 1) * stride + span_w,
                        height.span, span_w, stride, rows, cols)
        return replace(work, density=work.density * height.kernel * kernel_w
                       / (height.span * span_w))
    lead = [_extent(box, d) for d in desc.output if d != desc.channel]
    return fc_work(n * math.prod(lead), c, k)


def _computed(axis: Window, box: Box) -> int:
    """Output rows (or columns) of the body a member's box computes: its box's, or with a
    folded pooling the pre-pooling rows its pooled rows need (`partition.shares.conv_span`'s
    rule, clipped to the map)."""
    lo, hi = interval(axis.dim, box) if isinstance(axis.dim, Window) else box[axis.dim]
    return hi - lo


def pool_comparisons(desc: Description, box: Box) -> float:
    """Comparisons of a folded max pooling in the forward pass: kernel rows x columns - 1 per
    pooled output (a padded edge window counted whole, an upper bound); members that split
    the reduction pool a share each of the reduced outputs, their fraction of the channels
    (`hardware.costs.pool_comparisons`, the chain's count)."""
    if not desc.pooling:
        return 0.0
    outputs = math.prod(_extent(box, d) for d in (Dim.N, *desc.output))
    share = _extent(box, desc.reduction) / desc.loops[desc.reduction]
    return outputs * (math.prod(w.kernel for w in desc.pooling) - 1) * share


@lru_cache(maxsize=65536)
def _elementwise(ops: int, read: int, written: int, streams: int,
                 config: HardwareConfig) -> PieceCost:
    """An element-wise pass spread evenly over the cube's PUs."""
    if read + written <= 0:
        return ZERO_COST
    spec = pe_array_spec(config)
    pus = min(config.pus_per_cube, max(read, written))
    pieces = []
    for size, count in even_parts(max(read, written), pus):
        share = size / max(read, written)
        pieces.append((elementwise_cost(round(ops * share), round(read * share),
                                        round(written * share), streams, spec), count))
    return cube_cost(pieces, ops, config)


def _sum(first: PieceCost, second: PieceCost) -> PieceCost:
    """Two pieces one after the other."""
    return PieceCost(first.cycles + second.cycles, first.compute_cycles + second.compute_cycles,
                     first.memory_cycles + second.memory_cycles, first.macs + second.macs,
                     first.dram_bytes + second.dram_bytes, max(first.pus_used, second.pus_used),
                     MappingProxyType(add_counts(first.counts, second.counts)))


def node_cost(layout: NodeLayout, member: int, phase: Phase, config: HardwareConfig,
              needs_input_error: bool, update: UpdateRule = SGD_UPDATE,
              shards: int = 1) -> PieceCost:
    """Cost of one phase of a member's box of a node on its cube: a recomputation costs
    its forward pass; the update by `update` of its parameters' 1 / `shards` (ZeRO: a
    member updates its shard of its copies' parameters)."""
    box = layout.box(member)
    node, desc = layout.site.node, layout.site.desc
    if phase is Phase.RECOMPUTE:
        phase = Phase.FORWARD
    if phase is Phase.UPDATE:
        return update_piece_cost(-(-int(member_params(layout)[member]) // shards), config,
                                 update)
    if desc.channel is not None:  # a multiply-accumulate body
        work = _work(desc, box)
        if work is None:
            return ZERO_COST
        if phase is Phase.FORWARD:
            return forward_cost(work, pool_comparisons(desc, box), config)
        activations = desc.weights is None  # a product of two activations: no weights
        if phase is Phase.BACKWARD:
            if not needs_input_error:
                return ZERO_COST
            back = conv_cost(backward_work(work), config)
            return _sum(back, conv_cost(gradient_work(work), config)) if activations else back
        return ZERO_COST if activations else conv_cost(gradient_work(work), config)
    written = volume(region(desc.makes, box))
    read = sum(volume(region(access, box)) for access in desc.reads)
    if desc.lookup:
        read = written  # the table's rows looked up
        if phase is Phase.BACKWARD:
            return ZERO_COST  # token ids have no error
    elif phase is Phase.GRADIENT:
        return ZERO_COST
    if phase is Phase.BACKWARD and not needs_input_error:
        return ZERO_COST
    ops = desc.ops_per_element * written
    if phase is Phase.FORWARD:
        return _elementwise(ops, read, written, len(node.inputs), config)
    return _elementwise(ops, written, read, 1, config)  # the errors flow the other way

