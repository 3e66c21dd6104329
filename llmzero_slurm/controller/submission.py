"""Exactly-once submission of a node's phase script, and keeping one node's trouble its own.

Intent is recorded before sbatch (status `submitting`, a fresh token) and the job id after, so
a crash between leaves a token to look for. A submission whose answer was lost is looked up by
that token, by the job's own claim (`job.claim`) and by its status.json, and sent again only
once the scheduler has had `settle_s` to register a late one. A script that cannot be rendered
or a refusal no waiting cures fails that node alone; a refusal that may pass (a submit limit,
slurmctld down) backs the submitter off for a while.
"""
from __future__ import annotations

import time
import uuid
from functools import partial
from pathlib import Path
from typing import Callable

from ..backends import get_backend
from ..backends.spec import PhaseSpec
from ..errors import ConfigError, LLMZeroError, SchedulerError, StorageError
from ..job_names import node_job_name
from ..render import write_phase_script
from ..schedulers.base import Scheduler
from ..search.tree import Node, Status
from ..store.node_dir import NodeDir
from ..store.run_store import RunStore
from .. import faults
from .lease import Lease
from .progress import Progress

SUBMIT_BACKOFF_S = 60.0   # wait after a refusal that may pass (submit limit, slurmctld down)


class Submitter:
    def __init__(self, store: RunStore, scheduler: Scheduler, lease: Lease, progress: Progress,
                 poll_s: float, outcome: Callable[[str | None], object]):
        """`outcome(refusal)` after each sbatch: None when a job was taken, else why the
        scheduler refused the phase for good (the admission counts refusals in a row)."""
        self.store, self.scheduler, self.lease, self.progress = store, scheduler, lease, progress
        self.poll_s = poll_s
        self.outcome = outcome
        self._after = 0.0    # monotonic time before which no sbatch is tried again

    @property
    def backing_off(self) -> bool:
        return time.monotonic() < self._after

    def _script(self, node: Node) -> Path:
        resume_dir = self.store.node_dir(node.resume.node).path if node.resume else None
        spec = PhaseSpec.for_node(self.store.config, node, self.store.node_dir(node.id).path,
                                  node.submission.token or "unsubmitted", resume_dir)
        return write_phase_script(spec)

    def _resume_gone(self, node: Node) -> str | None:
        """Why the checkpoint `node` resumes from cannot be had, found here rather than by
        its job after a queue wait and an allocation; None when it is there."""
        if node.resume is None:
            return None
        parent = self.store.node_dir(node.resume.node)
        try:
            if not get_backend(self.store.config.backend).lost_checkpoints(
                    parent, [node.resume.step]):
                return None
        except ConfigError as exc:
            return f"the checkpoints of node {node.resume.node} cannot be listed: {exc}"
        return (f"the checkpoint of node {node.resume.node} at step {node.resume.step} that it "
                f"resumes from is gone from {parent.ckpt.relative_to(self.store.root)}")

    def submit(self, node: Node) -> bool:
        """Record intent, then sbatch, then the job id. True when the node holds a slot (taken
        by the scheduler, or waiting out a back-off); False when it failed or must wait, or
        was pruned (a fix of its chain succeeded first) and is withdrawn unsent."""
        if node.pruned:
            self._withdraw(node.id)
            return False
        if self.backing_off:
            return False
        token = node.submission.token
        if token is None or node.status is Status.PROPOSED:
            token = f"{self.store.config.name}-{node.id:04d}-{uuid.uuid4().hex[:10]}"

        def intent(n: Node) -> None:
            n.submission.token = token
            n.submission.attempts += 1
            n.status = Status.SUBMITTING
            n.submitted_at = time.time()    # an unconfirmed sbatch settles from here
        node = self.store.update_node(node.id, intent)
        if (gone := self._resume_gone(node)) is not None:
            self.fail(node.id, gone)
            return False
        try:
            script = self._script(node)
        except StorageError:
            raise       # the run's disk, not the node: nothing to hold against the node
        except LLMZeroError as exc:
            self.fail(node.id, f"its phase script could not be rendered: {exc}")
            return False
        faults.point("before_sbatch")
        self.lease.verify()     # a controller that lost its run submits nothing
        try:
            job_id = self.scheduler.submit(script, token)
        except SchedulerError as exc:
            if not exc.retryable:
                self.fail(node.id, f"the scheduler refused it: {exc}")
                self.outcome(str(exc))
                return False
            wait = max(self.poll_s, SUBMIT_BACKOFF_S)
            self._after = time.monotonic() + wait
            self.progress.event(f"node {node.id}: not submitted yet, trying again in "
                                f"{wait:.0f} s: {exc}")
            return True
        faults.point("after_sbatch")
        self._taken(node.id, job_id)
        return True

    def _taken(self, node_id: int, job_id: str, how: str = "") -> None:
        """The scheduler holds the node's job: an sbatch answered, or a lost answer's job was
        found; either is a job taken, which ends a run of refusals (the admission's count)."""
        self.outcome(None)
        self.store.update_node(node_id, partial(submitted, job_id=job_id))
        self.progress.event(f"node {node_id}: submitted as job {job_id}{how}")

    def confirm(self, node: Node) -> None:
        """A `submitting` node: adopt the job found for it, or send it again once settled."""
        try:
            job_id = find_job(self.scheduler, self.store.node_dir(node.id), node.submission.token,
                              node_job_name(self.store.config.name, node))
        except SchedulerError as exc:
            self.progress.event(f"node {node.id}: cannot look its job up yet: {exc}")
            return
        if job_id is not None:
            self._taken(node.id, job_id, " (found after its sbatch answer was lost)")
        elif time.time() - (node.submitted_at or 0.0) >= self.scheduler.settle_s:
            self.submit(node)

    def _withdraw(self, node_id: int) -> None:
        """A pruned node that never reached the scheduler ends cancelled, as the search's
        cancel of a pruned job does."""
        self._end_unsent(node_id, Status.CANCELLED, "pruned before it was submitted",
                         "pruned before it was submitted; not sent")

    def fail(self, node_id: int, reason: str) -> None:
        """Fail a node whose phase never reached the scheduler, for a person to look at."""
        self._end_unsent(node_id, Status.FAILED, reason, f"failed before submission: {reason}")

    def _end_unsent(self, node_id: int, status: Status, reason: str, said: str) -> None:
        def ended(n: Node) -> None:
            n.status = status
            n.terminal = n.terminal or status is Status.FAILED
            n.submission.reason = reason
            n.finished_at = time.time()
        self.store.update_node(node_id, ended)
        self.progress.event(f"node {node_id}: {said}")


def find_job(scheduler: Scheduler, files: NodeDir, token: str | None, name: str) -> str | None:
    """The job of a `submitting` node, whose sbatch answer was never recorded: found by its
    token and job name, by the job's claim or by its status.json (None: not found, maybe not
    registered yet). SchedulerError when the scheduler cannot be asked."""
    return (scheduler.find_by_token(token or "", name) or files.claimed_by()
            or job_in_status_file(files))


def job_in_status_file(files: NodeDir) -> str | None:
    """The job id a phase wrote when it started: proof it was submitted even if the
    scheduler has forgotten its token."""
    status = files.status()
    return status.job_id if status is not None and not status.by_hand else None


def submitted(n: Node, job_id: str) -> None:
    n.submission.job_id = job_id
    n.status = Status.QUEUED
