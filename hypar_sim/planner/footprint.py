"""The peak memory of the busiest cube under a plan and its training options: one function
for the planner's check and the simulator's, so that no plan is accepted that the run then
refuses.

Per member, summed over the nodes (`planner.training`): weights, gradients and optimizer
state of the parameters it holds (sharded among their copies by ZeRO), the activations it
keeps for the backward pass (those recomputation keeps, or under full recomputation what
it reads of each segment's inputs; plus, where it recomputes, the largest segment's
rebuilt activations), under ZeRO 3 the largest generation's gathered weights
(the other copies' shards), and buffers: the most it receives in one communication step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hypar_sim.hardware.capacity import Footprint
from hypar_sim.partition import node_layout
from hypar_sim.partition.regions import volume
from hypar_sim.planner.training import Training, recompute_plan
from hypar_sim.workload.graph import Graph

PARTS = ("weights", "gradients", "optimizer_state", "activations", "gathered_weights",
         "buffers")


@dataclass(frozen=True)
class MemoryPicture:
    """The busiest member's bytes by part, and node by node (its working sets last)."""

    parts: tuple[tuple[str, float], ...]
    nodes: tuple[Footprint, ...]
    buffers_bytes: float  # what the nodes do not hold: gathered weights and buffers


def _held(layouts: Sequence[node_layout.NodeLayout]) -> list[tuple[np.ndarray, ...]]:
    """Every layout's `NodeLayout.held`, computed once for layouts alike (the same geometry,
    boxes and replicas: a transformer's blocks repeat theirs)."""
    seen: dict[tuple, tuple[np.ndarray, ...]] = {}
    found = []
    for own in layouts:
        key = (own.site.geometry, tuple(box.tobytes() for box in own.boxes.values()),
               None if own.replicas is None else own.replicas.tobytes())
        if key not in seen:
            seen[key] = own.held
        found.append(seen[key])
    return found


def memory_picture(graph: Graph, layouts: Sequence[node_layout.NodeLayout], word_bytes: int,
                   gradients: bool, receive_bytes: float, training: Training,
                   in_flight: int = 1) -> MemoryPicture:
    """The member whose cube keeps the most at its peak (see the module docstring);
    `receive_bytes`: the most a member receives in one step; `gradients` False: an
    inference (no gradients, no optimizer state, nothing recomputed); `in_flight`: the
    micro-batches whose kept activations a pipeline stage holds at once (one segment's
    rebuilt ones at a time)."""
    if not layouts:
        return MemoryPicture(tuple((part, 0.0) for part in PARTS[:-1])
                             + (("buffers", receive_bytes),), (), receive_bytes)
    held = _held(layouts)
    params = np.stack([h[0] for h in held]).astype(float)
    copies = np.stack([h[1] for h in held])
    kept = np.stack([h[2] for h in held]).astype(float)
    plan = recompute_plan(graph, training.recompute if gradients else "none", in_flight)
    stays = np.zeros(len(layouts), dtype=bool)
    stays[list(plan.kept)] = True
    dropped = np.zeros(kept.shape)  # [node, member] reads a kept node does not keep
    for i, k in plan.dropped:
        dropped[i] += [volume(read) for read in layouts[i].reads(k)]
    kept = kept - dropped  # what a kept node keeps; a segment rebuilds the rest
    parts = training.member_bytes(params, copies, kept * stays[:, None] * in_flight,
                                  word_bytes, gradients)
    inputs = np.zeros(params.shape[1])  # full recomputation's segment inputs
    for i, k in plan.inputs:
        inputs += [volume(read) for read in layouts[i].reads(k)]
    inputs *= in_flight * word_bytes
    rebuilt = np.zeros(params.shape[1])  # the largest segment's recomputed activations
    for segment in plan.segments:
        again = [i for i in segment if not stays[i]]
        if again or dropped[list(segment)].any():
            rebuilt = np.maximum(rebuilt, (kept[again].sum(axis=0)
                                           + dropped[list(segment)].sum(axis=0)) * word_bytes)
    gathered = np.zeros(params.shape[1])  # ZeRO 3: a generation's whole weights at a time
    if training.zero >= 3:  # (the schedule gathers a generation's nodes together)
        others = (params - params / copies) * word_bytes
        for generation in graph.generations():
            gathered = np.maximum(gathered, others[generation].sum(axis=0))
    total = sum(part.sum(axis=0) for part in parts.values()) + inputs + rebuilt + gathered
    m = int(np.argmax(total))
    nodes = [Footprint(own.site.node.name, float(parts["weights"][i, m]),
                       float(parts["gradients"][i, m]), float(parts["activations"][i, m]),
                       float(parts["optimizer_state"][i, m])) for i, own in enumerate(layouts)]
    if inputs[m]:
        nodes.append(Footprint("(the segments' inputs)", 0.0, 0.0, float(inputs[m])))
    if rebuilt[m]:
        nodes.append(Footprint("(a recomputed segment)", 0.0, 0.0, float(rebuilt[m])))
    summed = {name: float(part[:, m].sum()) for name, part in parts.items()}
    summed["activations"] += float(inputs[m] + rebuilt[m])
    summed["gathered_weights"], summed["buffers"] = float(gathered[m]), receive_bytes
    return MemoryPicture(tuple((name, summed[name]) for name in PARTS), tuple(nodes),
                         receive_bytes + float(gathered[m]))


def node_rule(graph: Graph, training: Training, word_bytes: int, gradients: bool
              ) -> Callable[[node_layout.NodeLayout], np.ndarray]:
    """A node's bytes per member under the training options, for the planner's search
    (`layout_costs.Costs.priced_by`): `memory_picture`'s parts of that node alone, a lower
    bound: no working sets, and under full recomputation no kept activations (which nodes
    keep theirs depends on the segments, not on the node's shape, by which costs are
    remembered)."""
    plan = recompute_plan(graph, training.recompute if gradients else "none")
    kept_names = {graph.nodes[i].name for i in plan.kept} if training.recompute != "full" \
        else set()
    dropped = {(graph.nodes[i].name, k) for i, k in plan.dropped}

    def rule(own: node_layout.NodeLayout) -> np.ndarray:
        name = own.site.node.name
        kept = node_layout.member_kept(own) * float(name in kept_names)
        for k in range(len(own.site.inputs)):
            if (name, k) in dropped:
                kept = kept - np.array([volume(read) for read in own.reads(k)])
        parts = training.member_bytes(node_layout.member_params(own).astype(float),
                                      node_layout.weight_copies(own), kept, word_bytes,
                                      gradients)
        return sum(parts.values())

    return rule
