"""Graph networks: a DAG of operators (`ops`) with named inputs and inferred shapes.

YAML schema (a file with `nodes` is a graph; one with `layers` is a chain,
see `network`)::

    name: resnet18                       # optional, defaults to the file name
    description: ...                     # optional
    source: ...                          # optional: where the definition comes from
    inputs: {image: [3, 224, 224]}       # graph inputs: name -> per-sample shape
    nodes:
      - {name: conv1, type: conv, out_channels: 64, kernel: 7, stride: 2, padding: 3}
      - {name: bn1, type: batch_norm}    # inputs: default the node before
      - {name: add1, type: add, inputs: [bn3, relu1]}
    outputs: [fc]                        # optional: default, the nodes nobody reads

Nodes may be listed in any order; they are sorted so that every node comes
after its inputs, and a cycle is an error. Every error is one line naming
the file and the field.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hypar_sim.errors import InputError, clip_value, closest
from hypar_sim.workload.dims import Dim, Dims
from hypar_sim.workload.operators import flattens
from hypar_sim.workload.ops import OPS, Shape, check_elements, positive
from hypar_sim.workload.ops import name as check_name
from hypar_sim.workload.tdl import Description

_TOP_KEYS = {"name", "description", "source", "inputs", "nodes", "outputs"}
_NODE_KEYS = {"name", "type", "inputs"}


@dataclass(frozen=True)
class Node:
    """One operator with its inputs (node or graph-input names) and what it computes: its
    description (`workload.tdl`: loops, index expressions; None where the operator cannot
    be described, `why` says why: such a graph lists but does not plan)."""

    name: str
    op: str
    inputs: tuple[str, ...]
    input_shapes: tuple[Shape, ...]
    shape: Shape  # output, per sample
    params: int  # learnable values (biases and norm scales included; tied weights once)
    macs: int  # forward multiply-accumulates per sample (from the description)
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=False)
    desc: Description | None = field(default=None, compare=False)
    input_dims: tuple[Dims, ...] = field(default=(), compare=False)
    why: str = field(default="", compare=False)


@dataclass(frozen=True)
class Graph:
    """Nodes in dependency order, the graph's inputs (name -> per-sample shape) and outputs."""

    name: str
    inputs: Mapping[str, Shape]
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]
    source: str = ""
    description: str = ""
    notes: tuple[str, ...] = ()  # what an importer decided for the user (one line each)
    axes: Mapping[str, int] = field(default_factory=dict)  # an import's bound named axes

    @property
    def params(self) -> int:
        return sum(node.params for node in self.nodes)

    @property
    def macs_per_sample(self) -> int:
        return sum(node.macs for node in self.nodes)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def generation_of(self) -> list[int]:
        """Every node's generation: one more than its latest input's (graph inputs: -1)."""
        index = {node.name: i for i, node in enumerate(self.nodes)}
        depth: list[int] = []
        for node in self.nodes:
            depth.append(1 + max((depth[index[s]] for s in node.inputs if s in index),
                                 default=-1))
        return depth

    def generations(self) -> list[list[int]]:
        """Nodes by generation (`generation_of`), in order within each."""
        depth = self.generation_of()
        generations: list[list[int]] = [[] for _ in range(max(depth, default=-1) + 1)]
        for i, d in enumerate(depth):
            generations[d].append(i)
        return generations

    def consumers(self) -> dict[str, list[str]]:
        """Node or input name -> the nodes that read it, in order."""
        readers: dict[str, list[str]] = {name: [] for name in self.inputs}
        for node in self.nodes:
            readers.setdefault(node.name, [])
            for source in node.inputs:
                readers[source].append(node.name)
        return readers


def _shape(where: str, value: Any) -> Shape:
    if not isinstance(value, list) or not value:
        raise InputError(f"{where}: must be a list of sizes, e.g. [3, 224, 224], got {clip_value(value)}")
    return tuple(positive(where, v) for v in value)


def _keys(where: str, data: Any, allowed: set[str], what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: expected a mapping ({what})")
    unknown = [key for key in data if key not in allowed]
    if unknown:
        raise InputError(f"{where}: unknown field '{unknown[0]}'"
                         f"{closest(str(unknown[0]), allowed)}; allowed: "
                         f"{', '.join(sorted(allowed))}")
    return data


def _ordered(source: str, raw: list[tuple[str, Mapping[str, Any], tuple[str, ...]]],
             inputs: Mapping[str, Shape]) -> list[tuple[str, Mapping[str, Any], tuple[str, ...]]]:
    """The nodes sorted so that each follows its inputs (among the ready ones, the first
    listed goes first); a cycle is an error."""
    index_of = {name: i for i, (name, _, _) in enumerate(raw)}
    waiting = [0] * len(raw)
    readers: dict[int, list[int]] = {}
    for i, (_, _, sources) in enumerate(raw):
        for name in sources:
            if name in index_of:
                waiting[i] += 1
                readers.setdefault(index_of[name], []).append(i)
            elif name not in inputs:
                raise InputError(f"{source}: nodes[{i}].inputs: no node or input named "
                                 f"'{name}'{closest(name, [*inputs, *index_of])}")
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(raw[i])
        for reader in readers.get(i, ()):
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(order) < len(raw):
        stuck = ", ".join(raw[i][0] for i, count in enumerate(waiting) if count)
        raise InputError(f"{source}: nodes: the graph has a cycle (through {stuck[:120]})")
    return order


def parse_graph(data: Any, source: str, default_name: str = "graph",
                input_dims: Mapping[str, Dims] | None = None) -> Graph:
    """Validate a parsed YAML graph and infer every node's shape, parameters and MACs; an
    importer may name the loops of graph inputs (`input_dims`: token ids are positions P,
    whatever reads them), else `_input_dims` names them."""
    data = _keys(source, data, _TOP_KEYS, "name, inputs, nodes, outputs")
    for key in ("inputs", "nodes"):
        if key not in data:
            raise InputError(f"{source}: missing field '{key}'")
    if not isinstance(data["inputs"], Mapping):
        raise InputError(f"{source}: inputs: must map each input's name to its per-sample "
                         f"shape, e.g. {{image: [3, 224, 224]}}, got {clip_value(data['inputs'])}")
    given = data["inputs"]
    inputs = {check_name(f"{source}: inputs", name): _shape(f"{source}: inputs.{name}", shape)
              for name, shape in given.items()}
    for name, shape in inputs.items():
        check_elements(f"{source}: inputs.{name}", shape)
    if not inputs:
        raise InputError(f"{source}: inputs: give at least one, e.g. image: [3, 224, 224]")
    raw_nodes = data["nodes"]
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise InputError(f"{source}: nodes: must be a non-empty list")
    raw: Raw = []
    previous, names = None, set(inputs)
    for index, entry in enumerate(raw_nodes):
        where = f"{source}: nodes[{index}]"
        op = entry.get("type") if isinstance(entry, Mapping) else None
        if op not in OPS:
            raise InputError(f"{where}.type: unknown operator {clip_value(op)}{closest(str(op), OPS)}; "
                             f"allowed: {', '.join(OPS)}")
        name = check_name(f"{where}.name", entry.get("name", f"{op}{index + 1}"))
        if name in names:
            raise InputError(f"{where}.name: duplicate name '{name}'")
        names.add(name)
        sources = entry.get("inputs")
        if sources is None:
            if previous is None and len(inputs) > 1:
                raise InputError(f"{where}.inputs: the first node must name its input "
                                 f"(the graph has several: {', '.join(inputs)})")
            sources = [previous if previous is not None else next(iter(inputs))]
        if isinstance(sources, str):
            sources = [sources]
        if not isinstance(sources, list) or not sources:
            raise InputError(f"{where}.inputs: must be a list of node or input names")
        raw.append((name, entry, tuple(str(s) for s in sources)))
        previous = name
    outputs = data.get("outputs")
    if outputs == []:
        raise InputError(f"{source}: outputs: give at least one node name, or leave the field "
                         "out (the nodes nobody reads)")
    raw, renamed = fold_pools(raw, outputs if isinstance(outputs, list) else [])
    if isinstance(outputs, list):
        outputs = [renamed.get(o, o) for o in outputs]
    shapes: dict[str, Shape] = dict(inputs)
    ordered = _ordered(source, raw, inputs)
    dims = {name: (input_dims or {}).get(name) or _input_dims(
        name, shape, [entry["type"] for _, entry, sources in ordered if name in sources])
        for name, shape in inputs.items()}
    nodes = []
    for name, entry, sources in ordered:
        spec = OPS[entry["type"]]
        where = f"{source}: node {name}"
        fewest, most = spec.arity
        if not fewest <= len(sources) <= (most or len(sources)):
            takes = f"{fewest}" if fewest == most else f"{fewest} or more" if most is None \
                else f"{fewest} to {most}"
            raise InputError(f"{where}.inputs: a {spec.name} node takes {takes} input"
                             f"{'' if takes == '1' else 's'}, got {len(sources)}")
        attrs = spec.attributes(where, {k: v for k, v in entry.items() if k not in _NODE_KEYS})
        in_shapes = [shapes[s] for s in sources]
        counts = spec.count(where, attrs, in_shapes)
        check_elements(f"{where}: output", counts.shape)
        shapes[name] = counts.shape
        desc, why = _describe(spec.describe, attrs, in_shapes, counts.shape,
                              [dims[s] for s in sources], name, spec.name)
        if desc is None and spec.weighted:
            raise InputError(f"{where}: {why}")
        # an undescribed node's output takes the loops a graph input of its rank would have,
        # so that its readers still have descriptions (and MACs); planning refuses the node
        dims[name] = desc.output if desc is not None else _input_dims(name, counts.shape, [])
        nodes.append(Node(name, spec.name, sources, tuple(in_shapes), counts.shape,
                          counts.params, desc.macs if desc is not None else 0, attrs, desc,
                          tuple(dims[s] for s in sources), why))
    _check_ties(source, nodes)
    if outputs is None:
        read = {s for node in nodes for s in node.inputs}
        outputs = [node.name for node in nodes if node.name not in read]
    if not isinstance(outputs, list) or not all(o in shapes for o in outputs):
        raise InputError(f"{source}: outputs: must list node names, got {clip_value(outputs)}")
    return Graph(check_name(f"{source}: name", data.get("name", default_name)), inputs,
                 tuple(nodes),
                 tuple(str(o) for o in outputs), str(data.get("source", "")),
                 str(data.get("description", "")))


Raw = list[tuple[str, Mapping[str, Any], tuple[str, ...]]]


def fold_pools(raw: Raw, outputs: list) -> tuple[Raw, dict[str, str]]:
    """The nodes with every pooling that is the one reader of a convolution (and reads
    nothing else) folded into it, as its `pool` field (HyPar's chains: a convolution and its
    pooling are one layer, `workload.network`), and the folded pools' names -> their
    convolution's (their readers read the convolution)."""
    readers: dict[str, list[str]] = {}
    for name, _, sources in raw:
        for s in sources:
            readers.setdefault(s, []).append(name)
    entries = {name: entry for name, entry, _ in raw}
    folded: dict[str, str] = {}  # pool -> conv
    for name, entry, sources in raw:
        conv = entries.get(sources[0]) if len(sources) == 1 else None
        if entry.get("type") == "pool" and conv is not None and conv.get("type") == "conv" \
                and conv.get("pool") is None and readers[sources[0]] == [name] \
                and sources[0] not in outputs:
            folded[name] = sources[0]
    if not folded:
        return raw, {}
    pools = {conv: {k: v for k, v in entries[pool].items() if k not in _NODE_KEYS}
             for pool, conv in folded.items()}
    result = []
    for name, entry, sources in raw:
        if name in folded:
            continue
        if name in pools:
            entry = {**entry, "pool": pools[name]}
        result.append((name, entry, tuple(folded.get(s, s) for s in sources)))
    return result, folded


def _input_dims(name: str, shape: Shape, readers: list[str]) -> Dims | None:
    """The loops of a graph input's axes: an image (K channels, P rows, Q columns), token
    ids (P positions) where an embedding reads them, a vector (K), a token stream (P, K);
    None for other ranks (such a graph lists but does not plan)."""
    if len(shape) == 3:
        return Dim.K, Dim.P, Dim.Q
    if len(shape) == 1:
        return (Dim.P,) if "embedding" in readers else (Dim.K,)
    if len(shape) == 2:
        return Dim.P, Dim.K
    return None


def _describe(describe, attrs: Mapping[str, Any], shapes: list[Shape], shape: Shape,
              dims: list[Dims | None], name: str, op: str) -> tuple[Description | None, str]:
    """The node's description, or None and why there is none."""
    if any(d is None for d in dims):
        return None, (f"node {name} ({op}) reads an input of {len(shapes[0])} axes; graph "
                      "planning takes images (3 axes), token streams (1 or 2 axes) and vectors")
    try:
        desc = describe(attrs, shapes, shape, dims)
    except InputError as exc:
        return None, f"node {name} ({op}): {exc}"
    if len(set(desc.output)) != len(desc.output) or len(desc.output) != len(shape):
        return None, (f"node {name} ({op}): cannot name the axes of its output {list(shape)} "
                      f"(got {''.join(desc.output)})")
    return desc, ""


def _check_ties(source: str, nodes: list[Node]) -> None:
    """A node whose weights are another's (`tied_to`) must name a weighted node with as
    many weights (GPT-2's output projection is its token embedding, transposed)."""
    by_name = {node.name: node for node in nodes}
    for node in nodes:
        tied = node.attrs.get("tied_to")
        if not tied:
            continue
        owner = by_name.get(str(tied))
        if owner is None or not OPS[owner.op].weighted:
            raise InputError(f"{source}: node {node.name}.tied_to: no weighted node named "
                             f"'{tied}'{closest(str(tied), by_name)}")
        shape = node.input_shapes[0]
        own = (math.prod(shape) if flattens(shape, node.attrs["flatten"]) else shape[-1]) \
            * node.shape[-1]
        if owner.params - (owner.shape[-1] if owner.attrs.get("bias") else 0) != own:
            raise InputError(f"{source}: node {node.name}.tied_to: {owner.name} has "
                             f"{owner.params} weights, {node.name} needs {own}")
