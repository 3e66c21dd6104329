"""What every report figure shares: status colours, a figure of the usual size, the note
drawn where there is nothing to show yet, and a save that never leaves half a PNG."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..plots import DPI, plt
from ..search.tree import Status
from ..store.atomic import replace_with

STATUS_COLOURS = {
    Status.COMPLETED: "tab:green", Status.EARLY_STOPPED: "tab:orange", Status.FAILED: "tab:red",
    Status.CANCELLED: "tab:gray", Status.RUNNING: "tab:blue", Status.QUEUED: "lightskyblue",
    Status.SUBMITTING: "lightskyblue", Status.PROPOSED: "white",
}
def save(fig: plt.Figure, path: Path) -> Path:
    """Replace the figure atomically, so a reader of the page never sees half a PNG; a save
    that fails (a full disk) keeps the figure shown before and raises StorageError, which the
    controller reports and goes on without. Every figure here was laid out already
    (tight_layout), which leaves a placeholder layout engine behind: with one set, savefig
    runs a whole draw of its own before the real one (a sixth of a node curve grid's cost,
    the same pixels)."""
    try:
        fig.set_layout_engine(None)
        replace_with(path, lambda tmp: fig.savefig(tmp, dpi=DPI, format="png"))
    finally:
        plt.close(fig)
    return path


def dress(fig: plt.Figure, ax: Any, title: str, xlabel: str, ylabel: str) -> plt.Figure:
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def finish(fig: plt.Figure, ax: Any, path: Path, title: str, xlabel: str, ylabel: str) -> Path:
    return save(dress(fig, ax, title, xlabel, ylabel), path)


def new_figure(size: tuple[float, float] = (7.5, 4.0)) -> tuple[plt.Figure, Any]:
    return plt.subplots(figsize=size, dpi=DPI)


def empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])
