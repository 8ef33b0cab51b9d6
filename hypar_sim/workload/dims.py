"""The loop dimensions of an operator (Tofu's loop variables): the names every description
(`workload.tdl`), split kind (`partition.kinds`) and layout use."""

from __future__ import annotations

from enum import StrEnum


class Dim(StrEnum):
    """Loop dimensions of an operator (a convolution's, by default: an fc layer has P = Q = 1)."""

    N = "N"  # samples (batch)
    K = "K"  # output channels (features)
    C = "C"  # input channels (the reduction of the forward pass)
    P = "P"  # output rows, after pooling (a token stream's positions)
    Q = "Q"  # output columns, after pooling
    H = "H"  # attention heads (graph networks)
    G = "G"  # groups of a grouped convolution (graph networks)
    W = "W"  # another axis of an imported tensor (a windowed attention's windows): no kind
    V = "V"  # splits these two; they name axes beyond P, Q, H and K


#: The loops an axis takes, in this order, where its operator names none (a new axis, a
#: renamed one): P, Q, H and K, then W and V, which no kind splits (never G, which scales a
#: grouped operator's weights).
SPARE_LOOPS = (Dim.P, Dim.Q, Dim.H, Dim.K, Dim.W, Dim.V)

Dims = tuple[Dim, ...]  # the loop dimension of every axis of a per-sample tensor
