"""The controller loop: select -> propose -> render -> submit -> watch -> ingest -> back-propagate.

Everything it knows is in the run directory, so it can be killed at any instruction and
restarted: a node's status says how far its phase got. Submission is exactly-once: the token
is recorded (status `submitting`) before sbatch and the job id after; on restart a
`submitting` node is looked up by token before anything is resubmitted.
"""
from __future__ import annotations

import shutil
import signal
import sys
import time
import uuid
from functools import partial
from dataclasses import replace
from pathlib import Path
from typing import Callable, TextIO

from ..backends import get_backend
from ..errors import LLMZeroError, SchedulerError
from ..methods.base import GiveUp, PhasePlan, SearchMethod
from ..backends.spec import PhaseSpec
from ..render import write_phase_script
from ..schedulers.base import JobState, Scheduler, completed_at_limit
from ..search.budget import Budget
from ..search.policy import make_child, reparent_fix
from ..search.tree import Node, Status, Tree
from ..store.node_dir import NodeDir
from ..store.run_store import RunStore
from . import faults
from .ingest import collect_results
from .lease import Lease
from .keeper import MonitorKeeper
from .progress import Progress
from .stop_request import cancel_phases, clear_stop_request, read_stop_request


SUBMIT_BACKOFF_S = 60.0   # wait after a refusal that may pass (submit limit, slurmctld down)


class Controller:
    def __init__(self, store: RunStore, scheduler: Scheduler, method: SearchMethod,
                 poll_s: float = 10.0, out: TextIO = sys.stdout,
                 on_finish: Callable[[Path], object] | None = None,
                 monitor: MonitorKeeper | None = None):
        self.store, self.scheduler, self.method = store, scheduler, method
        self.config = store.config
        self.poll_s = poll_s
        self.progress = Progress(out)
        self.on_finish = on_finish
        self.monitor = monitor
        self.lease = Lease(store)
        self.backend = get_backend(self.config.backend)
        s = self.config.search
        self.budget = Budget(s.budget_iterations, s.budget_samples, s.budget_gpu_hours,
                             s.budget_wall_hours, self.backend.defaults(),
                             started_at=store.created_at)
        self._stop_signal: int | None = None
        self._submit_after = 0.0    # monotonic time before which no sbatch is tried again
        self._quarantine_told: set[int] = set()

    # -- the loop ---------------------------------------------------------------------------

    def run(self, cancel_on_stop: bool = False) -> int:
        """Run the search to its end; return 0 when finished, 130/143 when stopped by a signal."""
        self.lease.acquire()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._loop(cancel_on_stop)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.monitor is not None:
                self.monitor.stop()
            self.lease.release()

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._stop_signal = signum

    def _loop(self, cancel_on_stop: bool) -> int:
        while True:
            self.lease.heartbeat()
            tree = self.reconcile()
            request = read_stop_request(self.store)
            if self._stop_signal is not None or request is not None:
                cancel = cancel_on_stop or bool(request and request.get("cancel"))
                self._stop(tree, cancel)
                return 128 + self._stop_signal if self._stop_signal else 0
            pending = [n for n in tree if n.status.pending]
            spent = self.budget.spent(tree)
            if spent is None and not self.method.exhausted(tree):
                tree = self._start_phases(tree, len(pending))
                pending = [n for n in tree if n.status.pending]
                if not pending:   # nothing running and nothing the method can start
                    self.progress.finished(tree, f"{self.method.name} has nothing left to run")
                    return 0
            elif not pending:
                self.progress.finished(tree, spent or "the search has no branch left to grow")
                return 0
            if self.monitor is not None and self.method.early_stopping:
                try:
                    self.monitor.ensure(any(n.status is Status.RUNNING for n in tree))
                except SchedulerError as exc:
                    self.progress.event(f"monitor job not submitted, tried again at the next "
                                        f"poll: {exc}")
            self.progress.show(tree)
            self._sleep()

    def _sleep(self) -> None:
        end = time.monotonic() + self.poll_s
        while time.monotonic() < end and self._stop_signal is None:
            time.sleep(min(0.2, self.poll_s))

    def _start_phases(self, tree: Tree, running: int) -> Tree:
        """Create and submit phases until `concurrency` are pending or the method must wait."""
        while running < self.config.search.concurrency and self.budget.spent(tree) is None:
            plan = self.method.next_phase(tree)
            if plan is None:
                break
            if isinstance(plan, PhasePlan):
                plan = self._within_budget(tree, plan)
                if plan is None:
                    break
            if isinstance(plan, GiveUp):
                self.store.update_node(plan.node, partial(_give_up, message=plan.message))
                self.progress.event(f"node {plan.node}: debug chain stopped: {plan.message}")
            elif time.monotonic() < self._submit_after:
                break   # the scheduler asked to wait: create nothing it cannot take
            else:
                node = self._create(tree, plan)
                running += self._submit(node)
            tree = self.store.load_tree()
        return tree

    def _within_budget(self, tree: Tree, plan: PhasePlan) -> PhasePlan | None:
        """The plan, its steps cut to what the sample budget has left; None when nothing is."""
        steps = self.budget.fit_steps(tree, plan.hparams)
        if steps == 0:
            return None
        if steps is None or steps == plan.hparams.get("total_training_steps"):
            return plan
        return replace(plan, hparams={**plan.hparams, "total_training_steps": steps},
                       diagnosis=f"{plan.diagnosis} [cut to {steps} steps: what is left of "
                       "the sample budget]".lstrip())

    # -- creating and submitting --------------------------------------------------------------

    def _create(self, tree: Tree, plan: PhasePlan) -> Node:
        node = self.store.add_node(lambda i: make_child(
            tree, plan.action, i, plan.hparams, plan.resume_step, plan.diagnosis, time.time()))
        if plan.records_dir is not None and plan.records_dir.is_dir():
            for entry in plan.records_dir.iterdir():
                shutil.move(str(entry), str(self.store.node_dir(node.id).path / entry.name))
            plan.records_dir.rmdir()
        where = f"from node {node.resume.node} step {node.resume.step}" if node.resume else "from the base model"
        self.progress.event(f"node {node.id}: new {node.kind.value} phase {where}"
                            + (f" -- {node.diagnosis}" if node.diagnosis else ""))
        return node

    def _script(self, node: Node) -> Path:
        resume_dir = self.store.node_dir(node.resume.node).path if node.resume else None
        spec = PhaseSpec.for_node(self.config, node, self.store.node_dir(node.id).path,
                                  node.submission.token or "unsubmitted", resume_dir)
        return write_phase_script(spec)

    def _submit(self, node: Node) -> bool:
        """Record intent, then sbatch, then the job id: a crash between leaves a findable token.

        One node's trouble stays its own: a script that cannot be rendered, or a submission
        the scheduler refuses for good, fails that node with the reason; a refusal that may
        pass later (a submit limit, a controller down) backs off and leaves the node to be
        submitted again. True when the scheduler took it."""
        if time.monotonic() < self._submit_after:
            return False
        token = node.submission.token
        if token is None or node.status is Status.PROPOSED:
            token = f"{self.config.name}-{node.id:04d}-{uuid.uuid4().hex[:10]}"

        def intent(n: Node) -> None:
            n.submission.token = token
            n.submission.attempts += 1
            n.status = Status.SUBMITTING
            n.submitted_at = time.time()    # an unconfirmed sbatch settles from here
        node = self.store.update_node(node.id, intent)
        try:
            script = self._script(node)
        except LLMZeroError as exc:
            self._not_submitted(node.id, f"its phase script could not be rendered: {exc}")
            return False
        faults.point("before_sbatch")
        try:
            job_id = self.scheduler.submit(script, token)
        except SchedulerError as exc:
            if not exc.retryable:
                self._not_submitted(node.id, f"the scheduler refused it: {exc}")
                return False
            self._submit_after = time.monotonic() + max(self.poll_s, SUBMIT_BACKOFF_S)
            self.progress.event(f"node {node.id}: not submitted yet, trying again in "
                                f"{max(self.poll_s, SUBMIT_BACKOFF_S):.0f} s: {exc}")
            return True   # still pending: it holds its concurrency slot
        faults.point("after_sbatch")
        self.store.update_node(node.id, partial(_submitted, job_id=job_id))
        self.progress.event(f"node {node.id}: submitted as job {job_id}")
        return True

    def _not_submitted(self, node_id: int, reason: str) -> None:
        """Fail a node whose phase never reached the scheduler, for a person to look at."""
        def failed(n: Node) -> None:
            n.status = Status.FAILED
            n.terminal = True
            n.submission.reason = reason
            n.finished_at = time.time()
        self.store.update_node(node_id, failed)
        self.progress.event(f"node {node_id}: failed before submission: {reason}")

    # -- watching ---------------------------------------------------------------------------

    def reconcile(self) -> Tree:
        """Bring every pending node up to date with the scheduler; ingest finished phases."""
        tree = self.store.load_tree()
        for node in tree:
            if node.status is Status.PROPOSED:
                self._submit(node)
            elif node.status is Status.SUBMITTING:
                self._confirm(node)
        tree = self.store.load_tree()
        watched = {n.submission.job_id: n for n in tree
                   if n.status in (Status.QUEUED, Status.RUNNING) and n.submission.job_id}
        if watched:
            dirs = {j: self.store.node_dir(n.id).path for j, n in watched.items()}
            try:
                states = self.scheduler.states(list(watched), dirs)
            except SchedulerError as exc:
                self.progress.event(f"could not poll the scheduler, states kept as they were: {exc}")
                states = {}
            for job_id, state in states.items():
                self._observe(watched[job_id], state)
        tree = self.store.load_tree()
        for node_id in set(self.store.corrupt) - self._quarantine_told:
            self.progress.event(f"node {node_id}: left out of the search: "
                                f"{self.store.corrupt[node_id]}")
            self._quarantine_told.add(node_id)
        return tree

    def _confirm(self, node: Node) -> None:
        """A submission whose outcome was not recorded: find its job by token, by the job's
        own claim or status.json; only once the scheduler has had time to register a late
        submission is it presumed lost and sent again."""
        files = self.store.node_dir(node.id)
        try:
            job_id = self.scheduler.find_by_token(node.submission.token or "") \
                or files.claimed_by() or job_in_status_file(files)
        except SchedulerError as exc:
            self.progress.event(f"node {node.id}: cannot look its job up yet: {exc}")
            return
        if job_id is not None:
            self.store.update_node(node.id, partial(_submitted, job_id=job_id))
        elif time.time() - (node.submitted_at or 0.0) >= self.scheduler.settle_s:
            self._submit(node)

    def _observe(self, node: Node, state: JobState) -> None:
        if not state.final:
            if state.status is not node.status:
                self.store.update_node(node.id, lambda n: _advance(n, state))
                self.progress.event(f"node {node.id}: {state.status.value} ({state.raw})")
            return
        self._finish(node, state)

    def _finish(self, node: Node, state: JobState) -> None:
        files = self.store.node_dir(node.id)
        owner = files.claimed_by()
        if owner is not None and owner != state.job_id:
            # A duplicate submission ended at the claim: the first job runs this node.
            self.store.update_node(node.id, partial(_submitted, job_id=owner))
            self.progress.event(f"node {node.id}: job {state.job_id} was a duplicate; "
                                f"watching job {owner}, which claimed the node")
            return
        state = completed_at_limit(state, files.path)
        status = state.status
        if status is Status.CANCELLED and files.stop_decided():
            status = Status.EARLY_STOPPED
        results = collect_results(node, files, self.backend, self.config.slurm.nodes)
        faults.point("while_ingesting")

        def finish(n: Node) -> None:
            n.status = status
            n.results = results
            n.submission.scheduler_state = state.raw
            n.submission.exit_code = state.exit_code
            n.submission.reason = state.reason
            n.finished_at = time.time()
        self.store.update_node(node.id, finish)
        score = f"best val {results.best_val:.3f} at step {results.best_val_step}" \
            if results.best_val is not None else "no validation score"
        self.progress.event(f"node {node.id}: {status.value} ({state.raw}"
                            + (f", exit {state.exit_code}" if state.exit_code else "") + f"), {score}")
        tree = self.store.load_tree()
        plan = reparent_fix(tree, node.id)
        if plan is not None:
            self.store.write_nodes(plan.apply(tree))
            self.progress.event(f"node {node.id}: fixes node {plan.fixed_from}; moved beside it, "
                                f"{len(plan.prune)} debug node(s) pruned")
        if self.on_finish is not None:
            try:
                self.on_finish(self.store.root)
            except LLMZeroError as exc:
                self.progress.event(f"report not updated: {exc}")

    def _stop(self, tree: Tree, cancel: bool) -> None:
        if cancel:
            cancelled = cancel_phases(tree, self.scheduler)
            self.progress.event(f"stopped; cancelled {len(cancelled)} running phase(s)")
        else:
            pending = [n for n in tree if n.status in (Status.QUEUED, Status.RUNNING)]
            self.progress.event(f"stopped; {len(pending)} phase(s) keep running "
                                "(llmzero-start resumes watching them)")
        clear_stop_request(self.store)


def job_in_status_file(files: NodeDir) -> str | None:
    """The job id a phase wrote when it started: proof it was submitted even if the
    scheduler has forgotten its token."""
    status = files.status()
    return status.job_id if status is not None and not status.by_hand else None


def _submitted(n: Node, job_id: str) -> None:
    n.submission.job_id = job_id
    n.status = Status.QUEUED


def _advance(n: Node, state: JobState) -> None:
    n.status = state.status
    n.submission.scheduler_state = state.raw
    if state.status is Status.RUNNING and n.started_at is None:
        n.started_at = time.time()


def _give_up(n: Node, message: str) -> None:
    n.terminal = True
    n.diagnosis = (n.diagnosis + "\n" if n.diagnosis else "") + f"debugging stopped: {message}"

