"""HardwareConfig: every parameter of the simulated machine, validated when built.

The defaults live in configs/hypar_paper.yaml, one `key: value  # source` per
line; a user file changes only the keys it gives, and `--set` changes any.
Units are in the names. The same files also give the run's array size and
batch (`RUN_KEYS`: `accelerators`, `batch`); those are not hardware: the
run's request (`hypar_sim.request`) reads them, with `run_keys`, and flags
override them.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypar_sim.errors import InputError, clip_value, closest, why_not_a_file
from hypar_sim.partition.hierarchy import MAX_MEMBERS
from hypar_sim.workload.yaml_reader import read_yaml

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "hypar_paper.yaml"


def _param(unit: str, help_text: str, minimum: float, maximum: float) -> Any:
    """A dataclass field with its unit, meaning and allowed range, from `minimum` to `maximum`
    inclusive (no default: the YAML gives it)."""
    return field(metadata={"unit": unit, "help": help_text, "min": minimum, "max": maximum})


def _choice(help_text: str, *choices: str) -> Any:
    """A dataclass field naming one of `choices` (the YAML gives it)."""
    return field(metadata={"unit": "", "help": help_text, "choices": choices})


@dataclass(frozen=True)
class HardwareConfig:
    """The machine: array, HMC cubes, processing units, links, energy per action."""

    word_bytes: int = _param("B", "bytes per element (4 = fp32)", 1, 8)
    clock_mhz: float = _param("MHz", "array clock; one simulator cycle", 1e-3, 1e5)

    cube_bandwidth_gb_per_s: float = _param("GB/s", "DRAM bandwidth of one cube (all vaults)",
                                            1e-3, 1e6)
    cube_capacity_gib: float = _param("GiB", "DRAM capacity of one cube", 2**-20, 2**20)
    vaults_per_cube: int = _param("", "vaults (DRAM channels) per cube", 1, 1024)
    pus_per_cube: int = _param("", "processing units per cube (one per vault)", 1, 1024)
    dram_trcd_ns: float = _param("ns", "row activate to column command", 0, 1e6)
    dram_tcl_ns: float = _param("ns", "column command to data", 0, 1e6)
    dram_tburst_ns: float = _param("ns", "one burst on the vault bus", 0, 1e6)
    dram_controller_ns: float = _param("ns", "vault controller latency", 0, 1e6)

    pe_rows: int = _param("", "rows of the PE array", 1, 1024)
    pe_cols: int = _param("", "columns of the PE array", 1, 1024)
    pe_count: int = _param("", "processing engines per PU (must be pe_rows x pe_cols)",
                           1, 2**20)
    buffer_kib: float = _param("KiB", "on-chip global buffer per PU", 2**-10, 2**20)
    rf_filter_bytes: int = _param("B", "filter scratch pad per PE (words = bytes / word_bytes)",
                                  1, 2**20)
    rf_ifmap_bytes: int = _param("B", "ifmap scratch pad per PE", 1, 2**20)
    rf_psum_bytes: int = _param("B", "psum scratch pad per PE", 1, 2**20)
    mapper_objective: str = _choice("what the PU's mapping search minimises: energy (pJ) or "
                                    "cycles (processing overlapped with the vault's DRAM)",
                                    "energy", "cycles")
    pe_bus_bits: int = _param("bits", "width of each global buffer <-> PE array bus (filters, "
                              "ifmaps, psums), a multiple of 8", 8, 4096)

    link_bandwidth_gbps: float = _param("Gb/s", "bandwidth of one link, each direction",
                                        1e-3, 1e7)
    link_latency_ns: float = _param("ns", "fixed latency of one link traversal", 0, 1e9)
    switch_latency_ns: float = _param("ns", "latency of one switch traversal", 0, 1e9)
    packet_payload_bytes: int = _param("B", "data bytes per packet", 1, 2**20)
    packet_overhead_bytes: int = _param("B", "header and tail bytes per packet", 0, 2**20)
    torus_bandwidth: str = _choice("a torus link's bandwidth: per_link (link_bandwidth_gbps "
                                   "each) or total (accelerators x link_bandwidth_gbps shared "
                                   "by the torus's links)", "per_link", "total")

    energy_fp_add_pj: float = _param("pJ", "one 32-bit float addition", 0, 1e6)
    energy_fp_mult_pj: float = _param("pJ", "one 32-bit float multiplication", 0, 1e6)
    energy_fp16_add_pj: float = _param("pJ", "one 16-bit float addition (word_bytes 2)", 0, 1e6)
    energy_fp16_mult_pj: float = _param("pJ", "one 16-bit float multiplication (word_bytes 2)",
                                        0, 1e6)
    energy_buffer_pj: float = _param("pJ", "one global-buffer (SRAM) 32-bit word access", 0, 1e6)
    energy_dram_pj: float = _param("pJ", "one DRAM 32-bit word access", 0, 1e6)
    energy_rf_pj: float = _param("pJ", "one register-file 32-bit word access", 0, 1e6)
    energy_inter_pe_pj: float = _param("pJ", "one 32-bit word passed between PEs", 0, 1e6)
    energy_link_pj_per_bit: float = _param("pJ/bit", "one bit over one link", 0, 1e6)
    energy_switch_pj_per_bit: float = _param("pJ/bit", "one bit through one switch", 0, 1e6)
    energy_vault_hop_pj_per_bit: float = _param("pJ/bit", "one bit over one vault-to-vault hop "
                                                "of a cube's logic-die network", 0, 1e6)
    static_power_pu_mw: float = _param("mW", "static power of one PU", 0, 1e9)

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):
            _check_value(item, getattr(self, item.name), "config")
        if self.pe_rows * self.pe_cols != self.pe_count:
            raise InputError(
                f"config: pe_rows x pe_cols = {self.pe_rows} x {self.pe_cols} = "
                f"{self.pe_rows * self.pe_cols} differs from pe_count = {self.pe_count}; "
                "they must be equal"
            )
        if self.pe_bus_bits % 8:
            raise InputError(f"config: pe_bus_bits = {self.pe_bus_bits} is not a whole number of "
                             "bytes; allowed: a multiple of 8 bits")
        if self.pus_per_cube > self.vaults_per_cube:
            raise InputError(
                f"config: pus_per_cube = {self.pus_per_cube} exceeds vaults_per_cube = "
                f"{self.vaults_per_cube}; allowed: at most one PU per vault"
            )
        pads = {"rf_filter_bytes": self.rf_filter_bytes, "rf_ifmap_bytes": self.rf_ifmap_bytes,
                "rf_psum_bytes": self.rf_psum_bytes}
        for key, size in pads.items():
            if size < self.word_bytes:
                raise InputError(f"config: {key} = {size} B holds no {self.word_bytes}-byte word; "
                                 f"allowed: >= word_bytes = {self.word_bytes} B")
        # One PE set needs at least a filter row, an ifmap row and a psum per PE in the buffer.
        smallest_set_bytes = self.pe_count * 3 * self.word_bytes
        if self.buffer_kib * 1024 < smallest_set_bytes:
            raise InputError(
                f"config: buffer_kib = {self.buffer_kib} is smaller than one PE set needs "
                f"({smallest_set_bytes} B for {self.pe_count} PEs); allowed: >= "
                f"{smallest_set_bytes / 1024:.3g}"
            )

    # --- derived quantities (units in the names) ---
    @property
    def clock_hz(self) -> float:
        return self.clock_mhz * 1e6

    @property
    def cycle_ns(self) -> float:
        return 1e3 / self.clock_mhz

    @property
    def pu_peak_gops(self) -> float:
        """Peak of one PU: one MAC (2 ops) per PE per cycle; 84.0 GOPS in the paper."""
        return 2 * self.pe_count * self.clock_mhz / 1e3

    @property
    def vault_bandwidth_bytes_per_cycle(self) -> float:
        """DRAM bandwidth of one vault in bytes per array cycle."""
        return self.cube_bandwidth_gb_per_s * 1e9 / self.vaults_per_cube / self.clock_hz

    @property
    def dram_latency_cycles(self) -> int:
        """A closed-row vault access: tRCD + tCL + burst + controller, in cycles."""
        ns = self.dram_trcd_ns + self.dram_tcl_ns + self.dram_tburst_ns + self.dram_controller_ns
        return math.ceil(ns / self.cycle_ns)

    @property
    def cube_capacity_bytes(self) -> int:
        return int(self.cube_capacity_gib * 2**30)

    @property
    def buffer_bytes(self) -> int:
        return int(self.buffer_kib * 1024)

    def network_bandwidth_gbps(self, accelerators: int) -> float:
        """One link per accelerator: 25.6 Gb/s for 16 accelerators in the paper."""
        return accelerators * self.link_bandwidth_gbps

    @property
    def packet_efficiency(self) -> float:
        """Share of link bits that are data (payload / (payload + overhead))."""
        return self.packet_payload_bytes / (self.packet_payload_bytes + self.packet_overhead_bytes)

    @property
    def add_energy_pj(self) -> float:
        """One float addition at the word's width: 16-bit at word_bytes 2 or less, else
        32-bit (Horowitz, ISSCC 2014: 0.4 and 0.9 pJ at 45 nm)."""
        return self.energy_fp16_add_pj if self.word_bytes <= 2 else self.energy_fp_add_pj

    @property
    def mac_energy_pj(self) -> float:
        """One multiply-accumulate at the word's width: a float multiplication and a float
        addition (Horowitz, ISSCC 2014: 1.1 + 0.4 pJ at 16 bits, 3.7 + 0.9 at 32)."""
        mult = self.energy_fp16_mult_pj if self.word_bytes <= 2 else self.energy_fp_mult_pj
        return mult + self.add_energy_pj

    @property
    def word_energy_scale(self) -> float:
        """A word access's energy relative to a 32-bit one: the energies of a memory access
        are quoted per 32-bit word, and an access costs per bit moved (Horowitz's SRAM and
        DRAM figures are per 64-bit access), so a 16-bit word costs half."""
        return self.word_bytes / 4



_FIELDS = {item.name: item for item in dataclasses.fields(HardwareConfig)}


#: Most samples in a step (`--batch`, a config file's `batch`, a sweep's batches).
MAX_BATCH = 2**24


@dataclass(frozen=True)
class _RunKeys:
    """The keys of a config file that belong to the run, not the hardware (their defaults
    are in the default config file, with their sources)."""

    accelerators: int = _param("", "accelerators in the array (--accelerators)", 1,
                               MAX_MEMBERS)
    batch: int = _param("samples", "samples per training step (--batch)", 1, MAX_BATCH)


#: Keys a config file may give for the run's request (`hypar_sim.request`), not the hardware.
RUN_KEYS = {item.name: item for item in dataclasses.fields(_RunKeys)}


def allowed(item: dataclasses.Field) -> str:
    """A key's allowed values, as the `hardware` table and the error messages show them."""
    meta = item.metadata
    if "choices" in meta:
        return ", ".join(meta["choices"])
    return f"{_number(meta['min'])} to {_number(meta['max'])}"


def _number(value: float) -> str:
    """1,048,576; 1/1024; 0.001; 1e+07 (a range's ends, as people write them)."""
    if float(value).is_integer() and abs(value) < 1e9:
        return f"{int(value):,}"
    if 0 < value < 1 and math.log2(1 / value).is_integer():
        return f"1/{int(1 / value)}"
    return f"{value:g}"


def _type_name(item: dataclasses.Field) -> str:
    return "an integer" if item.type in ("int", int) else "a number"


def _check_value(item: dataclasses.Field, value: Any, where: str) -> None:
    """Raise InputError unless `value` has the field's type and lies in its range."""
    meta = item.metadata
    if "choices" in meta:
        if value not in meta["choices"]:
            raise InputError(f"{where}: {item.name}: {clip_value(value)} is not allowed; allowed: "
                             f"{', '.join(meta['choices'])}")
        return
    unit = f" {meta['unit']}" if meta["unit"] else ""
    is_int = item.type in ("int", int)
    ok_type = isinstance(value, int) if is_int else isinstance(value, int | float)
    if isinstance(value, bool) or not ok_type or (not is_int and not math.isfinite(value)):
        raise InputError(f"{where}: {item.name}: must be {_type_name(item)}{unit and ' in' + unit}, "
                         f"got {clip_value(value)}")
    if not meta["min"] <= value <= meta["max"]:
        raise InputError(f"{where}: {item.name}: {clip_value(value)} is out of range; allowed: "
                         f"{allowed(item)}{unit}")


RETIRED_KEYS = {
    "dram_row_bytes": "no model read it (each vault streams its words at the vault's bandwidth)",
}


def coerce_overrides(overrides: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Check keys and types of a mapping of parameter overrides."""
    result = {}
    for key, value in overrides.items():
        if key in RUN_KEYS:
            raise InputError(f"{where}: {key} is not a hardware key: it is the run's "
                             f"(--{key}, or `{key}:` in a config file)")
        if key in RETIRED_KEYS:
            raise InputError(f"{where}: {key} is no longer a hardware key: {RETIRED_KEYS[key]}; "
                             "delete the line")
        if key not in _FIELDS:
            raise InputError(f"{where}: unknown key '{key}'{closest(str(key), _FIELDS)}; "
                             f"see `hypar-sim hardware` for the keys")
        item = _FIELDS[key]
        if item.type in ("float", float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif item.type in ("int", int) and isinstance(value, float) and value.is_integer():
            value = int(value)  # 2e1 in a YAML file: an integer written as a float
        _check_value(item, value, where)
        result[key] = value
    return result


def _scalar(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_overrides(items: Iterable[str]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """`--set` items: `key=value` or `key=v1,v2,...` (a sweep's axis), checked against the
    hardware keys."""
    result = []
    for item in items:
        if "=" not in item:
            raise InputError(f"--set: '{item}' is not key=value (e.g. link_bandwidth_gbps=3.2)")
        key, text = item.split("=", 1)
        key = key.strip()
        if key in ("accelerators", "batch"):
            raise InputError(f"--set: {key} is an axis of the sweep; use --{key} {text} instead")
        values = tuple(dict.fromkeys(_scalar(v.strip()) for v in text.split(",") if v.strip()))
        if not values:
            raise InputError(f"--set: '{item}' gives no value for {key}; e.g. {key}=1,2")
        for value in values:
            coerce_overrides({key: value}, "--set")
        result.append((key, values))
    return tuple(result)


def _read_mapping(path: Path) -> dict[str, Any]:
    """A config file's hardware keys (its run keys are read by `run_keys`)."""
    return {key: value for key, value in _read_file(path).items() if key not in RUN_KEYS}


def _read_file(path: Path) -> dict[str, Any]:
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InputError(f"{path}: expected a mapping of key: value")
    return dict(data)


def run_keys(path: str | Path | None = None) -> dict[str, int]:
    """The run's keys (`RUN_KEYS`: accelerators, batch) that the config file `path` gives
    (None: the default file's, the run's defaults), checked; flags override them
    (`hypar_sim.request`)."""
    file = DEFAULT_CONFIG if path is None else Path(path)
    if not file.is_file():
        raise InputError(f"{file}: config file {why_not_a_file(file)}")
    return check_run_keys({key: value for key, value in _read_file(file).items()
                           if key in RUN_KEYS}, str(file))


def check_run_keys(values: Mapping[str, Any], where: str) -> dict[str, int]:
    """The run's keys checked against their ranges (an integral float is that integer)."""
    checked = {}
    for key, value in values.items():
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 1.6e1 in a YAML file: an integer written as a float
        _check_value(RUN_KEYS[key], value, where)
        checked[key] = value
    return checked


def load_hardware(path: str | Path | None = None,
                  overrides: Mapping[str, Any] | None = None) -> HardwareConfig:
    """The default config, changed by a user YAML file, then by `--set` overrides."""
    return load_config(path, overrides)[1]


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None
                ) -> tuple[dict[str, int], HardwareConfig]:
    """The run's keys (`RUN_KEYS`) the user file `path` gives, and the hardware (defaults,
    then the file, then `overrides`), each file read once."""
    values = coerce_overrides(_read_mapping(DEFAULT_CONFIG), str(DEFAULT_CONFIG))
    missing = set(_FIELDS) - set(values)
    if missing:
        raise InputError(f"{DEFAULT_CONFIG}: missing keys {', '.join(sorted(missing))}")
    where, given = str(DEFAULT_CONFIG), {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise InputError(f"{path}: config file {why_not_a_file(path)}")
        data = _read_file(path)
        values.update(coerce_overrides({k: v for k, v in data.items() if k not in RUN_KEYS},
                                       str(path)))
        given = check_run_keys({k: v for k, v in data.items() if k in RUN_KEYS}, str(path))
        where = str(path)
    config = _build(values, where)
    if overrides:
        values.update(coerce_overrides(overrides, "hardware keys"))  # --set, the API's keywords
        config = _build(values, "hardware keys")
    return given, config


def _build(values: Mapping[str, Any], where: str) -> HardwareConfig:
    """HardwareConfig(**values), its consistency errors attributed to `where`."""
    try:
        return HardwareConfig(**values)
    except InputError as exc:
        raise InputError(str(exc).replace("config:", f"{where}:", 1)) from None


_SOURCE = re.compile(r"^(\w+)\s*:[^#]*#\s*(.*)$")


def default_sources() -> dict[str, str]:
    """The source comment of every key in the default config file."""
    sources = {}
    for line in DEFAULT_CONFIG.read_text(encoding="utf-8").splitlines():
        match = _SOURCE.match(line)
        if match:
            sources[match.group(1)] = match.group(2).strip()
    return sources


def describe(config: HardwareConfig, user_file: str | None = None,
             run: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """Rows of (key, value, unit, allowed, meaning, source) for printing the effective config
    (a value equal to its default keeps the default's citation, wherever it is given): the
    run's keys (`run`: accelerators and batch as the request has them) first, then the
    hardware's."""
    sources = default_sources()
    user_values = _read_file(Path(user_file)) if user_file else {}
    defaults = dataclasses.asdict(load_hardware()) | run_keys()
    given = run_keys(user_file) if user_file else {}
    values = defaults | given | dict(run or {}) | dataclasses.asdict(config)
    rows = []
    for name, item in (RUN_KEYS | _FIELDS).items():
        value = values[name]
        if value == defaults[name]:  # a file repeating a default keeps the default's citation
            source = sources.get(name, "")
        elif name in user_values and value == user_values[name]:
            source = f"set in {user_file}"
        else:
            source = "set on the command line"
        rows.append({"key": name, "value": value, "unit": item.metadata["unit"],
                     "allowed": allowed(item), "meaning": item.metadata["help"],
                     "source": source})
    return rows


def derived(config: HardwareConfig, accelerators: int) -> list[tuple[str, str, str]]:
    """Quantities computed from the parameters, for display."""
    return [
        ("PU peak", f"{config.pu_peak_gops:.1f}", "GOPS"),
        ("cube peak", f"{config.pu_peak_gops * config.pus_per_cube:.1f}", "GOPS"),
        ("vault bandwidth", f"{config.vault_bandwidth_bytes_per_cycle:.2f}", "B/cycle"),
        ("DRAM access latency", str(config.dram_latency_cycles), "cycles"),
        ("MAC energy", f"{config.mac_energy_pj:.2f}", "pJ"),
        ("network bandwidth", f"{config.network_bandwidth_gbps(accelerators):.1f}", "Gb/s"),
        ("packet efficiency", f"{config.packet_efficiency:.4f}", ""),
    ]
