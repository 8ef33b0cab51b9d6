"""The planner against the hand-made plans people train with (issue "Training large models":
Megatron-LM's tensor-parallel split of a transformer block, Shoeybi et al. 2019, section 3)."""

from __future__ import annotations

import pytest

from hypar_sim.request import make_request, plan_request
from hypar_sim.runner import simulate_request

#: Megatron-LM's block: q, k, v and fc1 split by output columns, attn_out and fc2 by input
#: rows (one all-reduce each, forward and backward), attention by heads, the rest (layer
#: norms, residual adds, embeddings) whole on every member.
MEGATRON = ("*: replicate; *_attn_[qkv]: out; *_attn_[qkv]_heads: heads; *_attn_[qkv]_t: heads; "
            "*_attn_scores: heads; *_attn_softmax: heads; *_attn_context: heads; "
            "*_attn_merge: heads; *_attn_concat_heads: out; *_attn_out: in; *_mlp_fc1: out; "
            "*_mlp_gelu: out; *_mlp_fc2: in")
KINDS = "batch,in,out,heads,replicate"


@pytest.mark.slow
@pytest.mark.parametrize("link_gbps", [1.6, 400.0])
def test_bert_base_time_plan_is_no_slower_than_megatrons(link_gbps):
    """bert_base, batch 1, 4 accelerators: the plan `optimal --objective time` finds runs no
    slower in the simulator than Megatron's split given by hand. On HyPar's 1.6 Gb/s links
    it computes every node whole on every cube (86 ms against Megatron's 180 ms: a batch of
    one moves more than it computes); on 400 Gb/s links it splits (31 ms against 37 ms)."""
    fast = {"link_bandwidth_gbps": link_gbps}
    hand = make_request("bert_base", batch=1, hierarchy="4", kinds=KINDS, plan_text=MEGATRON,
                        overrides=fast)
    plan = plan_request(hand)
    columns = dict(zip(plan.node_names, plan.columns, strict=True))
    assert columns["l1_attn_q"] == ("out",) and columns["l1_mlp_fc2"] == ("in",)
    assert columns["l1_attn_scores"] == ("heads",) and columns["l1_attn_ln"] == ("replicate",)
    searched = make_request("bert_base", batch=1, hierarchy="4", kinds=KINDS, overrides=fast,
                            strategy="optimal", objective="time")
    megatron, optimal = simulate_request(hand), simulate_request(searched)
    assert optimal.latency_cycles <= megatron.latency_cycles
