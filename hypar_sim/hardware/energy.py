"""Energy as data: a table of pJ per action, apart from the counting of actions.

A total energy is one short sum of count x energy-per-action (Accelergy's
idea). Every breakdown carries its parts, and its total is their sum.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from hypar_sim.hardware.config import HardwareConfig


class Action(StrEnum):
    """What costs energy, one unit each (a word is `word_bytes` bytes)."""

    MAC = "mac"  # one multiply-accumulate
    RF = "rf"  # one register-file word access
    INTER_PE = "inter_pe"  # one word passed between PEs
    BUFFER = "buffer"  # one global-buffer word access
    DRAM = "dram"  # one DRAM word access (read or write)
    LINK_BIT = "link_bit"  # one bit over one link
    SWITCH_BIT = "switch_bit"  # one bit through one switch
    POOL = "pool"  # one comparison of max pooling (a float subtraction)
    VAULT_HOP_BIT = "vault_hop_bit"  # one bit over one hop of a cube's vault-to-vault network
    PSUM_ADD = "psum_add"  # one addition of partial sums reduced across a cube's vaults
    STATIC_PU_CYCLE = "static_pu_cycle"  # one PU powered for one cycle


@dataclass(frozen=True)
class EnergyTable:
    """pJ per action."""

    pj_per_action: Mapping[Action, float]

    @classmethod
    def from_config(cls, config: HardwareConfig) -> EnergyTable:
        word = config.word_energy_scale  # word accesses are quoted for 32-bit words
        return cls(MappingProxyType({
            Action.MAC: config.mac_energy_pj,
            Action.RF: config.energy_rf_pj * word,
            Action.INTER_PE: config.energy_inter_pe_pj * word,
            Action.BUFFER: config.energy_buffer_pj * word,
            Action.DRAM: config.energy_dram_pj * word,
            Action.LINK_BIT: config.energy_link_pj_per_bit,
            Action.SWITCH_BIT: config.energy_switch_pj_per_bit,
            # a comparison is a subtraction: a float add (Horowitz ISSCC 2014)
            Action.POOL: config.add_energy_pj,
            Action.VAULT_HOP_BIT: config.energy_vault_hop_pj_per_bit,
            Action.PSUM_ADD: config.add_energy_pj,
            Action.STATIC_PU_CYCLE: config.static_power_pu_mw * 1e-3 / config.clock_hz * 1e12,
        }))

    def energy(self, counts: Mapping[Action, float]) -> EnergyBreakdown:
        """The energy of `counts` actions, per action, in pJ."""
        return EnergyBreakdown(MappingProxyType(
            {action: counts.get(action, 0) * pj for action, pj in self.pj_per_action.items()}
        ))


@dataclass(frozen=True)
class EnergyBreakdown:
    """Energy per action in pJ; the total is the sum of the parts."""

    parts_pj: Mapping[Action, float]

    @property
    def total_pj(self) -> float:
        return sum(self.parts_pj.values())


def add_counts(*counts: Mapping[Action, float]) -> dict[Action, float]:
    """Sum several action counts."""
    total: dict[Action, float] = {}
    for item in counts:
        for action, count in item.items():
            total[action] = total.get(action, 0) + count
    return total


def scale_counts(counts: Mapping[Action, float], factor: float) -> dict[Action, float]:
    """Every count times `factor`."""
    return {action: count * factor for action, count in counts.items()}

