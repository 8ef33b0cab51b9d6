"""Export real PyTorch models to ONNX: the corpus under workloads/onnx/.

Needs torch, torchvision and transformers, with onnx and onnxscript for the dynamo exporter:
an optional extra for whoever regenerates the corpus, never a dependency of hypar-sim, its
tests or CI. Downloads nothing: every model is built from its configuration with random
weights (`trained_like`; torchvision's `weights=None`, Hugging Face models from a `XxxConfig(...)`, with
HF_HUB_OFFLINE=1), on the CPU.

For each MODEL, --out gets MODEL.onnx, the graph, whose weights are stored apart in
MODEL.onnx.data (tensors under 1 KB may stay inline), and MODEL.json: how it was exported
(exporter, opset, input shapes and dynamic axes, versions), its parameters and its MACs per
sample, counted by torch's FlopCounterMode on a forward pass at batch 1 (FLOPs / 2).

    python scripts/export_models.py [--models resnet50,gpt2] [--out workloads/onnx] [--seq 128]

prints one line per model; a model that fails prints its error and the others go on (exit
status 1 if any failed).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers reads it: never reach the Hub

import onnx  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "workloads" / "onnx"
IMAGE_SHAPE = (1, 3, 224, 224)
TORCHSCRIPT_OPSET = 17
DYNAMO_OPSET = 20
INLINE_LIMIT = 1024  # bytes: a tensor at least this large belongs in the weights file


@dataclass
class Example:
    """A model ready to export: the module, its example inputs and its outputs' names."""

    model: nn.Module
    inputs: dict[str, torch.Tensor]
    outputs: list[str]
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Spec:
    """One model of the corpus: how to build it and which exporter writes it."""

    name: str
    source: str
    exporter: str  # "torchscript" or "dynamo"
    build: Callable[[int], Example]  # the sequence length -> the model and its inputs

    @property
    def opset(self) -> int:
        return TORCHSCRIPT_OPSET if self.exporter == "torchscript" else DYNAMO_OPSET


class HuggingFace(nn.Module):
    """A Hugging Face model called with named tensors, giving some of its outputs as tensors."""

    def __init__(self, model: nn.Module, outputs: list[str], **options: Any) -> None:
        super().__init__()
        self.model = model
        self.outputs = outputs
        self.options = options

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
                ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        result = self.model(input_ids=input_ids, attention_mask=attention_mask, **self.options)
        tensors = tuple(getattr(result, name) for name in self.outputs)
        return tensors[0] if len(tensors) == 1 else tensors


def batch_axes(names: list[str], sequence: bool) -> dict[str, dict[int, str]]:
    """Dynamic axes naming the batch (and the sequence) on each of `names`."""
    axes = {0: "batch", 1: "sequence"} if sequence else {0: "batch"}
    return {name: dict(axes) for name in names}


def vision_options(name: str) -> dict[str, bool]:
    """torchvision's arguments besides `weights=None` (GoogLeNet: no auxiliary heads)."""
    return {"aux_logits": False, "init_weights": False} if name == "googlenet" else {}


def vision_source(name: str) -> str:
    """How the torchvision model is built, as a call."""
    options = "".join(f", {key}={value}" for key, value in vision_options(name).items())
    return f"torchvision.models.{name}(weights=None{options})"


def vision(name: str, dynamic: bool, seq: int) -> Example:
    """A torchvision classifier with random weights on one 224x224 image."""
    del seq  # images have no sequence
    model = getattr(torchvision.models, name)(weights=None, **vision_options(name))
    axes = batch_axes(["image", "logits"], sequence=False) if dynamic else {}
    return Example(model, {"image": torch.randn(*IMAGE_SHAPE)}, ["logits"], axes)


def token_inputs(vocab: int, seq: int, mask: bool) -> dict[str, torch.Tensor]:
    """Random token ids of one sequence (and an all-ones attention mask), int64."""
    inputs = {"input_ids": torch.randint(0, vocab, (1, seq), dtype=torch.int64)}
    if mask:
        inputs["attention_mask"] = torch.ones(1, seq, dtype=torch.int64)
    return inputs


def bert(seq: int) -> Example:
    """bert-base (BertConfig's defaults) with its pooler; batch and sequence dynamic."""
    config = transformers.BertConfig()
    outputs = ["last_hidden_state", "pooler_output"]
    model = HuggingFace(transformers.BertModel(config), outputs)
    axes = batch_axes(["input_ids", "attention_mask", outputs[0]], sequence=True)
    return Example(model, token_inputs(config.vocab_size, seq, mask=True), outputs,
                   {**axes, **batch_axes(outputs[1:], sequence=False)})


def causal_lm(model_class: str, config: Any, dynamic: bool, seq: int) -> Example:
    """A causal language model's logits over one sequence, without a KV cache.

    With dynamic axes, the attention mask is an input too: without one, transformers looks
    for packed sequences with torch.diff, which the TorchScript exporter cannot export.
    """
    model = HuggingFace(getattr(transformers, model_class)(config), ["logits"], use_cache=False)
    inputs = token_inputs(config.vocab_size, seq, mask=dynamic)
    axes = batch_axes([*inputs, "logits"], sequence=True) if dynamic else {}
    return Example(model, inputs, ["logits"], axes)


def llama_config() -> Any:
    """A small Llama: grouped-query attention (8 heads, 2 KV heads), RMSNorm, rotary."""
    return transformers.LlamaConfig(
        hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2, vocab_size=32000, max_position_embeddings=2048)


def specs() -> list[Spec]:
    """Every model of the corpus, in export order."""
    names = ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "densenet121",
             "convnext_tiny", "vit_b_16", "swin_t", "googlenet")
    models = [Spec(name, vision_source(name), "torchscript",
                   functools.partial(vision, name, True)) for name in names]
    gpt2 = functools.partial(causal_lm, "GPT2LMHeadModel", transformers.GPT2Config())
    llama_source = ("transformers LlamaForCausalLM(LlamaConfig(hidden_size=512, "
                    "intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8, "
                    "num_key_value_heads=2, vocab_size=32000, max_position_embeddings=2048))")
    return models + [
        Spec("resnet50_dynamo", vision_source("resnet50"), "dynamo",
             functools.partial(vision, "resnet50", False)),
        Spec("bert_base", "transformers BertModel(BertConfig())", "torchscript", bert),
        Spec("gpt2", "transformers GPT2LMHeadModel(GPT2Config())", "dynamo",
             functools.partial(gpt2, False)),
        Spec("llama_small", llama_source, "dynamo",
             functools.partial(causal_lm, "LlamaForCausalLM", llama_config(), False)),
        Spec("gpt2_dynamic", "transformers GPT2LMHeadModel(GPT2Config())", "torchscript",
             functools.partial(gpt2, True)),
    ]


def count_flops(example: Example) -> tuple[int, dict[str, int]]:
    """FLOPs of one forward pass on the example inputs, in total and per operator.

    Gradients stay on (with none, nn.MultiheadAttention takes a fused fast path that the
    counter does not see) and attention runs on the math backend (the CPU's fused kernel is
    not counted either), so the attention's matrix products are counted as bmm.
    """
    with (torch.enable_grad(), sdpa_kernel(SDPBackend.MATH),
          FlopCounterMode(display=False) as counter):
        example.model(*example.inputs.values())
    by_op = counter.get_flop_counts().get("Global", {})
    return counter.get_total_flops(), {str(op): int(n) for op, n in sorted(by_op.items(),
                                                                          key=str)}


def export(spec: Spec, example: Example, path: Path) -> None:
    """Write the graph to `path`; the dynamo exporter writes its weights beside it.

    Gradients stay on as in a plain call: under no_grad, nn.MultiheadAttention (vit_b_16)
    takes its fused fast path, aten::_native_multi_head_attention, which the TorchScript
    exporter cannot export.
    """
    names: dict[str, Any] = {"input_names": list(example.inputs),
                             "output_names": example.outputs}
    args = tuple(example.inputs.values())
    if spec.exporter == "dynamo":
        torch.onnx.export(example.model, args, str(path), dynamo=True, opset_version=spec.opset,
                          external_data=True, verbose=False, **names)
        return
    with warnings.catch_warnings():  # the legacy exporter is chosen on purpose: no reminder
        warnings.filterwarnings("ignore", "You are using the legacy", DeprecationWarning)
        # this exporter ignores external_data: finish() moves the weights out
        torch.onnx.export(example.model, args, str(path), dynamo=False, opset_version=spec.opset,
                          dynamic_axes=example.dynamic_axes or None, **names)


def all_nodes(graph: onnx.GraphProto | onnx.FunctionProto) -> Iterator[onnx.NodeProto]:
    """The nodes of a graph or function and of the graphs inside their attributes."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for inner in [attribute.g, *attribute.graphs]:
                yield from all_nodes(inner)


def strip_metadata(model: onnx.ModelProto) -> list[str]:
    """Drop the dynamo exporter's debugging metadata but `namespace`; the keys dropped.

    Stack traces (with this machine's paths), FX nodes, name scopes and class hierarchies
    make up most of a dynamo graph's bytes; `namespace` says the same module path in one line.
    """
    removed: set[str] = set()
    for graph in [model.graph, *model.functions]:
        for node in all_nodes(graph):
            kept = [p for p in node.metadata_props if p.key == "namespace"]
            removed.update(p.key for p in node.metadata_props if p.key != "namespace")
            del node.metadata_props[:]
            node.metadata_props.extend(kept)
    return sorted(removed)


def finish(path: Path, keep_metadata: bool) -> list[str]:
    """Strip the graph's debugging metadata (unless kept), and move every tensor of
    `INLINE_LIMIT` bytes or more into PATH.data if any is inline; the metadata keys dropped."""
    model = onnx.load(str(path), load_external_data=False)
    removed = [] if keep_metadata else strip_metadata(model)
    inline = [t for t in model.graph.initializer
              if t.data_location != onnx.TensorProto.EXTERNAL and t.ByteSize() >= INLINE_LIMIT]
    if inline:
        onnx.load_external_data_for_model(model, str(path.parent))
        for old in weights_files(path):
            (path.parent / old).unlink()
        onnx.save_model(model, str(path), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=f"{path.name}.data",
                        size_threshold=INLINE_LIMIT)
    elif removed:
        path.write_bytes(model.SerializeToString())
    return removed


def weights_files(path: Path) -> list[str]:
    """The external data files that the graph at `path` names, without loading them."""
    model = onnx.load(str(path), load_external_data=False)
    return sorted({entry.value for tensor in model.graph.initializer
                   for entry in tensor.external_data if entry.key == "location"})


def check(path: Path) -> int:
    """The opset of the graph at `path` after onnx has loaded it without its weights."""
    model = onnx.load(str(path), load_external_data=False)
    onnx.checker.check_model(str(path))
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def tensors(example: Example) -> tuple[dict[str, Any], dict[str, Any]]:
    """The inputs' shapes, dtypes and dynamic axes, and the outputs' dynamic axes."""
    def axes(name: str) -> dict[str, str]:
        return {str(axis): label for axis, label in example.dynamic_axes.get(name, {}).items()}
    inputs = {name: {"shape": list(tensor.shape), "dtype": str(tensor.dtype).split(".")[-1],
                     "dynamic_axes": axes(name)} for name, tensor in example.inputs.items()}
    return inputs, {name: {"dynamic_axes": axes(name)} for name in example.outputs}


def describe(spec: Spec, example: Example, opset: int, weights: list[str],
             flops: tuple[int, dict[str, int]]) -> dict[str, Any]:
    """The contents of MODEL.json."""
    inputs, outputs = tensors(example)
    return {"model": spec.name, "source": spec.source, "exporter": spec.exporter,
            "opset": opset, "inputs": inputs, "outputs": outputs,
            "graph_file": f"{spec.name}.onnx", "weights_files": weights,
            "torch_version": torch.__version__, "torchvision_version": torchvision.__version__,
            "transformers_version": transformers.__version__, "onnx_version": onnx.__version__,
            **({"onnxscript_version": metadata.version("onnxscript")}
               if spec.exporter == "dynamo" else {}),
            "params": sum(p.numel() for p in example.model.parameters()),
            "macs_per_sample": flops[0] // 2, "flops_by_op": flops[1]}


def trained_like(model: nn.Module) -> None:
    """Every parameter drawn at random (normal, std 0.02, as GPT-2 initialises its weights),
    so that the export is written as a trained model's: at initialisation many biases are
    zeros and norm scales ones, which the exporters' constant folding removes (a Gemm's zero
    bias) or shares between layers (one initializer behind many Identity nodes), so the
    graph would hold fewer parameters than the model."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.02)


def produce(spec: Spec, out: Path, seq: int, keep_metadata: bool) -> dict[str, Any]:
    """Build, count and export one model into `out`; its JSON description."""
    torch.manual_seed(0)
    example = spec.build(seq)
    example.model.eval()
    trained_like(example.model)
    flops = count_flops(example)
    with tempfile.TemporaryDirectory(prefix=".export-", dir=out) as scratch:
        staged = Path(scratch) / f"{spec.name}.onnx"
        export(spec, example, staged)  # not under no_grad: see export()
        removed = finish(staged, keep_metadata)
        weights = weights_files(staged)
        for name in [staged.name, *weights]:
            (out / name).unlink(missing_ok=True)
            shutil.move(Path(scratch) / name, out / name)
            (out / name).chmod(0o644)  # the exporters write some files private to their owner
    info = describe(spec, example, check(out / staged.name), weights, flops)
    if removed:
        info["node_metadata_removed"] = removed
    (out / f"{spec.name}.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def summary(info: dict[str, Any], out: Path, seconds: float) -> str:
    """One line: name, exporter, graph KB, weights MB, params, GMAC/sample, seconds."""
    graph = (out / info["graph_file"]).stat().st_size / 1024
    weights = sum((out / name).stat().st_size for name in info["weights_files"]) / 2**20
    return (f"{info['model']:20} {info['exporter']:11} opset {info['opset']:2}  "
            f"graph {graph:8.1f} KB  weights {weights:7.1f} MB  {info['params']:>12,} params  "
            f"{info['macs_per_sample'] / 1e9:7.3f} GMAC/sample  {seconds:6.1f} s")


def positive(text: str) -> int:
    """A positive integer from the command line."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def parse_args(names: list[str]) -> argparse.Namespace:
    """The command line, given the models' names."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(names),
                        help=f"comma-separated models to export (default: all of "
                             f"{', '.join(names)})")
    parser.add_argument("--out", type=Path, default=OUT,
                        help="folder for MODEL.onnx, MODEL.onnx.data and MODEL.json "
                             "(default workloads/onnx, created if missing)")
    parser.add_argument("--seq", type=positive, default=128,
                        help="sequence length of the language models' inputs (default 128)")
    parser.add_argument("--keep-metadata", action="store_true",
                        help="keep all the dynamo exporter's node metadata (stack traces, FX "
                             "nodes...; by default only `namespace` is kept)")
    parser.add_argument("--traceback", action="store_true",
                        help="print a failed export's whole traceback to stderr")
    return parser.parse_args()


def main() -> int:
    """Export the chosen models one after the other; 1 if any failed."""
    by_name = {spec.name: spec for spec in specs()}
    args = parse_args(list(by_name))
    chosen = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in by_name]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)} (known: {', '.join(by_name)})",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in chosen:
        start = time.perf_counter()
        try:
            info = produce(by_name[name], args.out, args.seq, args.keep_metadata)
        except Exception as error:  # one model's failure must not stop the others
            failed += 1
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            print(f"{name:20} FAILED after {time.perf_counter() - start:.1f} s: "
                  f"{type(error).__name__}: {first}", flush=True)
            if args.traceback:
                traceback.print_exc()
            continue
        print(summary(info, args.out, time.perf_counter() - start), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
