"""Each node's training curves drawn over the best strategy's, one PNG per node."""
from __future__ import annotations

import hashlib
from time import monotonic
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from ..elapsed import duration
from ..plots import overlay_figure
from .canvas import save
from .collect import NodeView, RunView

NODE_CURVES = "nodes"           # the report's folder of node curve grids
REFRESH_DRAW_S = 20.0
"""How long the controller's refresh after a finished phase draws curve grids. A new best
changes the overlay of every grid: at hundreds of nodes redrawing them all held the search
(no poll, no submission) for minutes. The rest keep their earlier drawing and are redrawn by
the following refreshes; llmzero-report draws every one."""
SAY_EVERY_S = 10.0              # a long drawing says how far it got this often (300 grids: minutes)


@dataclass
class NodeCurves:
    """Each node's curve file relative to the report folder (None: not drawn yet), and the
    nodes whose file is an earlier drawing, left for a later refresh by the draw budget."""

    files: dict[int, str | None] = field(default_factory=dict)
    earlier: set[int] = field(default_factory=set)


def node_curves(view: RunView, out_dir: Path, budget_s: float | None = None,
                say: Callable[[str], None] | None = None) -> NodeCurves:
    """Each node's training curves over the best strategy's, one PNG per node, named by a
    digest of the node's own curves and one of the best strategy's, so that a refresh redraws
    only the grids whose curves changed. Each node's curves are read as it is drawn, and
    dropped. With `budget_s`, drawing stops once that long was spent: the grids left undrawn
    show their earlier drawing. Those never drawn come first, then those whose own curves
    changed, then those only the best strategy changed (the newest first within each). The
    files it replaces stay until the new page is in place (`drop_stale_curves`): the old page
    still shows them. `say`: told how far the drawing got and about how long is left at the
    pace so far, every SAY_EVERY_S."""
    out_dir.mkdir(parents=True, exist_ok=True)
    best = _digest("|".join(_stamp(p.view) for p in view.phases))   # drawn behind every node
    drawn: dict[int, list[Path]] = {}
    for png in sorted(out_dir.glob("node-*.png"), key=_mtime, reverse=True):
        if (node_id := _node_of(png)) is not None:
            drawn.setdefault(node_id, []).append(png)
    own = {i: f"node-{i:04d}-{_digest(_stamp(node))}-" for i, node in view.nodes.items()}
    wanted = {i: f"{prefix}{best}.png" for i, prefix in own.items()}
    due = [i for i, name in wanted.items() if not (out_dir / name).exists()]
    due.sort(key=lambda i: (i in drawn, any(p.name.startswith(own[i]) for p in drawn.get(i, [])), -i))
    start = told = monotonic()
    for done, node_id in enumerate(due):
        now = monotonic()
        if budget_s is not None and now - start >= budget_s:
            break
        if say is not None and now - told >= SAY_EVERY_S:
            left = f", about {duration((now - start) / done * (len(due) - done))} left" if done else ""
            say(f"report: {done} of {len(due)} node curve grids drawn{left}")
            told = now
        save(overlay_figure(view.logs.curves(view.nodes[node_id].files), view.best_curves,
                            labels=(f"node {node_id}", "best strategy")), out_dir / wanted[node_id])
    result = NodeCurves()
    for node_id, name in wanted.items():
        if (out_dir / name).exists():
            result.files[node_id] = f"{out_dir.name}/{name}"
        elif node_id in drawn:
            result.files[node_id] = f"{out_dir.name}/{drawn[node_id][0].name}"
            result.earlier.add(node_id)
        else:
            result.files[node_id] = None
    return result


def drop_stale_curves(out_dir: Path, shown: Iterable[str | None]) -> None:
    """Remove the curve files the page no longer shows, once the page naming their
    successors is written: removed sooner, a reader of the old page meets broken images."""
    keep = {Path(name).name for name in shown if name is not None}
    for png in out_dir.glob("node-*.png"):
        if png.name not in keep:
            png.unlink(missing_ok=True)


def _stamp(node: NodeView) -> str:
    """Which node and which version of its metrics file."""
    return f"{node.node.id}:{node.files.metrics_stamp()}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _node_of(png: Path) -> int | None:
    """The node a curve file shows: node-NNNN-....png."""
    part = png.name.split("-")[1] if png.name.count("-") >= 2 else ""
    return int(part) if part.isdigit() else None


def _mtime(png: Path) -> float:
    try:
        return png.stat().st_mtime
    except OSError:
        return 0.0
