"""Convolution-shaped work: what a row-stationary PU computes (`rs_mapper.map_conv`).

A training step's three computations of a layer are convolutions: the forward pass, the
error backward (the output error, dilated and padded, convolved with the rotated filters)
and the weight gradient (the input convolved with the output error); a fully-connected
layer is a 1x1 convolution on a 1x1 map. Sizes are element counts. [JSSC17]: Chen et al.,
"Eyeriss", IEEE JSSC 52(1), 2017 (the sources of `pe_array`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np


def check_positive_ints(owner: str, values: dict[str, int]) -> None:
    """ValueError unless every value is an int >= 1."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class ConvWork:
    """One convolution-shaped computation (a fully-connected layer is a 1x1 conv on a 1x1 map).

    Sizes are element counts. ``in_height``/``in_width`` include any padding
    (and, for error backward, the zeros of stride dilation). ``density`` is the
    fraction of the dense MACs whose operands are not structural zeros (padding
    or dilation zeros of the backward passes); the array still steps through
    the zeros ([JSSC17] Sec. VI gates zero operands to save energy, not cycles).
    """

    batch: int  # N
    in_channels: int  # C
    out_channels: int  # M
    in_height: int  # H (input rows, padding included)
    in_width: int  # W (padding included)
    kernel_height: int  # R
    kernel_width: int  # S
    stride: int  # U
    out_height: int  # E
    out_width: int  # F
    density: Fraction = field(default=Fraction(1))

    def __post_init__(self) -> None:
        check_positive_ints("ConvWork", {
            "batch": self.batch, "in_channels": self.in_channels,
            "out_channels": self.out_channels, "in_height": self.in_height,
            "in_width": self.in_width, "kernel_height": self.kernel_height,
            "kernel_width": self.kernel_width, "stride": self.stride,
            "out_height": self.out_height, "out_width": self.out_width,
        })
        if self.kernel_height > self.in_height or self.kernel_width > self.in_width:
            raise ValueError(
                f"ConvWork: kernel {self.kernel_height}x{self.kernel_width} is larger than the "
                f"(padded) input {self.in_height}x{self.in_width}")
        fit_h = (self.in_height - self.kernel_height) // self.stride + 1
        fit_w = (self.in_width - self.kernel_width) // self.stride + 1
        if self.out_height > fit_h or self.out_width > fit_w:
            raise ValueError(
                f"ConvWork: output {self.out_height}x{self.out_width} is larger than the "
                f"{fit_h}x{fit_w} a {self.kernel_height}x{self.kernel_width} kernel at stride "
                f"{self.stride} fits in a {self.in_height}x{self.in_width} input")
        try:
            density = Fraction(self.density)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"ConvWork: density must be a number, got {self.density!r}") from exc
        if not 0 < density <= 1:
            raise ValueError(f"ConvWork: density must be in (0, 1], got {self.density!r}")
        object.__setattr__(self, "density", density)

    @property
    def dense_macs(self) -> int:
        """MACs the array steps through: N*M*C*E*F*R*S of this (possibly zero-padded) shape."""
        return (self.batch * self.out_channels * self.in_channels * self.out_height
                * self.out_width * self.kernel_height * self.kernel_width)

    @property
    def macs(self) -> int:
        """Useful MACs (structural zeros excluded); N*M*C*E*F*R*S for a forward layer."""
        return int(self.dense_macs * self.density)


def forward_work(batch: int, in_channels: int, out_channels: int, in_height: int, in_width: int,
                 kernel_height: int, kernel_width: int, stride: int = 1,
                 padding: int = 0) -> ConvWork:
    """Forward convolution of an unpadded ``in_height x in_width`` map padded by ``padding``."""
    if padding < 0:
        raise ValueError(f"forward_work: padding must be >= 0, got {padding}")
    height, width = in_height + 2 * padding, in_width + 2 * padding
    if kernel_height > height or kernel_width > width:
        raise ValueError(f"forward_work: kernel {kernel_height}x{kernel_width} larger than the "
                         f"padded input {height}x{width}")
    check_positive_ints("forward_work", {"stride": stride})
    return ConvWork(batch, in_channels, out_channels, height, width, kernel_height, kernel_width,
                    stride, (height - kernel_height) // stride + 1,
                    (width - kernel_width) // stride + 1)


def fc_work(batch: int, in_features: int, out_features: int) -> ConvWork:
    """Forward fully-connected layer as a 1x1 convolution on a 1x1 map."""
    return ConvWork(batch, in_features, out_features, 1, 1, 1, 1, 1, 1, 1)


def backward_work(forward: ConvWork) -> ConvWork:
    """Error backward E_{l+1} (*) rot180(W_l) -> E_l as a convolution.

    The N x M x E x F output error, dilated by the stride ((E-1)*U+1 rows) and
    fully padded (R-1 each side), is convolved at stride 1 with the rotated
    filters, channels swapped (M in, C out); the result covers the
    (E-1)*U+R <= H input rows that received a gradient. Useful MACs equal the
    forward MACs: each forward MAC has exactly one backward partner.
    """
    f = forward
    rows = (f.out_height - 1) * f.stride + f.kernel_height
    cols = (f.out_width - 1) * f.stride + f.kernel_width
    work = ConvWork(
        batch=f.batch, in_channels=f.out_channels, out_channels=f.in_channels,
        in_height=(f.out_height - 1) * f.stride + 1 + 2 * (f.kernel_height - 1),
        in_width=(f.out_width - 1) * f.stride + 1 + 2 * (f.kernel_width - 1),
        kernel_height=f.kernel_height, kernel_width=f.kernel_width, stride=1,
        out_height=rows, out_width=cols,
        density=f.density * Fraction(f.out_height * f.out_width, rows * cols),
    )
    return work


def gradient_work(forward: ConvWork) -> ConvWork:
    """Weight gradient F_l (*) E_{l+1} -> dW_l as a convolution.

    dW[m][c][r][s] = sum_n sum_{e,f} F[n][c][U*e+r][U*f+s] * E[n][m][e][f]: the
    error map (dilated by U) is the "filter" (M filters of N channels), each
    forward input channel c is an "image" of N channels, and the R x S filter
    positions are the output pixels. Useful MACs equal the forward MACs.
    """
    f = forward
    k_h = (f.out_height - 1) * f.stride + 1
    k_w = (f.out_width - 1) * f.stride + 1
    return ConvWork(
        batch=f.in_channels, in_channels=f.batch, out_channels=f.out_channels,
        in_height=k_h + f.kernel_height - 1, in_width=k_w + f.kernel_width - 1,
        kernel_height=k_h, kernel_width=k_w, stride=1,
        out_height=f.kernel_height, out_width=f.kernel_width,
        density=f.density * Fraction(f.out_height * f.out_width, k_h * k_w),
    )
