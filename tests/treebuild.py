"""Compact tree construction for search tests: N(id, parent, status, score, kind=...)."""
from __future__ import annotations

from llmzero_slurm.search.tree import Kind, Node, Results, Resume, Status, Tree

S = Status


def N(node_id: int, parent: int | None, status: Status = S.COMPLETED, score: float | None = None,
      kind: Kind | None = None, **extra) -> Node:
    if kind is None:
        kind = Kind.SCRATCH if parent is None else Kind.EVOLVE
    resume = Resume(parent, 10) if kind is Kind.EVOLVE else extra.pop("resume", None)
    results = Results(best_val=score, checkpoints=[10, 20])
    return Node(id=node_id, parent=parent, kind=kind, hparams={}, resume=resume, status=status,
                results=results, **extra)


def T(*nodes: Node) -> Tree:
    return Tree(nodes)
