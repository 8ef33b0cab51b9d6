"""Transformers generated from their sizes (issue "Training large models", item 5):
parameters against the published counts, MACs against torch's FlopCounterMode on the
exports of the ONNX corpus, --seq, --layers and --dim, and their one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hypar_sim.errors import InputError
from hypar_sim.workload.network import load_workload

ONNX = Path(__file__).resolve().parents[1] / "workloads" / "onnx"


def totals(graph) -> tuple[int, int]:
    return sum(n.params for n in graph.nodes), sum(n.macs for n in graph.nodes)


@pytest.mark.parametrize(("name", "params"), [
    ("gpt2_small", 124_439_808),    # OpenAI's 124M checkpoint (Hugging Face gpt2)
    ("gpt2_xl", 1_557_611_200),     # OpenAI's 1558M checkpoint (Hugging Face gpt2-xl)
    ("llama_7b", 6_738_415_616),    # Meta's released 7B checkpoint
])
def test_parameters_are_the_released_checkpoints(name, params):
    assert totals(load_workload(name))[0] == params


def test_gpt3_2_7b_has_the_papers_size():
    """Brown et al. 2020, Table 2.1: 2.7B (rounded); 12 L d^2 + embeddings = 2.65B."""
    params, macs = totals(load_workload("gpt3_2_7b"))
    assert params == pytest.approx(2.7e9, rel=0.02)
    assert macs == pytest.approx(2048 * (params - 2048 * 2560) + 32 * 2 * 2048**2 * 2560,
                                 rel=1e-3)  # 2 N per token, plus the scores and context


@pytest.mark.parametrize(("corpus", "sizes"), [
    ("gpt2", {"family": "gpt", "layers": 12, "hidden": 768, "heads": 12, "ffn": 3072,
              "vocab": 50257, "seq": 128, "positions": 1024, "tied": True}),
    ("llama_small", {"family": "llama", "layers": 4, "hidden": 512, "heads": 8,
                     "kv_heads": 2, "ffn": 1376, "vocab": 32000, "seq": 128}),
])
def test_macs_equal_torchs_on_the_exported_models(tmp_path, corpus, sizes):
    """The generator at the sizes of two exports of the ONNX corpus (GPT-2; a small Llama
    with grouped-query attention) counts the MACs torch's FlopCounterMode counted on them."""
    measured = json.loads((ONNX / f"{corpus}.json").read_text())
    path = tmp_path / f"{corpus}.yaml"
    path.write_text("transformer: " + json.dumps(sizes) + "\n")
    params, macs = totals(load_workload(str(path)))
    assert macs == measured["macs_per_sample"]
    assert params == measured["params"]


def test_seq_layers_and_dims_change_the_sizes():
    """A changed size is in the graph's name (results of two sizes are told apart); more
    heads keep multi-head attention multi-head (kv_heads follows heads unless given)."""
    graph = load_workload("gpt3_2_7b", seq=512, dims={"layers": 2})
    assert graph.name == "gpt3_2_7b[layers=2,seq=512]"
    assert graph.inputs["tokens"] == (512,) and graph.axes["layers"] == 2
    wider = load_workload("llama_7b", dims={"layers": 1, "heads": 64})
    assert wider.axes["kv_heads"] == 64 and not any("q_groups" in n.name for n in wider.nodes)
    assert sum(n.name.endswith("_attn_out") for n in graph.nodes) == 2
    wide = load_workload("llama_7b", dims={"layers": 1, "kv_heads": 8})
    assert wide.axes["kv_heads"] == 8
    assert any(n.name == "h1_attn_q_groups" for n in wide.nodes)


@pytest.mark.parametrize(("args", "message"), [
    (("vgg_a", None, {"layers": 2}), "--layers: vgg_a is not a generated transformer"),
    (("bert_base", 64, None), "--seq: bert_base is a YAML network"),
    (("gpt2_small", 2048, None), "--seq: 2,048 tokens are more than gpt2_small's 1,024 "
                                 "learned positions; allowed: 1 to 1,024"),
    (("gpt2_small", None, {"depth": 3}), "--dim: 'depth' is not a size of gpt2_small"),
    (("llama_7b", None, {"kv_heads": 5}), "kv_heads: 5 key/value heads do not divide the 32"),
    (("gpt2_small", None, {"heads": 7}), "heads: 7 heads do not divide the width 768"),
    (("gpt2_small", None, {"layers": 100}), "--layers: gpt2_small has 12 blocks; allowed: 1 "
                                            "to 12"),
])
def test_bad_sizes_are_one_line(args, message):
    name, seq, dims = args
    with pytest.raises(InputError) as info:
        load_workload(name, seq, dims)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("body", "message"), [
    ("transformer: {family: bert, layers: 1, hidden: 8, heads: 2, ffn: 8, vocab: 8, seq: 4}",
     "transformer.family: must be one of gpt, llama, got 'bert'"),
    ("transformer: {family: llama, layers: 1, hidden: 8, heads: 2, ffn: 8, vocab: 8}",
     "transformer: missing field 'seq'"),
    ("transformer: {family: llama, layers: 0, hidden: 8, heads: 2, ffn: 8, vocab: 8, seq: 4}",
     "transformer.layers: must be an integer from 1 to 16,777,216, got 0"),
    ("transformer: [1, 2]", "transformer: must be a mapping of family and sizes"),
    ("transformer: {family: llama, layers: 1, hidden: 8, heads: 2, ffn: 8, vocab: 8, seq: 4, "
     "width: 3}", "transformer: unknown field 'width'"),
    ("nodes: []\ntransformer: {}", "unknown field 'nodes'"),
    ("transformer: {family: gpt, layers: 1, hidden: 8, heads: 2, ffn: 8, vocab: 8, seq: 4}",
     "transformer: missing field 'positions'"),
    ("transformer: {family: llama, layers: 1, hidden: 8, heads: 2, ffn: 8, vocab: 8, seq: 4, "
     "positions: 8}", "transformer.positions: a Llama's positions are rotary"),
])
def test_bad_transformer_files_are_one_line(tmp_path, body, message):
    path = tmp_path / "t.yaml"
    path.write_text(body + "\n")
    with pytest.raises(InputError) as info:
        load_workload(str(path))
    assert message in str(info.value) and str(path) in str(info.value)


def test_the_cli_takes_layers_and_records_the_sizes(cli):
    args = ("llama_7b", "--layers", "1", "--seq", "64", "--batch", "8", "--accelerators", "4",
            "--engine", "analytic", "--optimizer", "adam")
    result = cli("run", *args, "--json")
    assert result.returncode == 0, result.stderr
    run = json.loads(result.stdout)
    assert run["network"] == "llama_7b[layers=1,seq=64]" and run["config"]["optimizer"] == "adam"
    assert run["config"]["network_axes"]["layers"] == 1
    assert run["config"]["network_axes"]["seq"] == 64
    assert cli("run", *args).stdout.splitlines()[0].endswith("analytic engine, optimizer adam")
