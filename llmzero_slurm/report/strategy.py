"""The best strategy of a search as a replayable schedule (the document strategy.yaml holds;
its format, and the reader `search.method: replay` uses, are llmzero_slurm/strategy_file.py's).
"""
from __future__ import annotations

from typing import Any

from ..config import ExperimentConfig
from ..search.policy import best_path
from ..search.tree import Node, Tree
from ..strategy_file import FORMAT


def last_step(node: Node) -> int:
    return node.results.last_step if node.results.last_step is not None else node.start_step


def phase_spans(tree: Tree) -> list[tuple[Node, int, int]]:
    """The best path as (node, first global step, step where the strategy leaves it): the
    next phase's resume step, or the last phase's last trained step."""
    path = best_path(tree)
    return [(node, node.start_step, path[i + 1].start_step if i + 1 < len(path) else last_step(node))
            for i, node in enumerate(path)]


def strategy_document(tree: Tree, config: ExperimentConfig) -> dict[str, Any] | None:
    """The best path as a replayable schedule; None while no phase has a score, or while a
    phase of it is unreadable (its settings unknown, a replay could not follow it)."""
    spans = phase_spans(tree)
    if not spans or any(node.unreadable for node, _, _ in spans):
        return None
    phases: list[dict[str, Any]] = []
    for node, start, end in spans:
        if end <= start:
            continue    # resumed from the phase's own starting point: it adds nothing
        phases.append({
            "node": node.id, "kind": node.kind.value, "start_step": start, "steps": end - start,
            "trained_steps": last_step(node) - start,
            "resume_offset": phases[-1]["steps"] if phases else None,
            "diagnosis": node.diagnosis, "hparams": dict(node.hparams),
        })
    best = spans[-1][0]
    return {"format": FORMAT, "experiment": config.name, "backend": config.backend,
            "best_node": best.id, "best_val": best.results.best_val,
            "best_val_step": best.results.best_val_step, "phases": phases}
