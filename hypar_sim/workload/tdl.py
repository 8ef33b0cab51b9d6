"""How an operator's tensors are indexed by its loops: one description per operator.

Tofu's insight (Wang et al., "Supporting Very Large Models using Automatic Dataflow Graph
Partitioning", EuroSys 2019, Sec. 4): an operator states its loop variables and, for every
tensor, the index expression of each axis in those variables; whoever splits the operator
derives what a part reads from that statement alone. Here a node's `Description` gives its
loops (per sample: the batch N is added by whoever splits it), the expression of every axis
of every input and of its output, the loop summed over (a split of it needs a reduction:
partition-n-reduce), its weights, and what its body does per output element (a
multiply-accumulate over the reduction and the window, or element operations). From it:
what a member reads (`partition.regions.region`), the MACs (`Description.macs`), the
kinds a node offers (every loop), its parameters and footprint (`partition.node_layout`),
and its cost on the PE array (`hardware.node_costs`).

Expressions of one axis (or, `Flat`, of several):

- `Ix(d)`: the loop d itself;
- `Window(d, kernel, stride, before, dilation, size)`: stride * d + dilation * r - before for
  r < kernel, clipped to the axis (a convolution's or a pooling's input rows); d may itself
  be a window (a convolution with its pooling folded in: the input rows of the pre-pooling
  rows a pooled row needs);
- `Whole(size)`: the whole axis whatever the part (a normalised axis, a broadcast axis of 1);
- `Shift(d, offset, size, clip)`: d - offset (a concatenation's inputs, clipped to the
  input, a part outside it reading nothing; a slice's input);
- `Grouped(g, d, per_group)`: g * per_group + d (a grouped convolution's channels);
- `Flat(dims, extents, shape)`: the axes of `shape` indexed by the C-order flat index of loops
  `dims` of `extents` (a reshape's run of axes, an fc layer's flattened map).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hypar_sim.workload.dims import Dim, Dims


@dataclass(frozen=True)
class Ix:
    dim: Dim


@dataclass(frozen=True)
class Window:
    dim: Dim | Window  # a window of a window: a pooling folded into its convolution
    kernel: int
    stride: int
    before: int
    dilation: int
    size: int

    @property
    def span(self) -> int:
        """Input positions one output position's window covers."""
        return self.dilation * (self.kernel - 1) + 1


@dataclass(frozen=True)
class Whole:
    size: int


@dataclass(frozen=True)
class Shift:
    dim: Dim
    offset: int
    size: int
    clip: bool = True


@dataclass(frozen=True)
class Grouped:
    group: Dim
    dim: Dim
    per_group: int


@dataclass(frozen=True)
class Flat:
    dims: Dims
    extents: tuple[int, ...]
    shape: tuple[int, ...]


Expr = Ix | Window | Whole | Shift | Grouped | Flat


@dataclass(frozen=True)
class Access:
    """One tensor's index: an expression per axis (`Flat`: per run of axes); where any loop
    of `needs` is empty in a part, the part touches none of the tensor."""

    axes: tuple[Expr, ...]
    needs: Dims = ()


@dataclass(frozen=True)
class Weights:
    """A weight matrix of `rows` x `columns` entries of `scale` values each (a convolution's
    kernel area; 0: tied to another node's weights, whose gradient takes this one's); its
    rows are the output channels (`by_channel`: a convolution's, an fc layer's (K, C)) or
    its columns are (an embedding table's (vocabulary, K))."""

    rows: int
    columns: int
    scale: int = 1
    by_channel: bool = True


@dataclass(frozen=True)
class Description:
    """An operator instance as Tofu describes it: its loops (per sample) with their extents,
    the loop of every output axis, the index of every input and of the output in the loops,
    the loop it sums over, and what its body costs."""

    output: Dims
    loops: Mapping[Dim, int]
    reads: tuple[Access, ...]
    makes: Access
    reduction: Dim | None = None  # summed over: a split of it leaves partial sums
    window: tuple[int, ...] = ()  # extents of loops never split (a kernel's rows, columns)
    channel: Dim | None = None  # a multiply-accumulate body's output-channel loop
    weights: Weights | None = None
    vectors: int = 0  # learned values per output channel (a bias; a norm's scale, shift)
    ops_per_element: int = 0  # element operations per output element (no MAC body)
    lookup: bool = False  # a table lookup: reads what it writes, gives its input no error

    @property
    def macs(self) -> int:
        """Multiply-accumulates per sample: every loop's extent and the window's, for an
        operator with a multiply-accumulate body; 0 for the others."""
        if self.channel is None:
            return 0
        body = {**self.loops, **{w.dim: w.size for w in self.pooling}}  # before pooling
        return math.prod(body.values()) * math.prod(self.window)

    @property
    def pooling(self) -> tuple[Window, ...]:
        """The windows of a pooling folded into the body (one per pooled axis, each over its
        loop; its `size` the pre-pooling extent): the body computes the pre-pooling rows and
        columns and pools them (HyPar's chains: a convolution and its pooling are one layer)."""
        return tuple(axis.dim for axis in self.reads[0].axes
                     if isinstance(axis, Window) and isinstance(axis.dim, Window))

    @property
    def pooled_ratio(self) -> float:
        """Pre-pooling elements per pooled output element (1 without a pooling): a partial
        output is reduced before it is pooled."""
        pooling = self.pooling  # one exact division: the chain's conv_output / output sizes
        return math.prod(w.size for w in pooling) / math.prod(self.loops[w.dim] for w in pooling)

    @property
    def elementwise(self) -> bool:
        """Every output element reads the same element of every input (Tofu Sec 5.1's
        merge: a norm, an activation, a sum of equal shapes)."""
        own = tuple(Ix(d) for d in self.output)
        return self.channel is None and not self.lookup and \
            all(access.axes == own for access in self.reads)

    @property
    def channel_alias(self) -> bool:
        """An operator with no reduction (nor table) splits its one channel loop K under both
        `in` and `out` (HyPar's {batch, in} keeps a channel split through a norm)."""
        return self.reduction is None and not self.lookup


def reshape_groups(source: Sequence[int], target: Sequence[int]) -> list[tuple[range, range]]:
    """Runs of axes of `source` and `target` with equal products (each maps onto the other:
    the finest such pairing)."""
    groups, i, j = [], 0, 0
    while i < len(source) or j < len(target):
        a, b = i + 1, j + 1
        left = source[i] if i < len(source) else 1
        right = target[j] if j < len(target) else 1
        while left != right:
            if left < right:
                left *= source[a]
                a += 1
            else:
                right *= target[b]
                b += 1
        a, b = min(a, len(source)), min(b, len(target))
        groups.append((range(i, a), range(j, b)))
        i, j = a, b
    return groups
