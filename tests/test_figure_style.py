"""figure_style: one style for every figure, saved as PNG at 300 dpi, PDF and SVG, unclipped."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from hypar_sim.errors import InputError
from hypar_sim.experiments.common import figure_formats
from hypar_sim.experiments.reproduce import load_figure
from hypar_sim.figure_style import PALETTE, lightness, plt, save_figure, style
from tests.conftest import REPO

# The long label is meant not to fit: tight layout gives up (and says so), bbox_inches does not.
pytestmark = pytest.mark.filterwarnings("ignore:Tight layout not applied:UserWarning")

LONG = "a tick label much longer than the figure is wide, which a plain savefig would clip"
WIDTH_IN, HEIGHT_IN = 3.0, 2.0


def small_figure():
    with style():
        fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN))
        ax.plot([0, 1, 2], [1, 3, 2], label="series")
        ax.set_yticks([1, 2, 3], ["1", "2", LONG])
        ax.legend()
    return fig


def ink(path) -> np.ndarray:
    """True where the image is dark (text, lines)."""
    return np.asarray(Image.open(path).convert("L")) < 128


def test_save_figure_writes_png_pdf_and_svg(tmp_path):
    paths = save_figure(small_figure(), tmp_path / "small.png", also=("pdf", "svg"),
                        description="a test")
    assert paths == [tmp_path / "small.png", tmp_path / "small.pdf", tmp_path / "small.svg"]
    assert paths[0].read_bytes().startswith(b"\x89PNG")
    assert paths[1].read_bytes().startswith(b"%PDF")
    assert b"<svg" in paths[2].read_bytes()[:1000]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.pdf", "small.png", "small.svg"]
    png = Image.open(paths[0])
    assert [round(d) for d in png.info["dpi"]] == [300, 300]
    assert png.info["Software"].startswith("hypar-sim ") and png.info["Comment"] == "a test"
    assert png.size[1] >= 0.9 * HEIGHT_IN * 300  # drawn at 300 dpi, not 100
    assert b"/Subtype /Type3" not in paths[1].read_bytes()  # TrueType fonts in the PDF


def test_the_suffix_picks_the_format_and_others_are_refused(tmp_path):
    (path,) = save_figure(small_figure(), tmp_path / "small.svg")
    assert b"<svg" in path.read_bytes()[:1000] and not (tmp_path / "small.png").exists()
    with pytest.raises(InputError, match=r"\.png, \.pdf or \.svg"):
        save_figure(small_figure(), tmp_path / "small.gif")
    with pytest.raises(InputError, match="figure format 'eps'"):
        save_figure(small_figure(), tmp_path / "small.png", also=("eps",))
    assert [p.name for p in tmp_path.iterdir()] == ["small.svg"]
    assert not plt.get_fignums()  # closed, refused or not


def test_a_long_tick_label_is_inside_the_saved_canvas(tmp_path):
    plain = tmp_path / "plain.png"  # the failure save_figure avoids: the label runs off the page
    fig = small_figure()
    fig.savefig(plain, dpi=300)
    plt.close(fig)
    assert ink(plain)[:, 0].any()

    (path,) = save_figure(small_figure(), tmp_path / "tight.png")
    dark = ink(path)
    width = dark.shape[1]
    assert width > 1.5 * WIDTH_IN * 300  # the canvas grew to hold the label
    margin = 10  # pad_inches 0.05 at 300 dpi is 15 pixels of paper around everything drawn
    assert not dark[:, :margin].any() and not dark[:, -margin:].any()
    assert not dark[:margin].any() and not dark[-margin:].any()
    assert dark[:, :width // 2].any()  # the label is drawn, on the left, inside the canvas


def test_the_same_figure_gives_the_same_bytes(tmp_path):
    first = save_figure(small_figure(), tmp_path / "a.pdf", also=("svg", "png"))
    second = save_figure(small_figure(), tmp_path / "b.pdf", also=("svg", "png"))
    for one, two in zip(first, second, strict=True):
        assert one.read_bytes() == two.read_bytes(), one.suffix


def test_the_palette_prints_in_grey_and_legends_show_markers():
    for one, two in itertools.combinations(PALETTE, 2):
        assert abs(lightness(one) - lightness(two)) >= 15, (one, two)
    with style():
        fig, ax = plt.subplots()
        for k in range(3):
            ax.plot([0, 1], [k, k + 1], label=str(k))
        handles = ax.legend().legend_handles
    assert [h.get_marker() for h in handles] == ["o", "s", "^"]
    assert len({h.get_color() for h in handles}) == 3
    plt.close(fig)


@pytest.mark.parametrize("name", ["fig09_lenet_space", "fig12_topology"])
def test_a_figure_from_its_committed_table_is_written_as_png_and_pdf(tmp_path, name):
    """Figure.draw: the module's plot in the tool's style, PNG and PDF beside it by default."""
    figure = load_figure(name)
    table = pd.read_csv(REPO / "results" / f"{name}.csv")
    paths = figure.draw(table, tmp_path)
    assert [p.name for p in paths] == [f"{name}.png", f"{name}.pdf"]
    assert round(Image.open(paths[0]).info["dpi"][0]) == 300
    assert paths[1].read_bytes().startswith(b"%PDF")
    assert not plt.get_fignums()


def test_figure_scripts_and_reproduce_take_formats(tmp_path, cli):
    table = load_figure("fig05_plans").main(["--quick", "--out", str(tmp_path), "--formats", "svg"])
    assert len(table) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fig05_plans.csv", "fig05_plans.png", "fig05_plans.svg"]
    assert figure_formats("pdf, SVG,png") == ("png", "pdf", "svg")
    result = cli("reproduce", "--formats", "png,eps", "--out", str(tmp_path / "none"))
    assert result.returncode == 2 and "--formats: unknown format 'eps'" in result.stderr
    assert not (tmp_path / "none").exists()
