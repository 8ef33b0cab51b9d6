"""AccPar's planner for chains (Song, Chen, Zhuo, Qian, Li and Chen, "AccPar: Tensor
Partitioning for Heterogeneous Deep Learning Accelerators", HPCA 2020).

Sources. The paper's text was reachable only in part (its abstract); its tables are taken from
the authors' public implementation (github.com/linghaosong/AccPar, `src/accpar.cpp`:
`Com_Cost_Inter_Layer`, `dp_on_one_hierarchy`, `h_partition`), checked here by deriving each
entry from the tensor layouts (`tests/test_accpar.py`). "Paper" below means the paper's model as
those sources give it; section names are the paper's, not numbers we could verify.

**Partition space** (the three basic partition types). A layer trains with F_{l+1} = F_l x W_l
(F_l: B x D_i, W_l: D_i x D_o), E_l = E_{l+1} x W_l^T, dW_l = F_l^T x E_{l+1}. Type-I splits B
(our `batch`), Type-II splits D_i (our `in`, input channels C), Type-III splits D_o (our `out`,
output channels K). A conv layer's feature-map positions go with B and its kernel with D_i.

**Communication** (cost model, intra- and inter-layer tables), in elements one member receives:
the split's reduction leaves a full-size partial sum, all-reduced: Type-I dW_l, Type-II F_{l+1}
(after pooling, as the authors count it), Type-III E_l (`intra_elements`); between layers l-1 and
l, layer l's F_l and E_l move from the layout one type leaves to the one the other needs
(`inter_elements`, the 3 x 3 table). **Computation**: the forward, backward and gradient
multiply-accumulates of a member's share divided by its peak throughput (`compute_seconds`).
**Cost** of a type = communication bytes / link bandwidth + computation time, summed over layers.
**Heterogeneity**: the partition ratio alpha = c_i / (c_i + c_j) gives the faster group the larger
share so that both compute alike (`partition_ratio`); every cube here is the same, so alpha = 1/2.

**Search**: a layer-wise DP over the chain for one split (`dp_on_one_hierarchy`: state = the
layer's type), applied hierarchically from the top level down, each level's tensors divided by
the types chosen above (`h_partition`, as HyPar's Algorithm 2): `plan_levels`.

Where this hardware forces a difference:

- levels of k > 2 members: the same three types with 1/k shares; a member receives (k - 1)/k of a
  tensor it needs whole, (k - 1)/k^2 of one re-split from rows to columns, and 2 (k - 1)/k of a
  partial sum it all-reduces (a ring's reduce-scatter and all-gather, as the simulator sends it);
  at k = 2 these are the paper's 1/2, 1/4 and 1.
- shares are integer boxes (`partition.shares`): a split dimension of d indices gives the
  heaviest member ceil(alpha d); its compute time is the level's (the group that finishes last).
  With even dimensions every type computes the same, so only rounding (and communication) tells
  the types apart on identical cubes.
- the bandwidth between the two halves of a level is taken as one link's (the H-tree joins them
  through one link); throughput is the cube's peak, pus_per_cube x pe_count MACs a cycle at
  clock_mhz; a group of m cubes computes m times as fast. Bytes are `word_bytes` per element.
- only kinds the user allows (`options.kinds` intersected with batch, in, out) and the traffic
  model offers are searched; the first layer is charged like any other (the authors' code does).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import HardwareConfig, load_hardware
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS, Dim, kind_of, listed
from hypar_sim.partition.shares import Column
from hypar_sim.planner.search import chain_dp
from hypar_sim.planner.strategies import PlanRequest, register_strategy

if TYPE_CHECKING:
    from hypar_sim.planner.graph_plan import GraphRequest
from hypar_sim.planner.traffic import TrafficModel
from hypar_sim.workload.layers import Layer

__all__ = ["TYPES", "AccParPlan", "Hardware", "Tensors", "accpar_columns", "compute_seconds",
           "group_tensors", "inter_elements", "intra_elements", "partition_ratio", "plan_cost",
           "plan_levels"]

#: Our kinds and AccPar's partition types, in search (tie-break) order.
TYPES: Mapping[str, str] = MappingProxyType({kind_of(Dim.N): "Type-I", kind_of(Dim.C): "Type-II",
                                             kind_of(Dim.K): "Type-III"})


@dataclass(frozen=True)
class Hardware:
    """The two numbers of AccPar's cost model for one cube and one link."""

    macs_per_s: float  # one cube's peak: MACs a second
    link_bytes_per_s: float  # one link, one direction

    def __post_init__(self) -> None:
        if not (self.macs_per_s > 0 and self.link_bytes_per_s > 0):
            raise InputError(f"accpar: throughput and bandwidth must be positive, got "
                             f"{self.macs_per_s} MAC/s and {self.link_bytes_per_s} B/s")

    @classmethod
    def from_config(cls, config: HardwareConfig) -> Hardware:
        """Peak = pus_per_cube x pe_count MACs a cycle (one MAC per PE) x clock_mhz; the link's
        link_bandwidth_gbps / 8 bytes a second (raw, before packet headers)."""
        return cls(config.pus_per_cube * config.pe_count * config.clock_hz,
                   config.link_bandwidth_gbps * 1e9 / 8)


def partition_ratio(throughputs: Sequence[float]) -> tuple[float, ...]:
    """The cost model's partition ratio: group g's share alpha_g = c_g / sum(c), so that every
    group's compute time alpha_g C / c_g is the same (two groups: alpha = c_i / (c_i + c_j));
    identical groups: 1/k each."""
    if not throughputs or any(c <= 0 for c in throughputs):
        raise InputError(f"accpar: throughputs must be positive, got {list(throughputs)}")
    total = sum(throughputs)
    return tuple(c / total for c in throughputs)


@dataclass(frozen=True)
class Tensors:
    """One group's part of a layer before a level splits it: the heaviest member's dimensions
    (indices) and the layer's geometry (positions per sample, kernel area)."""

    n: int  # samples (B)
    c: int  # input channels (D_i)
    k: int  # output channels (D_o)
    in_positions: int  # input rows x columns
    out_positions: int  # output rows x columns, after pooling
    conv_positions: int  # output rows x columns, before pooling
    kernel_area: int

    @property
    def features(self) -> int:
        """A(F_l) = A(E_l), elements."""
        return self.n * self.c * self.in_positions

    @property
    def output(self) -> int:
        """A(F_{l+1}) after pooling, elements."""
        return self.n * self.k * self.out_positions

    @property
    def weights(self) -> int:
        """A(W_l) = A(dW_l), elements."""
        return self.c * self.k * self.kernel_area

    @property
    def macs(self) -> int:
        """Forward, backward and gradient multiply-accumulates (three equal products)."""
        return 3 * self.n * self.c * self.k * self.conv_positions * self.kernel_area

    def split(self, kind: str, alpha: float) -> Tensors:
        """The heaviest share after a split by `kind` with ratio `alpha`: ceil(alpha d)."""
        def part(d: int) -> int:
            return max(1, math.ceil(d * alpha - 1e-9))
        fields = {Dim.N: "n", Dim.C: "c", Dim.K: "k"}  # Types I, II and III
        dim = KINDS[kind].dim if kind in KINDS else None
        if dim not in fields:
            raise ValueError(f"accpar has no type for kind {kind}")
        return dataclasses.replace(self, **{fields[dim]: part(getattr(self, fields[dim]))})


def group_tensors(layer: Layer, batch: int, column: Column, sizes: Sequence[int]) -> Tensors:
    """A layer's tensors in one group after the levels of `sizes` split it by `column` (the
    authors' `partition_by`, on integer shares)."""
    t = Tensors(batch, layer.input.channels, layer.output.channels,
                layer.input.height * layer.input.width, layer.output.height * layer.output.width,
                layer.conv_output.height * layer.conv_output.width, layer.kernel ** 2)
    for size, kind in zip(sizes, column, strict=True):
        t = t.split(kind, 1 / size)
    return t


def intra_elements(kind: str, t: Tensors, parts: int = 2) -> float:
    """Intra-layer communication: the partial sum a type leaves (Type-I dW_l, Type-II F_{l+1},
    Type-III E_l), all-reduced among `parts` members: 2 (k - 1)/k of it each (k = 2: the paper's
    A(.))."""
    whole = {Dim.N: t.weights, Dim.C: t.output, Dim.K: t.features}[KINDS[kind].dim]
    return 2 * (parts - 1) / parts * whole


def inter_elements(before: str, kind: str, t: Tensors, parts: int = 2) -> float:
    """Inter-layer communication between a layer of type `before` and the next of type `kind`
    (`t`: the next layer's tensors), one member's receipt. Type-I leaves F_l and E_l row-split,
    Type-II needs them column-split and leaves E_l column-split, Type-III needs F_l whole and
    leaves E_l whole; F_l after a Type-II layer is whole, after a Type-III column-split. Moving
    rows to columns costs (k - 1)/k^2, parts to whole (k - 1)/k; k = 2 gives the paper's table:
    I->II, III->I 1/4 (A(F)+A(E)); I->III, III->III 1/2 A(F); II->I, II->II 1/2 A(E); else 0."""
    whole, transpose = (parts - 1) / parts, (parts - 1) / parts ** 2
    f = e = t.features
    n, c, k = Dim.N, Dim.C, Dim.K  # Types I, II and III
    table = {(n, n): 0.0, (n, c): transpose * (f + e), (n, k): whole * f,
             (c, n): whole * e, (c, c): whole * e, (c, k): 0.0,
             (k, n): transpose * (f + e), (k, c): 0.0, (k, k): whole * f}
    return table[(KINDS[before].dim, KINDS[kind].dim)]


def compute_seconds(kind: str, t: Tensors, parts: int, cubes: int, hardware: Hardware) -> float:
    """The computation cost: the heaviest of `parts` sub-groups (of a group of `cubes` cubes),
    its share split by `kind` with the partition ratio, at the sub-group's peak."""
    throughputs = [cubes / parts * hardware.macs_per_s] * parts
    alpha = max(partition_ratio(throughputs))
    return t.split(kind, alpha).macs / throughputs[0]


@dataclass(frozen=True)
class AccParPlan:
    """The columns chosen and each level's cost for one group (seconds): communication and
    computation, summed over layers."""

    columns: tuple[Column, ...]
    communication_s: tuple[float, ...]
    computation_s: tuple[float, ...]

    @property
    def seconds(self) -> float:
        """AccPar's cost of the plan: every level's (the groups of a level run in parallel)."""
        return sum(self.communication_s) + sum(self.computation_s)


def _level_costs(layers: Sequence[Layer], batch: int, prefixes: Sequence[Column],
                 options: Sequence[Sequence[str]], hierarchy: Hierarchy, level: int,
                 hardware: Hardware, word_bytes: int
                 ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Per layer and type: communication and computation seconds; per boundary: the
    inter-layer table's seconds (rows: the previous layer's options)."""
    parts = hierarchy.sizes[level]
    cubes = hierarchy.members // math.prod(hierarchy.sizes[:level])
    per_second = word_bytes / hardware.link_bytes_per_s
    tensors = [group_tensors(layer, batch, prefix, hierarchy.sizes[:level])
               for layer, prefix in zip(layers, prefixes, strict=True)]
    comm = [np.array([intra_elements(kind, t, parts) * per_second for kind in kinds])
            for t, kinds in zip(tensors, options, strict=True)]
    compute = [np.array([compute_seconds(kind, t, parts, cubes, hardware) for kind in kinds])
               for t, kinds in zip(tensors, options, strict=True)]
    boundary = [np.array([[inter_elements(before, kind, tensors[i], parts) * per_second
                           for kind in options[i]] for before in options[i - 1]])
                for i in range(1, len(layers))]
    return comm, compute, boundary


def plan_levels(layers: Sequence[Layer], batch: int, hierarchy: Hierarchy, kinds: Sequence[str],
                hardware: Hardware, word_bytes: int = 4, model: TrafficModel | None = None,
                fixed: Sequence[Column] | None = None) -> AccParPlan:
    """The hierarchical search: level by level from the top, a layer-wise DP over the chain
    (state: the layer's type at this level) on the tensors the levels above leave. With
    `fixed`, every layer's column is given (AccPar's cost of that plan)."""
    kinds = [kind for kind in TYPES if kind in kinds]
    columns: list[Column] = [() for _ in layers]
    communication, computation = [], []
    for level in range(hierarchy.levels):
        upper = Hierarchy(hierarchy.sizes[:level + 1])
        options = []
        for index, layer in enumerate(layers):
            allowed = [fixed[index][level]] if fixed is not None else [
                kind for kind in kinds if model is None
                or model.offered(layer, batch, columns[index] + (kind,), upper)]
            if not allowed:
                raise InputError(
                    f"--kinds: accpar cannot split layer {layer.name} at level {level + 1} with "
                    f"{','.join(kinds)}; allowed: {', '.join(TYPES)} (AccPar's Type-I, II, III) "
                    "where the dimension has an index for every member")
            options.append(allowed)
        comm, compute, boundary = _level_costs(layers, batch, columns, options, hierarchy,
                                               level, hardware, word_bytes)
        _, states = chain_dp([c + p for c, p in zip(comm, compute, strict=True)], boundary)
        communication.append(sum(float(c[s]) for c, s in zip(comm, states, strict=True))
                             + sum(float(b[states[i], states[i + 1]])
                                   for i, b in enumerate(boundary)))
        computation.append(sum(float(p[s]) for p, s in zip(compute, states, strict=True)))
        columns = [column + (opts[s],)
                   for column, opts, s in zip(columns, options, states, strict=True)]
    return AccParPlan(tuple(columns), tuple(communication), tuple(computation))


def check_types(columns: Sequence[Column]) -> None:
    """Only AccPar's three types can be costed."""
    bad = sorted({kind for column in columns for kind in column} - set(TYPES))
    if bad:
        raise InputError(f"plan: accpar cannot cost kind(s) {','.join(bad)}; allowed: "
                         f"{', '.join(TYPES)}")


def plan_cost(layers: Sequence[Layer], batch: int, columns: Sequence[Column],
              hierarchy: Hierarchy, hardware: Hardware, word_bytes: int = 4) -> AccParPlan:
    """AccPar's cost of a given plan (kinds batch, in, out only)."""
    check_types(columns)
    return plan_levels(layers, batch, hierarchy, tuple(TYPES), hardware, word_bytes,
                       fixed=columns)


def request_hardware(request: PlanRequest | GraphRequest) -> Hardware:
    """The cost model's numbers: from the request's hardware (`make_plan` and
    `make_graph_plan` pass it), else the default hardware at the request's word size."""
    config = request.config
    if config is None:
        config = load_hardware(overrides={"word_bytes": request.word_bytes})
    return Hardware.from_config(config)


def accpar_columns(request: PlanRequest) -> list[Column]:
    """AccPar's plan over the allowed kinds it has types for (its own cost: bytes objective
    only, as the registry says)."""
    kinds = [kind for kind in request.options.kinds if kind in TYPES]
    if not kinds:
        raise InputError(f"--kinds: accpar searches {listed(TYPES)} (AccPar's Type-I, II, "
                         f"III); got {','.join(request.options.kinds)}")
    if not request.network.layers:
        return []
    if not request.hierarchy.levels:
        return [() for _ in request.network.layers]
    return list(plan_levels(request.network.layers, request.batch, request.hierarchy, kinds,
                            request_hardware(request), request.word_bytes,
                            request.model).columns)


@register_strategy("accpar", searches=True, default_kinds=tuple(TYPES), own_cost="its time")
def _accpar(request: PlanRequest) -> list[Column]:
    return accpar_columns(request)


# This strategy's implementation on graph networks registers itself on the entry above.
from hypar_sim.planner import accpar_graph  # noqa: E402, F401
