"""The runs Figures 6 and 7 share: ten networks x {model, data, hypar}, H-tree, 16 accelerators."""

from __future__ import annotations

import pandas as pd

from hypar_sim.experiments.common import QUICK_NETWORKS, cases, geomean, normalized_to_data, rows_frame
from hypar_sim.paper import PAPER_NETWORKS

STRATEGIES = ("model", "data", "hypar")


def compute(quick: bool = False, workers: int | None = None, cache: dict | None = None,
            topology: str = "htree") -> pd.DataFrame:
    networks = QUICK_NETWORKS if quick else PAPER_NETWORKS
    accelerators = 4 if quick else 16
    frame = rows_frame(cases(networks, STRATEGIES, topology, accelerators), workers, cache)
    frame = normalized_to_data(frame, ["network"])
    table = frame[["network", "strategy", "topology", "accelerators", "batch", "latency_s",
                   "energy_j", "traffic_bytes", "time_shares.communication", "speedup_vs_data",
                   "efficiency_vs_data"]].rename(columns={"time_shares.communication": "comm_share"})
    means = [{"network": "geomean", "strategy": s, "topology": topology,
              "accelerators": accelerators, "batch": 256,
              "speedup_vs_data": geomean(table[table.strategy == s].speedup_vs_data),
              "efficiency_vs_data": geomean(table[table.strategy == s].efficiency_vs_data)}
             for s in STRATEGIES]
    return pd.concat([table, pd.DataFrame(means)], ignore_index=True)
