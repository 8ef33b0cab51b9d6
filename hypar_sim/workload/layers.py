"""Weighted layers of a network and the shape inference that gives their tensors.

A convolution maps an input feature map of C x H x W (per sample) to M x E x F
with M kernels of C x K x K; an optional pooling stage follows it. A
fully-connected layer is the same computation as a 1x1 convolution on a 1x1
map whose channels are the flattened input features. Sizes are per sample;
the batch is applied by whoever uses the layer (the planner, the simulator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple


class LayerKind(StrEnum):
    """The two kinds of weighted layers HyPar partitions."""

    CONV = "conv"
    FC = "fc"


class FeatureShape(NamedTuple):
    """Per-sample feature-map shape: channels x height x width (elements)."""

    channels: int
    height: int
    width: int

    @property
    def size(self) -> int:
        """Elements per sample."""
        return self.channels * self.height * self.width

    def __str__(self) -> str:
        return f"{self.channels}x{self.height}x{self.width}"


@dataclass(frozen=True)
class Pool:
    """A pooling stage after a convolution (max pooling; the kind does not change sizes)."""

    kernel: int
    stride: int
    padding: int = 0
    ceil_mode: bool = False


def conv_output_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output rows (or columns) of a convolution; ValueError if the kernel does not fit."""
    padded = size + 2 * padding
    if kernel > padded:
        raise ValueError(f"kernel {kernel} is larger than its padded input {padded}")
    if stride > padded:
        raise ValueError(f"stride {stride} is larger than its padded input {padded}")
    return (padded - kernel) // stride + 1


def pool_output_size(size: int, pool: Pool) -> int:
    """Output rows of a pooling stage, floor or ceil mode (Caffe's rule for ceil mode)."""
    padded = size + 2 * pool.padding
    if pool.kernel > padded:
        raise ValueError(f"pooling kernel {pool.kernel} is larger than its input {padded}")
    if pool.stride > padded:
        raise ValueError(f"pooling stride {pool.stride} is larger than its input {padded}")
    if not pool.ceil_mode:
        return (padded - pool.kernel) // pool.stride + 1
    out = math.ceil((padded - pool.kernel) / pool.stride) + 1
    # Caffe drops a last window that would start entirely in the padding.
    if pool.padding and (out - 1) * pool.stride >= size + pool.padding:
        out -= 1
    return out


@dataclass(frozen=True)
class Layer:
    """A weighted layer with its inferred per-sample tensor shapes.

    `input` is what the layer reads (for fc, the flattened features as channels
    of a 1x1 map), `conv_output` the result before pooling, `output` the tensor
    the next layer receives (after pooling, if any).
    """

    name: str
    kind: LayerKind
    input: FeatureShape
    conv_output: FeatureShape
    output: FeatureShape
    kernel: int = 1
    stride: int = 1
    padding: int = 0
    pool: Pool | None = None

    @property
    def weights(self) -> int:
        """Number of weights (biases are ignored throughout, as in the HyPar paper)."""
        return self.input.channels * self.conv_output.channels * self.kernel * self.kernel

    @property
    def macs_per_sample(self) -> int:
        """Multiply-accumulates of the forward pass for one sample."""
        return self.weights * self.conv_output.height * self.conv_output.width


def make_conv(
    name: str,
    input_shape: FeatureShape,
    out_channels: int,
    kernel: int,
    stride: int = 1,
    padding: int = 0,
    pool: Pool | None = None,
) -> Layer:
    """A convolution layer (with optional pooling) on `input_shape`."""
    height = conv_output_size(input_shape.height, kernel, stride, padding)
    width = conv_output_size(input_shape.width, kernel, stride, padding)
    conv_output = FeatureShape(out_channels, height, width)
    output = conv_output
    if pool is not None:
        output = FeatureShape(
            out_channels, pool_output_size(height, pool), pool_output_size(width, pool)
        )
    return Layer(name, LayerKind.CONV, input_shape, conv_output, output, kernel, stride, padding,
                 pool)


def make_fc(name: str, input_shape: FeatureShape, out_features: int) -> Layer:
    """A fully-connected layer: the input is flattened to features x 1 x 1."""
    flat = FeatureShape(input_shape.size, 1, 1)
    out = FeatureShape(out_features, 1, 1)
    return Layer(name, LayerKind.FC, flat, out, out)
