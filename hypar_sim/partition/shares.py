"""Which part of a layer each member of the array computes: integer boxes per loop dimension.

A layer's plan is a *column*: one kind per level of the hierarchy. Dimension
d is split into the product of the sizes of the levels whose kind splits d;
a member's part is number i of those near-equal parts (sizes differ by at
most one, larger first), i being the mixed-radix number of the member's
coordinates at those levels (upper level more significant). A kind is
offered at a level only where every member's part of its dimension there is
at least the level size, so no member gets nothing to do.

Rows: a spatial split divides the layer's *output* rows (after pooling); a
member computes the pre-pooling rows its output rows need and reads the
input rows those need (a halo of kernel - stride rows shared with its
neighbours). Overlapping pooling windows (3x3 stride 2) make neighbours
compute one pre-pooling row twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS, Dim
from hypar_sim.partition.operators import extents
from hypar_sim.workload.layers import Layer, LayerKind

Column = tuple[str, ...]  # a layer's kind at every level, top first
Interval = tuple[int, int]  # [start, stop)


def split_levels(column: Column, dim: Dim) -> tuple[int, ...]:
    """The levels at which `column` splits `dim`."""
    return tuple(h for h, kind in enumerate(column) if KINDS[kind].dim is dim)


def offered(layer: Layer, batch: int, column: Column, hierarchy: Hierarchy) -> bool:
    """Every level's kind leaves each member at least one index of its dimension."""
    return fits(extents(layer, batch), column, hierarchy)


def fits(sizes: dict[Dim, int], column: Column, hierarchy: Hierarchy) -> bool:
    """Every level's kind splits a dimension of `sizes` and leaves each member at least one
    index of it."""
    parts = dict.fromkeys(sizes, 1)
    for size, kind in zip(hierarchy.sizes, column, strict=True):
        dim = KINDS[kind].dim
        if dim not in sizes or sizes[dim] // parts[dim] < size:
            return False
        parts[dim] *= size
    return True


def member_intervals(total: int, column: Column, hierarchy: Hierarchy, dim: Dim) -> np.ndarray:
    """[members, 2] start and stop of every member's part of `dim` (`total` long); cached,
    read-only."""
    return level_intervals(total, split_levels(column, dim), hierarchy)


@lru_cache(maxsize=65536)
def level_intervals(total: int, levels: tuple[int, ...], hierarchy: Hierarchy) -> np.ndarray:
    """[members, 2] every member's part of a dimension `total` long that the levels
    `levels` split (top first); cached, read-only."""
    mask = sum(1 << h for h in levels)
    result = split_intervals(total, np.array([mask], dtype=np.int64), hierarchy)[0]
    result.flags.writeable = False
    return result


def split_intervals(total: int, masks: np.ndarray, hierarchy: Hierarchy) -> np.ndarray:
    """[masks, members, 2] every member's part of a dimension `total` long, for each set of
    splitting levels in `masks` (bit h: level h splits it): part number i of near-equal
    parts (larger first), i the mixed-radix number of the member's coordinates at those
    levels, the upper level more significant."""
    members = np.arange(hierarchy.members)
    index = np.zeros((len(masks), hierarchy.members), dtype=np.int64)
    parts = np.ones((len(masks), 1), dtype=np.int64)
    for h, (stride, size) in enumerate(zip(hierarchy.strides, hierarchy.sizes, strict=True)):
        splits = (masks[:, None] >> h & 1).astype(bool)
        index = np.where(splits, index * size + (members // stride) % size, index)
        parts = np.where(splits, parts * size, parts)
    base, extra = np.divmod(total, parts)
    start = index * base + np.minimum(index, extra)
    stop = start + base + (index < extra)
    return np.stack([start, stop], axis=-1)


#: Dimensions in a fixed order: their positions code a column as numbers (`Columns`).
DIMS = tuple(Dim)


class Columns:
    """Many columns at once, for the planner's vectorised costs: which dimension every level
    of every column splits ([columns, levels] positions in `Dim`)."""

    def __init__(self, columns: Sequence[Column], levels: int) -> None:
        self.columns = tuple(columns)
        position = {name: DIMS.index(kind.dim) if kind.dim in DIMS else -1  # chains: not offered
                    for name, kind in KINDS.items()}
        self.dims = np.array([[position[kind] for kind in column] for column in self.columns],
                             dtype=np.int64).reshape(len(self.columns), levels)
        self._kept: dict[tuple, object] = {}  # see `kept`

    @staticmethod
    @lru_cache(maxsize=16)
    def of(columns: tuple[Column, ...], levels: int) -> Columns:
        """The (cached) `Columns` of `columns`: a search costs the same lists of columns at
        many layers, and their parts are kept (read-only)."""
        return Columns(columns, levels)

    def __len__(self) -> int:
        return len(self.columns)

    def kept(self, key: tuple, make: Callable[[], object]):
        """`make()`, made once per `key` for these columns (what the costs of many layers
        share: parts, numbers, groups); the caller keeps it read-only."""
        if key not in self._kept:
            self._kept[key] = make()
        return self._kept[key]

    def split_bits(self, dims: tuple[Dim, ...]) -> np.ndarray:
        """[columns] bit h set where the column splits one of `dims` at level h (kept)."""
        def make() -> np.ndarray:
            wanted = np.isin(self.dims, [DIMS.index(d) for d in dims], kind="table")
            return wanted @ (1 << np.arange(self.dims.shape[1], dtype=np.int64))
        return self.kept(("bits", dims), make)

    def numbered(self, dims: tuple[Dim, ...]) -> np.ndarray:
        """[columns] 0, 1, ...: equal numbers for equal lists of (level, dimension) splits of
        `dims` (kept)."""
        def make() -> np.ndarray:
            wanted = np.isin(self.dims, [DIMS.index(d) for d in dims], kind="table")
            digits = (len(DIMS) + 1) ** np.arange(self.dims.shape[1], dtype=np.int64)
            code = (np.where(wanted, self.dims + 1, 0) * digits).sum(axis=1)
            return np.unique(code, return_inverse=True)[1].reshape(-1)
        return self.kept(("numbered", dims), make)

    def parts(self, total: int, hierarchy: Hierarchy, dim: Dim) -> np.ndarray:
        """[columns, members, 2] every column's `member_intervals` of `dim` (each distinct
        set of splitting levels computed once, all at a time; kept, read-only)."""
        def make() -> np.ndarray:
            unique, inverse = np.unique(self.split_bits((dim,)), return_inverse=True)
            parts = split_intervals(total, unique, hierarchy)[inverse.reshape(-1)]
            parts.flags.writeable = False
            return parts
        return self.kept(("parts", total, hierarchy, dim), make)

    def boxes(self, layer: Layer, batch: int, hierarchy: Hierarchy,
              dims: Iterable[Dim] | None = None) -> dict[Dim, np.ndarray]:
        """Every loop dimension's (or those of `dims`) [columns, members, 2] intervals of
        `layer`."""
        sizes = extents(layer, batch)
        return {dim: self.parts(sizes[dim], hierarchy, dim)
                for dim in (sizes if dims is None else dims)}


@dataclass(frozen=True)
class Share:
    """What one member computes of one layer: a box of its loop dimensions."""

    layer: Layer
    batch: int  # samples
    in_channels: Interval
    out_channels: Interval
    out_rows: Interval  # after pooling
    out_cols: Interval

    @property
    def samples(self) -> int:
        return self.batch

    @property
    def channels(self) -> int:
        return self.in_channels[1] - self.in_channels[0]

    @property
    def kernels(self) -> int:
        return self.out_channels[1] - self.out_channels[0]

    @property
    def whole_map(self) -> bool:
        """All output rows and columns (no spatial split)."""
        out = self.layer.output
        return self.out_rows == (0, out.height) and self.out_cols == (0, out.width)

    @property
    def weights(self) -> int:
        """Weights of the kernels and channels held (R x S each)."""
        return self.kernels * self.channels * self.layer.kernel ** 2

    @property
    def input_elements(self) -> int:
        """Elements of the input the member reads (and keeps for the backward pass)."""
        rows = input_span(self.layer, *conv_span(self.layer, self.out_rows, "rows"), "rows")
        cols = input_span(self.layer, *conv_span(self.layer, self.out_cols, "cols"), "cols")
        return self.batch * self.channels * (rows[1] - rows[0]) * (cols[1] - cols[0])


def conv_spans(layer: Layer, out: np.ndarray, axis: str) -> np.ndarray:
    """Pre-pooling rows (or columns) that pooled outputs [..., 2] need, clipped to the map."""
    size = layer.conv_output.height if axis == "rows" else layer.conv_output.width
    pool = layer.pool
    out = np.asarray(out)
    if pool is None:
        return out
    lo = np.maximum(0, out[..., 0] * pool.stride - pool.padding)
    hi = np.minimum(size, (out[..., 1] - 1) * pool.stride - pool.padding + pool.kernel)
    empty = out[..., 1] <= out[..., 0]
    return np.where(empty[..., None], out, np.stack([lo, hi], axis=-1))


def input_spans(layer: Layer, conv: np.ndarray, axis: str) -> np.ndarray:
    """Input rows (or columns, unpadded) that conv outputs [..., 2] read, clipped to the map;
    an fc layer reads its whole (1 x 1) input."""
    size = layer.input.height if axis == "rows" else layer.input.width
    conv = np.asarray(conv)
    empty = conv[..., 1] <= conv[..., 0]
    if layer.kind is LayerKind.FC:
        lo, hi = np.zeros_like(conv[..., 0]), np.full_like(conv[..., 1], size)
    else:
        lo = np.maximum(0, conv[..., 0] * layer.stride - layer.padding)
        hi = np.minimum(size, (conv[..., 1] - 1) * layer.stride - layer.padding + layer.kernel)
    return np.where(empty[..., None], 0, np.stack([lo, hi], axis=-1))


@lru_cache(maxsize=65536)
def conv_span(layer: Layer, out: Interval, axis: str) -> Interval:
    """`conv_spans` of one interval (cached: a plan asks for the same few many times)."""
    lo, hi = conv_spans(layer, np.array(out), axis)
    return int(lo), int(hi)


@lru_cache(maxsize=65536)
def input_span(layer: Layer, lo: int, hi: int, axis: str) -> Interval:
    """`input_spans` of one interval of conv outputs (cached)."""
    start, stop = input_spans(layer, np.array((lo, hi)), axis)
    return int(start), int(stop)


def column_shares(layer: Layer, batch: int, column: Column,
                  hierarchy: Hierarchy) -> list[Share]:
    """Every member's share of `layer` under `column`."""
    sizes = extents(layer, batch)
    parts = {dim: member_intervals(total, column, hierarchy, dim) for dim, total in sizes.items()}
    shares = []
    for m in range(hierarchy.members):
        n0, n1 = parts[Dim.N][m]
        shares.append(Share(layer, int(n1 - n0), tuple(map(int, parts[Dim.C][m])),
                            tuple(map(int, parts[Dim.K][m])), tuple(map(int, parts[Dim.P][m])),
                            tuple(map(int, parts[Dim.Q][m]))))
    return shares


def whole_share(layer: Layer, batch: int) -> Share:
    """The whole layer (one accelerator)."""
    return column_shares(layer, batch, (), Hierarchy(()))[0]
