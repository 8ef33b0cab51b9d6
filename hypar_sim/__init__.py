"""hypar-sim: DNN training on an array of HMC accelerators, split by HyPar.

`hypar_sim.simulate`, `plan`, `compare` and `hardware` are the Python API (`hypar_sim.api`).
"""

__version__ = "0.1.0"

#: The Python API (`hypar_sim.api`), imported when first used so that `import hypar_sim`
#: and the command line stay quick.
_API = ("simulate", "plan", "compare", "hardware", "request")


def __getattr__(name: str):
    if name in _API:
        from hypar_sim import api

        return getattr(api, name)
    raise AttributeError(f"module 'hypar_sim' has no attribute {name!r}")
