"""Training-curve images for the agents (matplotlib, Agg: no display on a login node).

The proposer gets one small image per metric so it can spot inflections a table hides; the
stopper gets one panel grid that overlays the running phase (blue) on the best completed
strategy (green, dashed) on the shared global-step axis. Test metrics are never drawn.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from .metrics import (KEY_METRICS, OVERLAY_METRICS, VAL_SCORE, MetricsLog, Series,  # noqa: E402
                      val_score_series)

DPI = 100
DRAWABLE = 1e300   # larger magnitudes are left out of a plot (see _drawable)


def _series(log: MetricsLog, name: str) -> Series:
    return val_score_series(log) if name == VAL_SCORE else log.get(name)


def plot_name(metric: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", metric).strip("_") + ".png"


def _drawable(value: float) -> float:
    """`value`, or nan where it cannot be drawn. Matplotlib leaves inf and nan out of a line,
    but lays its ticks out over the span of the rest: a value near the float maximum (an
    overflowed grad norm, 1e308) makes that span overflow to inf and the tick layout raise
    ValueError. Such a value is as good as infinite, and left out the same way."""
    return value if abs(value) <= DRAWABLE else math.nan


def _draw(ax: plt.Axes, points: Series, **style: Any) -> None:
    if points:
        steps, values = zip(*((s, _drawable(v)) for s, v in points))
        marker = "o" if len(points) < 30 else None
        ax.plot(steps, values, marker=marker, markersize=3, linewidth=1.2, **style)


def metric_plots(log: MetricsLog, out_dir: str | Path,
                 metrics: Iterable[str] = (VAL_SCORE, *KEY_METRICS),
                 size_px: tuple[int, int] = (480, 300)) -> list[Path]:
    """One PNG per metric that has data; returns the written paths in prompt order."""
    log = log.without_test()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in metrics:
        points = _series(log, name)
        if not points:
            continue
        fig, ax = plt.subplots(figsize=(size_px[0] / DPI, size_px[1] / DPI), dpi=DPI)
        _draw(ax, points, color="tab:blue")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("global step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out / plot_name(name)
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
        paths.append(path)
    return paths


def overlay_plot(current: MetricsLog, best: MetricsLog | None, path: str | Path) -> Path:
    """`overlay_figure` saved to `path`."""
    fig = overlay_figure(current, best)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def overlay_figure(current: MetricsLog, best: MetricsLog | None,
                   metrics: Iterable[str] = OVERLAY_METRICS,
                   size_px: tuple[int, int] = (768, 480),
                   labels: tuple[str, str] = ("current", "best")) -> plt.Figure:
    """One grid of panels, current run blue solid, best completed strategy green dashed."""
    current = current.without_test()
    best = best.without_test() if best is not None else None
    names = [m for m in metrics if _series(current, m) or (best and _series(best, m))]
    names = names or [VAL_SCORE]
    cols = 3 if len(names) > 4 else 2
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size_px[0] / DPI, size_px[1] / DPI), dpi=DPI,
                             squeeze=False)
    for ax, name in zip(axes.flat, names):
        if best is not None:
            _draw(ax, _series(best, name), color="tab:green", linestyle="--", label=labels[1])
        _draw(ax, _series(current, name), color="tab:blue", label=labels[0])
        ax.set_title(name, fontsize=8)
        ax.tick_params(labelsize=6)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    first = axes.flat[0]
    if first.get_legend_handles_labels()[0]:
        first.legend(fontsize=6)
    elif not first.lines:      # nothing logged (a phase failed in its setup): not axes 0..1
        first.text(0.5, 0.5, "no metrics logged", ha="center", va="center",
                   transform=first.transAxes, color="gray")
        first.set_xticks([])
        first.set_yticks([])
    fig.supxlabel("global step", fontsize=7)
    fig.tight_layout()
    return fig
