"""Networks: load a YAML definition, validate it, and infer every layer's shapes.

Schema (see workloads/README.md)::

    name: lenet_c                      # optional, defaults to the file name
    description: Caffe's MNIST LeNet   # optional
    source: ...                        # optional, where the definition comes from
    input: {channels: 1, height: 28, width: 28}     # or {features: 784}
    layers:                            # weighted layers, in order
      - {type: conv, out_channels: 20, kernel: 5, stride: 1, padding: 0,
         pool: {kernel: 2, stride: 2, padding: 0, ceil_mode: false}}
      - {type: fc, out_features: 500}

Every error is an InputError whose one-line message names the file and field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypar_sim.errors import InputError, clip_value, closest, why_not_a_file
from hypar_sim.workload.graph import Graph, Node, parse_graph
from hypar_sim.workload.layers import FeatureShape, Layer, LayerKind, Pool, make_conv, make_fc
from hypar_sim.workload.ops import check_elements
from hypar_sim.workload.ops import name as check_name
from hypar_sim.workload.yaml_reader import read_yaml

WORKLOADS_DIR = Path(__file__).resolve().parents[2] / "workloads"

_TOP_KEYS = {"name", "description", "source", "input", "layers"}
_LAYER_KEYS = {
    "conv": ({"type", "out_channels", "kernel"}, {"name", "stride", "padding", "pool"}),
    "fc": ({"type", "out_features"}, {"name"}),
}
_POOL_KEYS = ({"kernel", "stride"}, {"padding", "ceil_mode", "type"})


@dataclass(frozen=True)
class Network:
    """A chain of weighted layers with inferred shapes."""

    name: str
    input: FeatureShape
    layers: tuple[Layer, ...]
    source: str = ""
    description: str = ""

    @property
    def weights(self) -> int:
        """Total weights (no biases)."""
        return sum(layer.weights for layer in self.layers)

    @property
    def macs_per_sample(self) -> int:
        """Forward multiply-accumulates for one sample."""
        return sum(layer.macs_per_sample for layer in self.layers)

    @property
    def layer_names(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers)


GRAPHS_DIR = WORKLOADS_DIR / "graphs"


def available_networks() -> list[str]:
    """Names of the chain networks shipped in workloads/ (the paper's ten)."""
    return sorted(path.stem for path in WORKLOADS_DIR.glob("*.yaml"))


def available_graphs() -> list[str]:
    """Names of the graph networks shipped in workloads/graphs/ (node lists, and the
    transformers generated from their sizes, `workload.transformer`)."""
    return sorted(path.stem for path in GRAPHS_DIR.glob("*.yaml"))


def resolve_network_path(name_or_path: str) -> Path:
    """The YAML file for a shipped network name or a user path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml", ".onnx") or path.parent != Path("."):
        if not path.is_file():
            raise InputError(f"{name_or_path}: network file {why_not_a_file(path)}")
        return path
    for folder in (WORKLOADS_DIR, GRAPHS_DIR):
        shipped = folder / f"{name_or_path}.yaml"
        if shipped.is_file():
            return shipped
    names = available_networks() + available_graphs()
    raise InputError(
        f"unknown network '{name_or_path}'{closest(name_or_path, names)}: "
        f"choose one of {', '.join(names)} or give a path to a .yaml or .onnx file"
    )


def load_workload(name_or_path: str, seq: int | None = None,
                  dims: Mapping[str, int] | None = None) -> Graph:
    """A network as a graph, by name or path: a file with `nodes`, a generated transformer,
    an ONNX model (a dynamic sequence axis takes `seq` tokens, other named axes their
    `dims`), or a chain (a file with `layers`: `graph_of`)."""
    return as_graph(load_as_written(name_or_path, seq, dims))


def load_as_written(name_or_path: str, seq: int | None = None,
                    dims: Mapping[str, int] | None = None) -> Network | Graph:
    """A network as its file gives it, read once: a `layers` file's chain as it is (no
    graph built from it), any other network as a graph (`load_workload`)."""
    path = resolve_network_path(name_or_path)
    if path.suffix == ".onnx":
        from hypar_sim.workload.onnx_import import load_onnx

        return load_onnx(path, seq, dims)
    data = read_yaml(path)
    if isinstance(data, Mapping) and "transformer" in data:
        from hypar_sim.workload.transformer import load_transformer

        return load_transformer(data, str(path), path.stem, seq, dims)
    if dims and set(dims) == {"layers"}:
        raise InputError(f"--layers: {name_or_path} is not a generated transformer; "
                         "--layers keeps the first blocks of gpt2_small, gpt2_xl, gpt3_2_7b, "
                         "llama_7b or a file with a `transformer:` mapping")
    if dims:
        raise InputError(f"--dim: {name_or_path} is a YAML network, whose shapes are fixed "
                         "in the file; --dim sets a named dynamic axis of an ONNX model or "
                         "a size of a generated transformer")
    if seq is not None:
        raise InputError(f"--seq: {name_or_path} is a YAML network, whose shapes are fixed in "
                         "the file; --seq sets the tokens of an ONNX model's dynamic sequence "
                         "axis or of a generated transformer (edit the YAML's input shape "
                         "instead)")
    if isinstance(data, Mapping) and "nodes" in data:
        return parse_graph(data, str(path), default_name=path.stem)
    return parse_network(data, str(path), default_name=path.stem)


def load_network(name_or_path: str) -> Network:
    """A network as HyPar's chain of layers, by name or path: a `layers` file, or a graph
    that is such a chain (`chain_of`)."""
    network = load_as_written(name_or_path)
    return network if isinstance(network, Network) else chain_of(network, name_or_path)


def _check_keys(where: str, data: Any, required: set[str], optional: set[str]) -> None:
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: expected a mapping with keys {', '.join(sorted(required))}")
    allowed = required | optional
    for key in data:
        if key not in allowed:
            raise InputError(
                f"{where}: unknown field '{key}'{closest(str(key), allowed)}; "
                f"allowed: {', '.join(sorted(allowed))}"
            )
    for key in sorted(required):
        if key not in data:
            raise InputError(f"{where}: missing field '{key}' (required: {', '.join(sorted(required))})")


#: Largest size accepted (channels, features, rows, kernels...): 2**24 keeps every tensor's
#: byte count far below 2**53, where the planner's float arithmetic stays exact.
MAX_SIZE = 2**24


def _positive_int(where: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_SIZE:
        raise InputError(f"{where}: must be an integer from {minimum} to {MAX_SIZE}, got {clip_value(value)}")
    return value


def _parse_input(where: str, data: Any) -> FeatureShape:
    if isinstance(data, Mapping) and "features" in data:
        _check_keys(where, data, {"features"}, set())
        return FeatureShape(_positive_int(f"{where}.features", data["features"]), 1, 1)
    _check_keys(where, data, {"channels", "height", "width"}, set())
    shape = FeatureShape(*(_positive_int(f"{where}.{key}", data[key])
                           for key in ("channels", "height", "width")))
    check_elements(where, tuple(shape))
    return shape


def _parse_pool(where: str, data: Any) -> Pool:
    _check_keys(where, data, *_POOL_KEYS)
    if data.get("type", "max") not in ("max", "avg"):
        raise InputError(f"{where}.type: must be max or avg, got {clip_value(data['type'])}")
    ceil_mode = data.get("ceil_mode", False)
    if not isinstance(ceil_mode, bool):
        raise InputError(f"{where}.ceil_mode: must be true or false, got {clip_value(ceil_mode)}")
    return Pool(
        kernel=_positive_int(f"{where}.kernel", data["kernel"]),
        stride=_positive_int(f"{where}.stride", data["stride"]),
        padding=_positive_int(f"{where}.padding", data.get("padding", 0), minimum=0),
        ceil_mode=ceil_mode,
    )


def _parse_layer(where: str, data: Any, index: int, shape: FeatureShape) -> Layer:
    kind = data.get("type") if isinstance(data, Mapping) else None
    if kind == "pool":
        raise InputError(f"{where}.type: pooling is not a layer of its own; give it as the "
                         "'pool' field of the conv layer before it, e.g. pool: {kernel: 2, stride: 2}")
    if kind not in _LAYER_KEYS:
        raise InputError(
            f"{where}.type: must be one of {', '.join(_LAYER_KEYS)}, got {clip_value(kind)}"
            f"{closest(str(kind), _LAYER_KEYS)}"
        )
    _check_keys(where, data, *_LAYER_KEYS[kind])
    name = check_name(f"{where}.name", data.get("name", f"{kind}{index + 1}"))
    try:
        if kind == LayerKind.FC.value:
            return make_fc(name, shape, _positive_int(f"{where}.out_features", data["out_features"]))
        pool = _parse_pool(f"{where}.pool", data["pool"]) if data.get("pool") is not None else None
        return make_conv(
            name,
            shape,
            out_channels=_positive_int(f"{where}.out_channels", data["out_channels"]),
            kernel=_positive_int(f"{where}.kernel", data["kernel"]),
            stride=_positive_int(f"{where}.stride", data.get("stride", 1)),
            padding=_positive_int(f"{where}.padding", data.get("padding", 0), minimum=0),
            pool=pool,
        )
    except ValueError as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{where} ({name}): {exc} (input {shape})") from None


def parse_network(data: Any, source: str, default_name: str = "network") -> Network:
    """Validate a parsed YAML document and infer the shapes of all its layers."""
    _check_keys(source, data, {"input", "layers"}, _TOP_KEYS - {"input", "layers"})
    input_shape = _parse_input(f"{source}: input", data["input"])
    shape = input_shape
    raw_layers = data["layers"]
    if not isinstance(raw_layers, list) or not raw_layers:
        raise InputError(f"{source}: layers: must be a non-empty list of conv/fc layers")
    layers: list[Layer] = []
    names: set[str] = set()
    for index, raw in enumerate(raw_layers):
        layer = _parse_layer(f"{source}: layers[{index}]", raw, index, shape)
        if layer.name in names:
            raise InputError(f"{source}: layers[{index}].name: duplicate layer name '{layer.name}'")
        names.add(layer.name)
        layers.append(layer)
        shape = layer.output
    return Network(
        name=check_name(f"{source}: name", data.get("name", default_name)),
        input=input_shape,
        layers=tuple(layers),
        source=str(data.get("source", "")),
        description=str(data.get("description", "")),
    )


def graph_of(network: Network) -> Graph:
    """The chain as a graph: a node per layer, named as the layer, a pooling as its conv's
    `pool` (`graph.fold_pools`: the same node a `nodes:` file with a pool node of its own
    gives); the input an image of the chain's input shape."""
    nodes: list[dict[str, Any]] = []
    for layer in network.layers:
        if layer.kind is LayerKind.FC:
            nodes.append({"name": layer.name, "type": "fc", "out_features": layer.output.channels})
            continue
        node = {"name": layer.name, "type": "conv", "out_channels": layer.conv_output.channels,
                "kernel": layer.kernel, "stride": layer.stride, "padding": layer.padding}
        if layer.pool is not None:
            pool = layer.pool
            node["pool"] = {"kernel": pool.kernel, "stride": pool.stride,
                            "padding": pool.padding, "ceil_mode": pool.ceil_mode}
        nodes.append(node)
    shape = network.input
    return parse_graph({"name": network.name, "description": network.description,
                        "source": network.source, "nodes": nodes,
                        "inputs": {"image": [shape.channels, shape.height, shape.width]}},
                       network.name)


def as_graph(network: Network | Graph) -> Graph:
    """A chain made a graph (`graph_of`); a graph as it is."""
    return graph_of(network) if isinstance(network, Network) else network


def is_chain(graph: Graph) -> bool:
    """Whether `chain_of` reads `graph` as a chain of conv and fc layers."""
    try:
        chain_of(graph, "")
    except InputError:
        return False
    return True


def chain_of(graph: Graph, why: str) -> Network:
    """The graph as HyPar's chain of conv and fc layers (each layer's pooling folded in), for
    what reads only such chains (`why`, named in the error); InputError naming the first
    node that is not such a layer."""
    def refuse(node: str, reason: str) -> InputError:
        return InputError(f"{why}: {graph.name} is not a chain of conv and fc layers (node "
                          f"{node}: {reason}); use --traffic-model layout")

    (name, shape), *more = graph.inputs.items()
    if more or len(shape) not in (1, 3):
        raise refuse(graph.nodes[0].name, "the graph must have one input, an image or a vector")
    current = _feature_shape(shape)
    layers, previous = [], name
    readers = graph.consumers()
    for node in graph.nodes:
        if node.inputs != (previous,) or len(readers[previous]) != 1:
            raise refuse(node.name, "it is not the one reader of the layer before it")
        try:
            layer = _layer_of(node, current)
        except ValueError as exc:
            raise refuse(node.name, str(exc)) from None
        layers.append(layer)
        current, previous = layer.output, node.name
    return Network(graph.name, _feature_shape(shape), tuple(layers), graph.source,
                   graph.description)


def layer_of(node: Node) -> Layer | None:
    """A conv or fc node without biases as a chain's layer (`chain_of`'s reading; None if it
    is not one): what the closed forms of `partition.totals` cost."""
    if node.op not in ("conv", "fc") or node.attrs.get("bias") or len(node.inputs) != 1:
        return None
    shape = node.input_shapes[0]
    if len(shape) not in (1, 3):
        return None
    try:
        return _layer_of(node, _feature_shape(shape))
    except ValueError:
        return None


def _feature_shape(shape: tuple[int, ...]) -> FeatureShape:
    """A chain's view of an image (channels, rows, columns) or a vector (features x 1 x 1)."""
    return FeatureShape(*shape) if len(shape) == 3 else FeatureShape(shape[0], 1, 1)


def _layer_of(node: Node, shape: FeatureShape) -> Layer:
    """A conv or fc node as a chain's layer (ValueError saying why it is not one)."""
    a = node.attrs
    if node.op == "fc" and not a["flatten"] and len(node.input_shapes[0]) == 3:
        raise ValueError("an fc layer on the last axis of a feature map (flatten: false)")
    if node.op == "fc" and not a["tied_to"]:
        return make_fc(node.name, shape, a["out_features"])
    if node.op != "conv":
        raise ValueError(f"a {node.op} node")
    square = {key: _square(a[key]) for key in ("kernel", "stride", "padding", "dilation")}
    if a["groups"] != 1 or square["dilation"] != 1 or None in square.values():
        raise ValueError("a grouped, dilated or non-square convolution")
    pool = None
    if a["pool"] is not None:
        given = a["pool"]
        kernel = _square(given["kernel"])
        stride = _square(given.get("stride") or given["kernel"])
        padding = _square(given.get("padding", 0))
        if None in (kernel, stride, padding):
            raise ValueError("a non-square pooling")
        pool = Pool(kernel, stride, padding, bool(given.get("ceil_mode", False)))
    return make_conv(node.name, shape, a["out_channels"], square["kernel"], square["stride"],
                     square["padding"], pool)


def _square(value: Any) -> int | None:
    """One size for rows and columns (and, padding, both sides), or None."""
    if isinstance(value, int):
        return value
    return value[0] if len(set(value)) == 1 else None

