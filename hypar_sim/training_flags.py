"""The command line's training flags (`plan`, `run`, `compare`): the optimizer, the precision,
recomputation, ZeRO and the pipeline (`planner.training` checks their values)."""

from __future__ import annotations

import argparse


def _int_or_auto(text: str) -> int | str:
    """A flag's integer, or `auto` (optimal chooses it)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or auto, got '{text}'") from None


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """--optimizer, --precision, --recompute, --zero and the pipeline's flags."""
    from hypar_sim.planner.optimizers import OPTIMIZERS
    from hypar_sim.planner.training import (
        AUTO,
        PIPELINE_SCHEDULES,
        PRECISIONS,
        RECOMPUTES,
        ZERO_STAGES,
    )

    parser.add_argument("--optimizer", default="sgd", choices=OPTIMIZERS,
                        help="the update rule, and the state per parameter each cube keeps "
                             "beside its weights and gradients: sgd (none, default), momentum "
                             "(one fp32 value), adam (two: Kingma and Ba 2015)")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS,
                        help="number format: fp32 (default: 32-bit everything); bf16, fp16: "
                             "16-bit compute, activations and messages, fp32 master weights "
                             "and optimizer state (Micikevicius et al. 2018)")
    parser.add_argument("--recompute", default="none", choices=[*RECOMPUTES, AUTO],
                        help="activation recomputation (auto: optimal chooses, with "
                             "--objective time): none (default: keep what the "
                             "backward pass reads); full: keep only segments' inputs (cut where "
                             "little crosses, as many as keep the least), run each segment's "
                             "forward again before its backward (Chen et al. 2016); selective: "
                             "recompute the attention core "
                             "only (Korthikanti et al. 2022)")
    parser.add_argument("--zero", default=0, type=_int_or_auto,
                        choices=[*ZERO_STAGES, AUTO],
                        help="ZeRO stage (auto: optimal chooses, with --objective time; "
                             "Rajbhandari et al. 2020), sharding among a node's "
                             "data-parallel copies: 1 the optimizer state, 2 and the "
                             "gradients, 3 and the weights (gathered before each forward and "
                             "backward pass); 0: none (default)")
    parser.add_argument("--pipeline", default=1, type=_int_or_auto, metavar="S",
                        help="pipeline parallelism: the array's top level holds S stages of "
                             "contiguous nodes (default 1: none; --hierarchy must start with "
                             "S); auto: optimal chooses S, the micro-batches and the stages "
                             "(with --objective time; Alpa's search, Zheng et al. 2022)")
    parser.add_argument("--microbatches", default=1, type=int, metavar="M",
                        help="micro-batches a pipeline's batch is cut into (default 1; it must "
                             "divide the batch, and a micro-batch must still split over a "
                             "stage's members as the plan asks)")
    parser.add_argument("--schedule", default="1f1b", choices=PIPELINE_SCHEDULES,
                        help="pipeline schedule: 1f1b (default; Narayanan et al. 2021) or "
                             "gpipe (Huang et al. 2019)")
    parser.add_argument("--stages", default=None, metavar="NODES",
                        help="the first node of each pipeline stage after the first, comma "
                             "separated (default: stages balanced by multiply-accumulates)")
