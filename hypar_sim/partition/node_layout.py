"""The layout model on graph networks: every node is split by its own column.

Every node of a graph (`workload.graph`) is a unit of the plan, weightless
ones included (Tofu's view: each operator states its loop dimensions and
which of them index its tensors: its description, `workload.tdl`). A node's
column splits its loop dimensions (a `replicate` level splits none: its
members compute the same, their tensors copies); every member holds a box of
its output and reads boxes of its inputs, and every edge (a tensor from its
producer to one consumer) is redistributed by the one rule of
`redistribute`, forward (the producer's output, partial where it split a
reduction, into the consumer's reads) and backward (the consumer's input
errors, partial where it split one of their reductions, into the producer's
output boxes). Consumers that read a tensor alike share one redistribution
(`planner.plan_messages`).

A node's loops are N and its description's: its output's axes (K, P, Q, H)
and, for a convolution, an fc layer or a product of two activations, the
reduction C; what it reads for a box is `regions.region`. Where a node has no
reduction (every weightless one), both `in` and `out` split its K, so
HyPar's {batch, in} can keep a channel split through a batch norm and an
activation. Batch norm statistics are per member (as frameworks compute them
by default); a global pool over split rows is a partial sum like any other.
A tied projection's weight gradient is added into its owner's (GPT-2's
output projection into the token embedding) before the owner's all-reduce.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hypar_sim.partition.axes import Site
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS, Dim
from hypar_sim.partition.member_boxes import MemberBoxes
from hypar_sim.partition.moved import Moved
from hypar_sim.partition.redistribute import (
    Region,
    all_reduce_totals,
    redistribute,
    redistribute_both_ways,
    totals_both_ways,
)
from hypar_sim.partition.regions import Box, member_boxes, member_regions, volume, weight_shape
from hypar_sim.partition.shares import Column, level_intervals
from hypar_sim.workload.tdl import Description


def loops(site: Site, batch: int) -> dict[Dim, int]:
    """Every loop dimension of the node and its extent: the batch N and its description's."""
    return {Dim.N: batch, **site.desc.loops}


def dim_of(desc: Description, kind: str) -> Dim | None:
    """The dimension `kind` splits in a node of description `desc` (its one channel
    dimension for both in and out where it has no reduction: `Description.channel_alias`;
    None for `replicate`, which splits none)."""
    dim = KINDS[kind].dim
    return Dim.K if desc.channel_alias and dim is Dim.C else dim


def offered(site: Site, batch: int, column: Column, hierarchy: Hierarchy) -> bool:
    """Every level's kind splits a loop dimension of the node and leaves each member at
    least one index of it."""
    op, sizes = site.desc, loops(site, batch)
    parts = dict.fromkeys(sizes, 1)
    for size, kind in zip(hierarchy.sizes, column, strict=True):
        dim = dim_of(op, kind)
        if dim is None:  # replicate: every member computes the same
            continue
        if dim not in sizes or sizes[dim] // parts[dim] < size:
            return False
        parts[dim] *= size
    return True


@dataclass(frozen=True)
class NodeLayout:
    """Every member's box of every loop dimension of one node, and (where a level of its
    column replicates it) every member's replica class: the first member of those that
    differ from it only at replicating levels (they compute the same; None: no replicas)."""

    site: Site
    boxes: dict[Dim, np.ndarray]  # [members, 2]
    replicas: np.ndarray | None = None

    @property
    def members(self) -> int:
        return len(self.boxes[Dim.N])

    def box(self, member: int) -> Box:
        """The member's interval of every loop."""
        return {dim: (int(parts[member, 0]), int(parts[member, 1]))
                for dim, parts in self.boxes.items()}

    def box_sizes(self) -> np.ndarray:
        """[members, dimensions] the length of every member's interval of every loop."""
        return np.stack([parts[:, 1] - parts[:, 0] for parts in self.boxes.values()], axis=1)

    @cached_property
    def held(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(`member_params`, `weight_copies`, `member_kept`) of this layout, once: a memory
        picture reads them for every way to train it is checked under."""
        return member_params(self), weight_copies(self), member_kept(self)

    def outputs(self) -> list[Region]:
        """Every member's region of the node's output (computed once per layout)."""
        return list(self._regions(None))

    def reads(self, index: int) -> list[Region]:
        """Every member's region of input `index` (computed once per layout)."""
        return list(self._regions(index))

    def _regions(self, index: int | None) -> tuple[Region, ...]:
        """Every member's region of input `index` (None: of the output), once."""
        held = self.holding(index)
        return held.regions if isinstance(held, MemberBoxes) else held

    def holding(self, index: int | None) -> MemberBoxes | tuple[Region, ...]:
        """Every member's region of input `index` (None: of the output), once: as arrays
        where each is one box (`regions.member_boxes`), else as tuples."""
        cache = self.__dict__.setdefault("_region_cache", {})  # frozen: not a field
        if index not in cache:
            access = self.site.desc.makes if index is None else self.site.desc.reads[index]
            arrays = member_boxes(access, self.boxes)
            cache[index] = member_regions(access, self.boxes) if arrays is None else arrays
        return cache[index]

    def holding_key(self, index: int | None) -> tuple:
        """Equal for layouts whose members hold equal regions of input `index` (None: of
        the output): `MemberBoxes.key`, or the regions."""
        held = self.holding(index)
        return held.key if isinstance(held, MemberBoxes) else held

    @cached_property
    def shape_key(self) -> tuple:
        """What every matrix of the layout depends on (`own_matrices`, `edge_matrices`): its
        node's geometry, every member's boxes and its replicas; not the node's name (a
        network's repeated blocks share it)."""
        replicas = None if self.replicas is None else self.replicas.tobytes()
        return (self.site.geometry, tuple((dim, parts.tobytes())
                                          for dim, parts in self.boxes.items()), replicas)

    def sharing(self, twin: NodeLayout) -> NodeLayout:
        """This layout, its members' regions computed once with `twin`'s (a node of the
        same `shape_key`): each keeps its own node."""
        self.__dict__["_region_cache"] = twin.__dict__.setdefault("_region_cache", {})
        return self

    def read_signature(self, index: int) -> tuple:
        """What decides that consumers read a tensor alike (one transfer serves them:
        `planner.plan_messages`): every member's region of input `index`, and which members
        are replicas (whose errors are copies, not partial sums)."""
        replicas = None if self.replicas is None else tuple(self.replicas.tolist())
        return tuple(self.reads(index)), replicas


def layout(site: Site, batch: int, column: Column, hierarchy: Hierarchy) -> NodeLayout:
    op = site.desc
    boxes = {}
    for dim, extent in loops(site, batch).items():
        levels = tuple(h for h, kind in enumerate(column) if dim_of(op, kind) is dim)
        boxes[dim] = level_intervals(extent, levels, hierarchy)
    replicated = [h for h, kind in enumerate(column) if dim_of(op, kind) is None]
    if not replicated:
        return NodeLayout(site, boxes)
    members = np.arange(hierarchy.members)
    first = members.copy()
    for h in replicated:  # the coordinate at a replicating level set to 0
        first -= (members // hierarchy.strides[h]) % hierarchy.sizes[h] * hierarchy.strides[h]
    return NodeLayout(site, boxes, first)


def _extent(own: NodeLayout, dim: Dim) -> np.ndarray:
    """[members] the length of every member's interval of `dim`."""
    return own.boxes[dim][:, 1] - own.boxes[dim][:, 0]


def member_channels(own: NodeLayout) -> np.ndarray:
    """[members] the output channels each member makes (a grouped convolution's: its
    channels per group x its groups)."""
    channels = _extent(own, Dim.K)
    return channels * _extent(own, Dim.G) if Dim.G in own.boxes else channels


def tied_copy_params(own: NodeLayout) -> np.ndarray:
    """[members] the parameters a tied projection's members would hold as their own copy
    (a pipeline stage apart from its owner keeps one: `planner.pipeline_messages`)."""
    desc = own.site.desc
    if desc.weights is None or desc.weights.scale or Dim.K not in own.boxes:
        return np.zeros(own.members, dtype=np.int64)
    rows = _extent(own, desc.reduction) if desc.reduction is not None else desc.weights.rows
    return member_channels(own) * rows


def weight_regions(own: NodeLayout) -> list[Region]:
    """Every member's region of the node's weight matrix (`regions.weight_shape`: an fc's
    (K, C), an embedding table's (vocab, K)): what its gradient covers."""
    desc = own.site.desc
    rows, _ = weight_shape(desc)
    channel = 1 + own.site.output.index(Dim.K) if Dim.K in own.site.output else None
    boxes = [own.box(m) for m in range(own.members)]
    return [(((0, rows), b[Dim.K]),) if not desc.weights.by_channel else
            tuple((made[channel], b[Dim.C]) for made in out)  # its channels' rows
            for b, out in zip(boxes, own.outputs(), strict=True)]


def member_params(own: NodeLayout) -> np.ndarray:
    """[members] the parameters each member holds (and updates): the weights of its output
    channels over its share of the reduction (an embedding's: every row of its columns),
    and its channels' biases and norm scales and shifts; a tied projection holds none of
    its owner's."""
    desc = own.site.desc
    if Dim.K not in own.boxes:
        return np.zeros(own.members, dtype=np.int64)
    channels = member_channels(own)
    held = channels * desc.vectors
    if desc.weights is not None:
        rows = _extent(own, desc.reduction) if desc.reduction is not None else \
            desc.weights.rows
        held = held + channels * rows * desc.weights.scale
    return held


def weight_copies(own: NodeLayout) -> np.ndarray:
    """[members] how many data-parallel copies of each member's parameters there are (the
    group its gradients are reduced in, ZeRO's degree for the node): the members with the
    same weight box (its output channels and its share of the reduction), those that only
    replicate it (compute the same samples: one replica class) counted once."""
    desc = own.site.desc
    if Dim.K not in own.boxes:
        return np.ones(own.members, dtype=np.int64)
    dims = [Dim.K] + [d for d in (desc.reduction,) if d is not None and d in own.boxes]
    _, box = np.unique(np.concatenate([own.boxes[d] for d in dims], axis=1), axis=0,
                       return_inverse=True)
    box = box.reshape(-1)
    replica = own.replicas if own.replicas is not None else np.arange(own.members)
    pairs = np.unique(np.stack([box, replica], axis=1), axis=0)
    return np.bincount(pairs[:, 0], minlength=int(box.max()) + 1)[box]


def member_kept(own: NodeLayout) -> np.ndarray:
    """[members] the elements of the node each member keeps for its backward pass: a
    multiply-accumulate body keeps what it reads of its inputs (its weight gradient, or the
    other operand's error, needs them: HyPar's F_l, halo and copies included), an operator
    with element operations its output box (an activation's,
    a norm's, a pooling's), a copy (reshape, concatenation, lookup) nothing. A tensor that
    several bodies read is counted by each (an overstatement where they share a cube)."""
    desc = own.site.desc
    if desc.channel is not None:
        return _read_volumes(own)
    if not desc.ops_per_element:
        return np.zeros(own.members, dtype=np.int64)
    kept = _extent(own, Dim.N)
    for dim in own.site.output:
        kept = kept * (member_channels(own) if dim is Dim.K else _extent(own, dim))
    return kept


def _read_volumes(own: NodeLayout) -> np.ndarray:
    """[members] the elements each member reads of all the node's inputs (its regions, as
    the edges' costs read them: `NodeLayout.reads`)."""
    total = np.zeros(own.members, dtype=np.int64)
    for index in range(len(own.site.desc.reads)):
        total += np.array([volume(read) for read in own.reads(index)], dtype=np.int64)
    return total


def member_footprint_bytes(own: NodeLayout, word_bytes: int,
                           gradients: bool = True) -> np.ndarray:
    """[members] bytes each member keeps for the node through a training step: its weights,
    their gradients (not in an inference: `gradients` False) and its kept output, all at
    `word_bytes` (the planner's guide where no training options price it:
    `Costs.priced_by`)."""
    return ((1 + gradients) * member_params(own) + member_kept(own)) * word_bytes


#: The stages of a forward pass (an inference moves these alone): an edge's forward reduce
#: and gather, and the reduction of the graph's partial outputs.
FORWARD_STAGES = frozenset({"forward reduce", "forward gather", "loss reduce"})


def tensor_shape(site: Site, batch: int) -> tuple[int, ...]:
    """The shape of the node's output with `batch` samples."""
    return (batch, *site.node.shape)


#: An edge's stages, in the order `edge_matrices` and `edge_bytes` give them.
EDGE_STAGE_NAMES = ("forward reduce", "forward gather", "backward reduce", "backward gather")


def edge_matrices(producer: NodeLayout, consumer: NodeLayout, index: int, batch: int,
                  word_bytes: int) -> dict[str, Moved]:
    """Bytes [src, dst] of the four stages of the edge into the consumer's input `index`
    (where every member reads exactly what it alone made, nothing moves: zeros, without
    running the cell rule)."""
    return _edge(producer, consumer, index, batch, word_bytes, True)


def edge_bytes(producer: NodeLayout, consumer: NodeLayout, index: int, batch: int,
               word_bytes: int) -> dict[str, float]:
    """The bytes of each of `edge_matrices`' stages, in closed form
    (`redistribute.totals_both_ways`): a cost in bytes, without the matrices."""
    return _edge(producer, consumer, index, batch, word_bytes, False)


def _edge(producer: NodeLayout, consumer: NodeLayout, index: int, batch: int,
          word_bytes: int, matrices: bool) -> dict:
    """`edge_matrices` (`matrices`), else `edge_bytes`."""
    made, read = producer.holding(None), consumer.holding(index)
    if _same_and_distinct(made, read):
        return dict.fromkeys(EDGE_STAGE_NAMES, Moved.none(len(made)) if matrices else 0.0)
    shape, replicas = tensor_shape(producer.site, batch), (producer.replicas,
                                                           consumer.replicas)
    if matrices:
        forward, backward = ((stages.reduce, stages.gather) for stages in
                             redistribute_both_ways(shape, made, read, *replicas))
    else:
        forward, backward = totals_both_ways(shape, made, read, *replicas)
    # a partial output is reduced before its folded pooling: pre-pooling elements
    pooled = producer.site.desc.pooled_ratio
    return dict(zip(EDGE_STAGE_NAMES, (forward[0] * (word_bytes * pooled),
                                       forward[1] * word_bytes, backward[0] * word_bytes,
                                       backward[1] * word_bytes), strict=True))


def _same_and_distinct(made: MemberBoxes | tuple[Region, ...],
                       read: MemberBoxes | tuple[Region, ...]) -> bool:
    """Whether every member reads the region it made, and no two members the same one
    (nothing moves)."""
    if isinstance(made, MemberBoxes) and isinstance(read, MemberBoxes):
        return made.same_as(read) and made.all_differ()
    made = made.regions if isinstance(made, MemberBoxes) else made
    read = read.regions if isinstance(read, MemberBoxes) else read
    return made == read and len(set(made)) == len(made)


def _vector_regions(own: NodeLayout) -> tuple[int, list[Region]]:
    """(output channels, every member's range of them): what a bias or a norm's scale and
    shift is held in."""
    channel = 1 + own.site.output.index(Dim.K)
    return (own.site.node.shape[channel - 1],
            [tuple((made[channel],) for made in out) for out in own.outputs()])


def own_key(own: NodeLayout, is_output: bool) -> tuple:
    """Everything `own_matrices` reads of the layout (besides the batch and the word):
    layouts of different nodes with equal keys have equal matrices."""
    desc = own.site.desc
    scale = desc.weights.scale if desc.weights is not None else 0
    extent, vector_regions = _vector_regions(own) if desc.vectors else (0, [])
    return ((weight_shape(desc), scale, tuple(weight_regions(own))) if scale else None,
            (desc.vectors, extent, tuple(vector_regions)) if desc.vectors else None,
            (own.site.node.shape, desc.pooled_ratio, tuple(own.outputs())) if is_output
            else None, None if own.replicas is None else own.replicas.tobytes())


def _own_parts(own: NodeLayout, batch: int, word_bytes: int, is_output: bool) -> list[tuple]:
    """The node's own all-reduces: (name, tensor shape, every member's region, bytes per
    element of the reduce, of the gather) of its weights' gradient, of its vectors (a bias
    or a norm's scale and shift: one value per output channel each) and, an output of the
    graph, of its loss (its partial values reduced before a folded pooling)."""
    desc = own.site.desc
    parts = []
    scale = desc.weights.scale if desc.weights is not None else 0
    if scale:
        parts.append(("gradient", weight_shape(desc), weight_regions(own), word_bytes * scale,
                      word_bytes * scale))
    if desc.vectors:
        extent, regions = _vector_regions(own)
        parts.append(("vector", (extent,), regions, word_bytes * desc.vectors,
                      word_bytes * desc.vectors))
    if is_output:
        parts.append(("loss", tensor_shape(own.site, batch), own.holding(None),
                      word_bytes * desc.pooled_ratio, word_bytes))
    return parts


def own_bytes(own: NodeLayout, batch: int, word_bytes: int,
              is_output: bool) -> dict[str, float]:
    """The bytes of each of `own_matrices`' stages, in closed form
    (`redistribute.all_reduce_totals`): a cost in bytes, without the matrices."""
    result = {}
    for name, shape, regions, reduce_scale, gather_scale in _own_parts(own, batch,
                                                                      word_bytes, is_output):
        reduced, gathered = all_reduce_totals(shape, regions, own.replicas)
        result[f"{name} reduce"] = reduced * reduce_scale
        result[f"{name} gather"] = gathered * gather_scale
    return result


def own_matrices(own: NodeLayout, batch: int, word_bytes: int,
                 is_output: bool) -> dict[str, Moved]:
    """Bytes [src, dst] of a node's gradient all-reduce (weights, biases, a norm's scale
    and shift), and of the loss if it is an output of the graph (its partial values
    reduced wherever the reduction leaves them; the error goes back the same way)."""
    result = {}
    for name, shape, regions, reduce_scale, gather_scale in _own_parts(own, batch,
                                                                      word_bytes, is_output):
        loss = name == "loss"  # needed nowhere: its error goes back to its contributors
        stages = redistribute(shape, regions, None if loss else regions, own.replicas)
        result[f"{name} reduce"] = stages.reduce * reduce_scale
        result[f"{name} gather"] = (stages.returned() if loss else stages.gather) * gather_scale
    return result
