"""The Eyeriss chip running AlexNet's convolutions: the published case the PU model is
checked against (tests/test_pe_array.py, `experiments.validation`).

[JSSC17] Y.-H. Chen, T. Krishna, J. Emer, V. Sze, "Eyeriss: An Energy-Efficient
Reconfigurable Accelerator for Deep Convolutional Neural Networks", IEEE JSSC 52(1), 2017:
Table IV (the chip: 12 x 14 PEs, 108 KB buffer, 16-bit words), Table III (AlexNet CONV1-5
as the chip runs them, batch 4), Table V (per layer: active PEs, processing latency at
200 MHz, MACs). These numbers have been the PE-array tests' targets since the model
landed; Table V's power column is not carried here (no copy of the paper in ../shared).
"""

from __future__ import annotations

from types import MappingProxyType

from hypar_sim.hardware.conv_work import ConvWork
from hypar_sim.hardware.pe_array import PEArraySpec

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

#: Table V: (active PEs, processing latency in ms, MACs in units of 1e9) per layer.
TABLE_V = MappingProxyType({
    "CONV1": (154, 16.5, 0.42),
    "CONV2": (135, 39.2, 0.90),
    "CONV3": (156, 21.8, 0.60),
    "CONV4": (156, 16.0, 0.45),
    "CONV5": (156, 10.0, 0.30),
})

#: How close the model's processing latency comes to Table V's (README's claim).
LATENCY_TOLERANCE = 0.15
