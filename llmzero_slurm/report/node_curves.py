"""Each node's training curves drawn over the best strategy's, one PNG per node."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

from ..plots import overlay_figure
from .canvas import save
from .collect import NodeView, RunView

NODE_CURVES = "nodes"           # the report's folder of node curve grids


def node_curves(view: RunView, out_dir: Path) -> dict[int, str]:
    """Each node's training curves over the best strategy's, one PNG per node, named by a
    digest of what it shows so that a poll redraws only the nodes whose curves changed.
    Each node's curves are read as it is drawn, and dropped. Returns each node's file name
    relative to the report folder. The files it replaces stay
    until the new page is in place (`drop_stale_curves`): the old page still shows them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    best = "|".join(_stamp(p.view) for p in view.phases)   # the curves drawn behind every node
    names = {}
    for node_id, node in view.nodes.items():
        key = hashlib.sha256(f"{_stamp(node)}#{best}".encode()).hexdigest()[:10]
        name = f"node-{node_id:04d}-{key}.png"
        if not (out_dir / name).exists():
            save(overlay_figure(view.logs.curves(node.files), view.best_curves,
                                labels=(f"node {node_id}", "best strategy")), out_dir / name)
        names[node_id] = f"{out_dir.name}/{name}"
    return names


def drop_stale_curves(out_dir: Path, shown: Iterable[str]) -> None:
    """Remove the curve files the page no longer shows, once the page naming their
    successors is written: removed sooner, a reader of the old page meets broken images."""
    keep = {Path(name).name for name in shown}
    for png in out_dir.glob("node-*.png"):
        if png.name not in keep:
            png.unlink(missing_ok=True)


def _stamp(node: NodeView) -> str:
    """Which node and which version of its metrics file."""
    return f"{node.node.id}:{node.files.metrics_stamp()}"
