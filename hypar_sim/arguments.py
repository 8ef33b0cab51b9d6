"""From the parsed command line to what the commands work on: the run's request (flags,
then the config file, then the defaults: `hypar_sim.request`), the network and its sizes,
the hardware keys given with --set."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from hypar_sim.errors import InputError, clip_value
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.network import load_as_written

if TYPE_CHECKING:
    from hypar_sim.request import RunRequest
    from hypar_sim.workload.network import Network

DEFAULT_LEVELS = 4
#: Bounds of --chunk-kib and --max-chunks: a message of a million chunks is a million events.
MOST_CHUNK_KIB = 2**20
MOST_CHUNKS = 2**16


def request_from_args(args: argparse.Namespace) -> RunRequest:
    """The run's request from the command line (`hypar_sim.request.make_request`: flags, then
    the config file's accelerators and batch, then the defaults)."""
    from hypar_sim.request import make_request

    sim = None
    if hasattr(args, "engine"):  # the commands that simulate
        from hypar_sim.sim.options import SimOptions

        if not 1 <= args.chunk_kib <= MOST_CHUNK_KIB:
            raise InputError(f"--chunk-kib: must be an integer from 1 to {MOST_CHUNK_KIB:,} "
                             f"(1 GiB), got {clip_value(args.chunk_kib)}")
        if not 1 <= args.max_chunks <= MOST_CHUNKS:
            raise InputError(f"--max-chunks: must be an integer from 1 to {MOST_CHUNKS:,}, "
                             f"got {clip_value(args.max_chunks)}")
        sim = SimOptions(topology=args.topology, engine=args.engine,
                         chunk_bytes=args.chunk_kib * 1024, max_chunks=args.max_chunks,
                         overlap_gradients=not args.no_overlap, bucket_mb=args.bucket_mb,
                         symmetry=not args.no_symmetry, progress=_progress(args),
                         trace=bool(getattr(args, "trace", None)),
                         trace_links=getattr(args, "trace_links", "messages"),
                         des_messages=args.des_messages)
    elif getattr(args, "topology", None):  # plan: the estimate's topology
        from hypar_sim.sim.options import SimOptions

        sim = SimOptions(topology=args.topology)
    request = make_request(
        args.network, accelerators=args.accelerators, batch=args.batch,
        levels=getattr(args, "levels", None), hierarchy=args.hierarchy, config=args.config,
        overrides=hardware_overrides(args), seq=args.seq, dims=_dims(args),
        strategy=_strategy(args),
        plan_text=getattr(args, "plan_text", None), kinds=args.kinds, search=args.search,
        traffic_model=args.traffic_model, objective=args.objective,
        phases=getattr(args, "phases", "training"), sim=sim, progress=_progress(args),
        optimizer=args.optimizer, precision=args.precision, recompute=args.recompute,
        zero=args.zero, pipeline=args.pipeline, microbatches=args.microbatches,
        schedule=args.schedule, stages=args.stages,
        force_memory=getattr(args, "force_memory", False))
    if str(args.network).endswith(".onnx"):  # loaded once here, to say what the import chose
        graph = request.workload()
        for note in graph.notes:
            print(f"note: {note}", file=sys.stderr)
        request = dataclasses.replace(request, network=graph)
    return request


def _progress(args: argparse.Namespace) -> bool:
    """Progress bars on stderr: on a terminal, unless --no-progress."""
    return sys.stderr.isatty() and not getattr(args, "no_progress", False)


def _strategy(args: argparse.Namespace) -> str:
    """--strategy (default hypar); with --plan, none or explicit (the plan is given)."""
    given = getattr(args, "strategy", None)
    if getattr(args, "plan_text", None) is not None and given not in (None, "explicit"):
        raise InputError(f"--plan: the plan is given, so the strategy is explicit, not "
                         f"--strategy {given}; drop one of them")
    return given or "hypar"


def written_network(args: argparse.Namespace) -> Network | Graph:
    """The network named by the command line as its file gives it (`load_as_written`: a
    `layers` file's chain, any other a graph), an ONNX model's sequence from --seq and its
    other named axes, or a transformer's sizes, from --dim and --layers."""
    from hypar_sim.request import check_dims, check_seq

    return load_as_written(args.network, check_seq(args.seq),
                           dict(check_dims(_dims(args))))


def _dims(args: argparse.Namespace) -> list[str] | None:
    """--dim NAME=SIZE, with --layers N as layers=N."""
    layers = getattr(args, "layers", None)
    if layers is None:
        return args.dim
    if layers < 1:
        raise InputError(f"--layers: must be a positive number of blocks, got {layers}")
    return [*(args.dim or []), f"layers={layers}"]


def hardware_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The hardware keys given on the command line (--set)."""
    from hypar_sim.hardware.config import parse_overrides

    given: dict[str, Any] = {}
    for key, values in parse_overrides(getattr(args, "overrides", None) or ()):
        if len(values) != 1:
            raise InputError(f"--set: {key} takes one value here (several make a sweep: "
                             "`sweep --set`)")
        given[key] = values[0]
    return given
