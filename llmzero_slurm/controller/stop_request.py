"""`llmzero-stop` asks a controller on any host to stop through a file in the run directory;
with no controller alive, it cancels the phases itself.

A request names the lease (its token) of the controller it is aimed at: that controller may
die before it reads it (paused, then killed), and a request nobody acted on must not stop the
next controller started on the run. That one clears it instead. The cancels the controller
was refused go back the same way, under its token, for llmzero-stop to name and exit on.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

from ..schedulers.base import Scheduler
from ..search.tree import Node, Status, Tree
from ..errors import LLMZeroError, SchedulerError, StateError
from ..job_names import node_job_name
from ..store.atomic import read_json, set_aside, write_json
from ..store.run_store import RunStore
from .lease import Lease
from .submission import find_job

STOP_FILE = "stop.json"
STOP_REFUSED = "stop-refused.json"   # the last stopped controller's refused cancels


def request_stop(store: RunStore, cancel: bool,
                 event: Callable[[str], object] = print) -> dict[str, Any] | None:
    """Ask the live controller to stop; return its lease record, or None when no controller
    holds the run (then nothing is written). Under the run lock, so no controller can take
    the run between the look at its lease and the request."""
    lease = Lease(store)
    with store.lock.hold():
        holder = lease.read()
        if not holder or not lease.holder_alive(holder):
            return None
        read_stop_request(store, event)     # a damaged one is kept, not overwritten
        write_json(store.root / STOP_FILE, {
            "cancel": cancel, "requested_at": time.time(), "by_host": socket.gethostname(),
            "by_pid": os.getpid(), "token": holder.get("token"), "host": holder.get("host"),
            "pid": holder.get("pid"), "started_at": holder.get("started_at")})
    return holder


def _read(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        raise StateError(path, "not a stop request (expected a JSON object)")
    return data


def read_stop_request(store: RunStore,
                      event: Callable[[str], object] = lambda line: None) -> dict[str, Any] | None:
    """The stop request on file, or None. A damaged one (torn, not UTF-8) names no controller,
    so it stops none: it is set aside as stop.json.damaged-<time>, said through `event`, and
    reads as none. Moved under the run lock and its fence, after a second look: llmzero-stop
    may have written a good one meanwhile."""
    path = store.root / STOP_FILE
    try:
        return _read(path)
    except StateError:
        pass
    with store.lock.hold():
        store.fence()
        try:
            return _read(path)
        except StateError as exc:
            kept = set_aside(path)
            problem = exc.problem
    event(f"{path.name} cannot be read ({problem}); moved to {kept}: a stop request names the "
          f"controller it is for, and this one names none")
    return None


def stop_request_for(store: RunStore, token: str,
                     event: Callable[[str], object]) -> dict[str, Any] | None:
    """The stop request aimed at the controller holding the lease `token`. One aimed at
    another, which must be gone (this one holds the lease), is cleared, saying so."""
    request = read_stop_request(store, event)
    if request is None or request.get("token") == token:
        return request
    if clear_stop_request(store, request.get("token")):
        event("an earlier stop request for a controller that is gone was cleared")
    return None     # a request for this controller, written meanwhile, is read at its next poll


def stop_asked(store: RunStore, token: str, event: Callable[[str], object]) -> str | None:
    """Why an agent's LLM call is no longer wanted (agents/deadline.py): llmzero-stop asked the
    controller holding the lease `token` to stop. None when it did not."""
    if stop_request_for(store, token, event) is None:
        return None
    return "llmzero-stop asked the controller to stop"


def clear_stop_request(store: RunStore, token: str | None) -> bool:
    """Remove the request if it is still the one aimed at the lease `token` (a newer one,
    written meanwhile for a live controller, stays); True when removed. Under the run lock and
    its fence: a controller that lost its run clears nothing."""
    with store.lock.hold():
        store.fence()
        request = read_stop_request(store)
        if request is None or request.get("token") != token:
            return False
        (store.root / STOP_FILE).unlink(missing_ok=True)
    return True


def cancel_phases(store: RunStore, tree: Tree, scheduler: Scheduler,
                  by: str = "llmzero-stop") -> tuple[list[str], list[SchedulerError]]:
    """scancel every queued or running phase's job, and that of a phase whose sbatch answer
    was never recorded (`submitting`: a controller killed in between), found as a restarted
    controller finds it; the job ids cancelled, and the refusals. Every job is tried: one the
    scheduler refuses (another member's, in a run a group shares) keeps no other running.
    A phase whose job had not started ends CANCELLED here, cancelled `by` (see `_unstarted`)."""
    jobs: dict[str, Node] = {}
    cancelled, refused = [], []
    for node in tree:
        if not node.status.in_flight:
            continue
        name = node_job_name(store.config.name, node)
        job = node.submission.job_id
        if node.status is Status.SUBMITTING:
            try:
                job = find_job(scheduler, store.node_dir(node.id), node.submission.token, name)
            except SchedulerError as exc:    # the others are cancelled all the same
                refused.append(SchedulerError(f"node {node.id}: its job could not be looked "
                                              f"up: {exc}"))
                continue
        if job:
            jobs[job] = node
    for job_id, node in jobs.items():
        try:
            scheduler.cancel(job_id, node_job_name(store.config.name, node))
            cancelled.append(job_id)
        except SchedulerError as exc:
            refused.append(exc)
    for job_id in cancelled:      # after every cancel: a record that cannot be written stops none
        node = jobs[job_id]
        if node.status is not Status.RUNNING:
            try:
                _unstarted(store, node.id, job_id, f"cancelled by {by} before it started")
            except LLMZeroError as exc:   # a full disk, the lock's timeout: the stop goes on
                refused.append(SchedulerError(f"node {node.id}: job {job_id} is cancelled, but "
                                              f"its end could not be recorded ({exc})"))
    return cancelled, refused


def _unstarted(store: RunStore, node_id: int, job_id: str, reason: str) -> None:
    """End CANCELLED a phase whose job was cancelled before it started: such a job writes
    neither job.claim nor status.json, and a scheduler without accounting soon forgets it, so
    a later controller would fail it as LOST (a failure that counts against the budget and
    the parent's score). Under the run's lock, and only while the node still waits on this
    job and the job left no sign of a start: one that started says its end in status.json."""
    files = store.node_dir(node_id)
    with store.lock.hold():
        node = store.read_node(node_id)
        if node.status not in (Status.QUEUED, Status.SUBMITTING) \
                or node.submission.job_id not in (None, job_id) \
                or files.claimed_by() is not None or files.status() is not None:
            return

        def ended(n: Node) -> None:
            n.status = Status.CANCELLED
            n.submission.job_id = job_id
            n.submission.scheduler_state = "CANCELLED"
            n.submission.reason = reason
            n.finished_at = time.time()
        store.update_node(node_id, ended)


def stop_phases(store: RunStore, tree: Tree, scheduler: Scheduler, cancel: bool, token: str,
                event: Callable[[str], object], by_request: bool = True) -> None:
    """The controller's side of a stop: cancel its phases when asked (else say they keep
    running, for the next controller to watch) and clear the request it acted on, its own
    lease `token`'s; `by_request`: asked by llmzero-stop, not by a signal."""
    if cancel:
        by = "llmzero-stop" if by_request else "the controller's --cancel-on-stop"
        cancelled, refused = cancel_phases(store, tree, scheduler, by)
        event(f"stopped; cancelled {len(cancelled)} running phase(s)")
        for exc in refused:
            event(f"stop: {exc}")
        if refused:
            try:
                write_json(store.root / STOP_REFUSED,
                           {"token": token, "refused": list(map(str, refused))})
            except StateError as exc:     # a full disk: said here, the request still cleared
                event(f"llmzero-stop cannot be told of these: {exc}")
    else:
        pending = [n for n in tree if n.status in (Status.QUEUED, Status.RUNNING)]
        event(f"stopped; {len(pending)} phase(s) keep running (llmzero-start resumes watching them)")
    clear_stop_request(store, token)


def refused_cancels(store: RunStore, token: str | None) -> list[SchedulerError]:
    """The cancels the controller holding the lease `token` was refused as it stopped (none
    when it stopped without cancelling, or died before it could)."""
    path = store.root / STOP_REFUSED
    try:
        data = read_json(path) if path.exists() else None
    except StateError as exc:
        return [SchedulerError(f"the controller's refused cancels are unknown: {exc}")]
    if not isinstance(data, dict) or data.get("token") != token:
        return []
    return [SchedulerError(str(line)) for line in data.get("refused", [])]
