"""Link parameters of the array's interconnect, in simulator units (bytes, cycles, pJ).

H-tree (HyPar Fig. 4(c)): a fat tree with the accelerators as leaves and a
switch at every group of the hierarchy. A link is as many base links wide as
there are accelerators below it (2**k at height k of a binary tree), so every
level carries the same total (16 x 1.6 Gb/s = 25.6 Gb/s in the paper); see
`topology.FatTree`. Torus: every link is one base link. Links are full duplex:
the bandwidth is per direction.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import HardwareConfig


@dataclass(frozen=True)
class LinkSpec:
    """One direction of one link."""

    bandwidth_bytes_per_cycle: float  # payload bytes per array cycle (packet overhead removed)
    latency_cycles: float  # fixed latency of one traversal (SerDes, wire, controller)
    energy_scale: float = 1.0  # its pJ/bit over the hardware config's energy_link_pj_per_bit


def link_spec(config: HardwareConfig, width: int = 1,
              base: HardwareConfig | None = None) -> LinkSpec:
    """A link `width` base links wide (a fat-tree link at height k has width 2**k), from
    `config`'s link keys; `base` is the hardware config whose energy_link_pj_per_bit the
    energy table charges (a topology file's level may differ from it)."""
    raw_bytes_per_cycle = width * config.link_bandwidth_gbps * 1e9 / 8 / config.clock_hz
    base = base or config
    if base.energy_link_pj_per_bit > 0:
        scale = config.energy_link_pj_per_bit / base.energy_link_pj_per_bit
    elif config.energy_link_pj_per_bit == 0:
        scale = 1.0
    else:
        raise InputError("topology: energy_link_pj_per_bit of a level needs the hardware "
                         "config's energy_link_pj_per_bit > 0 (the energy table scales it)")
    return LinkSpec(
        bandwidth_bytes_per_cycle=raw_bytes_per_cycle * config.packet_efficiency,
        latency_cycles=config.link_latency_ns / config.cycle_ns,
        energy_scale=scale,
    )


def switch_latency_cycles(config: HardwareConfig) -> float:
    """Cycles to cross one switch."""
    return config.switch_latency_ns / config.cycle_ns
