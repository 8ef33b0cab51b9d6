"""Numbers published in the HyPar paper (Song et al., HPCA 2019), kept as data.

FIGURE_8_GB: total communication per training step in GB at 16 accelerators,
batch 256, as (Model Parallelism, Data Parallelism, HyPar), read off the
labels of Figure 8 (see ../shared/reference/hypar_experiments.md; VGG-C and
VGG-D rows assigned by their weight counts). The AlexNet row is reproduced by
`alexnet_half`, the single-tower half-width AlexNet.
"""

from __future__ import annotations

PAPER_NETWORKS = ("sfc", "sconv", "lenet_c", "cifar_c", "alexnet_half",
                  "vgg_a", "vgg_b", "vgg_c", "vgg_d", "vgg_e")

DISPLAY_NAMES = {
    "sfc": "SFC", "sconv": "SCONV", "lenet_c": "Lenet-c", "cifar_c": "Cifar-c",
    "alexnet": "AlexNet (62M)", "alexnet_half": "AlexNet", "vgg_a": "VGG-A", "vgg_b": "VGG-B",
    "vgg_c": "VGG-C", "vgg_d": "VGG-D", "vgg_e": "VGG-E",
}

FIGURE_8_GB = {
    "sfc": (0.723, 16.9, 0.681),
    "sconv": (0.480, 0.0121, 0.0121),
    "lenet_c": (0.112, 0.0517, 0.0161),
    "cifar_c": (0.206, 0.0174, 0.0135),
    "alexnet_half": (13.0, 2.00, 0.289),
    "vgg_a": (50.1, 15.9, 1.47),
    "vgg_b": (134, 16.0, 1.47),
    "vgg_c": (157, 16.0, 1.58),
    "vgg_d": (157, 16.6, 2.13),
    "vgg_e": (180, 17.2, 2.76),
}
FIGURE_8_STRATEGIES = ("model", "data", "hypar")
FIGURE_8_GEOMEAN_GB = (8.88, 1.83, 0.318)

#: Known misprint: VGG-B is VGG-A plus two layers that add traffic under any
#: reading, so its HyPar traffic cannot be below VGG-A's 1.47; ours is 1.49.
VGG_B_HYPAR_GB_CONSISTENT = 1.49
