"""The Eyeriss chip running AlexNet's convolutions: the published case the PU model is
checked against (tests/test_pe_array.py, `experiments.validation`).

[JSSC17] Y.-H. Chen, T. Krishna, J. Emer, V. Sze, "Eyeriss: An Energy-Efficient
Reconfigurable Accelerator for Deep Convolutional Neural Networks", IEEE JSSC 52(1), 2017:
Table IV (the chip: 12 x 14 PEs, 108 KB buffer, 16-bit words), Table III (AlexNet CONV1-5
as the chip runs them, batch 4), Table V (per layer at 1 V, 200 MHz: active PEs, processing
latency, total latency, MACs, chip power, zeros in the ifmaps). The power, total latency and
zeros columns were read from a public text scan of the table (github.com/cucapra/fodlam,
raw/eyeriss-tableV.txt and data/eyeriss-alexnet.csv). The scan has misreadings: it gives
CONV3's processing latency as 21.3 ms, where the table's Total row (103.5 ms) confirms the
21.8 ms the tests have used since the PU model landed. The Total row's power, 278 mW, is the
layers' powers averaged over their total latencies (278.3 mW; over the processing latencies
it would be 277.2 mW), so a layer's chip energy is its power x its total latency.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from hypar_sim.hardware.conv_work import ConvWork
from hypar_sim.hardware.pe_array import AccessCounts, AccessEnergy, PEArraySpec

#: The chip at 200 MHz (Table V's clock). Its Table V configurations fill the array with
#: whole-width sets: the cycles objective finds them; the energy objective trades PEs for
#: fewer DRAM reads (CONV2 on 120 PEs, not 135).
CHIP = PEArraySpec(word_bytes=2, clock_hz=200e6, objective="cycles")

#: AlexNet CONV1-5, batch N = 4 (Table III: H, R, E, C, M, U; CONV2, CONV4 and CONV5 are the
#: grouped layers, taken per group: C = 48 / 192 / 192).
ALEXNET = MappingProxyType({
    "CONV1": ConvWork(4, 3, 96, 227, 227, 11, 11, 4, 55, 55),
    "CONV2": ConvWork(4, 48, 256, 31, 31, 5, 5, 1, 27, 27),
    "CONV3": ConvWork(4, 256, 384, 15, 15, 3, 3, 1, 13, 13),
    "CONV4": ConvWork(4, 192, 384, 15, 15, 3, 3, 1, 13, 13),
    "CONV5": ConvWork(4, 192, 256, 15, 15, 3, 3, 1, 13, 13),
})


@dataclass(frozen=True)
class TableVRow:
    """One layer of [JSSC17] Table V."""

    active_pes: int
    processing_ms: float  # processing latency (DRAM transfer time excluded)
    total_ms: float  # total latency (with the DRAM transfers)
    macs_g: float  # MACs, in units of 1e9
    power_mw: float  # the chip's measured power over the total latency (DRAM excluded)
    zero_ifmap_fraction: float  # of the input values, zeros (the chip gates their MACs)

    @property
    def energy_mj(self) -> float:
        """The chip's energy for the layer: power x total latency, mJ."""
        return self.power_mw * self.total_ms * 1e-3


#: [JSSC17] Table V, AlexNet CONV1-5 at batch 4, 1 V, 200 MHz.
TABLE_V = MappingProxyType({
    "CONV1": TableVRow(154, 16.5, 20.9, 0.42, 332, 0.0001),
    "CONV2": TableVRow(135, 39.2, 41.9, 0.90, 288, 0.387),
    "CONV3": TableVRow(156, 21.8, 23.6, 0.60, 266, 0.725),
    "CONV4": TableVRow(156, 16.0, 18.4, 0.45, 235, 0.793),
    "CONV5": TableVRow(156, 10.0, 10.5, 0.30, 236, 0.776),
})

#: How close the model's processing latency comes to Table V's (README's claim).
LATENCY_TOLERANCE = 0.15


def chip_energy_pj(counts: AccessCounts, energy: AccessEnergy) -> float:
    """The model's share of what Table V's power covers, pJ: each MAC, scratch-pad access,
    PE-to-PE pass and global-buffer access at its price. DRAM is outside the chip; the chip's
    clock tree, control and leakage are not modelled."""
    return energy.on_chip_pj(counts.macs, counts.rf, counts.buffer, counts.inter_pe)
