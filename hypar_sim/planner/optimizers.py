"""Optimizers (registry): what each keeps per parameter beside its weight and gradient, and
what its update computes (`--optimizer`).

A cube keeps, for every parameter it holds, the weight, its gradient (a training step) and
the optimizer's state: `state_words` fp32 values (ZeRO, Rajbhandari et al., SC 2020,
section 3.1, counts Adam's as the momentum and the variance). The update reads the weight,
the gradient and the state and writes the weight and the state back; its arithmetic is
`macs_per_param` multiply-accumulate equivalents per parameter (two element operations
each), counted from each method's update rule:

- sgd: w -= lr g (Robbins and Monro 1951): a multiply and a subtract, one MAC; no state.
- momentum: v = mu v + g; w -= lr v (Sutskever et al., ICML 2013; PyTorch's SGD): two MACs
  and one velocity per parameter.
- adam: Kingma and Ba, ICLR 2015, Algorithm 1: m = b1 m + (1 - b1) g (2 multiplies, an
  add), v = b2 v + (1 - b2) g^2 (3 multiplies, an add), w -= a_t m / (sqrt(v) + eps) (a
  square root, an add, a divide, a multiply, a subtract; a_t's bias corrections once per
  step, not per parameter): 12 operations, 6 MACs; the first and second moments per
  parameter.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypar_sim.errors import InputError, clip_value, closest


@dataclass(frozen=True)
class Optimizer:
    """An update rule: its state per parameter (fp32 values) and its arithmetic."""

    name: str
    state_words: int  # values kept per parameter beside its weight and gradient
    macs_per_param: int  # multiply-accumulate equivalents of the update per parameter


OPTIMIZERS = {o.name: o for o in (Optimizer("sgd", 0, 1), Optimizer("momentum", 1, 2),
                                  Optimizer("adam", 2, 6))}
#: Today's model: plain SGD (HyPar's update, W -= lr dW).
DEFAULT_OPTIMIZER = "sgd"


def optimizer(name: str) -> Optimizer:
    """The optimizer called `name`; one line naming the allowed ones otherwise."""
    found = OPTIMIZERS.get(name) if isinstance(name, str) else None
    if found is None:
        raise InputError(f"--optimizer: unknown {clip_value(name)}"
                         f"{closest(str(name), OPTIMIZERS)}; allowed: {', '.join(OPTIMIZERS)}")
    return found
