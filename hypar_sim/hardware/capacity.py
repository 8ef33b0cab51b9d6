"""What one cube keeps in its memory through a training step, and its capacity check.

Kept apart from the PE-array model (`hardware.costs`) so that planning, which
weighs footprints but not cycles, does not load it.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import HardwareConfig


@dataclass(frozen=True)
class Footprint:
    """Bytes one cube keeps for one layer through a training step."""

    layer: str
    weights_bytes: float
    gradients_bytes: float
    activations_bytes: float  # the input kept for the backward pass
    optimizer_bytes: float = 0.0  # the optimizer's state for its weights (`--optimizer`)

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.activations_bytes \
            + self.optimizer_bytes


def check_capacity(footprints: list[Footprint], buffers_bytes: float, config: HardwareConfig,
                   network: str) -> float:
    """Bytes per cube: every layer's footprint plus the communication buffers (the most
    one cube receives in one communication step). InputError naming the layer where the
    cube's capacity is crossed, with the numbers."""
    capacity = config.cube_capacity_bytes
    running = buffers_bytes
    gib = 2**30
    for item in footprints:
        running += item.total_bytes
        if running > capacity:
            raise InputError(
                f"capacity: {network} needs {running / gib:.2f} GiB per cube by layer "
                f"{item.layer} (weights {item.weights_bytes / gib:.2f}, gradients "
                f"{item.gradients_bytes / gib:.2f}, optimizer state "
                f"{item.optimizer_bytes / gib:.2f}, activations "
                f"{item.activations_bytes / gib:.2f} GiB for that layer; communication "
                f"buffers {buffers_bytes / gib:.2f} GiB), more than the cube's "
                f"{config.cube_capacity_gib:g} GiB; use more accelerators, a smaller batch or a "
                "larger cube_capacity_gib"
            )
    return running
