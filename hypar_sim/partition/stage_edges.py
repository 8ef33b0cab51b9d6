"""An edge between two pipeline stages: the tensor leaves the members of its producer's
stage for those of its consumer's, and its error comes back (`sim.pipeline_schedule`).

Each stage is a copy of the same sub-array, its members numbered alike. The edge's rule
is the one redistribution rule (`partition.redistribute`) on the two stages' members
side by side: the producer's m members contribute its output regions (holding partial
sums where it splits a reduction) and need nothing; the consumer's m members need their
read regions. The rule reduces the partial sums within the producer's stage (its
members own the parts: none of them needs the tensor) and gathers every part to the
consumer's members that read it, nothing held on the way: a member of the consumer's
stage receives all it reads. The error goes back the same way, reduced within the
consumer's stage.
"""

from __future__ import annotations

import numpy as np

from hypar_sim.partition.moved import Moved
from hypar_sim.partition.node_layout import NodeLayout
from hypar_sim.partition.redistribute import redistribute_both_ways


def _side_by_side(first: NodeLayout, second: NodeLayout) -> np.ndarray | None:
    """Replica classes of the two stages' members, the second's numbered after the first's
    (None where neither replicates)."""
    if first.replicas is None and second.replicas is None:
        return None
    m = first.members
    own = first.replicas if first.replicas is not None else np.arange(m)
    other = second.replicas if second.replicas is not None else np.arange(m)
    return np.concatenate([own, other + m])


def placed(moved: Moved, producer_stage: int, consumer_stage: int, members: int,
            total: int) -> Moved:
    """Entries of the side-by-side matrix (2 m members) as the array's members: the first
    m those of the producer's stage, the rest the consumer's."""
    def place(local: np.ndarray) -> np.ndarray:
        return np.where(local < members, producer_stage * members + local,
                        consumer_stage * members + local - members)

    return moved.relabelled(total, place)


def stage_edge_matrices(producer: NodeLayout, consumer: NodeLayout, index: int, batch: int,
                        word_bytes: int, producer_stage: int, consumer_stage: int,
                        total: int) -> dict[str, Moved]:
    """Bytes [src, dst] among the array's `total` members of the four stages of the edge into
    the consumer's input `index`: the forward reduce (within the producer's stage) and
    gather (to the consumer's), the backward reduce (within the consumer's stage) and gather
    (back to the producer's)."""
    m = producer.members
    shape = (batch, *producer.site.node.shape)
    nothing: list[tuple] = [()] * m
    made, read = producer.outputs(), consumer.reads(index)
    replicas = _side_by_side(producer, consumer)
    forward, backward = redistribute_both_ways(shape, made + nothing, nothing + read,
                                               replicas, replicas)
    pooled = producer.site.desc.pooled_ratio

    def on_array(moved: Moved, scale: float) -> Moved:
        return placed(moved * scale, producer_stage, consumer_stage, m, total)

    return {"forward reduce": on_array(forward.reduce, word_bytes * pooled),
            "forward gather": on_array(forward.gather, word_bytes),
            "backward reduce": on_array(backward.reduce, word_bytes),
            "backward gather": on_array(backward.gather, word_bytes)}
