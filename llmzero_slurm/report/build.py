"""write_report: the whole report of a run directory, cheap enough to refresh after every phase.

Output in <run>/report/: index.html, the figures (figures.FIGURES, the tree, one curve grid
per node under nodes/) and strategy.yaml (once a phase has a validation score). Every file is
replaced atomically; a stale strategy.yaml is never left behind when the run has none.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..errors import StorageError, UsageError
from ..store.atomic import remove_stale_temps, write_text
from ..store.locks import server_ages
from ..store.run_store import RunStore
from .collect import collect
from .figures import draw_all
from .logs import MetricsLogs
from .html import render_html
from .node_curves import NODE_CURVES, drop_stale_curves
from ..strategy_file import write_strategy
from .strategy import strategy_document
from .mark import MARK

STRATEGY = "strategy.yaml"


def _check_own_folder(out: Path) -> None:
    """A folder of the user's own is written into only when it is new, empty or a report: a
    report replaces index.html and strategy.yaml there, and removes a strategy.yaml the run
    has no phase for, which may be one the user kept. A file there is the user's typing."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a folder: give a new or empty folder, or one an "
                         "earlier llmzero-report wrote")
    try:
        held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    except OSError as exc:
        raise StorageError(out, f"cannot be listed ({exc.strerror or exc})") from None
    if held and MARK not in held:
        shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
        raise UsageError(f"{out} is not a report folder and not empty (it holds {shown}): give "
                         "a new or empty folder, or one an earlier llmzero-report wrote")


def write_report(run_dir: str | Path, out: Path | None = None,
                 logs: MetricsLogs | None = None, draw_budget_s: float | None = None,
                 say: Callable[[str], None] | None = None, store: RunStore | None = None) -> Path:
    """Write <run>/report/ (or `out`: a reader without write access to the run gives a folder
    of their own) and return the path of its index.html. A folder that cannot be made is a
    StorageError naming it, as a file that cannot be written is. `logs`: the one the last
    report of the run read through, for a refresh that parses only the logs that changed.
    `draw_budget_s`: how long the node curve grids may take (the controller's refresh);
    `say`: told how far they got, in a long drawing (hundreds of nodes: minutes); `store`:
    collect's."""
    view = collect(run_dir, logs, store)
    if out is not None:
        _check_own_folder(Path(out))
    out = Path(out) if out is not None else view.root / "report"
    elsewhere = out.resolve() != (view.root / "report").resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(out, f"cannot be made ({exc.strerror or exc})") from None
    write_text(out / MARK, "")
    for folder in (out, out / NODE_CURVES):   # what writers killed mid-figure left behind
        if folder.is_dir():
            remove_stale_temps(folder, server_ages)
    drawn = draw_all(view, out, draw_budget_s, say)
    document = strategy_document(view.tree, view.config)
    if document is not None and document["phases"]:
        write_strategy(document, out / STRATEGY)
        strategy_file: str | None = STRATEGY
    else:
        (out / STRATEGY).unlink(missing_ok=True)
        strategy_file = None
    index = out / "index.html"
    write_text(index, render_html(view, drawn, strategy_file, elsewhere))
    drop_stale_curves(out / NODE_CURVES, drawn.node_curves.files.values())
    return index
