"""HardwareConfig: the paper's numbers, overrides, validation, the `hardware` command."""

from __future__ import annotations

import json
from functools import partial

import pytest

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import (
    DEFAULT_CONFIG,
    RUN_KEYS,
    HardwareConfig,
    default_sources,
    load_hardware,
    parse_overrides,
    run_keys,
)
from hypar_sim.hardware.interconnect import link_spec
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.request import make_request
from tests.conftest import run_cli


def test_default_is_the_papers_setup():
    """HyPar section 6.1."""
    c = load_hardware()
    assert run_keys() == {"accelerators": 16, "batch": 256}
    assert (c.word_bytes, c.clock_mhz) == (4, 250.0)
    assert (c.cube_bandwidth_gb_per_s, c.cube_capacity_gib) == (320.0, 8.0)
    assert (c.pe_rows, c.pe_cols, c.pe_count, c.buffer_kib) == (12, 14, 168, 108)
    assert c.pu_peak_gops == pytest.approx(84.0)
    assert c.link_bandwidth_gbps == 1.6 and c.network_bandwidth_gbps(16) == pytest.approx(25.6)
    assert (c.energy_fp_add_pj, c.energy_fp_mult_pj, c.energy_buffer_pj, c.energy_dram_pj) == \
        (0.9, 3.7, 5.0, 640.0)
    assert c.vaults_per_cube == 32 and c.vault_bandwidth_bytes_per_cycle == pytest.approx(40.0)
    assert make_request("vgg_a").hierarchy == Hierarchy.binary(4)


def test_every_parameter_has_a_source():
    sources = default_sources()
    for name in [*HardwareConfig.__dataclass_fields__, *RUN_KEYS]:
        assert sources.get(name), f"{name} has no source comment in {DEFAULT_CONFIG}"


def test_user_file_changes_only_its_keys(tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text("link_bandwidth_gbps: 3.2\nbatch: 64\n")
    base, custom = load_hardware(), load_hardware(path)
    assert custom.link_bandwidth_gbps == 3.2 and run_keys(path) == {"batch": 64}
    changed = {k for k in HardwareConfig.__dataclass_fields__
               if getattr(base, k) != getattr(custom, k)}
    assert changed == {"link_bandwidth_gbps"}


def test_command_line_overrides_win(tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text("accelerators: 4\nbatch: 32\nclock_mhz: 500\n")
    assert load_hardware(path, {"clock_mhz": 125}).clock_mhz == 125
    from_file = make_request("lenet_c", config=str(path))
    assert (from_file.accelerators, from_file.batch) == (4, 32)
    flags = make_request("lenet_c", config=str(path), accelerators=64, batch=512)
    assert (flags.accelerators, flags.batch) == (64, 512)


@pytest.mark.parametrize("entry", ["plan", "run", "compare", "sweep", "api"])
def test_every_entry_point_honours_a_config_files_array_and_batch(tmp_path, cli, entry):
    """Issue "One graph", item 5: a config file's accelerators and batch are the run's in
    every entry point (they were ignored by plan, sweep and the API)."""
    import json

    import hypar_sim

    path = tmp_path / "hw.yaml"
    path.write_text("accelerators: 4\nbatch: 32\n")
    if entry == "api":
        result = hypar_sim.simulate("lenet_c", config=str(path), engine="analytic")
        plan = hypar_sim.plan("lenet_c", config=str(path))
        assert (result.accelerators, result.batch, plan.accelerators, plan.batch) == \
            (4, 32, 4, 32)
        return
    if entry == "sweep":
        out = tmp_path / "s.csv"
        done = cli("sweep", "--networks", "lenet_c", "--strategies", "data", "--config",
                   str(path), "--out", str(out), "--no-progress", "--engine", "analytic")
        assert done.returncode == 0, done.stderr
        row = out.read_text().splitlines()[1].split(",")
        assert row[3:5] == ["4", "32"]
        return
    extra = ("--engine", "analytic") if entry != "plan" else ()
    done = cli(entry, "lenet_c", "--config", str(path), "--json", *extra)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    for item in data if isinstance(data, list) else [data]:
        assert (item["accelerators"], item["batch"]) == (4, 32)


def test_accelerators_and_batch_are_not_hardware_keys():
    with pytest.raises(InputError, match="batch is not a hardware key"):
        load_hardware(None, dict(batch=64))
    with pytest.raises(InputError, match="--set: accelerators is an axis"):
        parse_overrides(["accelerators=4"])


@pytest.mark.parametrize("body, fragment", [
    ("link_bandwidth_mbps: 1600\n",
     "unknown key 'link_bandwidth_mbps' (did you mean 'link_bandwidth_gbps'?)"),
    ("clock_mhz: 250 MHz\n", "clock_mhz: must be a number in MHz, got '250 MHz'"),
    ("cube_bandwidth_gb_per_s: -1\n",
     "cube_bandwidth_gb_per_s: -1.0 is out of range; allowed: 0.001 to 1,000,000 GB/s"),
    ("pe_count: 0\n", "pe_count: 0 is out of range; allowed: 1 to 1,048,576"),
    ("vaults_per_cube: 2.5\n", "vaults_per_cube: must be an integer"),
    ("pe_rows: 13\n", "pe_rows x pe_cols = 13 x 14 = 182 differs from pe_count = 168"),
    ("buffer_kib: 0.5\n", "buffer_kib = 0.5 is smaller than one PE set needs"),
    ("mapper_objective: speed\n", "mapper_objective: 'speed' is not allowed; allowed: energy, cycles"),
    ("rf_ifmap_bytes: 2\n", "rf_ifmap_bytes = 2 B holds no 4-byte word; allowed: >= word_bytes"),
    ("rf_filter_words: 224\n", "unknown key 'rf_filter_words' (did you mean 'rf_filter_bytes'?)"),
    ("accelerators: 0\n", "accelerators: 0 is out of range; allowed: 1 to 1,048,576"),
    ("accelerators: 2097152\n", "accelerators: 2097152 is out of range"),
    ("accelerators: 12.5\n", "accelerators: must be an integer"),
    ("- a\n- b\n", "expected a mapping"),
])
def test_bad_config_is_one_line_naming_file_and_key(tmp_path, body, fragment):
    path = tmp_path / "hw.yaml"
    path.write_text(body)
    with pytest.raises(InputError) as info:
        load_hardware(path)
    message = str(info.value)
    assert str(path) in message and fragment in message and "\n" not in message


def test_hardware_command(cli, tmp_path):
    result = cli("hardware")
    assert result.returncode == 0
    assert "320" in result.stdout and "HyPar 6.1" in result.stdout and "84.0" in result.stdout
    path = tmp_path / "hw.yaml"
    path.write_text("batch: 64\n")
    data = json.loads(cli("hardware", "--config", str(path), "--accelerators", "4", "--json").stdout)
    assert data["batch"] == 64 and data["accelerators"] == 4
    assert not any(line.startswith("hierarchy levels") for line in result.stdout.splitlines())
    six = json.loads(cli("hardware", "--accelerators", "6", "--json").stdout)
    assert six["accelerators"] == 6  # any count: no power of two needed any more
    bad = cli("hardware", "--accelerators", "0")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "accelerators: 0 is out of range" in bad.stderr
    missing = cli("hardware", "--config", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "config file not found" in missing.stderr


def test_interconnect_parameters():
    c = load_hardware()
    base = link_spec(c)
    assert link_spec(c, 4).bandwidth_bytes_per_cycle == pytest.approx(4 * base.bandwidth_bytes_per_cycle)
    # 1.6 Gb/s at 250 MHz is 0.8 raw bytes per cycle; 256 of every 272 bytes are data.
    assert base.bandwidth_bytes_per_cycle == pytest.approx(0.8 * 256 / 272)
    assert base.latency_cycles == pytest.approx(11 / 4)


def test_yaml_numbers_with_exponents_are_numbers(tmp_path):
    """YAML 1.1 reads 2e1 and 1.6e9 as strings; here they are numbers (an integral float
    for an integer key is that integer)."""
    from hypar_sim.hardware.config import load_hardware

    path = tmp_path / "hw.yaml"
    path.write_text("clock_mhz: 2.5e2\nlink_bandwidth_gbps: 16e-1\naccelerators: 1.6e1\n")
    config = load_hardware(str(path))
    assert config.clock_mhz == 250 and config.link_bandwidth_gbps == 1.6
    assert run_keys(path) == {"accelerators": 16}
    assert isinstance(run_keys(path)["accelerators"], int)


def test_hardware_yaml_is_a_config_file_that_reads_back(tmp_path):
    """`hardware --yaml > my_hw.yaml` then the README's `--config my_hw.yaml` example, as
    written; the file gives the same configuration as the defaults."""

    from hypar_sim.hardware.config import load_hardware

    cli = partial(run_cli, cwd=tmp_path)
    (tmp_path / "my_hw.yaml").write_text(cli("hardware", "--yaml").stdout)
    assert load_hardware(str(tmp_path / "my_hw.yaml")) == load_hardware()
    run = cli("run", "lenet_c", "--accelerators", "64", "--batch", "512", "--config",
              "my_hw.yaml", "--csv", "layers.csv")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "layers.csv").is_file() and (tmp_path / "layers.csv.config.json").is_file()


def test_run_set_takes_any_hardware_key(tmp_path):
    import json

    cli = partial(run_cli, cwd=tmp_path)
    done = cli("run", "lenet_c", "--accelerators", "4", "--engine", "analytic", "--set",
               "link_bandwidth_gbps=3.2", "--set", "clock_mhz=500", "--json")
    config = json.loads(done.stdout)["config"]
    assert config["link_bandwidth_gbps"] == 3.2 and config["clock_mhz"] == 500
    for bad, fragment in (("clock_mhz=1,2", "takes one value here"), ("clockk=2", "unknown key"),
                          ("clock_mhz", "is not key=value")):
        refused = cli("run", "lenet_c", "--set", bad)
        assert refused.returncode == 2 and fragment in refused.stderr


def test_scratch_pads_keep_eyeriss_bytes_whatever_the_word():
    """Issue 13, cause 5: storage is sized in bytes (Eyeriss JSSC 2017 Table IV: 224, 12 and 24
    words of 16 bit), so at fp32 the spads hold half the words; at 16 bit the chip's."""
    from hypar_sim.hardware.hmc import pe_array_spec

    fp32 = pe_array_spec(load_hardware())
    assert (fp32.filter_rf_words, fp32.ifmap_rf_words, fp32.psum_rf_words) == (112, 6, 12)
    assert fp32.buffer_words == 108 * 1024 // 4
    half = pe_array_spec(load_hardware(overrides={"word_bytes": 2}))
    assert (half.filter_rf_words, half.ifmap_rf_words, half.psum_rf_words) == (224, 12, 24)
