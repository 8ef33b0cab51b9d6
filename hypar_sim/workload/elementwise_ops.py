"""The shipped operators without a multiply-accumulate body: element-wise ones (an
activation, a sum, a norm) and those that move elements (concatenation, slicing,
transposition, reshaping), each its shape and parameters (`count`) beside its description
(`describe`, `workload.tdl`), registered in `workload.ops.OPS`.
"""

from __future__ import annotations

import math

from hypar_sim.errors import InputError
from hypar_sim.workload.dims import Dim, Dims
from hypar_sim.workload.ops import (
    Attrs,
    Counts,
    OpSpec,
    Shape,
    broadcast,
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
from hypar_sim.workload.tdl import Access, Description, Expr, Flat, Ix, Shift, reshape_groups


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
                         f"got {perm!r}")
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
                         f"got {target!r}")
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
        inner = Dim.K if Dim.K in labels else labels[-1]
        if len(outs) == 1:
            output.append(inner)
        elif len(outs) > 1:
            output += [*[Dim.H, Dim.Q, Dim.P][:len(outs) - 1], inner]
    spare = [d for d in (Dim.P, Dim.Q, Dim.H, Dim.K) if d not in output]
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
        raise InputError(f"{where}.shape: must be a list of sizes, got {shape!r}")
    return Counts(tuple(positive(f"{where}.shape", v) for v in shape),
                  positive(f"{where}.params", a["params"], 0))


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
           "`params` counts a learned operand (a bias); described only where it keeps its "
           "input's shape", ("function", "shape"), {"params": 0}, _tensor_op,
           elementwise_description(per_element(0)), arity=(1, None)),
):
    register_op(_spec)
