"""The shipped operators without a multiply-accumulate body: element-wise ones (an
activation, a sum, a norm) and those that move elements (concatenation, slicing,
transposition, reshaping), each its shape and parameters (`count`) beside its description
(`describe`, `workload.tdl`), registered in `workload.ops.OPS`.
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
    broadcast_read,
    check_axis,
    choice,
    elementwise_description,
    flag,
    last_axis,
    made,
    per_element,
    positive,
    register_op,
    softmax_axis,
)
from hypar_sim.workload.tdl import Access, Description, Expr, Flat, Ix, Shift, Whole, reshape_groups


def _same(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    return Counts(shapes[0])


def _elementwise(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    return Counts(broadcast(where, shapes))


def _act(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    choice(f"{where}.function", a["function"], ACTIVATIONS)
    return Counts(shapes[0])


ACTIVATIONS = ("relu", "relu6", "gelu", "sigmoid", "tanh", "silu", "hardswish", "clip")


def _batch_norm(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """A scale and a shift per channel (axis 0)."""
    affine = flag(f"{where}.affine", a["affine"])
    return Counts(shapes[0], 2 * shapes[0][0] * affine)


def _layer_norm(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """A scale and a shift per feature (the last axis)."""
    affine = flag(f"{where}.affine", a["affine"])
    return Counts(shapes[0], 2 * shapes[0][-1] * affine)


def _rms_norm(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """A scale per feature (the last axis), no shift (Zhang and Sennrich 2019)."""
    affine = flag(f"{where}.affine", a["affine"])
    return Counts(shapes[0], shapes[0][-1] * affine)


def _softmax(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    check_axis(f"{where}.axis", a["axis"], len(shapes[0]))
    return Counts(shapes[0])


def _concat(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    rank = len(shapes[0])
    axis = check_axis(f"{where}.axis", a["axis"], rank)
    for shape in shapes[1:]:
        if len(shape) != rank or any(s != t for i, (s, t) in enumerate(zip(shape, shapes[0],
                                                                          strict=True))
                                     if i != axis):
            raise InputError(f"{where}: cannot concatenate shapes "
                             f"{[list(s) for s in shapes]} along axis {axis}")
    total = sum(s[axis] for s in shapes)
    return Counts((*shapes[0][:axis], total, *shapes[0][axis + 1:]))


def _describe_concat(a: Attrs, shapes: list[Shape], shape: Shape,
                     dims: list[Dims]) -> Description:
    """Each input is the output's range of the concatenated axis at its offset."""
    output = dims[0]
    axis = a["axis"] % len(shape)
    reads, offset = [], 0
    for source in shapes:
        axes = [Ix(d) for d in output]
        axes[axis] = Shift(output[axis], offset, source[axis])
        reads.append(Access(tuple(axes)))
        offset += source[axis]
    return Description(output, dict(zip(output, shape, strict=True)), tuple(reads),
                       made(output))


def _slice(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """Indices [start, stop) of one axis (BERT's pooler reads the first token)."""
    shape = shapes[0]
    axis = check_axis(f"{where}.axis", a["axis"], len(shape))
    start = positive(f"{where}.start", a["start"], 0)
    stop = positive(f"{where}.stop", a["stop"])
    if not start < stop <= shape[axis]:
        raise InputError(f"{where}: [start, stop) = [{start}, {stop}) is not inside axis "
                         f"{axis} of size {shape[axis]}")
    return Counts((*shape[:axis], stop - start, *shape[axis + 1:]))


def _describe_slice(a: Attrs, shapes: list[Shape], shape: Shape,
                    dims: list[Dims]) -> Description:
    output = dims[0]
    axis = a["axis"] % len(shape)
    axes: list[Expr] = [Ix(d) for d in output]
    axes[axis] = Shift(output[axis], -a["start"], shapes[0][axis], clip=False)
    return Description(output, dict(zip(output, shape, strict=True)), (Access(tuple(axes)),),
                       made(output))


def _transpose(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    perm = a["perm"]
    if not isinstance(perm, list | tuple) or sorted(perm) != list(range(len(shapes[0]))):
        raise InputError(f"{where}.perm: must order the axes 0..{len(shapes[0]) - 1}, "
                         f"got {clip_value(perm)}")
    return Counts(tuple(shapes[0][p] for p in perm))


def _describe_transpose(a: Attrs, shapes: list[Shape], shape: Shape,
                        dims: list[Dims]) -> Description:
    perm = a["perm"]
    output = tuple(dims[0][p] for p in perm)
    axes: list[Expr] = [Ix(Dim.K)] * len(perm)
    for j, p in enumerate(perm):
        axes[p] = Ix(output[j])
    return Description(output, dict(zip(output, shape, strict=True)), (Access(tuple(axes)),),
                       made(output))


def _reshape(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    target = a["shape"]
    if not isinstance(target, list | tuple) or not target or \
            sum(1 for v in target if v == -1) > 1:
        raise InputError(f"{where}.shape: must be a list of sizes with at most one -1, "
                         f"got {clip_value(target)}")
    known = [positive(f"{where}.shape", v) for v in target if v != -1]
    size = math.prod(shapes[0])
    if -1 in target:
        if size % math.prod(known):
            raise InputError(f"{where}.shape: {list(target)} does not fit {size} elements")
        target = [size // math.prod(known) if v == -1 else v for v in target]
    if math.prod(target) != size:
        raise InputError(f"{where}.shape: {list(target)} has {math.prod(target)} elements, "
                         f"the input {list(shapes[0])} has {size}")
    return Counts(tuple(target))


def _describe_reshape(a: Attrs, shapes: list[Shape], shape: Shape,
                      dims: list[Dims]) -> Description:
    """Runs of axes of equal products map onto each other (`tdl.reshape_groups`); a run that
    splits features into (heads, features) names its new outer loop H; one that merges axes
    names the result K if one of them was K (ShuffleNet's channel shuffle puts the channels
    back together), else after the innermost; axes of size 1 it adds (a [C] scale made
    [C, 1, 1]) take loops the others do not use."""
    source = shapes[0]
    output: list[Dim | None] = []
    groups = reshape_groups(source, shape)
    for ins, outs in groups:
        labels = [dims[0][i] for i in ins]
        if not labels:  # axes of size 1 the reshape adds
            output += [None] * len(outs)
            continue
        if not outs:  # axes of size 1 the reshape drops
            continue
        inner = Dim.K if Dim.K in labels else labels[-1]
        sized = [j for j in outs if shape[j] > 1] or [outs[-1]]
        outer = iter([Dim.H, Dim.Q, Dim.P])
        for j in outs:  # axes of size 1 in a run take spare loops, like added ones
            output.append(inner if j == sized[-1] else next(outer) if j in sized else None)
    output = [d if d not in output[:i] else None for i, d in enumerate(output)]
    spare = [d for d in SPARE_LOOPS if d not in output]
    if output.count(None) > len(spare):
        raise InputError(f"cannot name {output.count(None)} new axes of size 1")
    named = tuple(d if d is not None else spare.pop(0) for d in output)
    read = Access(tuple(Flat(tuple(named[j] for j in outs), tuple(shape[j] for j in outs),
                             tuple(source[i] for i in ins)) for ins, outs in groups))
    return Description(named, dict(zip(named, shape, strict=True)), (read,), made(named))


def _flatten(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    return Counts((math.prod(shapes[0]),))


def _describe_flatten(a: Attrs, shapes: list[Shape], shape: Shape,
                      dims: list[Dims]) -> Description:
    output = (Dim.K,)
    read = Access((Flat((Dim.K,), tuple(shape), tuple(shapes[0])),))
    return Description(output, {Dim.K: shape[0]}, (read,), made(output))


def _tensor_op(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    shape = a["shape"]
    if not isinstance(shape, list | tuple):
        raise InputError(f"{where}.shape: must be a list of sizes, got {clip_value(shape)}")
    shape = tuple(positive(f"{where}.shape", v) for v in shape)
    follows = a["from_axes"]
    if follows is not None and (not isinstance(follows, list | tuple) or len(follows) !=
                                len(shape) or any(f is not None and (
                                    isinstance(f, bool) or not isinstance(f, int) or
                                    not 0 <= f < len(shapes[0])) for f in follows)):
        raise InputError(f"{where}.from_axes: must list, per output axis, an axis of the "
                         f"first input (0 to {len(shapes[0]) - 1}) or null, got "
                         f"{clip_value(follows)}")
    return Counts(shape, positive(f"{where}.params", a["params"], 0))


def _describe_tensor_op(a: Attrs, shapes: list[Shape], shape: Shape,
                        dims: list[Dims]) -> Description:
    """Each output axis follows an axis of the first input (`from_axes`; by default numpy's
    right-aligned broadcasting) and takes its loop; an axis whose size changed (a reduced,
    sliced, padded or gathered one) reads that input axis whole, and so does an input axis
    no output axis follows; the other inputs are broadcast to the output. Learned values
    (`params`) that are a whole number per output channel are vectors (a bias, a layer
    scale): held by the members that make those channels, their gradients all-reduced."""
    first = shapes[0]
    follows = a["from_axes"]
    if follows is None:
        skip = len(shape) - len(first)
        follows = [j - skip if j >= skip else None for j in range(len(shape))]
    named: list[Dim | None] = []
    for source in follows:
        name = dims[0][source] if source is not None else None
        named.append(name if name not in named else None)
    spare = [d for d in SPARE_LOOPS if d not in named]
    if named.count(None) > len(spare):
        raise InputError(f"cannot name the {len(shape)} axes of its output {list(shape)}")
    output = tuple(d if d is not None else spare.pop(0) for d in named)
    axes: list[Expr] = []
    for i, size in enumerate(first):
        j = follows.index(i) if i in follows else None
        axes.append(Ix(output[j]) if j is not None and shape[j] == size else Whole(size))
    reads = (Access(tuple(axes)), *(broadcast_read(output, shape, source)
                                    for source in shapes[1:]))
    loops = dict(zip(output, shape, strict=True))
    channels = loops.get(Dim.K, 0)  # learned values per output channel: a bias, a layer
    vectors = a["params"] // channels if channels and not a["params"] % channels else 0
    return Description(output, loops, reads, made(output), vectors=vectors)  # scale


for _spec in (
    OpSpec("add", "elementwise sum (residual connections)", (), {}, _elementwise,
           elementwise_description(lambda a, shapes: len(shapes) - 1), arity=(2, None)),
    OpSpec("mul", "elementwise product", (), {}, _elementwise,
           elementwise_description(per_element(1)), arity=(2, None)),
    OpSpec("concat", "concatenation along an axis (channels by default)", (), {"axis": 0},
           _concat, _describe_concat, arity=(1, None)),
    OpSpec("batch_norm", "batch normalisation (a scale and shift per channel)", (),
           {"affine": True}, _batch_norm, elementwise_description(per_element(2), vectors=2)),
    OpSpec("layer_norm", "layer normalisation over the last axis", (), {"affine": True},
           _layer_norm, elementwise_description(per_element(4), vectors=2, whole=last_axis)),
    OpSpec("rms_norm", "RMS normalisation over the last axis (a scale per feature)", (),
           {"affine": True}, _rms_norm,
           elementwise_description(per_element(3), vectors=1, whole=last_axis)),
    OpSpec("act", f"elementwise activation ({', '.join(ACTIVATIONS)})", ("function",), {},
           _act, elementwise_description(per_element(1))),
    OpSpec("softmax", "softmax along an axis", (), {"axis": -1}, _softmax,
           elementwise_description(per_element(3), whole=softmax_axis)),
    OpSpec("reshape", "reshape (per sample; one size may be -1)", ("shape",), {}, _reshape,
           _describe_reshape),
    OpSpec("flatten", "flatten to one axis", (), {}, _flatten, _describe_flatten),
    OpSpec("transpose", "permute the axes", ("perm",), {}, _transpose, _describe_transpose),
    OpSpec("slice", "indices [start, stop) of one axis", ("start", "stop"), {"axis": 0},
           _slice, _describe_slice),
    OpSpec("lrn", "local response normalisation", (), {"size": 5}, _same,
           elementwise_description(lambda a, shapes: a["size"])),
    OpSpec("dropout", "dropout (the same shape)", (), {"ratio": 0.5}, _same,
           elementwise_description(per_element(1))),
    OpSpec("identity", "no-op", (), {}, _same, elementwise_description(per_element(0))),
    OpSpec("tensor_op", "another tensor operation, its output shape given by the importer "
           "(elementwise with a constant, reductions, slicing, padding, ...): no MACs; "
           "`params` counts a learned operand (a bias); `from_axes` names, per output axis, "
           "the first input's axis it follows", ("function", "shape"),
           {"params": 0, "from_axes": None}, _tensor_op, _describe_tensor_op,
           arity=(1, None)),
):
    register_op(_spec)
