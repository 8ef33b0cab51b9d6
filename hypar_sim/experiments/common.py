"""What the figure modules share: running cases, tables, plots, markdown, the command line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from hypar_sim import __version__
from hypar_sim.atomic import atomic_write_text
from hypar_sim.errors import InputError
from hypar_sim.figure_style import FORMATS, PALETTE, TINY, save_figure, style
from hypar_sim.hardware.config import load_hardware, run_keys
from hypar_sim.paper import DISPLAY_NAMES
from hypar_sim.planner.options import PlanOptions
from hypar_sim.sweep import Case, run_cases

RESULTS = Path(__file__).resolve().parents[2] / "results"
#: The figures of HyPar's evaluation plan under its reading of Tables 1 and 2 (`paper`).
PAPER_MODEL = PlanOptions(traffic_model="paper")
#: Small networks used by the quick (test) configuration.
QUICK_NETWORKS = ("sconv", "lenet_c", "cifar_c")
STRATEGY_LABELS = {"model": "Model Parallelism", "data": "Data Parallelism", "hypar": "HyPar",
                   "trick": "one weird trick"}
#: Strategies keep their colour and marker in every figure (figure_style.PALETTE: apart in grey).
STRATEGY_COLORS = {"data": PALETTE[0], "model": PALETTE[1], "hypar": PALETTE[2], "trick": PALETTE[3]}
STRATEGY_MARKERS = {"data": "s", "model": "D", "hypar": "o", "trick": "^"}
#: What Figure.run writes besides the CSV: PNG (results/README.md shows it) and PDF.
FIGURE_FORMATS = ("png", "pdf")


@dataclass(frozen=True)
class Figure:
    """One experiment: how to compute its table, draw it and describe it.

    `plot(table)` returns the matplotlib figure; `run` draws it in the tool's style
    (figure_style.style) and writes it with figure_style.save_figure."""

    name: str  # e.g. "fig06_performance"
    title: str
    compute: Callable[..., pd.DataFrame]
    plot: Callable[[pd.DataFrame], object]
    report: Callable[[pd.DataFrame], str]

    def paths(self, out: Path) -> tuple[Path, Path]:
        return out / f"{self.name}.csv", out / f"{self.name}.png"

    def draw(self, table: pd.DataFrame, out: Path,
             formats: Sequence[str] = FIGURE_FORMATS) -> list[Path]:
        """Write the figure of `table` as out/NAME.png and in the other `formats` beside it."""
        with style():
            fig = self.plot(table)
        return save_figure(fig, self.paths(out)[1], also=[f for f in formats if f != "png"],
                           description=base_config_json())

    def run(self, out: Path = RESULTS, quick: bool = False, workers: int | None = None,
            cache: dict | None = None,
            formats: Sequence[str] = FIGURE_FORMATS) -> tuple[pd.DataFrame, float]:
        """Compute, write the CSV and the figure (PNG, and the other `formats`);
        (table, seconds)."""
        started = time.perf_counter()
        table = self.compute(quick=quick, workers=workers, cache=cache)
        csv_path = self.paths(out)[0]
        stamped = table.assign(hypar_sim_version=__version__, base_config=base_config_json())
        atomic_write_text(csv_path, stamped.to_csv(index=False))
        self.draw(table, out, formats)
        return table, time.perf_counter() - started

    def main(self, argv: Sequence[str] | None = None) -> pd.DataFrame:
        parser = argparse.ArgumentParser(description=self.title)
        parser.add_argument("--out", type=Path, default=None,
                            help="output folder (default: results/; with --quick, a new scratch "
                                 "folder: quick runs never write over the committed results)")
        parser.add_argument("--quick", action="store_true",
                            help="reduced configuration: 4 accelerators, small networks")
        parser.add_argument("--workers", type=int, default=None, help="processes (all cores)")
        parser.add_argument("--formats", default=",".join(FIGURE_FORMATS),
                            help=f"figure formats, comma-separated among {', '.join(FORMATS)} "
                                 f"(default {','.join(FIGURE_FORMATS)}; png is always written)")
        args = parser.parse_args(argv)
        args.out = output_folder(args.out, args.quick)
        try:
            formats = figure_formats(args.formats)
            table, seconds = self.run(args.out, args.quick, args.workers, formats=formats)
        except InputError as exc:
            parser.exit(2, f"{self.name}: error: {exc}\n")
        csv_path, png_path = self.paths(args.out)
        written = [csv_path, *(png_path.with_suffix(f".{f}") for f in formats)]
        print(self.report(table))
        print(f"\nwrote {', '.join(map(str, written))} in {seconds:.1f} s")
        return table


def output_folder(out: Path | str | None, quick: bool) -> Path:
    """Where figures go: `out`; else results/ for a full run and a new scratch folder for a
    quick one (the reduced configuration must never replace the committed results)."""
    if out is not None:
        return Path(out)
    if quick:
        return Path(tempfile.mkdtemp(prefix="hypar-sim-quick-"))
    return RESULTS


def figure_formats(text: str) -> tuple[str, ...]:
    """`--formats png,pdf,svg` as a tuple, png first and always in it; InputError for others."""
    given = [f.strip().lstrip(".").lower() for f in text.split(",") if f.strip()]
    for fmt in given:
        if fmt not in FORMATS:
            raise InputError(f"--formats: unknown format '{fmt}'; allowed: {', '.join(FORMATS)}")
    return tuple(dict.fromkeys(["png", *given]))


def cases(networks: Iterable[str], strategies: Iterable[str], topology: str = "htree",
          accelerators: int = 16, batch: int = 256, engine: str = "des") -> list[Case]:
    return [Case(n, s, topology, accelerators, batch, engine, traffic_model="paper")
            for n in networks for s in strategies]


def rows_frame(case_list: Sequence[Case], workers: int | None, cache: dict | None) -> pd.DataFrame:
    """Run the cases (reusing `cache`) and return their rows; any failure is an error."""
    rows = run_cases(case_list, workers=workers, cache=cache)
    failed = [row for row in rows if row.get("error")]
    if failed:
        raise InputError(f"{failed[0]['network']} ({failed[0]['strategy']}): {failed[0]['error']}")
    frame = pd.DataFrame(rows)
    for column in ("latency_s", "latency_cycles", "energy_j", "traffic_bytes", "accelerators",
                   "batch"):
        frame[column] = pd.to_numeric(frame[column])
    return frame


def geomean(values: Iterable[float]) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def display(network: str) -> str:
    return DISPLAY_NAMES.get(network, network)


def base_config_json() -> str:
    """The default configuration every figure starts from (the run's defaults, then the
    hardware), as compact JSON."""
    return json.dumps(run_keys() | dataclasses.asdict(load_hardware()), separators=(",", ":"))


def grouped_bars(ax, table: pd.DataFrame, groups: Sequence[str], series: Sequence[str],
                 value: str, group_column: str, series_column: str,
                 labels: dict[str, str], colors: dict[str, str],
                 hatches: dict[str, str] | None = None) -> None:
    """One group of bars per `groups` item, one bar per `series` item."""
    width = 0.8 / len(series)
    for k, name in enumerate(series):
        part = table[table[series_column] == name].set_index(group_column)
        heights = [part.loc[g, value] if g in part.index else math.nan for g in groups]
        positions = [i + (k - (len(series) - 1) / 2) * width for i in range(len(groups))]
        bars = ax.bar(positions, heights, width, label=labels.get(name, name),
                      color=colors.get(name), edgecolor="black", linewidth=0.4,
                      hatch=(hatches or {}).get(name))
        if len(groups) * len(series) <= 40:
            ax.bar_label(bars, fmt="%.3g", fontsize=TINY, rotation=90, padding=2)
            ax.margins(y=0.1)  # room above the tallest bar for its label
    ax.set_xticks(range(len(groups)), [display(g) for g in groups])


def markdown_table(frame: pd.DataFrame, floats: str = "{:.4g}") -> str:
    """A GitHub markdown table of `frame`."""
    def cell(value) -> str:
        if isinstance(value, float):
            return floats.format(value)
        return str(value)

    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def normalized_to_data(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Add speedup (DP latency / latency) and efficiency (DP energy / energy) per `keys` group."""
    base = frame[frame.strategy == "data"].set_index(list(keys))
    index = frame.set_index(list(keys)).index
    frame = frame.copy()
    frame["speedup_vs_data"] = base.loc[index, "latency_s"].to_numpy() / frame.latency_s
    frame["efficiency_vs_data"] = base.loc[index, "energy_j"].to_numpy() / frame.energy_j
    return frame
