"""The phases whose jobs the run waits on, and what the scheduler says of them.

The controller's poll and `llmzero-status` ask the same question; both hand the scheduler each
job's node folder (its status.json stands in for a job the scheduler forgot) and the name it
was submitted under (a job that has since taken a recorded id is not the phase's).
"""
from __future__ import annotations

from ..job_names import node_job_name
from ..schedulers.base import JobState, Scheduler
from ..search.tree import Node, Status, Tree
from ..store.run_store import RunStore


def watched_phases(tree: Tree) -> dict[str, Node]:
    """job id -> node, for every phase queued or running under a recorded job id."""
    return {n.submission.job_id: n for n in tree
            if n.status in (Status.QUEUED, Status.RUNNING) and n.submission.job_id}


def poll_phases(scheduler: Scheduler, store: RunStore,
                watched: dict[str, Node]) -> dict[str, JobState]:
    """One scheduler call for all of them; raises the scheduler's own errors."""
    dirs = {j: store.node_dir(n.id).path for j, n in watched.items()}
    names = {j: node_job_name(store.config.name, n) for j, n in watched.items()}
    return scheduler.states(list(watched), dirs, names)
