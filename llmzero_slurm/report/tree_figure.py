"""The search tree figure, and where each node landed in its PNG, so the page can make every
node a link to that node's own section (its curves and the agents' reasoning)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from matplotlib.ticker import MaxNLocator

from ..plots import DPI
from ..search.tree import Kind, Status, Tree
from .canvas import STATUS_COLOURS, empty, new_figure, save
from .collect import RunView

TREE = "tree.png"
TREE_MARKER = 260               # scatter size (points squared) of a node on the tree figure
LEAF_INCHES = 0.6               # a leaf's room: its marker and its label clear of the next
MAX_INCHES = 20.0               # the height's bound: a deep tree is drawn denser
MAX_PIXELS = 12_000_000         # the width's: a wide tree widens (the page scrolls it) up to it


@dataclass(frozen=True)
class Area:
    """A node's clickable circle on the tree figure, in the PNG's own pixels."""

    node: int
    x: int
    y: int
    r: int


def _layout(tree: Tree) -> dict[int, tuple[float, int]]:
    """Layered layout: depth down, leaves left to right, a parent centred over its children.
    Iterative, children before their parent: a chain of phases may be deeper than Python's
    recursion limit."""
    pos: dict[int, tuple[float, int]] = {}
    next_x = 0.0
    stack = [(root, 0, False) for root in reversed(tree.children(None, include_pruned=True))]
    while stack:
        node, depth, placed_kids = stack.pop()
        kids = tree.children(node.id, include_pruned=True)
        if kids and not placed_kids:
            stack.append((node, depth, True))
            stack.extend((kid, depth + 1, False) for kid in reversed(kids))
            continue
        if kids:
            xs = [pos[kid.id][0] for kid in kids]
            x = (min(xs) + max(xs)) / 2
        else:
            x, next_x = next_x, next_x + 1
        pos[node.id] = (x, depth)
    return pos


def tree_figure(view: RunView, path: Path) -> list[Area]:
    """Every node coloured by status; the best path drawn bold; debug nodes square, injected
    scratch children joined by a dashed edge, pruned nodes faded. Returns each node's area."""
    tree = view.tree
    pos = _layout(tree)
    depth = max((d for _, d in pos.values()), default=0)
    height = max(3.0, min(MAX_INCHES, 1.0 + 0.9 * (depth + 1)))
    leaves = max((x for x, _ in pos.values()), default=0) + 2
    width = max(6.0, min(LEAF_INCHES * leaves, MAX_PIXELS / DPI ** 2 / height))
    fig, ax = new_figure((width, height))
    on_path = {p.view.node.id for p in view.phases}
    for node in tree:
        if node.parent is not None and node.parent in pos:
            (x0, y0), (x1, y1) = pos[node.parent], pos[node.id]
            bold = node.id in on_path and node.parent in on_path
            ax.plot([x0, x1], [y0, y1], color="black" if bold else "gray",
                    linewidth=2.5 if bold else 1, linestyle="--" if node.injected else "-", zorder=1)
    # A job's end the record does not have yet is shown, as the page's tables show it.
    shown = {n.id: view.nodes[n.id].status if n.id in view.nodes else n.status for n in tree}
    for node in tree:
        x, y = pos[node.id]
        ax.scatter([x], [y], s=TREE_MARKER, marker="s" if node.kind is Kind.DEBUG else "o",
                   color=STATUS_COLOURS[shown[node.id]], edgecolor="black",
                   linewidth=2 if node.id in on_path else 0.8, alpha=0.35 if node.pruned else 1,
                   zorder=2)
        label = str(node.id) + (f"\n{node.score:.2f}" if node.score is not None else "")
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(12, -4), fontsize=7)
    for status in sorted(set(shown.values()), key=list(Status).index):
        ax.scatter([], [], color=STATUS_COLOURS[status], edgecolor="black", label=status.value)
    if len(tree):
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    else:
        empty(ax, "no phase yet")
    ax.invert_yaxis()
    ax.set_xticks([])
    ax.set_ylabel("depth")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))   # a deep tree: not one tick a level
    ax.set_title("Search tree (bold: best strategy; square: debug; dashed edge: injected scratch)",
                 fontsize=9)
    fig.tight_layout()
    fig.canvas.draw()       # settles the autoscaled limits the pixel positions depend on
    pixels_high = fig.bbox.height
    radius = math.ceil(math.sqrt(TREE_MARKER) / 2 * DPI / 72) + 2
    areas = []
    for node_id, point in pos.items():
        px, py = ax.transData.transform(point)
        areas.append(Area(node_id, round(px), round(pixels_high - py), radius))
    save(fig, path)
    return sorted(areas, key=lambda a: a.node)
