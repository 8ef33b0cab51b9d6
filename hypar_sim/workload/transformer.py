"""Transformers generated from a few sizes: the GPT and Llama families as graph networks.

A file with a `transformer:` mapping (workloads/graphs/gpt2_small.yaml, ...) names a family and
its sizes; `build` writes the graph node by node and `load_transformer` parses it, any
size replaced by the caller's (`--seq`, `--layers`, `--dim hidden=...`):

- `gpt`: GPT-2 (Radford et al. 2019, section 2.3) and GPT-3 (Brown et al. 2020, section
  2.1): learned token and position embeddings, pre-norm blocks of multi-head attention
  and a GELU MLP (LayerNorm, biases everywhere), a final LayerNorm, the output projection
  tied to the token embedding (`tied: true`).
- `llama`: Llama (Touvron et al. 2023, section 2.2): RMSNorm before each block (Zhang and
  Sennrich 2019), a SwiGLU MLP (Shazeer 2020: gate and up projections, SiLU, their
  product, the down projection), no biases, an untied output projection; grouped-query
  attention where `kv_heads` < `heads` (Ainslie et al. 2023): the queries of the heads
  that share a key and value head are one matrix product with it.

Elementwise work that changes no shape and moves no bytes between members is omitted, as
in scripts/make_graph_workloads.py: the 1/sqrt(d) score scale, the causal mask and the
rotary position embedding (Su et al. 2021) of Llama.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from hypar_sim.errors import InputError, clip_value
from hypar_sim.workload.builder import Builder
from hypar_sim.workload.ops import MAX_SIZE

FAMILIES = ("gpt", "llama")
#: The sizes a file gives and a caller may replace (`--dim NAME=SIZE`; `--seq`, `--layers`).
SIZES = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "positions")


@dataclass(frozen=True)
class TransformerSpec:
    """A transformer's sizes: blocks, width, attention heads (and key/value heads), MLP
    width, vocabulary, tokens per sample and (gpt) learned positions."""

    family: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq: int
    positions: int  # rows of the learned position table (gpt); 0 for rotary (llama)
    tied: bool

    def check(self, where: str) -> TransformerSpec:
        """InputError naming the field unless the sizes make a model."""
        if self.family not in FAMILIES:
            raise InputError(f"{where}.family: must be one of {', '.join(FAMILIES)}, got "
                             f"{clip_value(self.family)}")
        for name in SIZES:
            value = getattr(self, name)
            least = 0 if name == "positions" else 1
            if isinstance(value, bool) or not isinstance(value, int) or \
                    not least <= value <= MAX_SIZE:
                raise InputError(f"{where}.{name}: must be an integer from {least} to "
                                 f"{MAX_SIZE:,}, got {clip_value(value)}")
        if self.hidden % self.heads:
            raise InputError(f"{where}.heads: {self.heads} heads do not divide the width "
                             f"{self.hidden}")
        if self.heads % self.kv_heads:
            raise InputError(f"{where}.kv_heads: {self.kv_heads} key/value heads do not "
                             f"divide the {self.heads} heads")
        if self.family == "gpt" and self.seq > self.positions:
            raise InputError(f"{where}: seq {self.seq} is more tokens than the model's "
                             f"{self.positions} learned positions; allowed: 1 to "
                             f"{self.positions} (or raise positions)")
        if not isinstance(self.tied, bool):
            raise InputError(f"{where}.tied: must be true or false, got "
                             f"{clip_value(self.tied)}")
        return self


_DEFAULTS = {"kv_heads": None, "positions": 0, "tied": False}


def spec_of(data: Any, where: str) -> TransformerSpec:
    """The `transformer:` mapping of a file as a checked spec (kv_heads default: heads)."""
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: must be a mapping of family and sizes, got "
                         f"{clip_value(data)}")
    allowed = ("family", *SIZES, "tied")
    unknown = [key for key in data if key not in allowed]
    if unknown:
        raise InputError(f"{where}: unknown field {clip_value(unknown[0])}; allowed: "
                         f"{', '.join(allowed)}")
    missing = [key for key in allowed if key not in data and key not in _DEFAULTS]
    if missing:
        raise InputError(f"{where}: missing field '{missing[0]}'")
    given = {**_DEFAULTS, **data}
    if given["kv_heads"] is None:
        given["kv_heads"] = given["heads"]
    if given["family"] == "gpt" and "positions" not in data:
        raise InputError(f"{where}: missing field 'positions' (a GPT's learned position "
                         "table: at least seq)")
    if given["family"] == "llama" and "positions" in data:
        raise InputError(f"{where}.positions: a Llama's positions are rotary (any seq); "
                         "remove the field")
    return TransformerSpec(**given).check(where)


def with_sizes(spec: TransformerSpec, sizes: Mapping[str, int], where: str) -> TransformerSpec:
    """`spec` with the caller's sizes (`--seq`, `--layers`, `--dim NAME=SIZE`)."""
    unknown = [name for name in sizes if name not in SIZES]
    if unknown:
        raise InputError(f"--dim: {clip_value(unknown[0])} is not a size of {where}; "
                         f"allowed: {', '.join(SIZES)}")
    if sizes.get("layers", 0) > spec.layers:
        raise InputError(f"--layers: {where} has {spec.layers} blocks; allowed: 1 to "
                         f"{spec.layers} (its first blocks)")
    if "heads" in sizes and "kv_heads" not in sizes and spec.kv_heads == spec.heads:
        sizes = {**sizes, "kv_heads": sizes["heads"]}  # multi-head attention stays so
    spec = replace(spec, **sizes)
    if "seq" in sizes and spec.family == "gpt" and spec.seq > spec.positions:
        raise InputError(f"--seq: {spec.seq:,} tokens are more than {where}'s "
                         f"{spec.positions:,} learned positions; allowed: 1 to "
                         f"{spec.positions:,} (or --dim positions={spec.seq})")
    return spec.check(where)


def build(spec: TransformerSpec, name: str, source: str, description: str) -> Builder:
    """The graph of `spec`, node by node (the families of the module's docstring)."""
    llama = spec.family == "llama"
    inputs = {"tokens": [spec.seq]} if llama else {"tokens": [spec.seq],
                                                   "positions": [spec.seq]}
    b = Builder(name, inputs, source, description)
    b.add("wte", "embedding", "tokens", vocab=spec.vocab, dim=spec.hidden)
    x = "wte"
    if not llama:
        b.add("wpe", "embedding", "positions", vocab=spec.positions, dim=spec.hidden)
        x = b.add("emb_sum", "add", ["wte", "wpe"])
    norm = "rms_norm" if llama else "layer_norm"
    for layer in range(spec.layers):
        p = f"h{layer + 1}"
        b.add(f"{p}_ln1", norm, x)
        attn = attention(b, f"{p}_attn", f"{p}_ln1", spec.hidden, spec.heads, spec.kv_heads,
                         spec.seq, bias=not llama)
        x = b.add(f"{p}_attn_add", "add", [attn, x])
        b.add(f"{p}_ln2", norm, x)
        mlp = (swiglu if llama else gelu_mlp)(b, f"{p}_mlp", f"{p}_ln2", spec.hidden,
                                              spec.ffn)
        x = b.add(f"{p}_mlp_add", "add", [mlp, x])
    b.add("ln_f", norm, x)
    if spec.tied:
        b.add("lm_head", "fc", out_features=spec.vocab, tied_to="wte")
    else:
        b.add("lm_head", "fc", out_features=spec.vocab, bias=not llama)
    return b


def attention(b: Builder, p: str, x: str, hidden: int, heads: int, kv_heads: int = 0,
              seq: int = 0, bias: bool = True) -> str:
    """Multi-head self-attention (Vaswani et al. 2017, section 3.2): Q, K and V projections,
    per-head scores Q K^T, softmax, their product with V, the output projection. With
    fewer key/value heads (grouped-query attention), the `heads / kv_heads` query heads of
    a group are stacked as rows of one product with their group's K and V."""
    kv_heads = kv_heads or heads
    head = hidden // heads
    group = heads // kv_heads
    for t, count in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
        b.add(f"{p}_{t}", "fc", x, out_features=count * head, bias=bias)
        b.add(f"{p}_{t}_heads", "reshape", shape=[-1, count, head])
        b.add(f"{p}_{t}_t", "transpose", perm=[1, 0, 2])  # [heads, seq, head]
    queries = f"{p}_q_t"
    if group > 1:
        queries = b.add(f"{p}_q_groups", "reshape", queries,
                        shape=[kv_heads, group * seq, head])
    b.add(f"{p}_scores", "matmul", [queries, f"{p}_k_t"], transpose_b=True)
    b.add(f"{p}_softmax", "softmax", axis=-1)
    b.add(f"{p}_context", "matmul", [f"{p}_softmax", f"{p}_v_t"])
    if group > 1:
        b.add(f"{p}_context_heads", "reshape", shape=[heads, seq, head])
    b.add(f"{p}_merge", "transpose", perm=[1, 0, 2])
    b.add(f"{p}_concat_heads", "reshape", shape=[-1, hidden])
    return b.add(f"{p}_out", "fc", out_features=hidden, bias=bias)


def gelu_mlp(b: Builder, p: str, x: str, hidden: int, ffn: int) -> str:
    """BERT's and GPT's MLP: up to `ffn` features, GELU, back to the width (biases)."""
    b.add(f"{p}_fc1", "fc", x, out_features=ffn, bias=True)
    b.add(f"{p}_gelu", "act", function="gelu")
    return b.add(f"{p}_fc2", "fc", out_features=hidden, bias=True)


def swiglu(b: Builder, p: str, x: str, hidden: int, ffn: int) -> str:
    """Llama's MLP (Shazeer 2020, SwiGLU): SiLU(x W_gate) * (x W_up), then W_down."""
    b.add(f"{p}_gate", "fc", x, out_features=ffn, bias=False)
    b.add(f"{p}_silu", "act", function="silu")
    b.add(f"{p}_up", "fc", x, out_features=ffn, bias=False)
    b.add(f"{p}_mul", "mul", [f"{p}_silu", f"{p}_up"])
    return b.add(f"{p}_down", "fc", out_features=hidden, bias=False)


def load_transformer(data: Mapping[str, Any], path: str, name: str, seq: int | None,
                     dims: Mapping[str, int] | None):
    """The graph of a transformer file (`data` read from `path`), sizes replaced by `seq`
    and `dims` (`--layers N` is `layers`), its sizes recorded in the graph's `axes`."""
    from hypar_sim.workload.graph import parse_graph

    extra = [key for key in data if key not in ("name", "description", "source",
                                                  "transformer")]
    if extra:
        raise InputError(f"{path}: unknown field {clip_value(extra[0])}; allowed: name, "
                         "description, source, transformer")
    spec = spec_of(data["transformer"], f"{path}: transformer")
    sizes = {**(dims or {}), **({"seq": seq} if seq is not None else {})}
    spec = with_sizes(spec, sizes, name)
    changed = ",".join(f"{key}={value}" for key, value in sizes.items())
    title = str(data.get("name", name))  # a changed size is in the name: results tell apart
    builder = build(spec, f"{title}[{changed}]" if changed else title,
                    str(data.get("source", "")), str(data.get("description", "")))
    graph = parse_graph(builder.data(), path, default_name=name)
    return replace(graph, axes={k: v for k, v in asdict(spec).items() if k in SIZES})
