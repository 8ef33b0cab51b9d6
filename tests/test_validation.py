"""`scripts/validate.py`: published numbers beside the model's, from the figure tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from hypar_sim.experiments import validation

RESULTS = Path(__file__).resolve().parent.parent / "results"
TABLES = ("fig05_plans", "fig06_performance", "fig07_energy", "fig08_communication",
          "fig13_trick")


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    """A copy of the committed figure tables (tests never write under results/)."""
    for name in TABLES:
        shutil.copy(RESULTS / f"{name}.csv", tmp_path / f"{name}.csv")
    return tmp_path


def test_every_published_number_has_a_row(tables):
    rows = validation.checks(tables)
    claims = [row.claim for row in rows]
    assert sum("abstract" in c for c in claims) == 3
    assert sum(c.startswith("Fig 8 traffic") for c in claims) == 33  # 10 networks + mean, x 3
    assert sum(c.startswith("Fig 5") for c in claims) == 5
    figure8 = {row.claim: row for row in rows if row.claim.startswith("Fig 8")}
    assert figure8["Fig 8 traffic, SFC, data"].holds  # 16.89 GB against 16.9
    assert figure8["Fig 8 traffic, SFC, model"].holds is None  # MP: no verdict
    assert all(row.holds for row in rows if row.claim.startswith("Fig 5"))
    eyeriss = [row for row in rows if row.claim.startswith("Eyeriss AlexNet CONV")]
    judged = [row for row in eyeriss if "energy" not in row.claim]
    assert len(judged) == 10  # five layers: active PEs and latency (JSSC 2017 Table V)
    assert all(row.holds and row.ratio is not None for row in judged)
    energy = [row for row in eyeriss if "chip energy" in row.claim]
    assert len(energy) == 6  # five layers and their sum, shown with ratios, not judged
    assert all(row.holds is None and 0.5 < row.ratio < 2 for row in energy)
    # No clock tree, control or leakage in the model: it is furthest below the chip on the
    # layer with no zeros to gate (CONV1: 0.546 of 332 mW x 20.9 ms).
    assert min(energy, key=lambda row: row.ratio).claim.startswith("Eyeriss AlexNet CONV1,")


def test_the_verdict_follows_the_model(tables):
    """The abstract's 3.39x holds when the model's mean is within 10% of it, not otherwise."""
    path = tables / "fig06_performance.csv"
    table = pd.read_csv(path)
    mean = (table.network == "geomean") & (table.strategy == "hypar")
    for value, holds in ((3.39 * 1.09, True), (3.39 * 1.11, False)):
        table.loc[mean, "speedup_vs_data"] = value
        table.to_csv(path, index=False)
        first = validation.checks(tables)[0]
        assert first.ratio == pytest.approx(value / 3.39) and first.holds is holds


def test_writes_the_report_and_refuses_a_folder_without_tables(tables, tmp_path, capsys):
    text = validation.main(["--results", str(tables)])
    assert (tables / "validation.md").read_text() == text
    assert "| claim | paper | model | model / paper | holds | note |" in text
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit) as exit_info:
        validation.main(["--results", str(empty)])
    assert exit_info.value.code == 2
    assert "fig06_performance.csv is missing" in capsys.readouterr().err
    assert not (empty / "validation.md").exists()
