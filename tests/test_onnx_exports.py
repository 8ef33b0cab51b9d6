"""ONNX import of what real exporters write (issue "ONNX import of real exports"): dynamic
batch and sequence axes bound from the run, the batch folded into tokens or heads by
reshapes, grouped-query attention through Expand, RMSNorm and rotary arithmetic,
squeeze-and-excitation scales, channels-last linears. Models are built here with
onnx.helper in the shapes torch.onnx writes (no torch needed)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from hypar_sim.errors import InputError  # noqa: E402
from hypar_sim.request import make_request  # noqa: E402
from hypar_sim.runner import simulate_request  # noqa: E402
from hypar_sim.workload.network import load_workload  # noqa: E402

RNG = np.random.default_rng(1)
n = helper.make_node


def weight(name, *shape):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def scalar(name, value):
    return numpy_helper.from_array(np.array(value, dtype=np.float32), name)


def save(tmp_path, name, nodes, inputs, inits):
    out = helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, name, inputs, [out], inits)
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def llama_block(tmp_path, fixed: bool, dim=32, heads=4, kv_heads=2, ffn=48, vocab=64,
                seq=8):
    """A Llama layer as the exporters write it: RMSNorm as Pow/ReduceMean/Add/Sqrt/
    Reciprocal/Mul, q/k/v projections, heads split by Reshape, rotary as Slice/Neg/Concat
    and products with cos/sin tables, grouped-query attention by Unsqueeze/Expand/Reshape
    of k and v, a causal mask added, SwiGLU MLP. `fixed`: the dynamo exporter's batch of 1
    with the tokens folded into a [seq, dim] matrix for the projections; else a dynamic
    batch and sequence (Reshape targets with -1 for the batch)."""
    head = dim // heads
    rep = heads // kv_heads
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                        [1, seq] if fixed else ["batch", "sequence"])
    inits = [weight("embed", vocab, dim), weight("norm_w", dim), scalar("eps", 1e-5),
             scalar("two", 2.0), weight("wq", dim, dim), weight("wk", dim, kv_heads * head),
             weight("wv", dim, kv_heads * head), weight("wo", dim, dim),
             weight("w_gate", dim, ffn), weight("w_up", dim, ffn), weight("w_down", ffn, dim),
             weight("cos", seq, head), weight("sin", seq, head), weight("mask", seq, seq),
             ints("flat", [seq, dim] if fixed else [-1, dim]),
             ints("back", [1 if fixed else -1, seq, dim]),
             ints("h_shape", [1 if fixed else -1, seq, heads, head]),
             ints("kv_shape", [1 if fixed else -1, seq, kv_heads, head]),
             ints("rot_lo", [0]), ints("rot_mid", [head // 2]), ints("rot_hi", [head]),
             ints("last", [-1]), ints("u2", [2]), scalar("scale", head ** -0.5)]
    nodes = [n("Gather", ["embed", "input_ids"], ["x"]),
             n("Pow", ["x", "two"], ["sq"]), n("ReduceMean", ["sq", "last"], ["ms"]),
             n("Add", ["ms", "eps"], ["ms_eps"]), n("Sqrt", ["ms_eps"], ["rms"]),
             n("Reciprocal", ["rms"], ["inv"]), n("Mul", ["x", "inv"], ["xn"]),
             n("Mul", ["xn", "norm_w"], ["h"]), n("Reshape", ["h", "flat"], ["h2"])]
    for t, w, shape in (("q", "wq", "h_shape"), ("k", "wk", "kv_shape"),
                        ("v", "wv", "kv_shape")):
        nodes += [n("MatMul", ["h2", w], [f"{t}_mm"]),
                  n("Reshape", [f"{t}_mm", shape], [f"{t}_4"]),
                  n("Transpose", [f"{t}_4"], [f"{t}_t"], perm=[0, 2, 1, 3])]
    for t in ("q", "k"):  # rotary: x * cos + rotate_half(x) * sin
        nodes += [n("Slice", [f"{t}_t", "rot_lo", "rot_mid", "last"], [f"{t}_x1"]),
                  n("Slice", [f"{t}_t", "rot_mid", "rot_hi", "last"], [f"{t}_x2"]),
                  n("Neg", [f"{t}_x2"], [f"{t}_nx2"]),
                  n("Concat", [f"{t}_nx2", f"{t}_x1"], [f"{t}_rot"], axis=-1),
                  n("Mul", [f"{t}_t", "cos"], [f"{t}_c"]),
                  n("Mul", [f"{t}_rot", "sin"], [f"{t}_s"]),
                  n("Add", [f"{t}_c", f"{t}_s"], [f"{t}_r"])]
    for t in ("k_r", "v_t"):  # grouped-query attention: each kv head serves `rep` heads
        nodes += [n("Unsqueeze", [t, "u2"], [f"{t}_u"]), n("Shape", [f"{t}_u"], [f"{t}_s"]),
                  n("Gather", [f"{t}_s", "g0"], [f"{t}_b"]),
                  n("Concat", [f"{t}_b", "rep_tail"], [f"{t}_target"], axis=0),
                  n("Expand", [f"{t}_u", f"{t}_target"], [f"{t}_e"]),
                  n("Concat", [f"{t}_b", "merge_tail"], [f"{t}_mt"], axis=0),
                  n("Reshape", [f"{t}_e", f"{t}_mt"], [f"{t}_all"])]
    inits += [ints("g0", [0]), ints("rep_tail", [kv_heads, rep, seq, head]),
              ints("merge_tail", [heads, seq, head]),
              ints("flat2", [seq, dim] if fixed else [-1, dim])]
    nodes += [n("Transpose", ["k_r_all"], ["k_T"], perm=[0, 1, 3, 2]),
              n("MatMul", ["q_r", "k_T"], ["scores"]), n("Mul", ["scores", "scale"], ["sc"]),
              n("Add", ["sc", "mask"], ["masked"]), n("Softmax", ["masked"], ["p"], axis=-1),
              n("MatMul", ["p", "v_t_all"], ["ctx"]),
              n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
              n("Reshape", ["ctx_t", "flat2"], ["ctx2"]),
              n("MatMul", ["ctx2", "wo"], ["o"]), n("Reshape", ["o", "back"], ["o3"]),
              n("Add", ["x", "o3"], ["res"]), n("Reshape", ["res", "flat"], ["r2"]),
              n("MatMul", ["r2", "w_gate"], ["gate"]), n("Sigmoid", ["gate"], ["sg"]),
              n("Mul", ["gate", "sg"], ["silu"]), n("MatMul", ["r2", "w_up"], ["up"]),
              n("Mul", ["silu", "up"], ["gu"]), n("MatMul", ["gu", "w_down"], ["down"]),
              n("Reshape", ["down", "back"], ["down3"]), n("Add", ["res", "down3"], ["y"])]
    name = "llama_fixed" if fixed else "llama_dynamic"
    return save(tmp_path, name, nodes, [ids], inits)


def llama_macs(dim=32, heads=4, kv_heads=2, ffn=48, seq=8):
    head = dim // heads
    projections = seq * dim * (2 * dim + 2 * kv_heads * head + 3 * ffn)
    return projections + 2 * heads * seq * seq * head


@pytest.mark.parametrize("fixed", [True, False])
def test_llama_block_imports_per_sample_and_runs(tmp_path, fixed):
    """Issue "ONNX import", items 2 and 3: the batch folded into tokens ([seq, dim] at batch
    1, [batch x seq, dim] dynamic) is found and the graph is per sample either way; MACs
    are the projections' and attention's (as torch's FlopCounterMode counts them); every
    node is described, so the graph plans and runs."""
    g = load_workload(str(llama_block(tmp_path, fixed)), seq=8)
    assert g.inputs == {"input_ids": (8,)}
    assert "h2" not in [node.name for node in g.nodes]  # [batch x seq, dim]: the same per sample
    assert g.node("q_mm").input_shapes == ((8, 32),) and g.node("q_t").shape == (4, 8, 8)
    assert g.node("k_r_all").shape == (4, 8, 8) and g.node("k_r_e").op == "tensor_op"
    assert g.node("scores").op == "matmul" and g.node("q_mm").op == "fc"
    assert g.macs_per_sample == llama_macs()
    dim, head = 32, 8
    learned = 64 * dim + dim + dim * dim * 2 + 2 * dim * 2 * head + 3 * dim * 48
    tables = 2 * 8 * head + 8 * 8  # cos, sin and the mask, stored as initializers
    assert g.params == learned + tables
    assert not [node.name for node in g.nodes if node.desc is None]
    assert any("fixes the batch at 1" in note for note in g.notes) == fixed
    result = simulate_request(make_request(g, accelerators=4, batch=8, strategy="hypar"))
    assert result.latency_s > 0


def test_dynamic_sequence_follows_seq(tmp_path):
    g = load_workload(str(llama_block(tmp_path, fixed=False, seq=16)), seq=16)
    assert g.inputs == {"input_ids": (16,)} and g.node("scores").shape == (4, 16, 16)


def test_named_dynamic_axes_are_bound_by_dim(tmp_path):
    """A dynamic axis other than the batch and a token input's sequence takes --dim."""
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, "h", "w"])
    nodes = [n("Conv", ["image", "k"], ["c"], pads=[1, 1, 1, 1]), n("Relu", ["c"], ["r"])]
    path = save(tmp_path, "fcn", nodes, [x], [weight("k", 4, 3, 3, 3)])
    with pytest.raises(InputError, match=r"input image axis 2 is dynamic \('h'\); give its "
                                         r"size with --dim h=SIZE"):
        load_workload(str(path))
    with pytest.raises(InputError, match="no dynamic axis named 'height'; its dynamic axes: "
                                         "batch, h, w"):
        load_workload(str(path), dims={"h": 5, "w": 7, "height": 2})
    g = load_workload(str(path), dims={"h": 5, "w": 7})
    assert g.node("r").shape == (4, 5, 7)


def test_squeeze_excitation_and_channels_last_linear(tmp_path):
    """EfficientNet's [C, 1, 1] scale times [C, H, W] (an elementwise product, broadcast)
    and ConvNeXt's Linear on channels-last [H, W, C] (an fc layer on the last axis, not
    flattened)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 6, 6])
    nodes = [n("GlobalAveragePool", ["x"], ["pool"]), n("Conv", ["pool", "w_se"], ["se"]),
             n("Sigmoid", ["se"], ["gate"]), n("Mul", ["x", "gate"], ["scaled"]),
             n("Transpose", ["scaled"], ["cl"], perm=[0, 2, 3, 1]),
             n("MatMul", ["cl", "w_fc"], ["fc"]), n("Add", ["fc", "b_fc"], ["y"])]
    g = load_workload(str(save(tmp_path, "se", nodes, [x],
                               [weight("w_se", 8, 8, 1, 1), weight("w_fc", 8, 16),
                                weight("b_fc", 16)])))
    assert g.node("scaled").op == "mul" and g.node("scaled").shape == (8, 6, 6)
    assert g.node("fc").op == "fc" and g.node("fc").shape == (6, 6, 16)
    assert g.node("fc").macs == 6 * 6 * 8 * 16 and g.params == 64 + 128 + 16
    assert not [node.name for node in g.nodes if node.desc is None]


def test_multihead_attention_with_batch_folded_into_heads(tmp_path):
    """torch's nn.MultiheadAttention (ViT) as TorchScript writes it: tokens first, then
    [seq, batch x heads, head dim] and batched products on [batch x heads, seq, *]."""
    seq, dim, heads = 5, 16, 4
    head = dim // heads
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", seq, dim])
    inits = [weight("w_in", dim, 3 * dim), ints("split", [dim] * 3),
             ints("bh", [seq, -1, head]), ints("back", [-1, dim]), weight("w_out", dim, dim),
             ints("out_shape", [seq, -1, dim])]
    nodes = [n("Transpose", ["x"], ["tb"], perm=[1, 0, 2]), n("MatMul", ["tb", "w_in"], ["qkv"]),
             n("Split", ["qkv", "split"], ["q", "k", "v"], axis=-1)]
    for t in "qkv":
        nodes += [n("Reshape", [t, "bh"], [f"{t}_r"]),
                  n("Transpose", [f"{t}_r"], [f"{t}_h"], perm=[1, 0, 2])]
    nodes += [n("Transpose", ["k_h"], ["k_T"], perm=[0, 2, 1]),
              n("MatMul", ["q_h", "k_T"], ["s"]), n("Softmax", ["s"], ["p"], axis=-1),
              n("MatMul", ["p", "v_h"], ["c"]), n("Transpose", ["c"], ["c_t"], perm=[1, 0, 2]),
              n("Reshape", ["c_t", "back"], ["c2"]), n("MatMul", ["c2", "w_out"], ["o"]),
              n("Reshape", ["o", "out_shape"], ["o3"]),
              n("Transpose", ["o3"], ["y"], perm=[1, 0, 2])]
    g = load_workload(str(save(tmp_path, "mha", nodes, [x], inits)))
    assert g.node("q_h").shape == (heads, seq, head) and g.node("c2").shape == (seq, dim)
    assert g.node("y").shape == (seq, dim)
    assert g.macs_per_sample == seq * dim * 4 * dim + 2 * heads * seq * seq * head
    assert not [node.name for node in g.nodes if node.desc is None]
    result = simulate_request(make_request(g, accelerators=4, batch=8, strategy="data"))
    assert result.latency_s > 0


def test_an_operator_along_the_batch_names_the_node(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    path = save(tmp_path, "bad", [n("Softmax", ["x"], ["y"], axis=0)], [x], [])
    with pytest.raises(InputError, match=r"node y \(Softmax of \[batch, 4\]\): acts along "
                                         "the batch axis"):
        load_workload(str(path))


@pytest.mark.parametrize("case", ["dangling", "cycle", "unsupported"])
def test_a_broken_graph_names_the_node_and_what_is_wrong(tmp_path, case):
    """Issue "ONNX import": a dangling input was reported as 'unsupported operator MatMul',
    a cycle as 'no static shape'; an operator the importer cannot take names the node, its
    operator and input shapes, and what is supported."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    nodes = {"dangling": [n("MatMul", ["x", "ghost"], ["y"])],
             "cycle": [n("Add", ["x", "b"], ["a"], name="add"), n("Relu", ["a"], ["b"]),
                       n("MatMul", ["b", "w"], ["y"])],
             "unsupported": [n("Hardmax", ["x"], ["y"], name="hm")]}[case]
    path = save(tmp_path, case, nodes, [x], [weight("w", 4, 4)])
    expected = {"dangling": r"node y \(MatMul\) reads ghost, which is neither a graph "
                            r"input, an initializer nor any node's output",
                "cycle": r"node add \(Add\) reads b, which node b \(Relu\) computes after "
                         "it: the graph has a cycle",
                "unsupported": r"node hm \(Hardmax of \[batch, 4\]\): unsupported operator; "
                               "supported: .*MatMul"}[case]
    with pytest.raises(InputError, match=expected) as info:
        load_workload(str(path))
    assert "\n" not in str(info.value)


def test_seq_is_refused_where_the_export_fixes_or_has_no_tokens(tmp_path):
    """--seq sets a dynamic sequence axis; an export whose tokens are fixed (the dynamo
    exporter's shapes) or that has no token input refuses it in one line, instead of failing
    later in shape arithmetic or ignoring it."""
    fixed = llama_block(tmp_path, fixed=True)
    with pytest.raises(InputError, match="--seq: .* fixes 8 tokens \\(input input_ids\\); give "
                                         "--seq 8 or none"):
        load_workload(str(fixed), seq=16)
    assert load_workload(str(fixed), seq=8).inputs == {"input_ids": (8,)}
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])
    image = save(tmp_path, "image", [n("Relu", ["x"], ["y"])], [x], [])
    with pytest.raises(InputError, match="--seq: .* has no token input"):
        load_workload(str(image), seq=16)


def test_audio_einsum_and_mask_operators(tmp_path):
    """What other exports use (tried as a new user would, issue "ONNX import"): a 1-D
    convolution (Whisper, wav2vec 2.0: a 2-D one over one row, the same MACs), instance
    normalisation, Einsum as a batched product (MaxViT) or a linear, and GatherND (the
    padding mask of transformers' dynamo exports)."""
    x = helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["N", 4, 50])
    nodes = [n("Conv", ["audio", "k1", "b1"], ["c"], strides=[2], pads=[1, 1]),
             n("InstanceNormalization", ["c", "in_s", "in_b"], ["norm"]),
             n("Transpose", ["norm"], ["t"], perm=[0, 2, 1]),
             n("Einsum", ["t", "w"], ["lin"], equation="btc,cd->btd"),
             n("Einsum", ["lin", "lin"], ["gram"], equation="bid,bjd->bij")]
    inits = [weight("k1", 8, 4, 3), weight("b1", 8), weight("in_s", 8), weight("in_b", 8),
             weight("w", 8, 6)]
    g = load_workload(str(save(tmp_path, "audio", nodes, [x], inits)))
    length = (50 + 2 - 3) // 2 + 1
    assert g.node("c").shape == (8, length) and g.node("c/conv2d").op == "conv"
    assert g.node("c/conv2d").macs == 8 * 4 * 3 * length
    assert g.node("lin").op == "fc" and g.node("lin").macs == length * 8 * 6
    assert g.node("gram").op == "matmul" and g.node("gram").attrs["transpose_b"]
    assert g.node("gram").macs == length * length * 6
    assert g.node("norm").op == "tensor_op"
    assert g.params == 8 * 4 * 3 + 8 + 16 + 48
    assert not [node.name for node in g.nodes if node.desc is None]
    with pytest.raises(InputError, match="Einsum 'btc,bcd->bd' is not a \\(batched\\) matrix"):
        load_workload(str(save(tmp_path, "odd", [n("Einsum", ["audio", "audio"], ["y"],
                                                       equation="btc,bcd->bd")], [x], [])))


def test_gather_nd_of_a_padding_mask(tmp_path):
    """transformers' dynamo export builds its padding mask as mask[batch_index, kv_index]:
    GatherND of the [1, seq] mask by [1, 1, 1, seq, 2] index pairs."""
    seq = 6
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [1, seq])
    pairs = [[[[[0, j] for j in range(seq)]]]]
    g = load_workload(str(save(tmp_path, "mask", [n("GatherND", ["attention_mask", "idx"],
                                                       ["picked"])], [mask],
                               [ints("idx", pairs)])))
    picked = g.node("picked")
    assert picked.shape == (1, 1, seq) and picked.op == "tensor_op" and picked.desc is not None


def test_dim_cannot_set_the_batch_nor_repeat_seq(tmp_path):
    path = llama_block(tmp_path, fixed=False)
    with pytest.raises(InputError, match="--dim: batch is the batch axis .*--batch sets"):
        load_workload(str(path), seq=8, dims={"batch": 4})
    with pytest.raises(InputError, match="sequence is the sequence axis .* by --seq or --dim, "
                                         "not both"):
        load_workload(str(path), seq=8, dims={"sequence": 8})
    assert load_workload(str(path), dims={"sequence": 8}).inputs == {"input_ids": (8,)}


def test_a_channels_last_linear_is_costed_as_it_runs(tmp_path):
    """ConvNeXt's and Swin's Linear on [H, W, C] is no chain fc layer: the planner's cost of
    its gradient all-reduce (HyPar's closed forms took it as an fc on the flattened map,
    its weights H x W times too many: hypar planned swin_t at 14x data parallelism's
    bytes) is that of its messages, for every column."""
    from hypar_sim.partition import layout_costs, node_layout
    from hypar_sim.partition.axes import sites
    from hypar_sim.partition.hierarchy import Hierarchy

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6, 6, 8])
    g = load_workload(str(save(tmp_path, "cl", [n("MatMul", ["x", "w"], ["fc"])], [x],
                               [weight("w", 8, 16)])))
    site = sites(g)[0]
    hierarchy = Hierarchy.for_count(4)
    costs = layout_costs.Costs(8, 4)
    for column in (("batch", "batch"), ("batch", "in"), ("in", "out")):
        own = node_layout.layout(site, 8, column, hierarchy)
        sent = sum(m.sum() for m in node_layout.own_matrices(own, 8, 4, False).values())
        assert costs.own(site, column, hierarchy, False) == pytest.approx(sent, rel=1e-12)
    assert node_layout.member_params(node_layout.layout(site, 8, ("batch", "batch"),
                                                        hierarchy)).max() == 8 * 16


def test_token_ids_are_positions_and_identity_reshapes_fold(tmp_path):
    """At a fixed batch of 1 an export reshapes [1, 128] ids to [128]: per sample nothing
    changes, so no node is made, and the ids stay positions (P), so that a plan may split
    the tokens (`--kinds batch,seq` at batch 1 was refused on the exported GPT-2)."""
    path = llama_block(tmp_path, fixed=True)
    g = load_workload(str(path))
    assert g.node("x").input_dims[0] == ("P",)
    assert not {"h2", "r2", "o3", "down3"} & {node.name for node in g.nodes}
    from hypar_sim.partition.hierarchy import Hierarchy
    from hypar_sim.planner.options import PlanOptions
    from hypar_sim.planner.plan import make_plan

    plan = make_plan(g, "hypar", Hierarchy.for_count(4), 1,
                     options=PlanOptions(kinds=("batch", "spatial")))
    assert plan.traffic_bytes > 0 and any("spatial" in column for column in plan.columns)


def test_mistakes_with_onnx_files_are_named(tmp_path):
    weights = tmp_path / "model.onnx.data"
    weights.write_bytes(b"\0" * 1024)
    with pytest.raises(InputError, match="the external data \\(weights\\) of an ONNX model, "
                                         "not a network; give its .onnx file"):
        load_workload(str(weights))
    x = helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["N", 1, "samples"])
    path = save(tmp_path, "short", [n("Conv", ["audio", "k"], ["c"], strides=[5])], [x],
                [weight("k", 4, 1, 10)])
    with pytest.raises(InputError, match="of shape \\[batch, 4, 0\\] has an axis of size 0 "
                                         "\\(an input too small"):
        load_workload(str(path), dims={"samples": 5})


def test_a_run_records_its_file_and_bound_axes(tmp_path):
    """`run --json` of an imported model says which file and which sizes its named axes
    took (--seq, --dim), so that a run can be told apart and repeated."""
    path = llama_block(tmp_path, fixed=False)
    result = simulate_request(make_request(str(path), accelerators=2, batch=4, seq=8))
    assert result.config["network_file"] == str(path)
    assert result.config["network_axes"] == {"sequence": 8}
