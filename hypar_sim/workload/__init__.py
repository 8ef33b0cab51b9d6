"""Networks as data: layers, shape inference, YAML loading."""

from hypar_sim.workload.layers import FeatureShape, Layer, LayerKind, Pool
from hypar_sim.workload.network import Network, available_networks, load_network

__all__ = ["FeatureShape", "Layer", "LayerKind", "Network", "Pool", "available_networks",
           "load_network"]
