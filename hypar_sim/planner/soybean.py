"""SoyBean's tensor-tiling planner for chains (Wang, Huang and Li, "Unifying Data, Model and
Hybrid Parallelism in Deep Learning via Tensor Tiling"; sections cited as §).

**Matrices** (§2.1, §4.5): a conv or fc layer trains with three matmuls over its unrolled
matrices, forward F' = W x F, backward E = W^T x E', gradient dW = E' x F^T, with W and dW
K rows x C columns, F and E C x N, F' and E' K x N (before pooling); a conv's spatial
positions go with N and its kernel with C (§4.5: "multipliers" of batch and weight size), so
an area is the tensor's elements. Loops (a, b, c) of Z = X x Y (X: a x b, Y: b x c): forward
(K, C, N), backward (C, K, N), gradient (K, N, C). **Tilings** (§4.1, Def. 1): R, C, r; a
split reduction leaves `red` (§4.2.1). **Aligned tilings** (§4.2.1, Fig. 6, Eq. 2): split a:
X=R, Y=r, Z=R; split c: X=r, Y=C, Z=C; split b: X=C, Y=R, Z=red. Our kinds are the loops:
batch = N, in = C, out = K (`aligned`). **Conversion cost** (§4.2.1, Fig. 7: ghost area minus
held area, summed over a group's members): `conversion`, `volume`.

**Cost** of a matmul (Eq. 2): converting its inputs to the aligned form and its output from
it; of a plan (Eq. 3): the sum over matmuls. **One cut** (§4.2.2, Eqs. 4-5, `one_cut`): a DP
over the chain's BFS levels (its layers), state tau_l = the tilings of F_{l+1} and E_{l+1}.
**k cuts** (§4.3, Algorithm 1, Theorem 1, `k_cuts`): the top level of the hierarchy is the
first cut (§5.1: the slowest links), then the groups' tile graphs, c_k = delta_k + 2 c_{k-1}.

Where this hardware forces a difference:

- one kind per layer per level (a member's share is one box of loop dimensions): a layer's
  three matmuls take the aligned forms of one loop (Eq. 2 lets each choose); only allowed
  kinds (`options.kinds`) that the traffic model offers are searched; `spatial` never (§4.5
  drops image dimensions).
- element-wise ops keep one tiling on both sides (§4.5): dW takes W's, F' and F_{l+1} (around
  the pooling) share one, as E_{l+1} and E'_l. §4.5 bars all-replicated element-wise ops but
  §4.1's model parallelism replicates activation gradients: r is allowed everywhere (Def. 2).
- a level of k >= 3 members is one k-way cut: the same tilings, tiles of 1/k, conversions
  scaled by what each member holds (`conversion`), deeper costs times k (c = delta + k c_sub:
  Theorem 1 becomes sum_h groups_h delta_h). Shares are exact fractions (even tilings, §4.1);
  the tile graph of a deeper cut sizes each conversion as `volume` says (the paper is silent).
- the input takes whatever tiling the first layer wants, no error is computed for it; the
  loss is element-wise (F_{L+1}'s tiling converted to E_{L+1}'s).

**Against HyPar** (kinds batch, in; two-way levels): the costs are the same (dp: red -> r on
dW, 2 A(dW); mp: red -> R on F', A(F'), and R -> r on E, A(E); dp -> mp: C -> R on F, A(F)/2,
and R -> C on E, A(E)/2) except where a pooling stage sits between two layers: (1) an
in-split layer's partial output is reduced before its ReLU and pooling (red is no stored
tiling), A(F'_pre) - A(F_post) more than HyPar's Table 1; (2) at a batch -> in boundary the
next layer's forward and gradient matmuls each convert the pooled input (Eq. 3 charges each
matmul), or the producer converts the 4x larger map once: min(A, A_pre / 2) instead of Table
2's A/2. Algorithm 1 is greedy like HyPar's (§4.4 claims it optimal; `tests/test_soybean.py`
shows a chain where it is not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from hypar_sim.errors import InputError
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS, Dim, kind_of, listed
from hypar_sim.partition.shares import Column
from hypar_sim.planner.strategies import PlanRequest, register_strategy
from hypar_sim.planner.traffic import TrafficModel
from hypar_sim.workload.layers import Layer

__all__ = ["MATMULS", "STORED", "Matrix", "SoyBeanPlan", "Tiling", "aligned", "conversion",
           "k_cuts", "one_cut", "plan_cost", "soybean_columns", "volume"]


class Tiling(StrEnum):
    """SoyBean's basic tilings (§4.1) and the partial-sum form of a reduction (§4.2.1)."""

    ROW = "R"
    COL = "C"
    REP = "r"
    RED = "red"


#: The tilings a stored matrix may have (T^1 of Definition 1), in DP-state order.
STORED = (Tiling.ROW, Tiling.COL, Tiling.REP)


class Matrix(StrEnum):
    """A layer's unrolled matrices; F' and E' are its output (before pooling) and its error."""

    W = "W"
    DW = "dW"
    F = "F"
    E = "E"
    FO = "F'"
    EO = "E'"


#: (row dimension, column dimension) of every matrix (read-only).
SHAPES: Mapping[Matrix, tuple[Dim, Dim]] = MappingProxyType({
    Matrix.W: (Dim.K, Dim.C), Matrix.DW: (Dim.K, Dim.C), Matrix.F: (Dim.C, Dim.N),
    Matrix.E: (Dim.C, Dim.N), Matrix.FO: (Dim.K, Dim.N), Matrix.EO: (Dim.K, Dim.N)})


@dataclass(frozen=True)
class MatMul:
    """Z = X x Y over a layer's matrices; a flag transposes an operand."""

    name: str
    x: Matrix
    x_transposed: bool
    y: Matrix
    y_transposed: bool
    z: Matrix

    @property
    def loops(self) -> tuple[Dim, Dim, Dim]:
        """(a, b, c) with X: a x b, Y: b x c, Z: a x c."""
        rows, cols = SHAPES[self.x][::-1] if self.x_transposed else SHAPES[self.x]
        return rows, cols, (SHAPES[self.y][::-1] if self.y_transposed else SHAPES[self.y])[1]


#: A layer's three matmuls (§2.1): forward, backward (skipped for the first layer), gradient.
MATMULS = (MatMul("forward", Matrix.W, False, Matrix.F, False, Matrix.FO),
           MatMul("backward", Matrix.W, True, Matrix.EO, False, Matrix.E),
           MatMul("gradient", Matrix.EO, False, Matrix.F, True, Matrix.DW))

_SWAP = MappingProxyType({Tiling.ROW: Tiling.COL, Tiling.COL: Tiling.ROW})


def aligned(matmul: MatMul, dim: Dim) -> tuple[Tiling, Tiling, Tiling]:
    """The tilings of (X, Y, Z) in the aligned form that splits loop `dim` (Figure 6, Eq. 2),
    in the stored (untransposed) orientation of X and Y."""
    a, b, c = matmul.loops
    forms = {a: (Tiling.ROW, Tiling.REP, Tiling.ROW), c: (Tiling.REP, Tiling.COL, Tiling.COL),
             b: (Tiling.COL, Tiling.ROW, Tiling.RED)}
    if dim not in forms:
        raise ValueError(f"{matmul.name} has no loop {dim}")
    tx, ty, tz = forms[dim]
    return (_SWAP.get(tx, tx) if matmul.x_transposed else tx,
            _SWAP.get(ty, ty) if matmul.y_transposed else ty, tz)


def conversion(source: Tiling, target: Tiling, parts: int) -> float:
    """c(source -> target) of §4.2.1 as a fraction of the matrix's area, summed over the
    `parts` = k members of a group: what each needs (its "ghost area") minus what it holds.

    R <-> C: each holds 1/k, needs 1/k and shares 1/k^2 of it: 1 - 1/k in all (k = 2: 1/2,
    Figure 7(b)). R or C -> r: k - 1. red -> R or C: each sums its 1/k from k - 1 other
    partials: k - 1. red -> r: red -> R -> r, 2(k - 1) (an update of replicated weights
    happens on a partitioned dW, §4.5; at k = 2 it is also each member fetching the other's
    whole partial, 2). From r, or to the same tiling: 0."""
    if target is Tiling.RED:
        raise ValueError("red is a matmul's output form, never a target tiling")
    if source is target or source is Tiling.REP:
        return 0.0
    if source is Tiling.RED:
        return (parts - 1) * (2 if target is Tiling.REP else 1)
    return parts - 1.0 if target is Tiling.REP else 1.0 - 1.0 / parts


def volume(source: Tiling, target: Tiling, parts: int, writer: float, reader: float) -> float:
    """Elements a group moves for one conversion in the tile graph of a deeper cut (§4.3),
    where the matrix's producer and its reader may hold parts of different sizes (`writer`,
    `reader` elements): a reduction sums the producer's whole partial, a gather (to r) fills
    the reader's part, an R <-> C exchange moves within the part both hold (the smaller).
    At the top cut both are the whole matrix and this is `conversion` x area. (The paper's
    ConstructTileGraph is silent on this; with these, two-level gathers, exchanges and
    reductions sum to their exact needs minus holds (tested), and HyPar's shares follow.)"""
    if source is target or source is Tiling.REP:
        return 0.0
    if source is Tiling.RED:
        moved = (parts - 1) * writer
        return moved + ((parts - 1) * reader if target is Tiling.REP else 0.0)
    if target is Tiling.REP:
        return conversion(source, target, parts) * reader
    return conversion(source, target, parts) * min(writer, reader)


@dataclass(frozen=True)
class Areas:
    """Elements of one layer's matrices in one group's share (the tile graph of §4.3): each
    cut above divides its kind's loop dimension by the level size. `before` and `after` are
    the neighbours' shares of the matrices the layer shares with them (the loss reads like
    the last layer; the network input is written like the first layer's share)."""

    weights: float  # W, dW
    input: float  # F_l, E_l in this layer's share
    output: float  # F'_l, E'_l (before pooling) in this layer's share
    before: float  # F_l, E_l in the previous layer's share of (N, K)
    after: float  # F'_l, E'_l (before pooling) in the next layer's share of (N, C)
    loss: float  # the last output after pooling, in this layer's share


def _parts(column: Column, sizes: Sequence[int]) -> dict[Dim, int]:
    """How many parts the cuts of `column` on levels of `sizes` divide each dimension into."""
    parts = {Dim.N: 1, Dim.C: 1, Dim.K: 1}
    for size, kind in zip(sizes, column, strict=True):
        parts[KINDS[kind].dim] *= size
    return parts


def share_areas(layer: Layer, batch: int, column: Column, sizes: Sequence[int],
                before: Column | None = None, after: Column | None = None) -> Areas:
    """A layer's areas after the cuts of `column` (the neighbours': `before`, `after`) on the
    levels of `sizes`."""
    own = _parts(column, sizes)
    n, c, k = batch / own[Dim.N], layer.input.channels / own[Dim.C], \
        layer.output.channels / own[Dim.K]
    pre, post, inp = layer.conv_output, layer.output, layer.input
    prev = _parts(before, sizes) if before is not None else {Dim.N: own[Dim.N],
                                                             Dim.K: own[Dim.C]}
    nxt = _parts(after, sizes) if after is not None else {Dim.N: own[Dim.N], Dim.C: own[Dim.K]}
    return Areas(k * c * layer.kernel ** 2, n * c * inp.height * inp.width,
                 n * k * pre.height * pre.width,
                 batch * inp.size / (prev[Dim.N] * prev[Dim.K]),
                 batch * pre.size / (nxt[Dim.N] * nxt[Dim.C]),
                 n * k * post.height * post.width)


@dataclass(frozen=True)
class LayerCut:
    """One layer under one kind at one cut: its own cost and its two sides, per DP state
    (index 3 * f + e into STORED x STORED), in elements."""

    kind: str
    own: float
    inputs: tuple[float, ...]  # by the tilings (f_l, e_l) of F_l and E_l
    outputs: tuple[float, ...]  # by the tilings (f_{l+1}, e_{l+1}) of F'_l and E'_l


_STATES = tuple((f, e) for f in STORED for e in STORED)


def layer_cut(kind: str, areas: Areas, parts: int, first: bool) -> LayerCut:
    """Eq. 2 for the layer's matmuls, each in the aligned form of `kind`'s dimension: a read
    converts the stored tiling to the form, a write the form (red included) to the stored
    tiling. A matrix read by two matmuls is converted for each (Eq. 3 sums per matmul)."""
    dim = KINDS[kind].dim
    reads: list[tuple[Matrix, Tiling]] = []
    writes: list[tuple[Matrix, Tiling]] = []
    for matmul in MATMULS:
        if first and matmul.name == "backward":
            continue  # no error is computed for the network's input
        tx, ty, tz = aligned(matmul, dim)
        reads += [(matmul.x, tx), (matmul.y, ty)]
        writes.append((matmul.z, tz))
    # (writer's part, reader's part) of every matrix
    sides = {Matrix.W: (areas.weights, areas.weights), Matrix.DW: (areas.weights, areas.weights),
             Matrix.F: (areas.before, areas.input), Matrix.E: (areas.input, areas.before),
             Matrix.FO: (areas.output, areas.after), Matrix.EO: (areas.after, areas.output)}

    def side(stored: Tiling, matrix: Matrix) -> float:
        writer, reader = sides[matrix]
        return sum(volume(stored, t, parts, writer, reader) for m, t in reads if m is matrix) \
            + sum(volume(t, stored, parts, writer, reader) for m, t in writes if m is matrix)

    # dW takes W's tiling (the update is element-wise); W is the layer's own: its best.
    own = min(side(w, Matrix.W) + side(w, Matrix.DW) for w in STORED)
    inputs = tuple(side(f, Matrix.F) + side(e, Matrix.E) for f, e in _STATES)
    outputs = tuple(side(f, Matrix.FO) + side(e, Matrix.EO) for f, e in _STATES)
    return LayerCut(kind, own, inputs, outputs)


def loss_cut(areas: Areas, parts: int) -> tuple[float, ...]:
    """The loss, element-wise from F_{L+1} to E_{L+1}: F's tiling converted to E's."""
    return tuple(conversion(f, e, parts) * areas.loss for f, e in _STATES)


@dataclass(frozen=True)
class Cut:
    """The result of one cut: every layer's kind and its share of delta (elements)."""

    kinds: tuple[str, ...]
    layer_costs: tuple[float, ...]
    tilings: tuple[tuple[Tiling, Tiling], ...]  # (F_l, E_l) stored, l = 1..L+1

    @property
    def delta(self) -> float:
        return sum(self.layer_costs)


def one_cut(options: Sequence[Sequence[LayerCut]], loss: Sequence[float]) -> Cut:
    """§4.2.2, Eqs. 4-5: g_l(tau_l) = min over tau_{l-1} and the layer's kind of
    level_cost_l(tau_{l-1}, tau_l) + g_{l-1}(tau_{l-1}); g_0 = 0 (the input takes any tiling).
    Ties go to the earlier kind, then the earlier state."""
    best = [0.0] * len(_STATES)
    back: list[list[tuple[int, int]]] = []
    for cuts in options:
        entry = []
        for cut in cuts:  # the tau_{l-1} part separates from the tau_l part
            costs = [g + c for g, c in zip(best, cut.inputs, strict=True)]
            i = costs.index(min(costs))
            entry.append((costs[i] + cut.own, i))
        new, pointers = [], []
        for j in range(len(_STATES)):
            totals = [base + cut.outputs[j] for (base, _), cut in zip(entry, cuts, strict=True)]
            k = totals.index(min(totals))
            new.append(totals[k])
            pointers.append((k, entry[k][1]))
        best = new
        back.append(pointers)
    final = [g + c for g, c in zip(best, loss, strict=True)]
    state = final.index(min(final))
    states, chosen = [state], []
    for pointers in reversed(back):
        k, previous = pointers[states[-1]]
        chosen.append(k)
        states.append(previous)
    chosen.reverse()
    states.reverse()  # states[l] is tau_{l-1}: the tilings before layer l
    costs = []
    for index, (cuts, k) in enumerate(zip(options, chosen, strict=True)):
        cut = cuts[k]
        cost = cut.own + cut.inputs[states[index]] + cut.outputs[states[index + 1]]
        costs.append(cost + (loss[states[-1]] if index == len(options) - 1 else 0.0))
    return Cut(tuple(cuts[k].kind for cuts, k in zip(options, chosen, strict=True)),
               tuple(costs), tuple(_STATES[state] for state in states))


#: The kinds SoyBean can search: the loop dimensions of its matrices (§4.5 drops the image's).
MATRIX_DIMS = (Dim.N, Dim.C, Dim.K)


@dataclass(frozen=True)
class SoyBeanPlan:
    """Algorithm 1's result: every layer's column and each cut's cost per group (bytes)."""

    columns: tuple[Column, ...]
    deltas: tuple[float, ...]  # delta_h: one group's cost at level h
    layer_bytes: tuple[tuple[float, ...], ...]  # [level][layer], all groups of the level
    hierarchy: Hierarchy

    @property
    def cost_bytes(self) -> float:
        """Theorem 1: sum over levels of (groups at the level) x delta_h."""
        return sum(g * d for g, d in zip(self.hierarchy.subarray_counts, self.deltas,
                                         strict=True))


def _options(model: TrafficModel | None, layer: Layer, batch: int, prefix: Column,
             kinds: Sequence[str], upper: Hierarchy) -> list[str]:
    return [kind for kind in kinds if KINDS[kind].dim in MATRIX_DIMS and (
        model is None or model.offered(layer, batch, prefix + (kind,), upper))]


def k_cuts(layers: Sequence[Layer], batch: int, hierarchy: Hierarchy, kinds: Sequence[str],
           word_bytes: int = 4, model: TrafficModel | None = None,
           fixed: Sequence[Column] | None = None) -> SoyBeanPlan:
    """§4.3, Algorithm 1, top level first: one cut on the tile graph the cuts above leave
    (ConstructTileGraph: each layer's cut loop dimension divided by the level size), then
    the groups below. With `fixed`, the kinds are the given columns' (the cost of a plan)."""
    columns: list[Column] = [() for _ in layers]
    deltas, layer_bytes = [], []
    for level, parts in enumerate(hierarchy.sizes):
        upper = Hierarchy(hierarchy.sizes[:level + 1])
        options = []
        for index, layer in enumerate(layers):
            allowed = [fixed[index][level]] if fixed is not None else _options(
                model, layer, batch, columns[index], kinds, upper)
            if not allowed:
                raise InputError(
                    f"--kinds: soybean cannot split layer {layer.name} at level {level + 1} "
                    f"with {','.join(kinds)}; allowed: {', '.join(SOYBEAN_KINDS)} (SoyBean's matrix "
                    "dimensions N, C, K) where the dimension has an index for every member")
            areas = share_areas(layer, batch, columns[index], hierarchy.sizes[:level],
                                columns[index - 1] if index else None,
                                columns[index + 1] if index + 1 < len(layers) else None)
            options.append([layer_cut(kind, areas, parts, index == 0) for kind in allowed])
        last = share_areas(layers[-1], batch, columns[-1], hierarchy.sizes[:level],
                           columns[-2] if len(layers) > 1 else None)
        cut = one_cut(options, loss_cut(last, parts))
        columns = [column + (kind,) for column, kind in zip(columns, cut.kinds, strict=True)]
        groups = hierarchy.subarray_counts[level]
        deltas.append(cut.delta * word_bytes)
        layer_bytes.append(tuple(groups * c * word_bytes for c in cut.layer_costs))
    return SoyBeanPlan(tuple(columns), tuple(deltas), tuple(layer_bytes), hierarchy)


def plan_cost(layers: Sequence[Layer], batch: int, columns: Sequence[Column],
              hierarchy: Hierarchy, word_bytes: int = 4) -> SoyBeanPlan:
    """SoyBean's cost (Eq. 3, Theorem 1) of a fixed plan: its best stored tilings."""
    kinds = sorted({kind for column in columns for kind in column})
    bad = [kind for kind in kinds if KINDS[kind].dim not in MATRIX_DIMS]
    if bad:
        raise InputError(f"plan: soybean cannot cost kind(s) {','.join(bad)}; allowed: "
                         f"{', '.join(SOYBEAN_KINDS)}")
    return k_cuts(layers, batch, hierarchy, kinds, word_bytes, fixed=columns)


def soybean_columns(request: PlanRequest) -> list[Column]:
    """The columns of Algorithm 1 over the allowed kinds that have a matrix dimension (it
    minimises its own Eq. 3 bytes: no other objective)."""
    if not any(KINDS[kind].dim in MATRIX_DIMS for kind in request.options.kinds):
        raise InputError(f"--kinds: soybean searches {listed(SOYBEAN_KINDS)} (SoyBean's matrix "
                         f"dimensions); got {','.join(request.options.kinds)}")
    if not request.network.layers:
        return []
    if not request.hierarchy.levels:
        return [() for _ in request.network.layers]
    return list(k_cuts(request.network.layers, request.batch, request.hierarchy,
                       request.options.kinds, request.word_bytes, request.model).columns)


#: SoyBean's kinds: row, column and replicated tilings split samples, input or output channels.
SOYBEAN_KINDS = tuple(kind_of(dim) for dim in (Dim.N, Dim.C, Dim.K))


@register_strategy("soybean", searches=True, default_kinds=SOYBEAN_KINDS, own_cost="Eq. 3 bytes")
def _soybean(request: PlanRequest) -> list[Column]:
    return soybean_columns(request)


# This strategy's implementation on graph networks registers itself on the entry above.
from hypar_sim.planner import soybean_graph  # noqa: E402, F401
