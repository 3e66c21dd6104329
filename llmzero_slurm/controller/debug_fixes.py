"""A debug fix that succeeded takes the place of the failure it fixes, and the attempts it
makes redundant leave the search, their jobs with them.

Both steps run on every poll, not only when the fix finishes: a controller killed between
recording the fix's end and moving it, or between pruning a phase and cancelling its job,
finishes the step when it comes back.
"""
from __future__ import annotations

from typing import Callable

from ..errors import SchedulerError
from ..job_names import node_job_name
from ..schedulers.base import Scheduler
from ..search.policy import reparent_fix
from ..search.tree import Tree
from ..stop_reason import PRUNED
from ..store.run_store import RunStore
from .watched import watched_phases


class DebugFixes:
    def __init__(self, store: RunStore, scheduler: Scheduler, event: Callable[[str], object]):
        self.store, self.scheduler, self.event = store, scheduler, event
        self._cancelled: set[int] = set()   # once per controller: scancel is not asked twice

    def settle(self, tree: Tree) -> Tree:
        """Move every successful fix, cancel every pruned phase still queued or running (with
        more than one phase at a time, the failure's other fix may still run); the tree after.
        `tree`: the run's tree as it stands."""
        for node in list(tree):
            plan = reparent_fix(tree, node.id)
            if plan is not None:
                self.store.write_nodes(plan.apply(tree))
                self.event(f"node {node.id}: fixes node {plan.fixed_from}; moved beside it, "
                           f"{len(plan.prune)} debug node(s) pruned")
                tree = self.store.load_tree()
        for job_id, node in watched_phases(tree).items():
            if not node.pruned or node.id in self._cancelled:
                continue
            try:
                self.scheduler.cancel(job_id, node_job_name(self.store.config.name, node),
                                      f"llmzero: {PRUNED}")
            except SchedulerError as exc:   # tried again at the next poll
                self.event(f"node {node.id}: pruned while {node.status.value}, but job "
                           f"{job_id} was not cancelled: {exc}")
                continue
            self._cancelled.add(node.id)
            self.event(f"node {node.id}: pruned while {node.status.value}; job {job_id} cancelled")
        return tree
