"""search.keep_checkpoints: which of a finished phase's checkpoints the search can still use.

A child resumes from a parent's checkpoint its proposer picked: the offline heuristics pick
the last one, or the latest at or before the best validation step (a collapse); a debug fix
goes on from its failed phase's own last one, or starts where that phase started; a chain
goes on from the last. Any other checkpoint of a finished phase is never a resume point, and
on a GPU cluster each one is a full verl checkpoint folder. Pure: the controller removes.
"""
from __future__ import annotations

from .tree import Node, Tree

KEEP_ALL = "all"          # every checkpoint a phase saved (the default, as before the setting)
KEEP_USEFUL = "useful"    # a finished phase's last, the one before its best step, resume points
KEEP_CHOICES = (KEEP_ALL, KEEP_USEFUL)

WHY = (f"search.keep_checkpoints is {KEEP_USEFUL}: a finished phase keeps its last checkpoint, "
       "the latest at or before its best validation step, and each one a phase resumes from")


def useful(node: Node, resumed: set[int]) -> set[int]:
    """The node's checkpoints the search may still resume from; `resumed`: the steps of this
    node that recorded phases start from (a debug fix reuses its failed phase's start)."""
    steps = node.results.checkpoints
    if not steps:
        return set()
    keep = {max(steps)} | (resumed & set(steps))
    best = node.results.best_val_step
    before = [s for s in steps if best is not None and s <= best]
    return keep | ({max(before)} if before else set())


def removable(tree: Tree) -> dict[int, list[int]]:
    """For each finished phase with checkpoints beyond its useful ones, their steps. A phase
    still pending (queued, running, requeued) keeps every checkpoint."""
    resumed: dict[int, set[int]] = {}
    for node in tree:
        if node.resume is not None:
            resumed.setdefault(node.resume.node, set()).add(node.resume.step)
    found = {}
    for node in tree:
        if node.status.finished:
            keep = useful(node, resumed.get(node.id, set()))
            if extra := sorted(set(node.results.checkpoints) - keep):
                found[node.id] = extra
    return found
