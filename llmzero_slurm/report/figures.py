"""The report's figures (matplotlib, Agg). Each draws one question about the run into one PNG;
with nothing to show yet it still writes a figure saying so, so the page never links to a
missing file. Unlike the agents' plots, these may show test-set scores.

The tree figure also returns where its nodes landed in the PNG, so the page can make every
node a link to that node's own section (its curves and the agents' reasoning)."""
from __future__ import annotations

import hashlib
import math
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..hparams import BATCH, CAPACITY, PARAMS, REGULARISATION
from ..metrics import val_score_series
from ..plots import DPI, overlay_plot, plt
from ..search.tree import Kind, Node, Status, Tree
from .collect import NodeView, Phase, RunView

STATUS_COLOURS = {
    Status.COMPLETED: "tab:green", Status.EARLY_STOPPED: "tab:orange", Status.FAILED: "tab:red",
    Status.CANCELLED: "tab:gray", Status.RUNNING: "tab:blue", Status.QUEUED: "lightskyblue",
    Status.SUBMITTING: "lightskyblue", Status.PROPOSED: "white",
}
PANELS = (("capacity (grows along a strategy)", (CAPACITY, BATCH)),
          ("regularisation (free to move both ways)", (REGULARISATION,)))
TREE = "tree.png"
NODE_CURVES = "nodes"           # one curve grid per node, named by what it shows
TREE_MARKER = 260               # scatter size (points squared) of a node on the tree figure


@dataclass(frozen=True)
class Area:
    """A node's clickable circle on the tree figure, in the PNG's own pixels."""

    node: int
    x: int
    y: int
    r: int


def _save(fig: plt.Figure, path: Path) -> Path:
    """Write beside the target and rename, so a reader of the page never sees half a PNG."""
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=DPI)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def _finish(fig: plt.Figure, ax: Any, path: Path, title: str, xlabel: str, ylabel: str) -> Path:
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def _figure(size: tuple[float, float] = (7.5, 4.0)) -> tuple[plt.Figure, Any]:
    return plt.subplots(figsize=size, dpi=DPI)


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def strategy_curve(view: RunView, path: Path) -> Path:
    """The best strategy's validation score on the global-step axis, one colour per phase."""
    fig, ax = _figure()
    for i, phase in enumerate(view.phases):
        points = [(s, v) for s, v in val_score_series(phase.view.log.without_test())
                  if phase.start <= s <= phase.end]
        if points:
            steps, values = zip(*points)
            ax.plot(steps, values, marker="o", markersize=3,
                    label=f"phase {i + 1}: node {phase.view.node.id}")
        if i:
            ax.axvline(phase.start, color="gray", linestyle=":", linewidth=1)
    best = view.best
    if best is not None and best.results.best_val_step is not None:
        ax.plot([best.results.best_val_step], [best.results.best_val], marker="*", markersize=14,
                color="gold", markeredgecolor="black", linestyle="none", label="best validation")
        test = best.results.test_at_best
        if test is not None:
            ax.annotate(f"test at best val: {test:.3f}",
                        (best.results.best_val_step, best.results.best_val),
                        textcoords="offset points", xytext=(-10, -18), ha="right", fontsize=8)
    if not view.phases:
        _empty(ax, "no scored phase yet")
    else:
        ax.legend(fontsize=7)
    return _finish(fig, ax, path, "Best strategy: validation score by phase",
                   "global step", "validation score")


def best_so_far(view: RunView, path: Path) -> Path:
    """Best validation score so far against iteration (phases in creation order)."""
    fig, ax = _figure()
    nodes = sorted(view.tree, key=lambda n: n.id)
    xs, best, running = [], [], None
    for i, node in enumerate(nodes, 1):
        if node.score is not None:
            ax.scatter([i], [node.score], color=STATUS_COLOURS[node.status], edgecolor="black",
                       zorder=3, s=25)
            running = node.score if running is None else max(running, node.score)
        if running is not None:
            xs.append(i)
            best.append(running)
    if xs:
        ax.step(xs, best, where="post", color="black", label="best so far")
        ax.legend(fontsize=7)
    else:
        _empty(ax, "no scored phase yet")
    return _finish(fig, ax, path, "Best validation score so far",
                   "iteration (phase created)", "validation score")


def test_vs_compute(view: RunView, path: Path) -> Path:
    """Test score of the best-validation phase so far against cumulative device-hours."""
    fig, ax = _figure()
    done = sorted((n for n in view.tree if n.status.finished),
                  key=lambda n: (n.finished_at or 0.0, n.id))
    hours: list[float] = []
    tests: list[float] = []
    spent, leader, leading = 0.0, None, -math.inf
    for node in done:
        spent += node.results.gpu_hours
        if node.score is not None and (leader is None or node.score > leading):
            leader, leading = node, node.score
        if leader is not None and leader.results.test_at_best is not None:
            hours.append(spent)
            tests.append(leader.results.test_at_best)
    if hours:
        ax.step(hours, tests, where="post", marker="o", markersize=3)
    else:
        _empty(ax, "no test score yet")
    return _finish(fig, ax, path, "Test score at the best validation vs compute",
                   "cumulative device-hours", "test score")


def _layout(tree: Tree) -> dict[int, tuple[float, int]]:
    """Layered layout: depth down, leaves left to right, a parent centred over its children."""
    pos: dict[int, tuple[float, int]] = {}
    next_x = 0.0

    def place(node: Node, depth: int) -> float:
        nonlocal next_x
        kids = tree.children(node.id, include_pruned=True)
        if kids:
            xs = [place(k, depth + 1) for k in kids]
            x = (min(xs) + max(xs)) / 2
        else:
            x, next_x = next_x, next_x + 1
        pos[node.id] = (x, depth)
        return x

    for root in tree.children(None, include_pruned=True):
        place(root, 0)
    return pos


def tree_figure(view: RunView, path: Path) -> list[Area]:
    """Every node coloured by status; the best path drawn bold; debug nodes square, injected
    scratch children joined by a dashed edge, pruned nodes faded. Returns each node's area."""
    tree = view.tree
    pos = _layout(tree)
    width = max(6.0, min(20.0, 0.6 * (max((x for x, _ in pos.values()), default=0) + 2)))
    depth = max((d for _, d in pos.values()), default=0)
    fig, ax = _figure((width, max(3.0, 1.0 + 0.9 * (depth + 1))))
    on_path = {p.view.node.id for p in view.phases}
    for node in tree:
        if node.parent is not None and node.parent in pos:
            (x0, y0), (x1, y1) = pos[node.parent], pos[node.id]
            bold = node.id in on_path and node.parent in on_path
            ax.plot([x0, x1], [y0, y1], color="black" if bold else "gray",
                    linewidth=2.5 if bold else 1, linestyle="--" if node.injected else "-", zorder=1)
    for node in tree:
        x, y = pos[node.id]
        ax.scatter([x], [y], s=TREE_MARKER, marker="s" if node.kind is Kind.DEBUG else "o",
                   color=STATUS_COLOURS[node.status], edgecolor="black",
                   linewidth=2 if node.id in on_path else 0.8, alpha=0.35 if node.pruned else 1,
                   zorder=2)
        label = str(node.id) + (f"\n{node.score:.2f}" if node.score is not None else "")
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(12, -4), fontsize=7)
    for status in sorted({n.status for n in tree}, key=list(Status).index):
        ax.scatter([], [], color=STATUS_COLOURS[status], edgecolor="black", label=status.value)
    if len(tree):
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    else:
        _empty(ax, "no phase yet")
    ax.invert_yaxis()
    ax.set_xticks([])
    ax.set_ylabel("depth")
    ax.set_yticks(range(depth + 1))
    ax.set_title("Search tree (bold: best strategy; square: debug; dashed edge: injected scratch)",
                 fontsize=9)
    fig.tight_layout()
    fig.canvas.draw()       # settles the autoscaled limits the pixel positions depend on
    height = fig.bbox.height
    radius = math.ceil(math.sqrt(TREE_MARKER) / 2 * DPI / 72) + 2
    areas = []
    for node_id, point in pos.items():
        px, py = ax.transData.transform(point)
        areas.append(Area(node_id, round(px), round(height - py), radius))
    _save(fig, path)
    return sorted(areas, key=lambda a: a.node)


def _numeric(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, (int, float)) else None


def _trajectory_panel(ax: Any, phases: list[Phase], title: str, categories: tuple[str, ...]) -> None:
    """Each setting that moved along the path as a line (scaled to its largest value); the
    settings held throughout listed below the panel, or in its middle when none moved."""
    names = [k for k, p in PARAMS.items() if p.category in categories and k != "total_training_steps"]
    held = []
    drawn = False
    for name in names:
        values = [_numeric(p.view.node.hparams.get(name)) for p in phases]
        known = [v for v in values if v is not None]
        if not known:
            continue
        if len(set(values)) == 1:
            held.append(f"{name}={phases[0].view.node.hparams[name]}")
            continue
        scale = max(abs(v) for v in known) or 1.0
        xs: list[float] = []
        ys: list[float] = []
        for phase, value in zip(phases, values):
            if value is not None:
                xs += [phase.start, phase.end]
                ys += [value / scale] * 2
        trail = " → ".join(str(p.view.node.hparams.get(name, "default")) for p in phases)
        ax.plot(xs, ys, marker="o", markersize=3, label=f"{name}: {trail}")
        drawn = True
    listing = textwrap.fill(", ".join(held), 75)
    if drawn:
        ax.set_ylim(0, 1.08)
        ax.legend(fontsize=6, loc="best")
        ax.set_ylabel("fraction of its largest value", fontsize=8)
        ax.grid(alpha=0.3)
        if held:
            ax.text(0.0, -0.16, "held throughout: " + listing, transform=ax.transAxes,
                    fontsize=6, color="dimgray", va="top")
    else:
        _empty(ax, "nothing changed along this strategy" + (f"\nheld at:\n{listing}" if held else ""))
    ax.set_title(title, fontsize=9)


def hparam_figure(view: RunView) -> plt.Figure:
    """Each hyperparameter along the best path, capacity and regularisation side by side."""
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.2), dpi=DPI)
    for ax, (title, categories) in zip(axes, PANELS):
        if view.phases:
            _trajectory_panel(ax, view.phases, title, categories)
        else:
            _empty(ax, "no scored phase yet")
        ax.set_xlabel("global step", fontsize=8)
    fig.tight_layout()
    return fig


def hparam_trajectories(view: RunView, path: Path) -> Path:
    return _save(hparam_figure(view), path)


def node_curves(view: RunView, out_dir: Path) -> dict[int, str]:
    """Each node's training curves over the best strategy's, one PNG per node, named by a
    digest of what it shows so that a poll redraws only the nodes whose curves changed.
    Returns each node's file name relative to the report folder."""
    out_dir.mkdir(parents=True, exist_ok=True)
    best = "|".join(_stamp(p.view) for p in view.phases)   # the curves drawn behind every node
    names = {}
    for node_id, node in view.nodes.items():
        key = hashlib.sha256(f"{_stamp(node)}#{best}".encode()).hexdigest()[:10]
        name = f"node-{node_id:04d}-{key}.png"
        if not (out_dir / name).exists():
            for stale in out_dir.glob(f"node-{node_id:04d}-*.png"):
                stale.unlink()
            tmp = out_dir / f".{name}.tmp.png"     # renamed into place, as _save does
            overlay_plot(node.log, view.best_curves, tmp,
                         labels=(f"node {node_id}", "best strategy"))
            os.replace(tmp, out_dir / name)
        names[node_id] = f"{out_dir.name}/{name}"
    return names


def _stamp(node: NodeView) -> str:
    """Which node and which version of its metrics file."""
    try:
        stat = node.files.metrics_file.stat()
        return f"{node.node.id}:{stat.st_mtime_ns}:{stat.st_size}"
    except FileNotFoundError:
        return f"{node.node.id}:none"


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
    node_curves: dict[int, str]


def draw_all(view: RunView, out_dir: Path) -> Drawn:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, draw in FIGURES.items():
        draw(view, out_dir / name)
    return Drawn(tree_figure(view, out_dir / TREE), node_curves(view, out_dir / NODE_CURVES))
