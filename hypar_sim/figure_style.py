"""The one style of every figure the tool draws, and the one way to save them.

The figure modules (`hypar_sim/experiments/`) and `run --plot` (`plots.py`)
draw inside `style()` and write with `save_figure`:

- fonts, line widths and marker sizes of `RC`; TrueType fonts in PDFs (no
  Type 3 fonts, which publishers refuse);
- the colour cycle `PALETTE`, five hues whose lightness (CIE L*) differs by
  at least 15 between any two, so the series stay apart printed in grey,
  each paired with its own marker;
- tight layout, and `bbox_inches="tight"` when saving, so no label is clipped;
- legends that show one marker per entry, at full size;
- PNG at 300 dpi, PDF and SVG by the file's suffix (or `also` beside it),
  each written atomically, with the tool's version in its metadata and no
  creation date, so the same figure gives the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from cycler import cycler  # noqa: E402

from hypar_sim import __version__  # noqa: E402
from hypar_sim.atomic import atomic_write  # noqa: E402
from hypar_sim.errors import InputError  # noqa: E402

FORMATS = ("png", "pdf", "svg")
DPI = 300
#: Dark to light; L* about 21, 38, 58, 73 and 95 (see `lightness`).
PALETTE = ("#08306b", "#b2182b", "#2ca02c", "#f4a259", "#fff3a3")
MARKERS = ("o", "s", "^", "D", "v")
HATCHES = ("//", "xx", "..", "\\\\", "++")
#: Font sizes (points): text inside a plot that must stay small (cell labels, bar values).
TINY = 6
SMALL = 7

RC = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "figure.titlesize": 11,
    "axes.linewidth": 0.8,
    "axes.prop_cycle": cycler(color=PALETTE) + cycler(marker=MARKERS),
    "lines.linewidth": 1.6,
    "lines.markersize": 5.5,
    "lines.markeredgewidth": 0.8,
    "lines.markeredgecolor": "black",
    "patch.linewidth": 0.4,
    "hatch.linewidth": 0.6,
    "grid.linewidth": 0.5,
    "grid.alpha": 0.3,
    "legend.numpoints": 1,
    "legend.scatterpoints": 1,
    "legend.markerscale": 1.0,
    "legend.framealpha": 0.9,
    "legend.edgecolor": "0.6",
    "image.cmap": "viridis",  # lightness rises monotonically: prints in grey
    "figure.autolayout": True,  # tight layout
    "savefig.dpi": DPI,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.05,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "svg.hashsalt": "hypar-sim",  # stable ids: the same figure gives the same SVG
}


@contextmanager
def style() -> Iterator[None]:
    """Draw (and save) figures in the tool's style: `with style(): fig, ax = plt.subplots()`."""
    with matplotlib.rc_context(RC):
        yield


def lightness(color) -> float:
    """CIE L* (0 black .. 100 white) of a matplotlib colour: what is left of it in grey."""
    channels = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
                for c in matplotlib.colors.to_rgb(color)]
    y = 0.2126 * channels[0] + 0.7152 * channels[1] + 0.0722 * channels[2]
    return 116 * y ** (1 / 3) - 16 if y > 216 / 24389 else y * 24389 / 27


def figure_format(path: str | Path, what: str = "figure") -> str:
    """The format `path`'s suffix asks for (png, pdf or svg); InputError for any other."""
    suffix = Path(path).suffix.lstrip(".").lower()
    if suffix not in FORMATS:
        raise InputError(f"{what}: {path}: the file name must end in .png, .pdf or .svg")
    return suffix


def _metadata(fmt: str, description: str | None) -> dict:
    software = f"hypar-sim {__version__}"
    if fmt == "png":
        return {"Software": software} | ({"Comment": description} if description else {})
    if fmt == "pdf":
        return {"Creator": software, "CreationDate": None} | (
            {"Subject": description} if description else {})
    return {"Creator": software, "Date": None} | (
        {"Description": description} if description else {})


def save_figure(fig, path: str | Path, *, also: Iterable[str] = (),
                description: str | None = None) -> list[Path]:
    """Write `fig` to `path` in the format of its suffix (png, pdf or svg), and beside it
    with the same stem in every format of `also`; PNG at 300 dpi, every file cropped to
    what is drawn (`bbox_inches="tight"`, nothing clipped), written atomically, with the
    tool's version and `description` in its metadata. Closes the figure; returns the paths."""
    rendered = render_figure(fig, path, also=also, description=description)
    for target, data in rendered.items():
        atomic_write(target, lambda handle, data=data: handle.write(data))
    return list(rendered)


def render_figure(fig, path: str | Path, *, also: Iterable[str] = (),
                  description: str | None = None) -> dict[Path, bytes]:
    """The files `save_figure` writes, as bytes by path (nothing written). Closes `fig`."""
    path = Path(path)
    rendered = {}
    try:
        targets = {figure_format(path): path}
        for fmt in also:
            fmt = fmt.lstrip(".").lower()
            if fmt not in FORMATS:
                raise InputError(f"figure format {fmt!r}: allowed: {', '.join(FORMATS)}")
            targets.setdefault(fmt, path.with_suffix(f".{fmt}"))
        with style():
            if fig.get_layout_engine() is None:  # drawn outside style(): lay it out now
                fig.tight_layout()
            for fmt, target in targets.items():
                buffer = io.BytesIO()
                fig.savefig(buffer, format=fmt, dpi=DPI, bbox_inches="tight", pad_inches=0.05,
                            metadata=_metadata(fmt, description))
                rendered[target] = buffer.getvalue()
    finally:
        plt.close(fig)
    return rendered
