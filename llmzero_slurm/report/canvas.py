"""What every report figure shares: status colours, a figure of the usual size, the note
drawn where there is nothing to show yet, and a save that never leaves half a PNG."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import StorageError
from ..plots import DPI, plt
from ..search.tree import Status

STATUS_COLOURS = {
    Status.COMPLETED: "tab:green", Status.EARLY_STOPPED: "tab:orange", Status.FAILED: "tab:red",
    Status.CANCELLED: "tab:gray", Status.RUNNING: "tab:blue", Status.QUEUED: "lightskyblue",
    Status.SUBMITTING: "lightskyblue", Status.PROPOSED: "white",
}
def save(fig: plt.Figure, path: Path) -> Path:
    """Write beside the target and rename, so a reader of the page never sees half a PNG. A
    write that fails (a full disk, a quota) keeps the figure shown before and raises
    StorageError, which the controller reports and goes on without."""
    tmp = path.with_name(f".{path.stem}.tmp.png")
    try:
        fig.savefig(tmp, dpi=DPI)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(path, f"could not be written ({exc.strerror or exc}); it still "
                                 "shows what it showed before") from exc
    finally:
        plt.close(fig)
    return path


def finish(fig: plt.Figure, ax: Any, path: Path, title: str, xlabel: str, ylabel: str) -> Path:
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save(fig, path)


def new_figure(size: tuple[float, float] = (7.5, 4.0)) -> tuple[plt.Figure, Any]:
    return plt.subplots(figsize=size, dpi=DPI)


def empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])
