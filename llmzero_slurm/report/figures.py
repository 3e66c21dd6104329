"""The report's figures (matplotlib, Agg). Each draws one question about the run into one PNG;
with nothing to show yet it still writes a figure saying so, so the page never links to a
missing file. Unlike the agents' plots, these may show test-set scores. `draw_all` draws them
with the tree (tree_figure.py) and each node's curves (node_curves.py)."""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from matplotlib.ticker import MaxNLocator

from ..hparams import BATCH, CAPACITY, PARAMS, REGULARISATION
from ..metrics import val_score_series
from ..plots import DPI, plt
from ..search.tree import Status
from .canvas import STATUS_COLOURS, dress, empty, finish, new_figure, save
from .collect import Phase, RunView
from .node_curves import NODE_CURVES, NodeCurves, node_curves
from .tree_figure import TREE, Area, tree_figure

PANELS = (("capacity (grows along a strategy)", (CAPACITY, BATCH)),
          ("regularisation (free to move both ways)", (REGULARISATION,)))


def strategy_figure(view: RunView) -> plt.Figure:
    """The best strategy's validation score on the global-step axis, one colour per phase
    (an early-stopped one says so: its span is shorter than planned), the best step starred;
    its test score is in the legend, where no curve runs through it."""
    fig, ax = new_figure()
    for i, phase in enumerate(view.phases):
        points = [(s, v) for s, v in val_score_series(phase.log.without_test())
                  if phase.start <= s <= phase.end]
        if points:
            steps, values = zip(*points)
            node = phase.view.node
            stopped = f" ({node.status.value})" if node.status is not Status.COMPLETED else ""
            ax.plot(steps, values, marker="o", markersize=3,
                    label=f"phase {i + 1}: node {node.id}{stopped}")
        if i:
            ax.axvline(phase.start, color="gray", linestyle=":", linewidth=1)
    best = view.best
    if best is not None and best.results.best_val_step is not None \
            and best.results.best_val is not None:
        test = best.results.test_at_best
        ax.plot([best.results.best_val_step], [best.results.best_val], marker="*", markersize=14,
                color="gold", markeredgecolor="black", linestyle="none",
                label=f"best validation {best.results.best_val:.3f} at step "
                      f"{best.results.best_val_step}"
                      + (f"; test there {test:.3f}" if test is not None else ""))
    if not view.phases:
        empty(ax, "no scored phase yet")
    else:
        ax.legend(fontsize=7)
    return dress(fig, ax, "Best strategy: validation score by phase", "global step",
                 "validation score")


def strategy_curve(view: RunView, path: Path) -> Path:
    return save(strategy_figure(view), path)


def best_so_far_line(view: RunView) -> tuple[list[int], list[float]]:
    """(iteration, best validation score so far) in creation order, of the strategy scores the
    headline's best_node picks from (no pruned, cancelled or failed node), so the line ends
    at its."""
    xs: list[int] = []
    best: list[float] = []
    running = None
    for i, node in enumerate(sorted(view.tree, key=lambda n: n.id), 1):
        if (score := node.strategy_score) is not None:
            running = score if running is None else max(running, score)
        if running is not None:
            xs.append(i)
            best.append(running)
    return xs, best


NOT_COUNTED = " (not a candidate for the best)"


def best_so_far_figure(view: RunView) -> plt.Figure:
    """Best validation score so far against iteration (phases in creation order), each scored
    phase a dot in its status colour, named in the legend; a dot the line does not count (a
    failed, cancelled, running or pruned phase's) says so, or one above the line reads as a
    mistake."""
    fig, ax = new_figure()
    dots: dict[tuple[Status, bool], tuple[list[int], list[float]]] = {}
    for i, node in enumerate(sorted(view.tree, key=lambda n: n.id), 1):
        if node.score is not None:
            xs_, ys_ = dots.setdefault((node.status, node.strategy_score is None), ([], []))
            xs_.append(i)
            ys_.append(node.score)
    xs, best = best_so_far_line(view)
    if xs:
        ax.step(xs, best, where="post", color="black", label="best so far")
    for (status, uncounted), (dot_x, dot_y) in sorted(
            dots.items(), key=lambda d: (list(Status).index(d[0][0]), d[0][1])):
        ax.scatter(dot_x, dot_y, color=STATUS_COLOURS[status], edgecolor="black", zorder=3, s=25,
                   label=status.value + (NOT_COUNTED if uncounted else ""))
    if dots:
        ax.legend(fontsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))    # phases come whole
    else:
        empty(ax, "no scored phase yet")
    return dress(fig, ax, "Best validation score so far", "iteration (phase created)",
                 "validation score")


def best_so_far(view: RunView, path: Path) -> Path:
    return save(best_so_far_figure(view), path)


def leader_test_by_compute(view: RunView) -> tuple[list[float], list[float]]:
    """(cumulative device-hours, test score of the best phase so far) as phases finished. The
    best is chosen as the headline's (best_node): strategy scores only, a tie to the older node,
    so the curve ends at the test score the page states."""
    done = sorted((n for n in view.tree if n.status.finished),
                  key=lambda n: (n.finished_at or 0.0, n.id))
    hours: list[float] = []
    tests: list[float] = []
    spent, leader, leading = 0.0, None, (-math.inf, 0)
    for node in done:
        spent += node.results.gpu_hours
        if (score := node.strategy_score) is not None and (score, -node.id) > leading:
            leader, leading = node, (score, -node.id)
        if leader is not None and leader.results.test_at_best is not None:
            hours.append(spent)
            tests.append(leader.results.test_at_best)
    return hours, tests


def test_vs_compute(view: RunView, path: Path) -> Path:
    """Test score of the best-validation phase so far against cumulative device-hours."""
    fig, ax = new_figure()
    hours, tests = leader_test_by_compute(view)
    if hours:
        ax.step(hours, tests, where="post", marker="o", markersize=3)
    else:
        empty(ax, "no test score yet")
    return finish(fig, ax, path, "Test score at the best validation vs compute",
                   "cumulative device-hours", "test score")


def _numeric(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, (int, float)) else None


def _trajectory_panel(ax: Any, phases: list[Phase], title: str, categories: tuple[str, ...]) -> None:
    """Each setting that moved along the path as a line (scaled to its largest value), a
    text one (kl_loss_type) as its trail alone, having no scale; the settings held
    throughout listed below the panel, or in its middle when none moved."""
    names = [k for k, p in PARAMS.items() if p.category in categories and k != "total_training_steps"]
    held, moved_text = [], []
    drawn = False
    for name in names:
        raw = [p.view.node.hparams.get(name) for p in phases]
        if all(v is None for v in raw):
            continue
        if all(v == raw[0] for v in raw):
            held.append(f"{name}={raw[0]}")
            continue
        trail = f"{name}: " + " → ".join(str("default" if v is None else v) for v in raw)
        values = [_numeric(v) for v in raw]
        known = [v for v in values if v is not None]
        if not known:
            moved_text.append(trail)
            continue
        scale = max(abs(v) for v in known) or 1.0
        xs: list[float] = []
        ys: list[float] = []
        for phase, value in zip(phases, values):
            if value is not None:
                xs += [phase.start, phase.end]
                ys += [value / scale] * 2
        ax.plot(xs, ys, marker="o", markersize=3, label=trail)
        drawn = True
    listing = textwrap.fill(", ".join(held), 75)      # at 6 points, under the panel
    if drawn:
        for trail in moved_text:     # in the legend, without a line
            ax.plot([], [], linestyle="none", label=trail)
        ax.set_ylim(0, 1.08)
        ax.legend(fontsize=6, loc="best")
        ax.set_ylabel("fraction of its largest value", fontsize=8)
        ax.grid(alpha=0.3)
        if held:
            ax.text(0.0, -0.16, "held throughout: " + listing, transform=ax.transAxes,
                    fontsize=6, color="dimgray", va="top")
    else:
        said = ("changed along this strategy:\n" + "\n".join(moved_text) if moved_text
                else "nothing changed along this strategy")
        # In the panel at the note's 10 points: 75 characters a line ran across its frame.
        empty(ax, said + ("\nheld at:\n" + textwrap.fill(", ".join(held), 52) if held else ""))
    ax.set_title(title, fontsize=9)


def hparam_figure(view: RunView) -> plt.Figure:
    """Each hyperparameter along the best path, capacity and regularisation side by side."""
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.2), dpi=DPI)
    for ax, (title, categories) in zip(axes, PANELS):
        if view.phases:
            _trajectory_panel(ax, view.phases, title, categories)
        else:
            empty(ax, "no scored phase yet")
        ax.set_xlabel("global step", fontsize=8)
    fig.tight_layout()
    return fig


def hparam_trajectories(view: RunView, path: Path) -> Path:
    return save(hparam_figure(view), path)


FIGURES: dict[str, Callable[[RunView, Path], Path]] = {
    "strategy_curve.png": strategy_curve,
    "best_so_far.png": best_so_far,
    "test_vs_compute.png": test_vs_compute,
    "hparams.png": hparam_trajectories,
}


@dataclass
class Drawn:
    """What the page links: the tree's node areas and each node's curve file."""

    tree_areas: list[Area]
    node_curves: NodeCurves


def draw_all(view: RunView, out_dir: Path, budget_s: float | None = None,
             say: Callable[[str], None] | None = None) -> Drawn:
    """`budget_s`: how long the node curve grids may take (node_curves.REFRESH_DRAW_S); `say`:
    told how far they got, in a long drawing."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, draw in FIGURES.items():
        draw(view, out_dir / name)
    return Drawn(tree_figure(view, out_dir / TREE), node_curves(view, out_dir / NODE_CURVES,
                                                                budget_s, say))
