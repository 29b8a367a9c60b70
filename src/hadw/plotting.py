"""The one way hadw draws a figure: matplotlib's object API on an Agg canvas.

No pyplot and no `matplotlib.use(...)`: the global backend of the user's process (a notebook, a GUI) is never
touched, and figures are freed with their last reference instead of living in pyplot's registry.

    fig, axes = subplots(1, 2, figsize=(10, 4))   # axes: a list of Axes, left to right
    ...
    save(fig, "out.png")
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

# matplotlib's default colour cycle ("tab10"), named so that panels of one figure agree on colours.
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray"]


def subplots(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] = (6.4, 4.2)) -> tuple[Figure, list]:
    """A figure with an nrows × ncols grid; the Axes are returned as a flat list (row-major)."""
    fig = Figure(figsize=figsize)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def save(fig: Figure, path: str | Path, dpi: int = 120, overwrite: bool = True) -> Path:
    """Lay out and write `fig` (format from the suffix: hadw.safe_files.FIGURE_FORMATS), marked as hadw's
    (FIGURE_MARKER in its metadata); parent folders are created. Never a link, a folder or a special file
    (a device, a FIFO), and with overwrite=False never an existing file hadw did not draw (check_figure: commands
    check it before their work, with their --overwrite). Written to a temporary name and renamed: a failed write
    leaves the old file."""
    import io

    from hadw.safe_files import FIGURE_MARKER, atomic_write_bytes, check_figure, figure_format

    path = Path(path)
    check_figure(path, "figure", overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.tight_layout()
    buffer = io.BytesIO()
    fmt = figure_format(path, "figure")
    metadata = {"Software" if fmt == "png" else "Creator": f"{FIGURE_MARKER} (matplotlib)"}
    fig.savefig(buffer, dpi=dpi, format=fmt, metadata=metadata)
    atomic_write_bytes(path, buffer.getvalue())
    return path
