"""The controller loop: select -> propose -> render -> submit -> watch -> ingest -> back-propagate.

Everything it knows is in the run directory, so it can be killed at any instruction and
restarted: a node's status says how far its phase got. Submission is exactly-once
(submission.py); the lease (lease.py) makes sure only one controller writes.
"""
from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path
from typing import Callable, TextIO

from ..backends import get_backend
from ..errors import LLMZeroError, SchedulerError, StorageError, full_storage, storage_remedy
from ..methods.base import PhasePlan, SearchMethod, Verdict
from ..paths import InstallWatch
from ..schedulers.base import JobState, Scheduler
from ..search.policy import make_child
from ..search.tree import Node, Status, Tree
from ..spent import run_budget, spent
from ..store import inputs
from ..store.run_store import RunStore
from .. import faults
from .ingest import (collect_results, completed_at_limit, device_hours, ended_line, record_end,
                     rescore)
from .admission import Admission
from .debug_fixes import DebugFixes
from .lease import Lease, LeaseLost
from .outcome import outcome
from .retention import Retention
from .keeper import MonitorKeeper
from .progress import Progress, waiting_phases, warnings_shown
from .signals import StopSignals
from .stop_request import stop_asked, stop_phases, stop_request_for
from .submission import Submitter, submitted
from .watched import poll_phases, watched_phases

CHARGE_STEP_H = 0.01    # a running phase's record is rewritten as its device-hours grow by this


class Controller:
    def __init__(self, store: RunStore, scheduler: Scheduler, method: SearchMethod,
                 poll_s: float = 10.0, out: TextIO = sys.stdout,
                 on_finish: Callable[[Path, bool], object] | None = None,
                 monitor: MonitorKeeper | None = None,
                 on_poll: Callable[[Tree], object] | None = None):
        """`on_finish(run_dir, complete)` after a poll in which phases ended (the report; the
        search waits on it, so not complete) and at the end (`refresh_report`); `on_poll(tree)`
        after each poll (curves for TensorBoard). Neither may stop the search: their errors are
        shown."""
        self.store, self.scheduler, self.method = store, scheduler, method
        self.config = store.config
        self.poll_s = poll_s
        self.progress = Progress(out)
        self.on_finish, self.on_poll = on_finish, on_poll
        self.monitor = monitor
        self.lease = Lease(store)
        self.admission = Admission(run_budget(store), self.progress)
        self.submitter = Submitter(store, scheduler, self.lease, self.progress, poll_s,
                                   self.admission.submitted)
        self.backend = get_backend(self.config.backend)
        self.signals = StopSignals()
        scheduler.give_up_when(self.signals.came)
        self.fixes = DebugFixes(store, scheduler, self.progress.event)
        self.retention = Retention(store, self.backend, self.progress.event)
        self._quarantine_told: set[int] = set()
        self._states: dict[int, JobState] = {}   # each watched node's last state, by node id
        self._install = InstallWatch()

    # -- the loop ---------------------------------------------------------------------------

    def run(self, cancel_on_stop: bool = False) -> int:
        """Run the search to its end; return 0 when finished, 7 when it ended without a
        completed phase (outcome.py), 128 + the signal when stopped by one; LeaseLost if taken over."""
        with warnings_shown(self.progress):
            return self._run(cancel_on_stop)

    def _run(self, cancel_on_stop: bool) -> int:
        self.lease.acquire()
        self.store.fence = self.lease.verify
        self.signals.install()
        lost = False
        try:
            rescore(self.store, self.progress.event)   # once: what an earlier release missed
            code = self._loop(cancel_on_stop)
            self.lease.heartbeat()   # taken over since its last write? then its monitor is not ours
            return code
        except LeaseLost:
            lost = True      # the run is another controller's now, its monitor included
            raise
        except (StorageError, OSError) as exc:
            full = exc if isinstance(exc, StorageError) else full_storage(exc)
            if full is None:
                raise
            self.progress.event(f"the run's state could not be written: {full}. Phases already "
                                f"submitted keep running; {storage_remedy(full)}, then resume "
                                f"with llmzero-start {self.store.root}")
            if full is exc:
                raise
            raise full from exc
        finally:
            try:
                if self.monitor is not None and not lost:
                    try:
                        self.monitor.stop()
                    except LLMZeroError as exc:
                        self.progress.event(f"monitor job not cancelled: {exc}")
            finally:     # the lease is given back, a second Ctrl-C in the cancel or not
                self.signals.restore()
                self.lease.release()
                self.store.fence = lambda: None

    def _loop(self, cancel_on_stop: bool) -> int:
        while True:
            self.lease.heartbeat()
            if self._install.changed():
                root = self.store.root
                self.progress.event("llmzero-slurm's files changed under this controller (an upgrade?)"
                                    "; restart it so that one release runs the search (code, "
                                    f"templates, jobs): llmzero-stop {root}, then llmzero-start {root}")
            tree = self.reconcile()
            request = stop_request_for(self.store, self.lease.token, self.progress.event)
            stop_signal = self.signals.received
            if stop_signal is not None or request is not None:
                cancel = bool(request.get("cancel")) if request is not None else cancel_on_stop  # its --cancel
                stop_phases(self.store, tree, self.scheduler, cancel, self.lease.token,
                            self.progress.event, by_request=request is not None)
                return 128 + stop_signal if stop_signal else 0
            pending = [n for n in tree if n.status.pending]
            spent = self.admission.closed(tree)
            if spent is None and not self.method.exhausted(tree):
                tree = self._start_phases(tree, len(pending))
                pending = [n for n in tree if n.status.pending]
                if self._stopping():
                    continue      # asked to stop while the agents answered: acted on above
                if not pending:   # nothing running and nothing the method can start
                    return self._finished(tree, self.admission.closed(tree) or self.method.ended(tree))
            elif not pending:
                return self._finished(tree, spent or self.method.ended(tree))
            if self.monitor is not None and self.method.early_stopping:
                try:
                    if news := self.monitor.ensure(any(n.status is Status.RUNNING for n in tree)):
                        self.progress.event(news)
                except SchedulerError as exc:
                    self.progress.event(str(exc))   # the keeper's line: not checked, or not submitted
            self.progress.show(tree, partial(waiting_phases, self.store, tree, self._states))
            self._export_curves(tree)
            self.signals.sleep(self.poll_s)

    def _export_curves(self, tree: Tree) -> None:
        """After each poll, and at the end: the poll that ingests the last phase ends there."""
        if self.on_poll is not None:
            try:
                self.on_poll(tree)
            except (LLMZeroError, OSError) as exc:
                self.progress.event(f"curves not exported: {exc}")

    def _finished(self, tree: Tree, reason: str) -> int:
        self._export_curves(tree)
        halted = self.admission.halted(tree)
        code, said = outcome(tree, self.store)
        self.progress.finished(tree, reason, [*spent(self.store, tree, self.admission.budget).lines(),
                                              *said], "stopped" if halted else "finished")
        return halted or code

    def _stopping(self) -> bool:
        """A stop signal or request came (an agent may have waited minutes on its LLM)."""
        return self.signals.came() or stop_request_for(
            self.store, self.lease.token, self.progress.event) is not None

    def _start_phases(self, tree: Tree, running: int) -> Tree:
        """Create and submit phases until `concurrency` are pending or the method must wait."""
        while (running < self.config.search.concurrency and not self.submitter.backing_off
               and self.admission.closed(tree) is None):
            plan = self.signals.unless_stopped(partial(self.method.next_phase, tree), partial(
                stop_asked, self.store, self.lease.token, self.progress.event))
            if plan is None or self._stopping():   # a stop asked for while agents answered
                break
            if isinstance(plan, PhasePlan):
                plan = self.admission.admit(tree, plan)
                if plan is None:
                    break
            if isinstance(plan, Verdict):
                self.store.file_records(plan.records_dir, plan.folder(self.store.node_dir(plan.node)))
                self.store.update_node(plan.node, plan.apply)
                self.progress.event(f"node {plan.node}: {plan.said}: {plan.message}")
            else:
                inputs.refuse_while_running(self.store.root)
                node = self._create(tree, plan)
                running += self.submitter.submit(node)
            tree = self.store.load_tree()
        return tree

    # -- creating and submitting --------------------------------------------------------------

    def _create(self, tree: Tree, plan: PhasePlan) -> Node:
        node = self.store.add_node(lambda i: make_child(
            tree, plan.action, i, plan.hparams, plan.resume_step, plan.diagnosis, time.time()))
        self.store.file_records(plan.records_dir, self.store.node_dir(node.id).path)
        where = f"from node {node.resume.node} step {node.resume.step}" if node.resume else "from the base model"
        self.progress.event(f"node {node.id}: new {node.kind.value} phase {where}"
                            + (f" -- {node.diagnosis}" if node.diagnosis else ""))
        return node

    # -- watching ---------------------------------------------------------------------------

    def reconcile(self) -> Tree:
        """Bring every pending node up to date with the scheduler; ingest finished phases."""
        tree, read_at = self.store.load_tree(), self.store.writes
        for node in tree:
            if self.signals.came():   # stopping: nothing is sent, nor asked of a Slurm maybe down
                return self.store.load_tree()
            if node.status is Status.PROPOSED:
                self.submitter.submit(node)
            elif node.status is Status.SUBMITTING:
                self.submitter.confirm(node)
        tree, read_at = self.store.tree_since(tree, read_at), self.store.writes   # read once a poll
        watched = watched_phases(tree)
        ended: list[bool] = []
        if watched:
            try:
                states = poll_phases(self.scheduler, self.store, watched)
            except SchedulerError as exc:
                self.progress.event(f"could not poll the scheduler, states kept as they were: {exc}")
                states = {}
            ended = [self._observe(watched[job_id], state) for job_id, state in states.items()]
            self._states = {watched[job_id].id: state for job_id, state in states.items()}
        tree = self.retention.apply(self.fixes.settle(self.store.tree_since(tree, read_at)))
        if any(ended):   # once per poll, after the reparent: the report sees the tree as it stands
            self.refresh_report()
        for node_id in sorted(set(self.store.corrupt) - self._quarantine_told):
            held = ("; until then no phase is created: what it used of the budget is unknown"
                    if node_id in self.admission.budget.uncounted(tree) else "")
            self.progress.event(f"node {node_id}: left out of the search (llmzero-repair "
                                f"{self.store.root} {node_id} rebuilds it{held}): "
                                f"{self.store.corrupt[node_id]}")
            self._quarantine_told.add(node_id)
        return tree

    def refresh_report(self, complete: bool = False) -> object | None:
        """Call `on_finish` and return what it returned (the report's path); `complete` once
        the search is over and nothing waits on it. The report is not
        state: whatever it fails on (a damaged metrics file, an unreadable figure) is shown and
        the search goes on, so any error is caught here, not only the project's own."""
        if self.on_finish is None:
            return None
        try:
            return self.on_finish(self.store.root, complete)
        except Exception as exc:  # see the docstring
            self.progress.event(f"report not updated: {type(exc).__name__}: {exc}")
            return None

    def _observe(self, node: Node, state: JobState) -> bool:
        """Record a job's new state; True when its phase has ended."""
        if not state.final:
            if state.status is not node.status:
                self.store.update_node(node.id, lambda n: _advance(n, state))
                self.progress.event(f"node {node.id}: {state.status.value} ({state.raw})")
            if state.status is Status.RUNNING:
                self._charge(node)
            return False
        return self._finish(node, state)

    def _charge(self, node: Node) -> None:
        """A running phase's device-hours so far go into its record, so the device-hour budget
        (with phases running side by side), status and the report count them as they grow."""
        hours = device_hours(self.store.node_dir(node.id), self.config.slurm.nodes)
        if hours - node.results.gpu_hours >= CHARGE_STEP_H:
            self.store.update_node(node.id, lambda n: setattr(n.results, "gpu_hours", hours))

    def _finish(self, node: Node, state: JobState) -> bool:
        files = self.store.node_dir(node.id)
        owner = files.claimed_by()
        if owner is not None and owner != state.job_id:
            # A duplicate submission ended at the claim: the first job runs this node.
            self.store.update_node(node.id, partial(submitted, job_id=owner))
            self.progress.event(f"node {node.id}: job {state.job_id} was a duplicate; "
                                f"watching job {owner}, which claimed the node")
            return False
        results = collect_results(node, files, self.backend, self.config.slurm.nodes)
        state = completed_at_limit(state, node, files, results, self.backend)
        status = files.ended_as(state.status)
        faults.point("while_ingesting")
        self.store.update_node(node.id, partial(record_end, status=status, state=state,
                                                results=results, files=files))
        self.progress.event(ended_line(node, status, state, results, files))
        return True


def _advance(n: Node, state: JobState) -> None:
    n.status = state.status
    n.submission.scheduler_state = state.raw
    if state.status is Status.RUNNING and n.started_at is None:
        n.started_at = time.time()
