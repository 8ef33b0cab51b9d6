"""The samples of an ONNX model: its symbolic axes bound, and which axis of every tensor
carries the batch, whence each tensor's per-sample shape.

Exports leave the batch, the sequence and sometimes other axes symbolic. The batch is
bound to `PROBE_BATCH`, a prime no model size is a multiple of, and every other symbolic
axis to the run's value (`--seq` for a token input's axis 1, `--dim NAME=VALUE` for any
named axis). After shape inference, the axis of a tensor whose size is a multiple of the
probe carries the samples: alone (the batch axis, dropped from the per-sample shape) or
folded with another axis (an exporter's [batch x tokens, hidden] or [batch x heads, tokens,
head dim]: per sample, its size divided by the probe). An export whose batch is fixed at 1
(the dynamo exporter's fixed shapes) is one sample per run of the graph: a leading axis of
size 1 is the batch, and a tensor without one is the sample whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypar_sim.errors import InputError

#: The batch shape inference runs at: a prime no layer size is a multiple of (in ViT, BERT,
#: GPT, Llama and torchvision's CNNs, none is), small enough that batch x tokens x hidden
#: stays far within the int64 shape arithmetic of an export.
PROBE_BATCH = 997

#: Default length of a dynamic sequence axis (tokens).
DEFAULT_SEQ = 128

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Binding:
    """How the graph inputs' symbolic axes were bound: the batch axis's name ('' when the
    export fixes the batch at 1), every other bound name -> its size, and notes for the
    user (one line each)."""

    batch: str
    sizes: Mapping[str, int]
    notes: tuple[str, ...] = ()

    @property
    def probe(self) -> int | None:
        return PROBE_BATCH if self.batch else None


def bind_inputs(path: Path, inputs: Sequence[Any], seq: int | None,
                dims: Mapping[str, int]) -> Binding:
    """Fix every axis of the graph inputs (in place): the batch (axis 0, symbolic) to the
    probe, a token input's symbolic axis 1 to `seq`, any other named axis from `dims`; a
    symbolic axis nothing binds, or a `dims` name the model does not have, is an error."""
    batch, sizes, notes = "", {}, []
    symbolic: set[str] = set()
    tokens = False
    for tensor in inputs:
        axes = tensor.type.tensor_type.shape.dim
        tokens = tokens or _tokens(tensor, axes)
        for axis, dim in enumerate(axes):
            if dim.HasField("dim_value"):
                if axis == 0 and dim.dim_value != 1:
                    raise InputError(f"{path}: input {tensor.name} fixes the batch at "
                                     f"{dim.dim_value}; export it with a dynamic batch axis "
                                     "or a batch of 1")
                if axis == 1 and seq not in (None, dim.dim_value) and _tokens(tensor, axes):
                    raise InputError(f"--seq: {path} fixes {dim.dim_value} tokens (input "
                                     f"{tensor.name}); give --seq {dim.dim_value} or none, or "
                                     "export the model with a dynamic sequence axis")
                continue
            name = dim.dim_param or f"{tensor.name}[{axis}]"
            symbolic.add(name)
            if axis == 0:
                if name in dims:
                    raise InputError(f"--dim: {name} is the batch axis (axis 0 of input "
                                     f"{tensor.name}); --batch sets the samples of a step")
                batch = batch or name
                value = PROBE_BATCH
            elif axis == 1 and _tokens(tensor, axes):
                if seq is not None and name in dims:
                    raise InputError(f"--dim: {name} is the sequence axis of input "
                                     f"{tensor.name}; give it by --seq or --dim, not both")
                value = seq if seq is not None else dims.get(name, DEFAULT_SEQ)
            elif name in dims:
                value = dims[name]
            else:
                raise InputError(f"{path}: input {tensor.name} axis {axis} is dynamic "
                                 f"('{name}'); give its size with --dim {name}=SIZE")
            dim.dim_value = value
            if axis or name in dims:
                sizes[name] = value
    if seq is not None and not tokens:
        raise InputError(f"--seq: {path} has no token input (ids [batch, tokens] or "
                         "embeddings [batch, tokens, hidden]) whose length it would set")
    unknown = sorted(set(dims) - symbolic)
    if unknown:
        raise InputError(f"--dim: the model has no dynamic axis named '{unknown[0]}'; its "
                         f"dynamic axes: {', '.join(sorted(symbolic)) or 'none'}")
    if not batch:
        notes.append("the export fixes the batch at 1: each sample is one run of its graph")
    return Binding(batch, sizes, tuple(notes))


def _tokens(tensor: Any, axes: Any) -> bool:
    """A token input: integer ids [batch, tokens] or embeddings [batch, tokens, hidden]."""
    integer = tensor.type.tensor_type.elem_type in (6, 7)  # int32, int64
    return len(axes) == 2 and integer or len(axes) == 3 and not integer


@dataclass(frozen=True)
class Sampled:
    """One tensor per sample: its shape, and the ONNX axis that carries the samples (None:
    the tensor is one sample whole) and whether that axis is the batch alone (dropped from
    `shape`) or folded with another (kept, divided)."""

    shape: Shape
    axis: int | None
    dropped: bool

    def sample_axis(self, axis: int) -> int | None:
        """The per-sample axis of ONNX axis `axis` (negative counts from the end); None
        for the batch axis."""
        rank = len(self.shape) + (1 if self.dropped else 0)
        axis %= rank
        if self.dropped and self.axis is not None:
            if axis == self.axis:
                return None
            return axis - (1 if axis > self.axis else 0)
        return axis


def sampled(full: Shape, probe: int | None) -> Sampled | str:
    """The per-sample view of a tensor of shape `full` inferred at batch `probe` (None: the
    batch is fixed at 1), or why there is none."""
    if probe is None:
        if full and full[0] == 1:
            return Sampled(tuple(full[1:]), 0, True)
        return Sampled(tuple(full), None, False)
    if 0 in full:
        return "has an axis of size 0 (an input too small for the operators that read it?)"
    carriers = [axis for axis, size in enumerate(full) if size % probe == 0]
    if len(carriers) != 1:
        return "mixes the samples; such models are not supported" if carriers else \
            "has no axis that carries the samples; such models are not supported"
    axis = carriers[0]
    if full[axis] == probe:
        return Sampled(tuple(full[:axis] + full[axis + 1:]), axis, True)
    per = list(full)
    per[axis] //= probe
    return Sampled(tuple(per), axis, False)
