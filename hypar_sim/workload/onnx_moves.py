"""ONNX operators that move elements, per sample: reshapes, transposes, concatenation,
splits, slices, index gathers, expansions and reductions (`onnx_nodes` has the registry,
the weighted and the element-wise operators)."""

from __future__ import annotations

from typing import Any

from hypar_sim.workload.onnx_nodes import (
    Call,
    broadcast_axes,
    maps,
    same_axes,
    sample_shape,
    tensor_op,
)


@maps("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(im: Any, call: Call) -> None:
    shape = sample_shape(im, call.out)
    if shape == sample_shape(im, call.acts[0]) and im.same(call.out, call.acts[0]):
        return  # the same tensor per sample: only the batch axis moved
    if call.node.op_type == "Flatten" and len(shape) == 1:
        im.emit(call.out, "flatten", call.acts[:1])
    else:
        im.emit(call.out, "reshape", call.acts[:1], shape=shape)


@maps("Transpose")
def _transpose(im: Any, call: Call) -> None:
    """The permutation of the per-sample axes; one that only moves axes of size 1 (or the
    batch) is a reshape."""
    source = im.sample(call.acts[0])
    rank = len(source.shape) + (1 if source.dropped else 0)
    perm = [int(p) for p in call.attrs.get("perm", list(reversed(range(rank))))]
    order = [source.sample_axis(p) for p in perm]
    order = [p for p in order if p is not None]
    moved = [p for p in order if source.shape[p] > 1]
    if moved == sorted(moved):
        im.emit(call.out, "reshape", call.acts, shape=sample_shape(im, call.out))
    elif [source.shape[p] for p in order] == sample_shape(im, call.out):
        im.emit(call.out, "transpose", call.acts, perm=order)
    else:  # the batch fixed at 1 leaves an axis of size 1 where the export moved it
        im.emit(f"{call.out}/transpose", "transpose", call.acts, perm=order)
        im.emit(call.out, "reshape", [f"{call.out}/transpose"], shape=sample_shape(im, call.out))


@maps("Concat")
def _concat(im: Any, call: Call) -> None:
    axis = im.axis(call.node, call.acts[0], call.attrs["axis"])
    if call.consts:
        tensor_op(im, call, same_axes(im, call))
    else:
        im.emit(call.out, "concat", call.acts, axis=axis)


@maps("Split")
def _split(im: Any, call: Call) -> None:
    axis = im.axis(call.node, call.acts[0], call.attrs.get("axis", 0))
    start = 0
    for part in call.node.output:
        size = sample_shape(im, part)[axis]
        im.emit(part, "slice", call.acts, axis=axis, start=start, stop=start + size)
        start += size


@maps("Slice")
def _slice(im: Any, call: Call) -> None:
    """One axis by constant bounds with step 1: a `slice` node (ShuffleNet's channel
    split); anything else a tensor_op."""
    node = call.node
    before, after = sample_shape(im, node.input[0]), sample_shape(im, call.out)
    bounds = [im.values.get(name) for name in node.input[1:] if name]
    changed = [a for a, (x, y) in enumerate(zip(before, after, strict=True)) if x != y]
    if call.acts != [node.input[0]] or any(b is None for b in bounds) or len(changed) != 1 \
            or any(int(step) != 1 for step in (bounds[3] if len(bounds) > 3 else [1])):
        tensor_op(im, call, same_axes(im, call))
        return
    source = im.sample(node.input[0])
    axes = [int(a) for a in bounds[2]] if len(bounds) > 2 else list(range(len(bounds[0])))
    onnx_axes = [source.sample_axis(a) for a in axes]
    axis = changed[0]
    start = int(bounds[0][onnx_axes.index(axis)]) if axis in onnx_axes else 0
    start = min(max(start + before[axis] if start < 0 else start, 0), before[axis])
    im.emit(call.out, "slice", call.acts, axis=axis, start=start, stop=start + after[axis])


@maps("GatherND")
def _gather_nd(im: Any, call: Call) -> None:
    """Index tuples into an activation (transformers' padding mask): the data axes the
    tuples do not index are the output's last ones; the indices' axes are new."""
    data, out = sample_shape(im, call.acts[0]), sample_shape(im, call.out)
    kept = min(len(data), len(out))
    while kept and data[len(data) - kept:] != out[len(out) - kept:]:
        kept -= 1
    follows: list[int | None] = [None] * (len(out) - kept)
    tensor_op(im, call, follows + list(range(len(data) - kept, len(data))))


@maps("Pad", "Tile", "Resize", "Upsample", "GatherElements", "ScatterND", "ScatterElements")
def _same_rank(im: Any, call: Call) -> None:
    tensor_op(im, call, same_axes(im, call))


@maps("Expand")
def _expand(im: Any, call: Call) -> None:
    tensor_op(im, call, broadcast_axes(im, call))


@maps("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceL2", "ReduceProd",
      "ReduceSumSquare", "ArgMax", "ArgMin")
def _reduce(im: Any, call: Call) -> None:
    """Over a feature map's rows and columns: a global pool; otherwise a tensor_op whose
    reduced axes are read whole."""
    node, attrs = call.node, call.attrs
    source = sample_shape(im, node.input[0])
    axes = attrs.get("axes", [attrs["axis"]] if "axis" in attrs else None)
    if axes is None and len(node.input) > 1 and node.input[1] in im.values:
        axes = [int(a) for a in im.values[node.input[1]]]
    axes = list(range(len(source))) if axes is None else \
        sorted(im.axis(node, node.input[0], a) for a in axes)
    keep = attrs.get("keepdims", 1)
    if len(source) == 3 and axes == [1, 2] and node.op_type in ("ReduceMean", "ReduceMax"):
        mode = "avg" if node.op_type == "ReduceMean" else "max"
        if keep:
            im.emit(call.out, "global_pool", call.acts, mode=mode)
        else:
            im.emit(f"{call.out}/pool", "global_pool", call.acts, mode=mode)
            im.emit(call.out, "flatten", [f"{call.out}/pool"])
        return
    follows = list(range(len(source))) if keep else \
        [a for a in range(len(source)) if a not in axes]
    tensor_op(im, call, follows)
