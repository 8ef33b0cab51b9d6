"""SimResult: everything one simulated training step reports, as plain frozen data.

Convertible to a dict (the JSON of `run --json`; its key names are read by
other tools, keep them), to pandas DataFrames (per layer, per link), and to
a summary a person reads at a glance.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

from hypar_sim.report import (
    BYTE_UNITS,
    TIME_UNITS,
    plural,
    quantity,
    table,
    training_note,
    unit_for,
)


def whole_cycles(data: Any) -> Any:
    """`data` with every `*_cycles` number rounded to whole cycles (the simulator's clock
    ticks; the DES keeps fractions of a cycle where a transfer ends mid-cycle), in nested
    dicts and lists too; seconds keep their fractions."""
    if isinstance(data, dict):
        return {key: round(value) if key.endswith("_cycles") and isinstance(value, float)
                else whole_cycles(value) for key, value in data.items()}
    if isinstance(data, list):
        return [whole_cycles(item) for item in data]
    return data


@dataclass(frozen=True)
class LayerResult:
    """One layer on one accelerator (all accelerators do the same work)."""

    name: str
    forward_cycles: float  # compute of the phase, DRAM stalls included
    backward_cycles: float
    gradient_cycles: float
    update_cycles: float
    comm_wait_cycles: float  # time blocked on this layer's messages (mean over accelerators)
    traffic_bytes: float  # bytes of this layer's messages, whole array, all levels
    recompute_cycles: float = 0.0  # its forward run again in the backward pass (--recompute)


@dataclass(frozen=True)
class LinkResult:
    """One direction of one link."""

    link: str
    bytes: float
    busy_fraction: float  # share of the step the link was transmitting


@dataclass(frozen=True)
class AcceleratorResult:
    """One member of the array over the whole step (stragglers show here)."""

    accelerator: int
    busy_cycles: float  # its computations, DRAM stalls included
    sent_bytes: float
    received_bytes: float
    energy_pj: float  # its computations and the DRAM accesses of its messages


def flatten(data: Mapping[str, Any]) -> dict[str, Any]:
    """`run --json` as one row: dicts become `name.key` columns, lists become JSON text."""
    row: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            for inner, item in value.items():
                row[f"{key}.{inner}"] = json.dumps(item) if isinstance(item, list | dict) else item
        elif isinstance(value, list | tuple):
            row[key] = json.dumps(value, separators=(",", ":"))
        else:
            row[key] = value
    return row


@dataclass(frozen=True, repr=False)
class SimResult:
    """One training step of one network under one plan on one array."""

    network: str
    strategy: str
    topology: str
    engine: str  # "des" (SimPy) or "analytic"
    accelerators: int
    batch: int
    plan: tuple[tuple[str, ...], ...]  # [level][layer] kind names (batch, in, out, spatial)
    clock_hz: float
    latency_cycles: float
    energy_breakdown_pj: Mapping[str, float]
    traffic_bytes: float
    traffic_bytes_per_level: tuple[float, ...]
    compute_cycles: float  # mean per accelerator: PE arrays busy
    dram_stall_cycles: float  # mean per accelerator: waiting on DRAM beyond compute
    comm_wait_cycles: float  # mean per accelerator: blocked on messages
    per_layer: tuple[LayerResult, ...]
    per_link: tuple[LinkResult, ...]
    events: int  # simulation events processed (0 for the analytic engine)
    wall_s: float  # wall-clock time of the simulation, seconds
    #: des: link and vault-channel requests served (with group operations: each
    #: operation's links, one grant a link)
    lane_grants: int = 0
    #: des: communication steps run as group operations (`sim.operations`; 0: every message
    #: simulated on its own, chunk by chunk)
    group_operations: int = 0
    per_accelerator: tuple[AcceleratorResult, ...] = ()
    hierarchy: tuple[int, ...] = ()
    traffic_model: str = ""
    phases: str = "training"  # or "forward": inference, the forward pass alone
    version: str = ""
    config: Mapping[str, Any] | None = None  # the full effective hardware configuration
    #: A pipeline's idle stage-time over stages x step time (`sim.accounting`); 0 without one.
    pipeline_idle_fraction: float = 0.0
    #: Mean per accelerator: blocked on what another pipeline stage sends (its activations or
    #: errors: the bubble and the stages' waits for each other), apart from communication.
    stage_wait_cycles: float = 0.0
    trace_events: tuple[Mapping[str, Any], ...] = field(default=(), repr=False, compare=False)

    @property
    def latency_s(self) -> float:
        return self.latency_cycles / self.clock_hz

    @property
    def energy_pj(self) -> float:
        return sum(self.energy_breakdown_pj.values())

    @property
    def energy_j(self) -> float:
        return self.energy_pj * 1e-12

    @property
    def energy_breakdown_j(self) -> dict[str, float]:
        return {action: pj * 1e-12 for action, pj in self.energy_breakdown_pj.items()}

    @property
    def time_shares(self) -> dict[str, float]:
        """Shares of the step spent computing, waiting on DRAM, communicating and (in a
        pipeline) waiting for what other stages send."""
        if self.latency_cycles <= 0:
            return {"compute": 0.0, "dram": 0.0, "communication": 0.0, "other_stages": 0.0}
        return {"compute": self.compute_cycles / self.latency_cycles,
                "dram": self.dram_stall_cycles / self.latency_cycles,
                "communication": self.comm_wait_cycles / self.latency_cycles,
                "other_stages": self.stage_wait_cycles / self.latency_cycles}

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of `run --json` (cycles as whole cycles, `whole_cycles`)."""
        return whole_cycles({
            "network": self.network, "strategy": self.strategy, "topology": self.topology,
            "engine": self.engine, "accelerators": self.accelerators, "batch": self.batch,
            "plan": [list(level) for level in self.plan],
            "latency_s": self.latency_s, "latency_cycles": self.latency_cycles,
            "energy_j": self.energy_j, "energy_breakdown_j": self.energy_breakdown_j,
            "traffic_bytes": self.traffic_bytes,
            "traffic_bytes_per_level": list(self.traffic_bytes_per_level),
            "time_shares": self.time_shares,
            "per_layer": [asdict(layer) for layer in self.per_layer],
            "per_link": [asdict(link) for link in self.per_link],
            "per_accelerator": [asdict(item) for item in self.per_accelerator],
            "hierarchy": list(self.hierarchy), "traffic_model": self.traffic_model,
            "phases": self.phases, "events": self.events, "lane_grants": self.lane_grants,
            "group_operations": self.group_operations,
            "pipeline_idle_fraction": self.pipeline_idle_fraction,
            "stage_wait_cycles": self.stage_wait_cycles,
            "wall_s": self.wall_s,
            "version": self.version,
            "config": dict(self.config or {}),
        })

    def to_frame(self) -> pd.DataFrame:
        """One row: every number of `to_dict` (dicts as `name.key` columns, lists as JSON
        text, as sweep CSVs have them); concatenate many runs' frames to compare them."""
        import pandas as pd

        return pd.DataFrame([flatten(self.to_dict())])

    def per_layer_frame(self) -> pd.DataFrame:
        import pandas as pd  # a heavy import, only when a frame is asked for

        return pd.DataFrame([whole_cycles(asdict(layer)) for layer in self.per_layer])

    def per_link_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame([asdict(link) for link in self.per_link],
                            columns=["link", "bytes", "busy_fraction"])

    def __repr__(self) -> str:
        """One line: what ran and its headline numbers (the tables: `to_dict`, the frames)."""
        return (f"SimResult(network={self.network!r}, strategy={self.strategy!r}, "
                f"topology={self.topology!r}, engine={self.engine!r}, "
                f"accelerators={self.accelerators}, batch={self.batch}, "
                f"latency_s={self.latency_s:.6g}, energy_j={self.energy_j:.6g}, "
                f"traffic_bytes={self.traffic_bytes:.6g})")

    def __str__(self) -> str:
        return self.summary()

    def summary(self, busiest: int = 5) -> str:
        """A few lines a person reads at a glance."""
        shares = self.time_shares
        lines = [
            f"{self.network}: {self.strategy} plan on {plural(self.accelerators, 'accelerator')} "
            f"({self.topology}), batch {self.batch}, traffic model {self.traffic_model}, "
            f"{self.engine} engine" + (", inference (forward pass only)" if self.phases == "forward" else "")
            + training_note(self.config or {}),
            "",
            f"step latency   {quantity(self.latency_s, TIME_UNITS)}  ({self.latency_cycles:,.0f} cycles "
            f"at {self.clock_hz / 1e6:g} MHz)",
            f"time shares    compute {shares['compute']:.1%}, DRAM stalls {shares['dram']:.1%}, "
            f"communication {shares['communication']:.1%}"
            + (f", waiting for other stages {shares['other_stages']:.1%}"
               if self.stage_wait_cycles else ""),
            *([f"pipeline       stages idle {self.pipeline_idle_fraction:.1%} of the step "
               "(bubble and stage-to-stage waits)"] if self.pipeline_idle_fraction else []),
            f"energy         {self.energy_j:.4g} J: " + ", ".join(
                f"{action} {joules:.3g}" for action, joules in self.energy_breakdown_j.items()
                if joules > 0),
            f"traffic        {quantity(self.traffic_bytes, BYTE_UNITS)}" + "".join(
                (": " if level == 0 else ", ")
                + f"H{level + 1} {level_bytes / unit_for([self.traffic_bytes], BYTE_UNITS)[1]:.4g}"
                for level, level_bytes in enumerate(self.traffic_bytes_per_level)),
        ]
        links = sorted(self.per_link, key=lambda link: (-link.busy_fraction, link.link))[:busiest]
        links_unit = unit_for([link.bytes for link in links], BYTE_UNITS)
        if links and links[0].bytes > 0:
            lines += ["", "busiest links:",
                      table(("link", links_unit[0], "busy"),
                            [(link.link, f"{link.bytes / links_unit[1]:.4g}",
                              f"{link.busy_fraction:.1%}") for link in links])]
        lines.append(f"\n{self.events:,} events in {self.wall_s:.2f} s" + (
            f"; its {self.group_operations:,} communication steps as group operations (more "
            "messages than --des-messages)" if self.group_operations else ""))
        return "\n".join(lines)
