"""Shape inference and weight counts of the shipped networks."""

from __future__ import annotations

import pytest

from hypar_sim.errors import InputError
from hypar_sim.workload.layers import FeatureShape, Pool, pool_output_size
from hypar_sim.workload.network import available_networks, load_network, parse_network

# Weights without biases. VGG-D: 138,357,544 with biases (Simonyan & Zisserman, Table 2)
# minus 13,416 biases; SFC: 784*8192 + 2*8192**2 + 8192*10.
EXPECTED_WEIGHTS = {
    "sfc": 140_722_176,
    "sconv": 100_500,
    "lenet_c": 430_500,
    "cifar_c": 145_376,
    "alexnet": 62_367_776,
    "alexnet_half": 16_624_656,
    "vgg_a": 132_851_392,
    "vgg_b": 133_035_712,
    "vgg_c": 133_625_536,
    "vgg_d": 138_344_128,
    "vgg_e": 143_652_544,
}

EXPECTED_LAYERS = {"sfc": 4, "sconv": 4, "lenet_c": 4, "cifar_c": 5, "alexnet": 8,
                   "alexnet_half": 8, "vgg_a": 11, "vgg_b": 13, "vgg_c": 16, "vgg_d": 16,
                   "vgg_e": 19}


def test_all_networks_are_shipped():
    assert set(available_networks()) == set(EXPECTED_WEIGHTS)


@pytest.mark.parametrize("name", sorted(EXPECTED_WEIGHTS))
def test_weight_and_layer_counts(name):
    net = load_network(name)
    assert net.weights == EXPECTED_WEIGHTS[name]
    assert len(net.layers) == EXPECTED_LAYERS[name]


@pytest.mark.parametrize("name", sorted(EXPECTED_WEIGHTS))
def test_layers_chain(name):
    net = load_network(name)
    shape = net.input
    for layer in net.layers:
        expected = shape if layer.kind.value == "conv" else FeatureShape(shape.size, 1, 1)
        assert layer.input == expected
        assert layer.macs_per_sample == layer.weights * layer.conv_output.height * \
            layer.conv_output.width
        shape = layer.output


def test_known_shapes():
    cifar = load_network("cifar_c")
    assert cifar.layers[3].input.channels == 1024  # fc1 sees 64x4x4 (ceil-mode pooling)
    assert [layer.output for layer in cifar.layers[:3]] == [
        (32, 16, 16), (32, 8, 8), (64, 4, 4)]
    lenet = load_network("lenet_c")
    assert lenet.layers[2].input.channels == 800
    sconv = load_network("sconv")
    assert [layer.output for layer in sconv.layers] == [
        (20, 24, 24), (50, 10, 10), (50, 6, 6), (10, 1, 1)]
    alex = load_network("alexnet")
    assert alex.layers[5].input.channels == 9216
    half = load_network("alexnet_half")
    assert half.layers[5].input.channels == 4608
    vgg = load_network("vgg_d")
    assert vgg.layers[13].input.channels == 512 * 7 * 7
    # VGG-C's third conv of stages 3-5 is 1x1
    vgg_c = load_network("vgg_c")
    assert [layer.kernel for layer in vgg_c.layers if layer.name.endswith("_3")] == [1, 1, 1]


def test_pool_ceil_mode():
    assert pool_output_size(32, Pool(3, 2, ceil_mode=True)) == 16
    assert pool_output_size(32, Pool(3, 2)) == 15
    assert pool_output_size(24, Pool(2, 2)) == 12


def test_user_network_by_path(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("input: {features: 10}\nlayers:\n  - {type: fc, out_features: 5}\n")
    net = load_network(str(path))
    assert net.name == "tiny" and net.weights == 50 and net.layer_names == ("fc1",)


@pytest.mark.parametrize("doc, fragment", [
    ({"layers": [{"type": "fc", "out_features": 3}]}, "missing field 'input'"),
    ({"input": {"features": 4}, "layers": [{"type": "fc", "out_featurs": 3}]},
     "did you mean 'out_features'"),
    ({"input": {"features": 4}, "layers": [{"type": "fc"}]}, "missing field 'out_features'"),
    ({"input": {"channels": 1, "height": 4, "width": 4},
      "layers": [{"type": "conv", "out_channels": 2, "kernel": 5}]}, "larger than its padded input"),
    ({"input": {"features": 4}, "layers": []}, "non-empty list"),
    ({"input": {"features": 0}, "layers": [{"type": "fc", "out_features": 3}]}, "integer from 1 to"),
    ({"input": {"features": 4}, "layers": [{"type": "pool", "kernel": 2}]}, "pooling is not a layer"),
    ({"input": {"features": 4}, "layers": [{"type": "lstm", "units": 2}]}, "must be one of conv, fc"),
])
def test_bad_network_documents(doc, fragment):
    with pytest.raises(InputError, match="net.yaml") as info:
        parse_network(doc, "net.yaml")
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)
