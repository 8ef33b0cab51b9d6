"""Export torchvision's CNNs to ONNX, import each, and plan and simulate one step.

Needs torch and torchvision (not dependencies of hypar-sim; e.g. `pip install
torch torchvision` in a separate environment with hypar-sim installed). The
files are what the ONNX model zoo's are made of: torch.onnx's TorchScript
exporter, opset 17, random weights, a dynamic batch axis. Prints, per model,
the imported nodes, parameters (against torchvision's own count), MACs, and the
simulated step on `--accelerators` cubes (HyPar vs data parallelism).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

MODELS = ("alexnet", "vgg11", "resnet50", "googlenet", "squeezenet1_0", "shufflenet_v2_x1_0",
          "densenet121", "mobilenet_v2", "inception_v3")


def export(name: str, folder: Path) -> tuple[Path, int]:
    """The model as an ONNX file, and torchvision's parameter count."""
    import torch
    import torchvision

    extra = {"aux_logits": False, "init_weights": False} if name in ("googlenet",
                                                                      "inception_v3") else {}
    model = getattr(torchvision.models, name)(weights=None, **extra).eval()
    size = 299 if name == "inception_v3" else 224
    path = folder / f"{name}.onnx"
    torch.onnx.export(model, torch.randn(1, 3, size, size), str(path), opset_version=17,
                      input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False)
    return path, sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"torchvision model names (default {','.join(MODELS)})")
    parser.add_argument("--accelerators", type=int, default=16)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    from hypar_sim.request import make_request
    from hypar_sim.runner import simulate_request
    from hypar_sim.workload.network import load_workload

    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            path, params = export(name, Path(folder))
            start = time.perf_counter()
            graph = load_workload(str(path))
            imported = time.perf_counter() - start
            data, hypar = (simulate_request(make_request(
                graph, accelerators=args.accelerators, batch=args.batch, strategy=strategy))
                for strategy in ("data", "hypar"))
            print(f"{name:20} {len(graph.nodes):4} nodes, {graph.params:>11,} parameters "
                  f"(torchvision {params:,}), {graph.macs_per_sample / 1e9:6.3f} GMAC/sample, "
                  f"imported in {imported:.2f} s; step data {data.latency_s * 1e3:8.1f} ms, "
                  f"hypar {hypar.latency_s * 1e3:8.1f} ms ({data.latency_s / hypar.latency_s:.2f}x), "
                  f"{hypar.traffic_bytes / 1e9:.3f} GB")


if __name__ == "__main__":
    main()
