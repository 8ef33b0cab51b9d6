"""The shipped operators: for each, its shape and parameters (`count`) beside its
description (`describe`: Tofu's loops and index expressions, `workload.tdl`), registered
in `workload.ops.OPS`. A new operator is one `register_op(OpSpec(...))` with both, here or
in the user's own code (tests/test_graph_features.py registers one).
"""

from __future__ import annotations

import math

from hypar_sim.errors import InputError, clip_value
from hypar_sim.workload.dims import SPARE_LOOPS, Dim, Dims
from hypar_sim.workload.ops import (
    Attrs,
    Counts,
    OpSpec,
    Shape,
    broadcast,
    check_rank,
    choice,
    flag,
    made,
    pads,
    pair,
    positive,
    register_op,
    top_left,
    window,
)
from hypar_sim.workload.tdl import (
    Access,
    Description,
    Expr,
    Flat,
    Grouped,
    Ix,
    Weights,
    Whole,
    Window,
)


def _conv(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    check_rank(where, shapes[0], (3,), "a feature map (channels, rows, columns)")
    channels, rows, cols = shapes[0]
    out = positive(f"{where}.out_channels", a["out_channels"])
    groups = positive(f"{where}.groups", a["groups"])
    if channels % groups or out % groups:
        raise InputError(f"{where}.groups: {groups} does not divide the {channels} input and "
                         f"{out} output channels")
    kh, kw = pair(f"{where}.kernel", a["kernel"])
    sh, sw = pair(f"{where}.stride", a["stride"])
    dh, dw = pair(f"{where}.dilation", a["dilation"])
    top, left, bottom, right = pads(f"{where}.padding", a["padding"])
    try:
        height = window(rows, kh, sh, top, bottom, dh)
        width = window(cols, kw, sw, left, right, dw)
    except ValueError as exc:
        raise InputError(f"{where}: {exc} (input {list(shapes[0])})") from None
    weights = out * (channels // groups) * kh * kw
    bias = out if flag(f"{where}.bias", a["bias"]) else 0
    if a["pool"] is not None:
        return Counts(_pool(f"{where}.pool", _pool_attrs(f"{where}.pool", a["pool"]),
                            [(out, height, width)]).shape, weights + bias)
    return Counts((out, height, width), weights + bias)


_POOL_DEFAULTS = {"mode": "max", "stride": None, "padding": 0, "ceil_mode": False}


def _pool_attrs(where: str, given: object) -> Attrs:
    """A folded pooling's fields (a pool node's: kernel, and mode, stride, padding,
    ceil_mode) with their defaults; unknown or missing: InputError."""
    if not isinstance(given, dict):
        raise InputError(f"{where}: must be a mapping such as {{kernel: 2, stride: 2}}, "
                         f"got {clip_value(given)}")
    unknown = sorted(set(given) - {"kernel", "type", *_POOL_DEFAULTS})
    if unknown:
        raise InputError(f"{where}: unknown field '{unknown[0]}'; allowed: kernel, mode, "
                         "stride, padding, ceil_mode")
    if "kernel" not in given:
        raise InputError(f"{where}: missing field 'kernel'")
    mode = given.get("mode", given.get("type", "max"))  # a chain's pool names it `type`
    return {**_POOL_DEFAULTS, **{k: v for k, v in given.items() if k != "type"}, "mode": mode}


def _describe_conv(a: Attrs, shapes: list[Shape], shape: Shape, dims: list[Dims]) -> Description:
    channels, rows, cols = shapes[0]
    out, height, width = shape
    groups = a["groups"]
    (kh, kw), (sh, sw), (dh, dw) = pair("", a["kernel"]), pair("", a["stride"]), \
        pair("", a["dilation"])
    top, left = top_left("", a["padding"])
    output = (Dim.K, Dim.P, Dim.Q)
    rows_of, cols_of = (Dim.P, Dim.Q) if a["pool"] is None else \
        _pool_windows(_pool_attrs("", a["pool"]), *_conv_rows(a, shapes[0]))
    spatial = (Window(rows_of, kh, sh, top, dh, rows), Window(cols_of, kw, sw, left, dw, cols))
    if groups == 1:
        loops = {Dim.K: out, Dim.P: height, Dim.Q: width, Dim.C: channels}
        read = Access((Ix(Dim.C), *spatial), needs=(Dim.K, Dim.C))
        makes = Access((Ix(Dim.K), Ix(Dim.P), Ix(Dim.Q)))
    else:
        loops = {Dim.K: out // groups, Dim.P: height, Dim.Q: width, Dim.C: channels // groups,
                 Dim.G: groups}
        read = Access((Grouped(Dim.G, Dim.C, channels // groups), *spatial))
        makes = Access((Grouped(Dim.G, Dim.K, out // groups), Ix(Dim.P), Ix(Dim.Q)))
    return Description(output, loops, (read,), makes, Dim.C, (kh, kw), Dim.K,
                       Weights(out, channels // groups, kh * kw), int(a["bias"]))


def _conv_rows(a: Attrs, source: Shape) -> tuple[int, int]:
    """A convolution's output rows and columns before any pooling."""
    (kh, kw), (sh, sw), (dh, dw) = pair("", a["kernel"]), pair("", a["stride"]), \
        pair("", a["dilation"])
    top, left, bottom, right = pads("", a["padding"])
    return window(source[1], kh, sh, top, bottom, dh), window(source[2], kw, sw, left, right, dw)


def _pool_windows(a: Attrs, rows: int, cols: int) -> tuple[Window, Window]:
    """A pooling's windows over the P and Q loops of its output, on `rows` x `cols` input
    rows and columns (a pool node's, or the pre-pooling rows of a convolution with its
    pooling folded in)."""
    (kh, kw) = pair("", a["kernel"])
    (sh, sw) = pair("", a["stride"] if a["stride"] is not None else a["kernel"])
    top, left = top_left("", a["padding"])
    return Window(Dim.P, kh, sh, top, 1, rows), Window(Dim.Q, kw, sw, left, 1, cols)


def _fc(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """A feature map (rank 3) is flattened first (the chain networks' convention, unless
    `flatten` is false: a channels-last linear); any other input is transformed along its
    last axis, position by position."""
    shape = shapes[0]
    out = positive(f"{where}.out_features", a["out_features"])
    flat = flattens(shape, flag(f"{where}.flatten", a["flatten"]))
    features = math.prod(shape) if flat else shape[-1]
    lead = () if flat else shape[:-1]
    owned = not a["tied_to"]
    bias = out if flag(f"{where}.bias", a["bias"]) else 0
    params = (features * out) * owned + bias
    return Counts((*lead, out), params)


def flattens(shape: Shape, flatten: bool) -> bool:
    """Whether an fc layer reads an input of `shape` flattened (a feature map, by default)."""
    return len(shape) == 3 and flatten


def _describe_fc(a: Attrs, shapes: list[Shape], shape: Shape, dims: list[Dims]) -> Description:
    """A feature map is read flattened (its reduction C runs over all its elements); a token
    stream keeps its leading axes."""
    source, out = shapes[0], shape[-1]
    if flattens(source, a["flatten"]):
        features = math.prod(source)
        output: Dims = (Dim.K,)
        read = Access((Flat((Dim.C,), (features,), tuple(source)),))
    else:  # a leading axis named K (a transposed stream) takes a spare loop's name
        features = source[-1]
        spare = [d for d in SPARE_LOOPS if d is not Dim.K and d not in dims[0]]
        lead = tuple(spare.pop(0) if d is Dim.K and spare else d for d in dims[0][:-1])
        output = (*lead, Dim.K)
        read = Access((*(Ix(d) for d in lead), Ix(Dim.C)))
    loops = {**dict(zip(output, shape, strict=True)), Dim.C: features}
    return Description(output, loops, (read,), made(output), Dim.C, (), Dim.K,
                       Weights(out, features, 0 if a["tied_to"] else 1), int(a["bias"]))


def _matmul(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """A (..., m, k) x B (..., k, n), B given as (..., n, k) with `transpose_b`."""
    left, right = shapes
    if len(left) < 2 or len(right) < 2:
        raise InputError(f"{where}: matmul inputs need two or more axes, got {list(left)} "
                         f"and {list(right)}")
    m, k = left[-2:]
    n, k2 = (right[-2], right[-1]) if flag(f"{where}.transpose_b", a["transpose_b"]) else \
        (right[-1], right[-2])
    if k != k2:
        raise InputError(f"{where}: inner sizes differ ({list(left)} x {list(right)}, "
                         f"transpose_b {a['transpose_b']})")
    lead = broadcast(where, [left[:-2], right[:-2]])
    return Counts((*lead, m, n))


def _describe_matmul(a: Attrs, shapes: list[Shape], shape: Shape,
                     dims: list[Dims]) -> Description:
    """A (..., rows, C) x B (..., C, columns) (B as (..., columns, C) with `transpose_b`),
    their leading axes broadcast (numpy's rule); the output's leading loops are A's (B's
    where A has fewer axes), the columns take B's loop name, or K where that is taken
    (attention scores' key positions)."""
    first, second = dims
    count = len(shape) - 2  # leading axes of the output
    extra = count - (len(first) - 2)
    lead = [*second[:-2][:extra], *first[:-2]] if extra > 0 else list(first[:-2])
    rows = first[-2]
    column = second[-2] if a["transpose_b"] else second[-1]
    if column in (*lead, rows):
        column = next(d for d in (Dim.K, *SPARE_LOOPS) if d not in (*lead, rows))
    output = (*lead, rows, column)
    loops = {**dict(zip(output, shape, strict=True)), Dim.C: shapes[0][-1]}

    def leading(source: Shape) -> list[Expr]:
        skip = count - (len(source) - 2)
        return [Ix(output[axis + skip]) if size == shape[axis + skip] else Whole(size)
                for axis, size in enumerate(source[:-2])]

    left = Access((*leading(shapes[0]), Ix(rows), Ix(Dim.C)))
    right = Access((*leading(shapes[1]), *((Ix(column), Ix(Dim.C)) if a["transpose_b"]
                                           else (Ix(Dim.C), Ix(column)))))
    return Description(output, loops, (left, right), made(output), Dim.C, (), column)


def _pool(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    check_rank(where, shapes[0], (3,), "a feature map (channels, rows, columns)")
    channels, rows, cols = shapes[0]
    choice(f"{where}.mode", a["mode"], ("max", "avg"))
    kh, kw = pair(f"{where}.kernel", a["kernel"])
    sh, sw = pair(f"{where}.stride", a["stride"] if a["stride"] is not None else a["kernel"])
    top, left, bottom, right = pads(f"{where}.padding", a["padding"])
    ceil_mode = flag(f"{where}.ceil_mode", a["ceil_mode"])
    try:
        return Counts((channels, window(rows, kh, sh, top, bottom, ceil_mode=ceil_mode),
                       window(cols, kw, sw, left, right, ceil_mode=ceil_mode)))
    except ValueError as exc:
        raise InputError(f"{where}: {exc} (input {list(shapes[0])})") from None


def _describe_pool(a: Attrs, shapes: list[Shape], shape: Shape, dims: list[Dims]) -> Description:
    _, rows, cols = shapes[0]
    output = dims[0]
    rows_of, cols_of = _pool_windows(a, rows, cols)
    read = Access((Ix(output[0]), rows_of, cols_of))
    return Description(output, dict(zip(output, shape, strict=True)), (read,), made(output),
                       ops_per_element=rows_of.kernel * cols_of.kernel)


def _global_pool(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    check_rank(where, shapes[0], (3,), "a feature map (channels, rows, columns)")
    choice(f"{where}.mode", a["mode"], ("max", "avg"))
    return Counts((shapes[0][0], 1, 1))


def _describe_global_pool(a: Attrs, shapes: list[Shape], shape: Shape,
                          dims: list[Dims]) -> Description:
    _, rows, cols = shapes[0]
    output = (Dim.K, Dim.P, Dim.Q)
    read = Access((Ix(Dim.K), Whole(rows), Whole(cols)))
    return Description(output, dict(zip(output, shape, strict=True)), (read,), made(output),
                       ops_per_element=rows * cols)


def _embedding(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """A table lookup: token ids (sequence,) -> (sequence, dim); no MACs."""
    check_rank(where, shapes[0], (1,), "a sequence of ids")
    vocab = positive(f"{where}.vocab", a["vocab"])
    dim = positive(f"{where}.dim", a["dim"])
    return Counts((shapes[0][0], dim), vocab * dim)


def _describe_embedding(a: Attrs, shapes: list[Shape], shape: Shape,
                        dims: list[Dims]) -> Description:
    """Token ids (positions,) -> (positions, K): a lookup of whole table rows (ids reshaped
    on their way, whose axis is named K, are positions too)."""
    output = (dims[0][0] if dims[0][0] is not Dim.K else Dim.P, Dim.K)
    return Description(output, dict(zip(output, shape, strict=True)),
                       (Access((Ix(output[0]),)),), made(output),
                       weights=Weights(a["vocab"], a["dim"], 1, by_channel=False), lookup=True)


for _spec in (
    OpSpec("conv", "convolution (groups, depthwise, rectangular kernels, strides, padding, "
           "dilation)", ("out_channels", "kernel"),
           {"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "bias": False, "pool": None},
           _conv,
           _describe_conv, weighted=True),
    OpSpec("fc", "fully connected (gemm); flattens a feature map (unless flatten: false), "
           "acts on a token stream's last axis", ("out_features",),
           {"bias": False, "tied_to": "", "flatten": True}, _fc, _describe_fc,
           weighted=True),
    OpSpec("matmul", "product of two activations (attention)", (), {"transpose_b": False},
           _matmul, _describe_matmul, arity=(2, 2)),
    OpSpec("pool", "max or average pooling", ("kernel",),
           {"mode": "max", "stride": None, "padding": 0, "ceil_mode": False}, _pool,
           _describe_pool),
    OpSpec("global_pool", "global max or average pooling", (), {"mode": "avg"}, _global_pool,
           _describe_global_pool),
    OpSpec("embedding", "table lookup of token ids", ("vocab", "dim"), {}, _embedding,
           _describe_embedding, weighted=True),
):
    register_op(_spec)
