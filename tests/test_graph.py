"""Graph networks: operators' shape inference, the shipped graphs against their published
totals, the YAML reader's errors, and the `networks` command."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import yaml

from hypar_sim.errors import InputError
from hypar_sim.workload.graph import parse_graph
from hypar_sim.workload.network import available_graphs, available_networks, load_workload
from hypar_sim.workload.ops import OPS
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]

#: (parameters, forward MACs per sample) as published, and the source.
PUBLISHED = {
    # torchvision model docs (ResNet50_Weights.IMAGENET1K_V1): 25,557,032 params, 4.09 GFLOPS
    # (multiply-accumulates); the "about 25.6 M and 4.1 G".
    "resnet50": (25.6e6, 4.1e9),
    # torchvision model docs (ResNet18_Weights): 11,689,512 params, 1.81 GFLOPS.
    "resnet18": (11_689_512, 1.81e9),
    # torchvision docs (MobileNet_V2_Weights): 3,504,872 params; Sandler et al. 2018, Table 4:
    # 300 M multiply-adds.
    "mobilenet_v2": (3_504_872, 300e6),
    # Szegedy et al. 2015, Table 1: the sums of its rows, 6,797.7 K parameters in units of
    # 1,024 (inception 3a's row, 159 K, is 163,328 weights) and 1,586 M operations.
    "inception_v1": (6797.7 * 1024, 1586e6),
    # Devlin et al. 2019, section 3: BERT-base 110 M parameters (embeddings included).
    "bert_base": (110e6, None),
    # OpenAI's released GPT-2 small ("124M"), the output projection tied to the embedding.
    "gpt2_small": (124e6, None),
    # Generated from their sizes (tests/test_transformers.py checks them exactly): OpenAI's
    # GPT-2 XL "1558M"; Brown et al. 2020, Table 2.1: GPT-3 2.7B; Touvron et al. 2023: 6.7B.
    "gpt2_xl": (1558e6, None),
    "gpt3_2_7b": (2.7e9 * 0.982, None),  # 12 L d^2 + embeddings = 2.65B of the rounded 2.7B
    "llama_7b": (6.7e9, None),
}


def graph(nodes, inputs=None, **top):
    return parse_graph({"inputs": inputs or {"x": [8, 10, 12]}, "nodes": nodes, **top}, "t.yaml")


def test_the_graphs_are_shipped():
    assert set(available_graphs()) == set(PUBLISHED)
    assert len(available_networks()) == 11  # the paper's ten and alexnet_half, unchanged


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_graph_totals_match_the_published_figures(name):
    g = load_workload(name)
    params, macs = PUBLISHED[name]
    assert g.params == pytest.approx(params, rel=0.01)
    if macs is not None:
        assert g.macs_per_sample == pytest.approx(macs, rel=0.01)


def test_exact_totals_of_the_torchvision_models():
    """Counted exactly as torchvision counts them (biases and batch-norm scales included)."""
    assert load_workload("resnet50").params == 25_557_032
    assert load_workload("resnet18").params == 11_689_512
    assert load_workload("mobilenet_v2").params == 3_504_872


def test_transformer_totals_by_hand():
    """BERT-base: embeddings 30522x768 + 512x768 + 2x768 + a layer norm; 12 layers of
    4 (768x768 + 768) attention, 2 layer norms, 768x3072 + 3072 + 3072x768 + 768; the pooler.
    GPT-2 small adds no pooler, has 1024 positions and a tied output projection."""
    layer = 4 * (768 * 768 + 768) + 2 * 1536 + 768 * 3072 + 3072 + 3072 * 768 + 768
    bert = (30522 + 512 + 2) * 768 + 1536 + 12 * layer + 768 * 768 + 768
    assert load_workload("bert_base").params == bert == 109_482_240
    gpt2 = (50257 + 1024) * 768 + 12 * layer + 1536
    assert load_workload("gpt2_small").params == gpt2 == 124_439_808
    g = load_workload("gpt2_small")
    assert g.node("lm_head").params == 0 and g.node("lm_head").macs == 1024 * 768 * 50257
    scores = load_workload("bert_base").node("l1_attn_scores")
    assert scores.shape == (12, 128, 128) and scores.macs == 12 * 128 * 64 * 128


def test_committed_graph_files_are_what_the_script_writes():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_graph_workloads.py"),
                           "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_convolution_shapes_groups_dilation_rectangles_and_asymmetric_padding():
    g = graph([
        {"name": "dw", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1, "groups": 8},
        {"name": "rect", "type": "conv", "out_channels": 4, "kernel": [1, 5], "stride": [1, 2],
         "padding": [0, 1, 0, 2], "bias": True},
        {"name": "dil", "type": "conv", "out_channels": 2, "kernel": 3, "dilation": 2,
         "inputs": ["x"]},
    ])
    dw, rect, dil = g.nodes
    assert dw.shape == (8, 10, 12) and dw.params == 8 * 9 and dw.macs == 8 * 9 * 120
    # columns: 12 + 1 + 2 = 15 padded, window 5, stride 2 -> 6
    assert rect.shape == (4, 10, 6) and rect.params == 4 * 8 * 5 + 4
    # a dilated 3x3 spans 5: 10 - 4 = 6 rows, 12 - 4 = 8 columns
    assert dil.shape == (2, 6, 8) and dil.macs == 2 * 8 * 9 * 48


def test_branches_concat_add_pool_and_consumers():
    g = graph([
        {"name": "a", "type": "conv", "out_channels": 4, "kernel": 1},
        {"name": "b", "type": "pool", "kernel": 3, "stride": 1, "padding": 1, "inputs": ["x"]},
        {"name": "cat", "type": "concat", "inputs": ["a", "b"]},
        {"name": "skip", "type": "conv", "out_channels": 12, "kernel": 1, "inputs": ["x"]},
        {"name": "sum", "type": "add", "inputs": ["cat", "skip"]},
        {"name": "gp", "type": "global_pool"},
        {"name": "fc", "type": "fc", "out_features": 3, "bias": True},
    ])
    assert g.node("cat").shape == (12, 10, 12)
    assert g.node("gp").shape == (12, 1, 1) and g.node("fc").params == 12 * 3 + 3
    assert g.consumers()["x"] == ["a", "b", "skip"] and g.outputs == ("fc",)


def test_nodes_in_any_order_are_sorted_by_their_inputs():
    g = graph([{"name": "late", "type": "act", "function": "relu", "inputs": ["early"]},
               {"name": "early", "type": "identity", "inputs": ["x"]}])
    assert [n.name for n in g.nodes] == ["early", "late"]


def test_token_stream_ops():
    g = graph([
        {"name": "emb", "type": "embedding", "vocab": 100, "dim": 16},
        {"name": "h", "type": "reshape", "shape": [-1, 4, 4]},
        {"name": "t", "type": "transpose", "perm": [1, 0, 2]},
        {"name": "s", "type": "matmul", "inputs": ["t", "t"], "transpose_b": True},
        {"name": "p", "type": "softmax"},
        {"name": "first", "type": "slice", "inputs": ["emb"], "start": 0, "stop": 1},
        {"name": "proj", "type": "fc", "out_features": 100, "tied_to": "emb"},
    ], inputs={"ids": [6]})
    assert g.node("t").shape == (4, 6, 4) and g.node("s").shape == (4, 6, 6)
    assert g.node("s").macs == 4 * 6 * 4 * 6 and g.node("first").shape == (1, 16)
    assert g.params == 100 * 16 and g.node("proj").macs == 16 * 100


@pytest.mark.parametrize("nodes, fragment", [
    ([{"type": "warp"}], "unknown operator 'warp'"),
    ([{"name": "a", "type": "identity", "inputs": ["b"]},
      {"name": "b", "type": "identity", "inputs": ["a"]}], "cycle"),
    ([{"type": "identity", "inputs": ["nowhere"]}], "no node or input named 'nowhere'"),
    ([{"name": "a", "type": "conv", "out_channels": 3, "kernel": 1},
      {"type": "add", "inputs": ["a", "x"]}], "do not match"),
    ([{"type": "conv", "out_channels": 3, "kernel": 1, "groups": 3}], "groups: 3 does not"),
    ([{"type": "conv", "out_channels": 3}], "missing field 'kernel'"),
    ([{"type": "conv", "out_channels": 3, "kernel": 1, "strides": 2}], "unknown field 'strides'"),
    ([{"type": "reshape", "shape": [7, -1]}], "does not fit"),
    ([{"name": "x", "type": "identity"}], "duplicate name 'x'"),
    ([{"type": "fc", "out_features": 4, "tied_to": "nothing"}], "tied_to"),
    ([{"type": "matmul", "inputs": ["x"]}], "takes 2 inputs"),
])
def test_bad_graphs_are_one_line_errors(nodes, fragment):
    with pytest.raises(InputError) as error:
        graph(nodes)
    assert fragment in str(error.value) and "\n" not in str(error.value)
    assert str(error.value).startswith("t.yaml")


def test_every_operator_is_listed_in_the_unknown_operator_message():
    with pytest.raises(InputError) as error:
        graph([{"type": "warp"}])
    assert all(name in str(error.value) for name in OPS)


def test_cli_lists_graphs_and_refuses_the_paper_model_for_them(tmp_path):
    cli = partial(run_cli, cwd=tmp_path)
    listing = cli("networks", "--json")
    assert listing.returncode == 0
    names = {row["network"]: row for row in json.loads(listing.stdout)}
    assert names["resnet50"]["parameters"] == 25_557_032 and "vgg_a" in names
    one = json.loads(cli("networks", "bert_base", "--json").stdout)
    assert one["parameters"] == 109_482_240 and one["nodes"][0]["op"] == "embedding"
    refused = cli("run", "bert_base", "--traffic-model", "paper")
    assert refused.returncode == 2 and "of conv and fc layers" in refused.stderr
    assert refused.stderr.count("\n") == 1 and not list(tmp_path.iterdir())
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"inputs": {"x": [3, 8, 8]},
                                   "nodes": [{"type": "pool", "kernel": 9}]}))
    shown = cli("networks", str(bad))
    assert shown.returncode == 2 and "pool" in shown.stderr and "window 9" in shown.stderr
