"""A topology file (`--topology my_topo.yaml`): the links of an H-tree level by level, or of
a torus, as changes to the hardware config's link keys.

    topology: htree            # or torus
    levels:                    # htree: the links joining the groups of each level, top (H1)
      - link_bandwidth_gbps: 6.4   # first; one entry for all levels, or one per level
        link_latency_ns: 11
        energy_link_pj_per_bit: 5
      - {}                     # an empty entry keeps the hardware config's values
    rows: 4                    # torus only (default: the squarest grid)
    links: {link_bandwidth_gbps: 1.6}   # torus only: every link

Every key is one of `LINK_KEYS`, checked like the hardware config's (type, range, unit);
anything else is refused in one line naming the file and the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypar_sim.errors import InputError, clip_value, why_not_a_file
from hypar_sim.hardware.config import HardwareConfig, coerce_overrides
from hypar_sim.workload.yaml_reader import read_yaml

#: The hardware keys a topology file may set, per level (H-tree) or for every link (torus).
LINK_KEYS = ("link_bandwidth_gbps", "link_latency_ns", "energy_link_pj_per_bit")
KINDS = ("htree", "torus")


def is_topology_file(name: str) -> bool:
    """A --topology value naming a file rather than a built-in topology."""
    return name.endswith((".yaml", ".yml"))


@dataclass(frozen=True)
class TopologyFile:
    """What a topology file says: the kind, link keys per level (H-tree, top first) or for
    every link (torus), and the torus's rows."""

    path: str
    kind: str
    levels: tuple[Mapping[str, float], ...] = ()  # htree
    links: Mapping[str, float] = dataclasses.field(default_factory=dict)  # torus
    rows: int | None = None  # torus

    def level_config(self, config: HardwareConfig, level: int) -> HardwareConfig:
        """The hardware config with level `level`'s link keys (one entry serves all)."""
        if not self.levels:
            return config
        entry = self.levels[level] if len(self.levels) > 1 else self.levels[0]
        return dataclasses.replace(config, **entry)

    def link_config(self, config: HardwareConfig) -> HardwareConfig:
        return dataclasses.replace(config, **self.links)

    def check(self, levels: int) -> None:
        if self.kind == "htree" and len(self.levels) not in (0, 1, levels):
            raise InputError(f"{self.path}: levels: {len(self.levels)} entries for a hierarchy "
                             f"of {levels} levels; allowed: 1 entry (for all) or {levels}")


def read_topology_file(path: str) -> TopologyFile:
    """Read and check a topology file (one-line errors naming the file and the field)."""
    where = Path(path)
    if not where.is_file():
        raise InputError(f"--topology: {path}: topology file {why_not_a_file(path)} (a file name ends in "
                         ".yaml or .yml; built-in topologies: htree, torus, ideal)")
    data = read_yaml(where)
    if not isinstance(data, dict):
        raise InputError(f"{path}: must be a mapping with the key 'topology'")
    allowed = {"topology", "levels", "links", "rows"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InputError(f"{path}: unknown key '{unknown[0]}'; allowed: {', '.join(sorted(allowed))}")
    kind = data.get("topology")
    if kind not in KINDS:
        raise InputError(f"{path}: topology: must be one of {', '.join(KINDS)}, got {clip_value(kind)}")
    if kind == "htree" and ("links" in data or "rows" in data):
        raise InputError(f"{path}: an htree takes 'levels' (per level), not 'links' or 'rows'")
    if kind == "torus" and "levels" in data:
        raise InputError(f"{path}: a torus takes 'links' (all of them) and 'rows', not 'levels'")
    levels = data.get("levels", [])
    if not isinstance(levels, list) or ("levels" in data and not levels):
        raise InputError(f"{path}: levels: must be a non-empty list of mappings of "
                         f"{', '.join(LINK_KEYS)} (or no levels: the config's links)")
    rows = data.get("rows")
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise InputError(f"{path}: rows: must be a positive integer, got {clip_value(rows)}")
    return TopologyFile(path, kind,
                        tuple(_link_keys(entry, f"{path}: levels[{i}]")
                              for i, entry in enumerate(levels)),
                        _link_keys(data.get("links", {}), f"{path}: links"), rows)


def _link_keys(entry: Any, where: str) -> dict[str, float]:
    if entry is None:
        return {}
    if not isinstance(entry, dict):
        raise InputError(f"{where}: must be a mapping of {', '.join(LINK_KEYS)}")
    for key in entry:
        if key not in LINK_KEYS:
            raise InputError(f"{where}: unknown key '{key}'; allowed: {', '.join(LINK_KEYS)}")
    return coerce_overrides(entry, where)
