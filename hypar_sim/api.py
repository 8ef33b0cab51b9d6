"""The Python API: plan, simulate and compare from a script or a notebook.

    import hypar_sim
    result = hypar_sim.simulate("vgg_a", strategy="hypar", topology="torus",
                                accelerators=16, batch=256, clock_mhz=500)
    result.latency_s, result.energy_j, result.traffic_bytes
    result.to_frame()                      # one row: every number of the result
    result.per_layer_frame()               # one row per layer (or graph node)
    result.per_link_frame()                # one row per directed link: bytes, busy share
    hypar_sim.plan("resnet50", accelerators=64, kinds=("batch", "in", "out"))
    hypar_sim.compare("vgg_a")             # data, model, trick, hypar
    hypar_sim.simulate("vgg_a", strategy="optimal", objective="time")   # or "energy"
    hypar_sim.simulate("vgg_a", config="my_hw.yaml")   # its accelerators and batch too

A network is a shipped name, a path to a YAML or ONNX file, or a `Network` or
`Graph` object. Keyword arguments beyond the named ones set hardware config
keys (`hypar-sim hardware` lists them, with units); `config` is a YAML file of
them; the array and the batch are the arguments', else the config file's, else 16
and 256. Bad input raises `hypar_sim.errors.InputError` with the same one-line
message the command line prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypar_sim.errors import InputError, closest
from hypar_sim.hardware.config import HardwareConfig, load_hardware
from hypar_sim.planner.plan import Plan
from hypar_sim.planner.traffic import DEFAULT_TRAFFIC_MODEL
from hypar_sim.request import RunRequest, make_request, plan_request
from hypar_sim.results import SimResult
from hypar_sim.runner import SimOptions, simulate_request
from hypar_sim.sim.defaults import DEFAULT_DES_MESSAGES
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.network import Network

#: What `compare` runs unless told otherwise (on any network).
COMPARED = ("data", "model", "trick", "hypar")


def hardware(config: str | None = None, **overrides: Any) -> HardwareConfig:
    """The effective hardware configuration (defaults, then `config`, then `overrides`)."""
    return load_hardware(config, overrides)


def request(network: str | Network | Graph, strategy: str = "hypar", topology: str = "htree",
            accelerators: int | None = None, batch: int | None = None, engine: str = "des",
            kinds: str | Sequence[str] | None = None, search: str = "greedy",
            traffic_model: str = DEFAULT_TRAFFIC_MODEL,
            hierarchy: str | Sequence[int] | None = None, plan_text: str | None = None,
            overlap_gradients: bool = True, seq: int | None = None,
            dims: Mapping[str, int] | None = None, layers: int | None = None,
            config: str | None = None,
            trace: bool = False, objective: str = "bytes", phases: str = "training",
            optimizer: str = "sgd", precision: str = "fp32", recompute: str = "none",
            zero: int = 0, pipeline: int = 1, microbatches: int = 1, schedule: str = "1f1b",
            stages: Sequence[str] | None = None, des_messages: int = DEFAULT_DES_MESSAGES,
            force_memory: bool = False, **config_overrides: Any) -> RunRequest:
    """The run's request, built as the command line builds it (`hypar_sim.request`):
    `accelerators` and `batch` None take the config file's, else 16 and 256; any other
    keyword is a hardware key (`hardware()`)."""
    arguments = request.__code__.co_varnames[:request.__code__.co_argcount]
    if layers is not None:  # a generated transformer's first blocks: its size `layers`
        dims = {**(dims or {}), "layers": layers}
    for key in config_overrides:
        hint = closest(key, arguments)
        if key not in HardwareConfig.__dataclass_fields__ and hint:
            raise InputError(f"{key}: unknown argument{hint}; arguments: "
                             f"{', '.join(arguments)}, or a hardware key")
    try:
        return make_request(network, accelerators=accelerators, batch=batch,
                            hierarchy=hierarchy, config=config, overrides=config_overrides,
                            seq=seq, dims=dims, strategy=strategy, plan_text=plan_text,
                            kinds=kinds, search=search, traffic_model=traffic_model,
                            objective=objective, phases=phases, optimizer=optimizer,
                            precision=precision, recompute=recompute, zero=zero,
                            pipeline=pipeline, microbatches=microbatches, schedule=schedule,
                            stages=stages, force_memory=force_memory,
                            sim=SimOptions(topology=topology, engine=engine,
                                           overlap_gradients=overlap_gradients, trace=trace,
                                           des_messages=des_messages))
    except InputError as error:
        raise InputError(_as_argument(str(error))) from None


def _as_argument(message: str) -> str:
    """A request error as the API's caller reads it: the flag that begins it (`--batch:`)
    named as the keyword argument (`batch:`)."""
    flag, colon, rest = message.partition(": ")
    if colon and flag.startswith("--") and " " not in flag:
        return f"{flag[2:].replace('-', '_')}: {rest}"
    return message


def plan(network: str | Network | Graph, strategy: str = "hypar",
         accelerators: int | None = None, batch: int | None = None, **kwargs: Any
         ) -> Plan:
    """The plan of `strategy` and its traffic (bytes per level and layer or node), the same
    keyword arguments as `simulate` (`kinds` None: batch and in, or the strategy's paper's
    own; `objective` bytes, time or energy, estimated on `topology`; `phases` "forward": an
    inference; `config` a YAML file)."""
    return plan_request(request(network, strategy, accelerators=accelerators, batch=batch,
                                **kwargs))


def simulate(network: str | Network | Graph, strategy: str = "hypar", **kwargs: Any
             ) -> SimResult:
    """One training step of `network` split by `strategy`, simulated (see the module; with
    `trace`, `result.trace_events` holds its Chrome/Perfetto trace; `phases` "forward": an
    inference, the forward pass alone)."""
    return simulate_request(request(network, strategy, **kwargs))


def compare(network: str | Network | Graph, strategies: Sequence[str] | None = None,
            **kwargs: Any) -> list[SimResult]:
    """`simulate` for each strategy (default: every strategy `compare` runs on the command
    line), the same keyword arguments for all."""
    workload = request(network, "hypar", **kwargs).workload()
    return [simulate_request(request(workload, strategy, **kwargs), workload)
            for strategy in strategies or COMPARED]
