"""ONNX import: models built here with onnx.helper (no downloads) become the same graphs as
their YAML equivalents; shape arithmetic folds away; bad files are one-line errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from hypar_sim.errors import InputError  # noqa: E402
from hypar_sim.workload.graph import parse_graph  # noqa: E402
from hypar_sim.workload.network import load_workload  # noqa: E402

RNG = np.random.default_rng(0)


def init(name, *shape, dtype=np.float32):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(dtype) if dtype ==
                                   np.float32 else np.array(shape[0], dtype=dtype), name)


def const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype=dtype), name)


def save(tmp_path, nodes, inputs, outputs, inits, name="m", old_style=False):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    if old_style:  # early exporters listed every initializer as a graph input too
        graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                           for t in inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def cnn_block(tmp_path, old_style=False, constant_weights=False):
    """A residual block, then a two-branch concat (conv 1x1 with bias beside the block's
    output), global pooling and a Gemm classifier."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 16, 16])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])
    inits = [init("w1", 8, 8, 3, 3), init("w2", 8, 8, 3, 3), init("w3", 4, 8, 1, 1),
             init("b3", 4), init("fc_w", 10, 12), init("fc_b", 10)]
    inits += [init(f"bn_{p}", 8) for p in ("scale", "bias", "mean", "var")]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean",
                                                "bn_var"], ["bn1"]),
        helper.make_node("Relu", ["bn1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["sum"]),
        helper.make_node("Relu", ["sum"], ["block"]),
        helper.make_node("MaxPool", ["block"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p", "w3", "b3"], ["c3"]),
        helper.make_node("Concat", ["block", "c3"], ["cat"], axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    if constant_weights:  # weights given by Constant nodes instead of initializers
        moved = [t for t in inits if t.name.startswith("w")]
        inits = [t for t in inits if not t.name.startswith("w")]
        nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in moved] + nodes
    return save(tmp_path, nodes, [x], [y], inits, "cnn", old_style)


CNN_YAML = {
    "inputs": {"x": [8, 16, 16]},
    "nodes": [
        {"name": "c1", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1},
        {"name": "bn1", "type": "batch_norm"},
        {"name": "r1", "type": "act", "function": "relu"},
        {"name": "c2", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1},
        {"name": "sum", "type": "add", "inputs": ["c2", "x"]},
        {"name": "block", "type": "act", "function": "relu"},
        {"name": "p", "type": "pool", "kernel": 3, "stride": 1, "padding": 1},
        {"name": "c3", "type": "conv", "out_channels": 4, "kernel": 1, "bias": True},
        {"name": "cat", "type": "concat", "inputs": ["block", "c3"]},
        {"name": "gp", "type": "global_pool"},
        {"name": "flat", "type": "flatten"},
        {"name": "logits", "type": "fc", "out_features": 10, "bias": True},
    ],
}


@pytest.mark.parametrize("variant", ["initializers", "old_style", "constant_nodes"])
def test_residual_and_concat_block_equals_its_yaml(tmp_path, variant):
    path = cnn_block(tmp_path, old_style=variant == "old_style",
                     constant_weights=variant == "constant_nodes")
    imported = load_workload(str(path))
    written = parse_graph(CNN_YAML, "yaml")
    assert list(imported.inputs.items()) == [("x", (8, 16, 16))]
    assert [(n.name, n.op, n.shape, n.params, n.macs) for n in imported.nodes] == \
        [(n.name, n.op, n.shape, n.params, n.macs) for n in written.nodes]
    assert imported.params == written.params == 2 * 8 * 8 * 9 + 16 + 4 * 8 + 4 + 12 * 10 + 10
    assert imported.macs_per_sample == written.macs_per_sample


def test_depthwise_block_and_same_padding(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 15, 15])
    y = helper.make_tensor_value_info("pw", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Conv", ["x", "dw_w"], ["dw"], group=8, strides=[2, 2],
                              auto_pad="SAME_UPPER"),
             helper.make_node("Clip", ["dw", "lo", "hi"], ["r6"]),
             helper.make_node("Conv", ["r6", "pw_w"], ["pw"])]
    inits = [init("dw_w", 8, 1, 3, 3), init("pw_w", 16, 8, 1, 1),
             const("lo", 0.0, np.float32), const("hi", 6.0, np.float32)]
    g = load_workload(str(save(tmp_path, nodes, [x], [y], inits, "dw")))
    dw = g.node("dw")
    assert dw.shape == (8, 8, 8) and dw.params == 8 * 9 and dw.macs == 8 * 9 * 64
    assert g.node("r6").op == "tensor_op" and g.node("pw").shape == (16, 8, 8)


def transformer_block(tmp_path, heads=4, dim=16):
    """Embedding, layer norm, fused QKV split in three, heads by a Reshape whose target is
    computed from Shape/Gather/Unsqueeze/Concat (folded by data propagation), attention,
    the output projection, a residual, and an MLP with GELU written as Erf arithmetic."""
    tokens = helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    head = dim // heads
    inits = [init("emb", 100, dim), init("ln_s", dim), init("ln_b", dim),
             init("w_qkv", dim, 3 * dim), init("b_qkv", 3 * dim), init("w_o", dim, dim),
             init("b_o", dim), init("w1", dim, 4 * dim), init("b1", 4 * dim),
             init("w2", 4 * dim, dim), init("b2", dim),
             const("split", [dim] * 3), const("i0", [0]), const("i1", [1]),
             const("hd", [heads, head]), const("merge", [0, 0, dim]),
             const("sqrt_d", 2.0, np.float32), const("sqrt2", 1.4142135, np.float32),
             const("one", 1.0, np.float32), const("half", 0.5, np.float32)]
    n = helper.make_node
    nodes = [
        n("Gather", ["emb", "tokens"], ["x"]),
        n("LayerNormalization", ["x", "ln_s", "ln_b"], ["ln"], axis=-1),
        n("MatMul", ["ln", "w_qkv"], ["qkv_mm"]), n("Add", ["qkv_mm", "b_qkv"], ["qkv"]),
        n("Split", ["qkv", "split"], ["q", "k", "v"], axis=2),
        n("Shape", ["x"], ["shape"]),
        n("Gather", ["shape", "i0"], ["b_dim"]), n("Gather", ["shape", "i1"], ["s_dim"]),
        n("Concat", ["b_dim", "s_dim", "hd"], ["heads_shape"], axis=0),
    ]
    for t, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [n("Reshape", [t, "heads_shape"], [f"{t}4"]),
                  n("Transpose", [f"{t}4"], [f"{t}t"], perm=perm)]
    nodes += [
        n("MatMul", ["qt", "kt"], ["scores_raw"]), n("Div", ["scores_raw", "sqrt_d"], ["scores"]),
        n("Softmax", ["scores"], ["probs"], axis=-1), n("MatMul", ["probs", "vt"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merge"], ["ctx2"]),
        n("MatMul", ["ctx2", "w_o"], ["o_mm"]), n("Add", ["o_mm", "b_o"], ["o"]),
        n("Add", ["o", "x"], ["res"]),
        n("MatMul", ["res", "w1"], ["h_mm"]), n("Add", ["h_mm", "b1"], ["h"]),
        n("Div", ["h", "sqrt2"], ["g1"]), n("Erf", ["g1"], ["g2"]), n("Add", ["g2", "one"], ["g3"]),
        n("Mul", ["h", "g3"], ["g4"]), n("Mul", ["g4", "half"], ["gelu"]),
        n("MatMul", ["gelu", "w2"], ["f_mm"]), n("Add", ["f_mm", "b2"], ["f"]),
        n("Add", ["f", "res"], ["out"]),
    ]
    return save(tmp_path, nodes, [tokens], [out], inits, "block")


@pytest.mark.parametrize("seq", [None, 32])
def test_transformer_block(tmp_path, seq):
    g = load_workload(str(transformer_block(tmp_path)), seq=seq)
    s = seq or 128
    assert g.inputs == {"tokens": (s,)}
    assert g.node("x").op == "embedding" and g.node("qt").shape == (4, s, 4)
    assert g.node("kt").shape == (4, 4, s) and g.node("scores_raw").op == "matmul"
    assert g.node("scores_raw").macs == 4 * s * 4 * s and g.node("q").op == "slice"
    assert not any(n.name in ("shape", "heads_shape", "b_dim") for n in g.nodes)  # folded
    dim = 16
    biases = 3 * dim + dim + 4 * dim + dim  # the Adds of learned vectors
    assert g.params == 100 * dim + 2 * dim + dim * 3 * dim + dim * dim + 2 * 4 * dim * dim \
        + biases
    assert g.macs_per_sample == s * dim * (3 * dim + dim + 8 * dim) + 2 * 4 * s * 4 * s
    assert g.node(g.outputs[0]).shape == (s, dim)


def test_cli_shows_an_imported_model(tmp_path):
    path = cnn_block(tmp_path)
    done = subprocess.run([sys.executable, "-m", "hypar_sim", "networks", str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "logits" in done.stdout and "1,334 parameters" in \
        done.stdout


def test_bad_models_are_one_line_errors(tmp_path):
    text = tmp_path / "notes.onnx"
    text.write_text("not a model at all")
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(cnn_block(tmp_path).read_bytes()[:300])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", 8])
    odd = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [x],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [], "odd")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    custom = save(tmp_path, [helper.make_node("Foo", ["x"], ["y"], domain="acme")], [x],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])], [],
                  "custom")
    hard = save(tmp_path, [helper.make_node("Hardmax", ["x"], ["y"])], [x],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [], "hard")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    mismatch = save(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["y"])], [x],  # audit
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                    [init("w", 5, 4)], "mismatch")
    for path, fragment in ((text, "not an ONNX model"), (cut, "not an ONNX model"),
                           (mismatch, "its weight w has 5 rows, but its input x has [8] "
                            "values per sample"),
                           (odd, "input x axis 2 is dynamic ('H'); give its size with --dim "
                            "H=SIZE"), (custom, "unsupported operator acme.Foo"),
                           (hard, "node y (Hardmax of [1, 3, 8, 8]): unsupported operator; "
                            "supported: ")):
        with pytest.raises(InputError) as error:
            load_workload(str(path))
        assert fragment in str(error.value) and "\n" not in str(error.value), str(error.value)
        assert str(path) in str(error.value)


def to_onnx(graph, tmp_path):
    """The CNN graphs written back as ONNX (as an exporter would: Flatten before Gemm, Clip
    for ReLU6, LRN), to import the full-size networks."""
    n = helper.make_node
    nodes, inits = [], []
    name_of = {next(iter(graph.inputs)): next(iter(graph.inputs))}
    for node in graph.nodes:
        a, src, out = node.attrs, [name_of[i] for i in node.inputs], node.name
        if node.op == "conv":
            kh, kw = (a["kernel"], a["kernel"]) if isinstance(a["kernel"], int) else a["kernel"]
            channels = node.input_shapes[0][0] // a["groups"]
            inits.append(init(f"{out}_w", a["out_channels"], channels, kh, kw))
            inputs = [*src, f"{out}_w"]
            if a["bias"]:
                inits.append(init(f"{out}_b", a["out_channels"]))
                inputs.append(f"{out}_b")
            pad = a["padding"]
            stride = a["stride"]
            nodes.append(n("Conv", inputs, [out], group=a["groups"], pads=[pad] * 4,
                           strides=[stride] * 2 if isinstance(stride, int) else stride))
        elif node.op == "batch_norm":
            c = node.shape[0]
            inits += [init(f"{out}_{p}", c) for p in "sbmv"]
            nodes.append(n("BatchNormalization", [*src, *(f"{out}_{p}" for p in "sbmv")], [out]))
        elif node.op == "act" and a["function"] == "relu6":
            inits += [const(f"{out}_lo", 0.0, np.float32), const(f"{out}_hi", 6.0, np.float32)]
            nodes.append(n("Clip", [*src, f"{out}_lo", f"{out}_hi"], [out]))
        elif node.op == "act":
            nodes.append(n("Relu", src, [out]))
        elif node.op == "pool":
            stride = a["stride"] or a["kernel"]
            nodes.append(n("MaxPool", src, [out], kernel_shape=[a["kernel"]] * 2,
                           strides=[stride] * 2, pads=[a["padding"]] * 4,
                           ceil_mode=int(a["ceil_mode"])))
        elif node.op == "global_pool":
            nodes.append(n("GlobalAveragePool", src, [out]))
        elif node.op in ("add", "concat"):
            extra = {"axis": 1} if node.op == "concat" else {}
            nodes.append(n(node.op.capitalize(), src, [out], **extra))
        elif node.op in ("lrn", "dropout"):
            extra = {"size": 5} if node.op == "lrn" else {}
            nodes.append(n(node.op.upper() if node.op == "lrn" else "Dropout", src, [out],
                           **extra))
        elif node.op == "fc":
            inits += [init(f"{out}_w", node.shape[0], node.input_shapes[0][0]),
                      init(f"{out}_b", node.shape[0])]
            nodes += [n("Flatten", src, [f"{out}_flat"]),
                      n("Gemm", [f"{out}_flat", f"{out}_w", f"{out}_b"], [out], transB=1)]
        name_of[node.name] = out
    image = helper.make_tensor_value_info(next(iter(graph.inputs)), TensorProto.FLOAT,
                                          ["N", *next(iter(graph.inputs.values()))])
    result = helper.make_tensor_value_info(graph.outputs[0], TensorProto.FLOAT, None)
    return save(tmp_path, nodes, [image], [result], inits, graph.name)


@pytest.mark.parametrize("name", ["resnet50", "inception_v1", "mobilenet_v2"])
def test_full_size_cnns_written_as_onnx_import_with_the_same_totals(tmp_path, name):
    written = load_workload(name)
    imported = load_workload(str(to_onnx(written, tmp_path)))
    assert imported.params == written.params
    assert imported.macs_per_sample == written.macs_per_sample
    assert [n.shape for n in imported.nodes if n.op != "flatten"] == \
        [n.shape for n in written.nodes]


def test_shufflenet_block_folds_div_and_cast_shape_arithmetic(tmp_path):
    """ShuffleNet v2 as torch exports it: a channel split by Slice, a channel shuffle whose
    Reshape target is Shape/Gather/Div/Cast/Unsqueeze/Concat arithmetic (ONNX's data
    propagation stops at Div and Cast; the importer folds it), x.mean([2, 3]) as ReduceMean."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 4, 4])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    n = helper.make_node
    inits = [init("w", 4, 4, 1, 1), const("s0", [0]), const("e0", [4]), const("s1", [4]),
             const("e1", [8]), const("ax", [1]), const("i0", 0), const("i1", 1),
             const("i2", 2), const("i3", 3), const("two", 2), const("groups", [2]),
             const("u0", [0])]
    nodes = [
        n("Slice", ["x", "s0", "e0", "ax"], ["left"]),
        n("Slice", ["x", "s1", "e1", "ax"], ["right_in"]),
        n("Conv", ["right_in", "w"], ["right"]),
        n("Concat", ["left", "right"], ["cat"], axis=1),
        n("Shape", ["cat"], ["shape"]),
        *[n("Gather", ["shape", f"i{k}"], [f"d{k}"], axis=0) for k in range(4)],
        n("Div", ["d1", "two"], ["half"]), n("Cast", ["half"], ["half64"], to=7),
        *[n("Unsqueeze", [name, "u0"], [f"u_{name}"]) for name in ("d0", "half64", "d2", "d3")],
        n("Concat", ["u_d0", "groups", "u_half64", "u_d2", "u_d3"], ["target"], axis=0),
        n("Reshape", ["cat", "target"], ["split"]),
        n("Transpose", ["split"], ["shuffled"], perm=[0, 2, 1, 3, 4]),
        n("Reshape", ["shuffled", "shape"], ["merged"]),
        n("ReduceMean", ["merged"], ["y"], axes=[2, 3], keepdims=0),
    ]
    g = load_workload(str(save(tmp_path, nodes, [x], [out], inits, "shuffle")))
    assert g.node("left").op == "slice" and g.node("right_in").attrs["start"] == 4
    assert g.node("split").shape == (2, 4, 4, 4) and g.node("merged").shape == (8, 4, 4)
    assert g.node("y").op == "flatten" and g.node("y").shape == (8,)
    assert not any(node.name in ("shape", "target", "half") for node in g.nodes)
    from hypar_sim.partition.axes import sites

    named = {s.node.name: "".join(s.output) for s in sites(g)}
    assert named["merged"] == "KPQ"  # the shuffled channels are channels again


@pytest.mark.parametrize("present", [True, False])
def test_weights_stored_as_external_data_are_never_needed(tmp_path, present):
    """Issue "ONNX import", item 1: an export whose weights are external data imports the
    same with its weights file present or absent (only shapes are read); small values a
    shape depends on are read from the file, each from its offset."""
    source = transformer_block(tmp_path)
    model = onnx.load(str(source))
    path = tmp_path / "external.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="external.bin", size_threshold=0)
    if not present:
        (tmp_path / "external.bin").write_bytes(b"")  # the weights file, emptied
    inline = load_workload(str(source))
    if not present:
        with pytest.raises(InputError) as info:
            load_workload(str(path))
        message = str(info.value)
        assert "\n" not in message and "in an external data file that is not there" in message
        return
    imported = load_workload(str(path))
    assert [(n.name, n.op, n.shape, n.params, n.macs) for n in imported.nodes] == \
        [(n.name, n.op, n.shape, n.params, n.macs) for n in inline.nodes]


def test_absent_weights_file_imports_when_no_shape_needs_it(tmp_path):
    """The CNN block with every weight in an external file that is then deleted: the same
    graph as with its weights (0 of 12 real exports imported so before)."""
    source = cnn_block(tmp_path)
    path = tmp_path / "external.onnx"
    onnx.save_model(onnx.load(str(source)), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    (tmp_path / "weights.bin").unlink()
    imported, inline = load_workload(str(path)), load_workload(str(source))
    assert [(n.name, n.op, n.shape, n.params, n.macs) for n in imported.nodes] == \
        [(n.name, n.op, n.shape, n.params, n.macs) for n in inline.nodes]


def test_external_data_longer_than_its_tensor_is_refused(tmp_path):
    """Issue "Hardening": an external-data entry claiming more bytes than its tensor holds
    (a 3 GB file for a 16 x 8 tensor) is refused in one line; nothing beyond the tensor's
    own bytes is ever read."""
    source = transformer_block(tmp_path)
    model = onnx.load(str(source))
    path = tmp_path / "long.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="long.bin", size_threshold=0)
    model = onnx.load(str(path), load_external_data=False)
    small = next(t for t in model.graph.initializer if t.name == "hd")
    for entry in small.external_data:
        if entry.key == "length":
            entry.value = str(3 * 2**30)
    onnx.save(model, str(path))
    with pytest.raises(InputError, match="the external data of tensor hd is '3221225472' bytes "
                                         "long; its \\[2\\] values take 16"):
        load_workload(str(path))
