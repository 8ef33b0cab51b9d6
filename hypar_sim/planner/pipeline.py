"""Pipeline parallelism (`--pipeline S --microbatches M --schedule gpipe|1f1b`): the array's
top level is a pipeline level of S stages, each a copy of the sub-array below it; every
stage holds a contiguous run of the graph's nodes (in the graph's order), and the batch is
cut into M micro-batches that flow through the stages (GPipe: Huang et al., NeurIPS 2019;
1F1B: Narayanan et al., ICML 2021).

The stages are the user's (`--stages`: the first node of each stage after the first, or a
pipeline plan's `plan --json` file given with `--plan`) or balanced: contiguous runs
minimising the largest stage's multiply-accumulates (per sample, the work of its forward
and, in proportion, its backward pass), each boundary then moved, within a tenth of a
stage's work, to where the fewest elements cross it. Within a stage,
nodes are split across the sub-array by the strategy's plan for one micro-batch on it (the
same plan for every stage); that plan is searched without the capacity, and the pipeline
plan is checked against it: per cube, its stage's weights, gradients and state, the
activations of the micro-batches in flight (GPipe keeps all M, 1F1B at most S - s on
stage s), and the largest receive. A tied projection in another stage than its weights'
owner (GPT-2's output projection) keeps a copy of them there, with its gradients and state.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import HardwareConfig, load_hardware
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.node_layout import tied_copy_params, weight_copies
from hypar_sim.partition.shares import Column
from hypar_sim.partition.steps import largest_receive
from hypar_sim.planner.footprint import memory_picture
from hypar_sim.planner.pipeline_messages import (
    pipeline_messages,
    stage_graph,
    stage_nodes,
    tied_apart,
)
from hypar_sim.planner.plan_messages import graph_layouts
from hypar_sim.planner.plan_text import plan_file_stages
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.planner.training import Training, crossing_elements
from hypar_sim.workload.graph import Graph

GIB = 2**30


def sub_array(hierarchy: Hierarchy, stages: int) -> Hierarchy:
    """The levels below the pipeline level (the top one, of `stages` members)."""
    if not hierarchy.sizes or hierarchy.sizes[0] != stages:
        raise InputError(f"--pipeline {stages}: the array's top level holds the stages, but "
                         f"the hierarchy is {hierarchy}; give --hierarchy {stages}x... (or "
                         f"only --accelerators, a multiple of {stages})")
    return Hierarchy(hierarchy.sizes[1:])


def assign_stages(graph: Graph, training: Training) -> tuple[int, ...]:
    """Every node's stage: from `training.stage_names`, else balanced (the module
    docstring)."""
    count, nodes = training.stages, graph.nodes
    if len(nodes) < count:
        raise InputError(f"--pipeline {count}: {graph.name} has {len(nodes)} nodes, fewer than "
                         "the stages")
    if training.stage_names:
        index = {node.name: i for i, node in enumerate(nodes)}
        firsts = [0]
        for name in training.stage_names:
            if name not in index:
                raise InputError(f"--stages: no node '{name}' in {graph.name}; give node names "
                                 "as `networks` lists them")
            firsts.append(index[name])
        if any(b <= a for a, b in zip(firsts, firsts[1:], strict=False)):
            raise InputError(f"--stages: {','.join(training.stage_names)} are not in the graph's "
                             "order after its first node; each stage must hold a node")
        return tuple(int(np.searchsorted(firsts, i, side="right")) - 1 for i in range(len(nodes)))
    work = np.array([max(node.macs, 0) for node in nodes], dtype=np.int64)
    return cheap_cuts(graph, balanced(work, count), work)


#: How far a balanced stage boundary may move to cut fewer elements: within this share of
#: a stage's work.
SLACK = 0.1


def cheap_cuts(graph: Graph, stages: tuple[int, ...], work: np.ndarray) -> tuple[int, ...]:
    """`stages` with every boundary moved to where the fewest elements (per sample) cross
    from the nodes before it to those after (a layer's input rather than its attention
    scores), among the boundaries whose stage work stays within `SLACK` of a stage's share;
    the nearest on a tie."""
    count = max(stages) + 1
    crossing = crossing_elements(graph, range(len(graph.nodes)))  # a cut before node c
    done = np.concatenate([[0], np.cumsum(work)])
    share = done[-1] / count * SLACK
    starts = [stages.index(s) for s in range(1, count)]
    moved = []
    for j, start in enumerate(starts):
        low = moved[-1] + 1 if moved else 1
        high = starts[j + 1] - 1 if j + 1 < len(starts) else len(graph.nodes) - 1
        near = [c for c in range(low, high + 1) if abs(done[c] - done[start]) <= share]
        moved.append(min(near or [start], key=lambda c: (crossing[c], abs(c - start))))
    return tuple(int(np.searchsorted(moved, i, side="right")) for i in range(len(graph.nodes)))


def balanced(work: np.ndarray | Sequence[int], count: int) -> tuple[int, ...]:
    """Contiguous runs of `work` into `count` non-empty stages minimising the largest run's
    sum B (the least bound whose greedy filling needs at most `count` runs, by bisection);
    then, stage by stage, the run whose sum is nearest an even share of the work left among
    those that stay within B and leave a rest that `count` - 1 - j runs within B can take."""
    values = [int(w) for w in work]
    n = len(values)
    prefix = [0, *itertools.accumulate(values)]

    def needed(bound: int) -> list[int]:
        """[i]: the fewest runs within `bound` that take values[i:] (greedy is optimal)."""
        need = [0] * (n + 1)
        end = n
        for i in range(n - 1, -1, -1):
            while prefix[end] - prefix[i] > bound and end > i + 1:
                end -= 1
            need[i] = 1 + need[end] if prefix[end] - prefix[i] <= bound else n + 1
        return need

    low, high = max(values, default=0), prefix[-1]
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if needed(middle)[0] <= count else (middle + 1, high)
    need = needed(low)
    stages: list[int] = []
    start = 0
    for j in range(count):
        left = count - j
        if left == 1:
            stages += [j] * (n - start)
            break
        share = (prefix[n] - prefix[start]) / left
        ends = [b for b in range(start + 1, n - left + 2)
                if prefix[b] - prefix[start] <= low and need[b] <= left - 1]
        end = min(ends, key=lambda b: (abs(prefix[b] - prefix[start] - share), b))
        stages += [j] * (end - start)
        start = end
    return tuple(stages)


def _given_stages(graph: Graph, training: Training, plan_text: str | None
                  ) -> tuple[int, ...] | None:
    """The stages a pipeline plan's `plan --json` file gives (`--plan FILE`), unless
    `--stages` names them; one line where they are not `training.stages` contiguous runs."""
    found = None if training.stage_names else plan_file_stages(plan_text, [
        node.name for node in graph.nodes])
    if found is None:
        return None
    if sorted(set(found)) != list(range(training.stages)) or list(found) != sorted(found):
        raise InputError(f"--plan {plan_text}: its nodes' stages are not {training.stages} "
                         f"contiguous runs 1 to {training.stages} (--pipeline "
                         f"{training.stages}); give --pipeline as the plan has it")
    return found


def in_flight(training: Training, stage: int) -> int:
    """Micro-batches whose activations stage `stage` keeps at once: all of them under
    GPipe, at most S - s under 1F1B (its warm-up depth plus the one in its backward)."""
    if training.schedule == "gpipe":
        return training.microbatches
    return min(training.microbatches, training.stages - stage)


def micro_batch(batch: int, training: Training) -> int:
    if batch % training.microbatches:
        raise InputError(f"--microbatches {training.microbatches}: does not divide the batch "
                         f"{batch}; use a divisor of it")
    return batch // training.microbatches


def pipeline_plan(graph: Graph, strategy: str, hierarchy: Hierarchy, batch: int,
                  plan_text: str | None, word_bytes: int, options, config: HardwareConfig | None,
                  columns: Sequence[Column] | None = None):
    """The pipeline plan of `strategy` (module docstring): a `Plan` on the whole array whose
    columns are the stages' plan on the sub-array (`columns`: given, e.g. by `optimal`'s
    search over ways to train), `stages` every node's stage."""
    from hypar_sim.planner.plan import Plan, evaluate_plan, make_plan

    training = options.training
    sub = sub_array(hierarchy, training.stages)
    micro = micro_batch(batch, training)
    stages = _given_stages(graph, training, plan_text) or assign_stages(graph, training)
    config = config or load_hardware(overrides={"word_bytes": word_bytes})
    unbounded = dataclasses.replace(config, cube_capacity_gib=2.0**20)
    alone = dataclasses.replace(training, stages=1, microbatches=1, schedule="1f1b",
                                stage_names=())
    try:
        inner = make_plan(graph, strategy, sub, micro, plan_text, word_bytes,
                          dataclasses.replace(options, training=alone), unbounded) \
            if columns is None else evaluate_plan(graph, strategy, "", micro, sub, columns,
                                                  word_bytes, options.phases,
                                                  options.traffic_model, alone)
    except InputError as error:
        if "batch" not in str(error) or micro == batch:
            raise
        raise InputError(f"--microbatches {training.microbatches}: each stage plans a "
                         f"micro-batch of {micro} samples; {error}") from None
    model = traffic_model(inner.traffic_model, inner.phases)
    layouts = list(inner.layouts) or graph_layouts(graph, micro, sub, inner.columns, model)
    messages = pipeline_messages(graph, layouts, stages, hierarchy, micro, word_bytes,
                                 training, model.collective)
    per_node = [0.0] * len(graph.nodes)
    per_level = np.zeros(hierarchy.levels)
    for key, step in messages.steps.items():
        per_node[key[0]] += float(step.sent_bytes.sum())
        per_level += np.bincount(step.level, step.sent_bytes, minlength=hierarchy.levels)
    parts = pipeline_footprint(graph, layouts, stages, word_bytes,
                               largest_receive(messages.steps), training)
    plan = Plan(graph.name, inner.strategy, inner.search, batch, hierarchy,
                inner.node_names, inner.columns, tuple(per_node),
                tuple(float(b) for b in per_level), word_bytes, inner.phases, training, parts,
                inner.objective, float(sum(per_node)), inner.traffic_model, tuple(layouts),
                stages=stages)
    if inner.objective == "time":  # the pipeline's step, not one micro-batch's
        from hypar_sim.planner.stage_times import pipeline_step_cycles

        plan = dataclasses.replace(plan, estimate=pipeline_step_cycles(
            graph, plan, micro, options.topology, config))
    needed = plan.footprint_bytes
    if needed > config.cube_capacity_bytes:
        raise InputError(f"capacity: the pipeline plan of {strategy} needs {needed / GIB:.3g} "
                         f"GiB per cube, more than the cube's {config.cube_capacity_gib:g} GiB; "
                         "use more stages or micro-batches"
                         + (", --schedule 1f1b" if training.schedule == "gpipe" else "")
                         + ", --recompute, --zero 1, --precision bf16 or more accelerators")
    return plan


def pipeline_footprint(graph: Graph, layouts: Sequence, stages: Sequence[int],
                       word_bytes: int, receive_bytes: float, training: Training
                       ) -> tuple[tuple[str, float], ...]:
    """The busiest stage's busiest cube by part (`footprint.memory_picture` of the stage's
    nodes, its activations times the micro-batches in flight)."""
    best: tuple[tuple[str, float], ...] = ()
    tied = tied_apart(graph, stages)
    for s, nodes in enumerate(stage_nodes(stages, training.stages)):
        picture = memory_picture(stage_graph(graph, nodes, s), [layouts[i] for i in nodes],
                                 word_bytes, True, receive_bytes, training,
                                 in_flight(training, s))
        parts = dict(picture.parts)
        for t in (t for t in tied if stages[t] == s):  # its copy of the owner's weights
            own = layouts[t]
            copy = training.member_bytes(tied_copy_params(own).astype(float),
                                         weight_copies(own), np.zeros(own.members),
                                         word_bytes, True)
            for part in ("weights", "gradients", "optimizer_state"):
                parts[part] += float(copy[part].max())
        if not best or sum(parts.values()) > sum(v for _, v in best):
            best = tuple(parts.items())
    return best
