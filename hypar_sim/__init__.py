"""hypar-sim: DNN training on an array of HMC accelerators, split by HyPar."""

__version__ = "0.1.0"
