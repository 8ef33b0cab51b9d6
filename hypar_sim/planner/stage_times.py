"""The step time of a way to train, estimated from its nodes' costs: what `optimal`'s search
over stages, micro-batches, recomputation and ZeRO (`planner.stage_search`) ranks by.

Every node's cycles under one plan of kinds on a sub-array (`node_times`, from
`timed_costs.TimedCosts`: the simulator's compute and transfer models):

- per micro-batch, its forward, backward and gradient compute, its loss and its input's
  and error's transfers; what recomputing it adds (its forward compute, its input's
  relayout, its own partial sums); (ZeRO 3) its weights gathered before both passes;
- per step, its update (on ZeRO's shards) and its gradient exchange; a tied projection in
  another stage than its owner, its copy's all-reduce and the two copies' sum.

`step_estimate` adds them up: stages are contiguous runs balanced by their time per
micro-batch (`pipeline.balanced`, then `pipeline.cheap_cuts`), and the step is Alpa's
eq. (2) (Zheng et al., "Alpa", OSDI 2022, section 5.1), T = sum_s t_s + (M - 1) max_s t_s,
plus the slowest stage's per-step work; t_s counts what the stage receives from its
neighbours (the crossing elements, member to member, timed on the whole array's topology
by `hardware.transfer.step_cycles`). Without a pipeline T = X + max(Y_compute, Y_port), as
`planner.estimate` reads the simulator's overlap of the gradient reduce-scatters (Y_port)
with the backward compute (Y_compute). A sub-array is timed as a topology of its own (on a
torus, with wrap-around links the whole array's sub-array does not have).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.topology import Topology, make_topology
from hypar_sim.hardware.transfer import Routed, step_cycles
from hypar_sim.partition import node_layout
from hypar_sim.partition.axes import Site
from hypar_sim.partition.axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.redistribute import redistribute
from hypar_sim.partition.regions import weight_shape
from hypar_sim.partition.shares import Column
from hypar_sim.partition.steps import Phase, StepMessages, TransferKind
from hypar_sim.planner.pipeline import balanced, cheap_cuts
from hypar_sim.planner.pipeline_messages import tied_apart
from hypar_sim.planner.plan_messages import fed_nodes, paying_edges, sharing_edges
from hypar_sim.planner.timed_costs import TimedCosts
from hypar_sim.planner.training import Training, crossing_elements, recompute_plan
from hypar_sim.sim.defaults import DEFAULT_CHUNK_BYTES, DEFAULT_MAX_CHUNKS
from hypar_sim.workload.graph import Graph


@dataclass(frozen=True)
class NodeTimes:
    """Every node's cycles under one plan on a sub-array (arrays over the graph's nodes;
    read only)."""

    forward_cycles: np.ndarray  # per micro-batch: forward compute, loss, input's, error's steps
    backward_cycles: np.ndarray  # per micro-batch: backward and gradient compute
    again_cycles: np.ndarray  # what recomputing it adds per micro-batch
    gather_cycles: np.ndarray  # one gather of its weights (the gradient gather's; ZeRO 3's)
    reduce_cycles: np.ndarray  # per step: its gradient reduce-scatter
    update_cycles: dict[bool, np.ndarray]  # per step, by sharded (ZeRO >= 1) or not
    tied_cycles: dict[int, float]  # a tied projection's copy: its all-reduce (`tied_copy`)
    tied_bytes: dict[int, float]  # ... and the whole copy, summed with its owner's


def node_times(costs: TimedCosts, graph: Graph, sites: Sequence[Site],
               columns: Sequence[Column], hierarchy: Hierarchy) -> NodeTimes:
    """Every node's cycles under `columns` (`costs` of one micro-batch on `hierarchy`):
    the parts a way to train adds up (module docstring). Consumers that read a tensor alike
    share one transfer (`plan_messages.paying_edges`), charged to the first of them."""
    n = len(sites)
    outputs = set(graph.outputs)
    forward, backward, again, gathers, reduces = (np.zeros(n) for _ in range(5))
    update = {False: np.zeros(n), True: np.zeros(n)}
    for i, (site, column) in enumerate(zip(sites, columns, strict=True)):
        own = costs.own_parts(site, column, hierarchy, site.node.name in outputs)
        forward[i] = costs.phase_value(site, column, hierarchy, (Phase.FORWARD,)) + own["loss"]
        backward[i] = costs.phase_value(site, column, hierarchy,
                                        (Phase.BACKWARD, Phase.GRADIENT))
        again[i] = costs.phase_value(site, column, hierarchy, (Phase.RECOMPUTE,)) \
            + own["loss reduce"]  # an output's loss reduced again with its partial sums
        gathers[i], reduces[i] = own["gather"], own["gradient"] - own["gather"]
        for sharded in (False, True):
            update[sharded][i] = costs.phase_value(site, column, hierarchy, (Phase.UPDATE,),
                                                   zero=int(sharded))
    for edges in sharing_edges(graph):
        for p, c, k in paying_edges(costs, sites, edges, columns, hierarchy):
            stages = costs.edge_stages(sites[p], sites[c], k, columns[p], columns[c],
                                       hierarchy)
            summed, gathered = stages["forward reduce"], stages["forward gather"]
            forward[c] += sum(stages.values())
            again[p] += summed  # sent again where the producer is recomputed
            again[c] += gathered  # and where the consumer is
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    tied = {i: tied_copy(costs, sites[i], columns[i], hierarchy)
            for i, node in enumerate(graph.nodes) if node.attrs.get("tied_to") in index}
    return NodeTimes(forward, backward, again, gathers, reduces, update,
                     {i: c for i, (c, _) in tied.items()}, {i: b for i, (_, b) in tied.items()})


def stage_to_stage_cycles(topology: Topology, config: HardwareConfig, members: int,
                          sent_bytes: float, source: int, target: int) -> float:
    """Cycles to send `sent_bytes` from stage `source` to stage `target` (each of their
    `members` to its counterpart, 1/`members` each), as the analytic engine times a step."""
    if sent_bytes <= 0:
        return 0.0
    src = source * members + np.arange(members)
    dst = target * members + np.arange(members)
    messages = StepMessages(0, TransferKind.STAGE_FEATURE, src, dst,
                            np.full(members, sent_bytes / members), np.zeros_like(src),
                            np.zeros_like(src))
    return step_cycles(messages, topology, config, DEFAULT_CHUNK_BYTES, DEFAULT_MAX_CHUNKS,
                       Routed.of(src, dst, topology))


def tied_copy(costs: TimedCosts, site: Site, column: Column, hierarchy: Hierarchy
              ) -> tuple[float, float]:
    """A tied projection's copy in another stage than its owner
    (`pipeline_messages.tied_apart`): (cycles of its gradients' all-reduce within its
    stage, bytes of the whole copy, summed with the owner's and sent back)."""
    own = node_layout.layout(site, costs.batch, column, hierarchy)
    regions = node_layout.weight_regions(own)
    shape = weight_shape(site.desc)
    parts = redistribute(shape, regions, regions, own.replicas)
    word = costs.word_bytes
    within = costs.matrices_value({"gradient reduce": parts.reduce * word,
                                   "gradient gather": parts.gather * word})
    return within, float(np.prod(shape)) * word


def step_estimate(graph: Graph, times: NodeTimes, training: Training, recomputed: set[int],
                  topology: Topology, config: HardwareConfig, micro_samples: int,
                  word_bytes: int, members: int, stages: tuple[int, ...] | None = None
                  ) -> tuple[tuple[int, ...], float]:
    """(every node's stage, the estimated step in cycles) of `training` with stages of
    `members` accelerators on `topology`, the whole array (module docstring); `stages`:
    every node's, where given (else balanced by time)."""
    per_micro = times.forward_cycles.copy()  # what the backward pass cannot overlap
    if recomputed:
        index = sorted(recomputed)
        per_micro[index] += times.again_cycles[index]
    gathered = times.gather_cycles  # the reduced gradients or (ZeRO 1, 2) updated weights
    if training.zero >= 3:  # the weights before both passes, no gradient gathered
        per_micro += 2 * times.gather_cycles
        gathered = np.zeros_like(gathered)
    update = times.update_cycles[training.zero >= 1]
    count = training.stages
    if count == 1:  # the reduce-scatters overlap the backward pass, as the simulator runs them
        return (0,) * len(graph.nodes), float(
            per_micro.sum() + update.sum() + gathered.sum()
            + max(times.backward_cycles.sum(), times.reduce_cycles.sum()))
    per_micro += times.backward_cycles
    if stages is None:
        work = np.maximum(np.rint(per_micro), 1).astype(np.int64)
        stages = cheap_cuts(graph, balanced(work, count), work)
    crossing = crossing_elements(graph, range(len(graph.nodes)))
    stage_of = np.array(stages)
    t = np.bincount(stage_of, per_micro, minlength=count)
    for s in range(count - 1):
        first = int(np.searchsorted(stage_of, s + 1))
        sent = float(crossing[first]) * micro_samples * word_bytes
        cycles = stage_to_stage_cycles(topology, config, members, sent, s, s + 1)
        t[s + 1] += cycles  # the activations into the next stage
        t[s] += cycles  # and the error back
    once = np.bincount(stage_of, update + gathered + times.reduce_cycles, minlength=count)
    for node, owner in tied_apart(graph, stages).items():
        within = times.tied_cycles[node]
        there = stage_to_stage_cycles(topology, config, members, times.tied_bytes[node],
                                      stages[node], stages[owner])
        # the owner's gradients come in over the links of the copy's all-reduce, then the
        # sum goes back; with no all-reduce (a member per stage) the two ways overlap
        once[stages[node]] += within + there * (2 if within else 1)
        once[stages[owner]] += there
    return stages, float(t.sum() + (training.microbatches - 1) * t.max() + once.max())


def pipeline_step_cycles(graph: Graph, plan, micro_samples: int, topology: str,
                         config: HardwareConfig) -> float:
    """The estimated step of a pipeline `Plan` (`step_estimate` over its own stages, its
    columns timed on a stage's sub-array for one micro-batch)."""
    training = plan.training
    sub = Hierarchy(plan.hierarchy.sizes[1:])
    costs = TimedCosts(micro_samples, plan.word_bytes, False, "time", config,
                       make_topology(topology, config, sub), fed_nodes(graph), training)
    times = node_times(costs, graph, graph_sites(graph), plan.columns, sub)
    recomputed = set(recompute_plan(graph, training.recompute).recomputed)
    return step_estimate(graph, times, training, recomputed,
                         make_topology(topology, config, plan.hierarchy), config, micro_samples,
                         plan.word_bytes, sub.members, plan.stages)[1]
