"""Write the shipped graph networks (workloads/graphs/*.yaml) from their papers' tables.

(The GPT and Llama files there give sizes only; hypar_sim/workload/transformer.py builds
their nodes when they are loaded.)

Each network is built node by node from the architecture its source gives;
the YAML files are committed, and this script regenerates them
(`python scripts/make_graph_workloads.py`; `--check` only compares).
Parameter and MAC totals are checked in tests/test_graph.py against the
published figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hypar_sim.workload.builder import Builder
from hypar_sim.workload.transformer import attention, gelu_mlp

OUT = Path(__file__).resolve().parents[1] / "workloads" / "graphs"


def resnet(name: str, blocks: list[int], bottleneck: bool) -> Builder:
    """He et al., "Deep residual learning for image recognition", CVPR 2016, Table 1; the
    stride of a bottleneck's downsampling block on its 3x3 convolution and batch norm after
    every convolution as in torchvision's resnet (v1.5), whose totals are published."""
    b = Builder(name, {"image": [3, 224, 224]},
                "He et al., CVPR 2016, Table 1; torchvision.models.resnet (v1.5 strides)",
                f"ResNet-{'50' if bottleneck else '18'}, 224x224 input")
    b.conv_bn("conv1", 64, 7, 2, 3)
    x = b.add("pool1", "pool", kernel=3, stride=2, padding=1)
    channels = 64
    for stage, (count, width) in enumerate(zip(blocks, (64, 128, 256, 512), strict=True)):
        for block in range(count):
            stride = 2 if block == 0 and stage > 0 else 1
            out = width * 4 if bottleneck else width
            p = f"s{stage + 2}b{block + 1}"
            if bottleneck:
                b.conv_bn(f"{p}_c1", width, 1, inputs=x)
                b.conv_bn(f"{p}_c2", width, 3, stride, 1)
                y = b.conv_bn(f"{p}_c3", out, 1, act=None)
            else:
                b.conv_bn(f"{p}_c1", width, 3, stride, 1, inputs=x)
                y = b.conv_bn(f"{p}_c2", width, 3, 1, 1, act=None)
            shortcut = x
            if stride > 1 or channels != out:
                shortcut = b.conv_bn(f"{p}_down", out, 1, stride, act=None, inputs=x)
            b.add(f"{p}_add", "add", [y, shortcut])
            x = b.add(f"{p}_relu", "act", function="relu")
            channels = out
    b.add("avgpool", "global_pool")
    b.add("fc", "fc", out_features=1000, bias=True)
    return b


def mobilenet_v2() -> Builder:
    """Sandler et al., "MobileNetV2: inverted residuals and linear bottlenecks", CVPR 2018,
    Table 2 (t, c, n, s) and the block of its Figure 4; width 1.0, 224x224."""
    b = Builder("mobilenet_v2", {"image": [3, 224, 224]},
                "Sandler et al., CVPR 2018, Table 2 and Fig. 4; torchvision.models.mobilenet_v2",
                "MobileNetV2 1.0, 224x224 input")
    x = b.conv_bn("conv1", 32, 3, 2, 1, act="relu6")
    channels = 32
    table = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
             (6, 160, 3, 2), (6, 320, 1, 1)]
    index = 0
    for t, c, n, s in table:
        for repeat in range(n):
            index += 1
            stride = s if repeat == 0 else 1
            hidden = channels * t
            p = f"b{index}"
            if t != 1:
                b.conv_bn(f"{p}_expand", hidden, 1, act="relu6", inputs=x)
            b.conv_bn(f"{p}_dw", hidden, 3, stride, 1, act="relu6", groups=hidden,
                      inputs=None if t != 1 else x)
            y = b.conv_bn(f"{p}_project", c, 1, act=None)
            if stride == 1 and channels == c:
                y = b.add(f"{p}_add", "add", [y, x])
            x, channels = y, c
    b.conv_bn("conv_last", 1280, 1, act="relu6")
    b.add("avgpool", "global_pool")
    b.add("dropout", "dropout", ratio=0.2)
    b.add("fc", "fc", out_features=1000, bias=True)
    return b


def inception_v1() -> Builder:
    """Szegedy et al., "Going deeper with convolutions", CVPR 2015, Table 1 (GoogLeNet
    without its auxiliary classifiers, which inference drops); biases on every convolution,
    LRN after the first two convolutions, as in the paper's Figure 3."""
    b = Builder("inception_v1", {"image": [3, 224, 224]},
                "Szegedy et al., CVPR 2015, Table 1 and Fig. 3 (GoogLeNet, no auxiliary heads)",
                "Inception v1 (GoogLeNet), 224x224 input")

    def conv(name: str, out: int, kernel: int, stride: int = 1, inputs: str | None = None) -> str:
        b.add(name, "conv", inputs, out_channels=out, kernel=kernel,
              **({"stride": stride} if stride > 1 else {}),
              **({"padding": kernel // 2} if kernel > 1 else {}), bias=True)
        return b.add(f"{name}_relu", "act", function="relu")

    conv("conv1", 64, 7, 2)
    b.add("pool1", "pool", kernel=3, stride=2, ceil_mode=True)
    b.add("lrn1", "lrn")
    conv("conv2_reduce", 64, 1)
    conv("conv2", 192, 3)
    b.add("lrn2", "lrn")
    x = b.add("pool2", "pool", kernel=3, stride=2, ceil_mode=True)
    table = {"3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
             "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
             "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
             "4e": (256, 160, 320, 32, 128, 128), "5a": (256, 160, 320, 32, 128, 128),
             "5b": (384, 192, 384, 48, 128, 128)}
    for name, (c1, r3, c3, r5, c5, pp) in table.items():
        p = f"i{name}"
        a = conv(f"{p}_1x1", c1, 1, inputs=x)
        conv(f"{p}_3x3_reduce", r3, 1, inputs=x)
        m = conv(f"{p}_3x3", c3, 3)
        conv(f"{p}_5x5_reduce", r5, 1, inputs=x)
        f = conv(f"{p}_5x5", c5, 5)
        b.add(f"{p}_pool", "pool", x, kernel=3, stride=1, padding=1)
        q = conv(f"{p}_pool_proj", pp, 1)
        x = b.add(f"{p}_concat", "concat", [a, m, f, q])
        if name in ("3b", "4e"):
            x = b.add(f"pool_{name}", "pool", kernel=3, stride=2, ceil_mode=True)
    b.add("avgpool", "global_pool")
    b.add("dropout", "dropout", ratio=0.4)
    b.add("fc", "fc", out_features=1000, bias=True)
    return b


def bert_base(seq: int = 128) -> Builder:
    """Devlin et al., "BERT", NAACL 2019, section 3 (L=12, H=768, A=12, 3072 hidden;
    post-norm blocks), with WordPiece vocabulary 30,522, 512 positions, 2 segment types and
    the pooler on the first token (Google's bert_config.json for BERT-Base, Uncased)."""
    dim = 768
    b = Builder("bert_base", {"tokens": [seq], "positions": [seq], "segments": [seq]},
                "Devlin et al., NAACL 2019, section 3; BERT-Base uncased bert_config.json",
                f"BERT-base encoder, sequence {seq}")
    b.add("word_emb", "embedding", "tokens", vocab=30522, dim=dim)
    b.add("pos_emb", "embedding", "positions", vocab=512, dim=dim)
    b.add("type_emb", "embedding", "segments", vocab=2, dim=dim)
    b.add("emb_sum", "add", ["word_emb", "pos_emb", "type_emb"])
    x = b.add("emb_ln", "layer_norm")
    for layer in range(12):
        p = f"l{layer + 1}"
        attn = attention(b, f"{p}_attn", x, dim, 12)
        b.add(f"{p}_attn_add", "add", [attn, x])
        x = b.add(f"{p}_attn_ln", "layer_norm")
        mlp = gelu_mlp(b, f"{p}_mlp", x, dim, 4 * dim)
        b.add(f"{p}_mlp_add", "add", [mlp, x])
        x = b.add(f"{p}_mlp_ln", "layer_norm")
    b.add("cls", "slice", x, start=0, stop=1)
    b.add("pooler", "fc", out_features=dim, bias=True)
    b.add("pooler_tanh", "act", function="tanh")
    return b


BUILDERS = {
    "resnet18": lambda: resnet("resnet18", [2, 2, 2, 2], bottleneck=False),
    "resnet50": lambda: resnet("resnet50", [3, 4, 6, 3], bottleneck=True),
    "inception_v1": inception_v1,
    "mobilenet_v2": mobilenet_v2,
    "bert_base": bert_base,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only compare with the committed files (exit 1 if they differ)")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, build in BUILDERS.items():
        path = OUT / f"{name}.yaml"
        text = build().text("scripts/make_graph_workloads.py")
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
            continue
        tmp = path.with_suffix(".yaml.tmp")
        tmp.write_text(text)
        tmp.replace(path)
        print(f"wrote {path}")
    if stale:
        print(f"out of date: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
