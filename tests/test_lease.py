"""The controller's lease fences (issue 14.2): it beats while the loop is busy, its age is read
on the file server's clock, and a controller that lost it writes and submits nothing."""
from __future__ import annotations

import errno
import json
import os
import threading
import time
from contextlib import contextmanager

import pytest

from controller_doubles import ScriptedMethod, ScriptedScheduler
from llmzero_slurm.config import parse_config
from llmzero_slurm.controller.controller import Controller
from llmzero_slurm.controller.lease import Lease, LeaseHeld, LeaseLost
from llmzero_slurm.errors import StateError
from llmzero_slurm.methods.base import MethodContext, PhasePlan
from llmzero_slurm.search.policy import Action
from llmzero_slurm.search.tree import Kind, Node
from llmzero_slurm.store.node_dir import NodeDir
from llmzero_slurm.store.run_store import RunStore


def new_run(tmp_path) -> RunStore:
    return RunStore.create(tmp_path / "run", parse_config({
        "name": "lease", "backend": "cpu", "scheduler": "local", "task": {"builtin": "addition"},
        "search": {"budget_iterations": 3}}))


def elsewhere(lease: Lease) -> dict:
    """The lease record as seen from another host (no pid to check: only its age counts)."""
    info = lease.read()
    assert info is not None
    return {**info, "host": "another-login-node"}


def test_the_heartbeat_goes_on_while_the_loop_is_busy(tmp_path):
    """A long LLM call or sbatch retries made a live controller look dead."""
    store = new_run(tmp_path)
    # Seconds, not tenths: on a loaded CI host one fsync'd beat took longer than a 0.6 s expiry.
    holder = Lease(store, expire_s=3.0)
    holder.acquire()
    try:
        time.sleep(6.6)                    # the loop is busy for more than twice the expiry
        observer = Lease(store, expire_s=3.0)
        assert observer.holder_alive(elsewhere(holder))
        assert holder.read()["beat"] >= 10   # one beat every 0.5 s: 13 if none is late
    finally:
        holder.release()
    assert holder.read() is None


def test_age_is_judged_on_the_file_servers_clock_not_the_observers(tmp_path, monkeypatch):
    """130 s of clock skew made a live controller look dead to a second one."""
    store = new_run(tmp_path)
    holder = Lease(store)
    holder.acquire()
    try:
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 130)
        observer = Lease(store)
        assert observer.holder_alive(elsewhere(holder))
    finally:
        monkeypatch.undo()
        holder.release()


def test_a_dead_controllers_pid_given_to_another_program_does_not_hold_the_run(tmp_path):
    """A controller killed (OOM killer, kill -9, a reboot) left its lease naming its pid;
    once the system gave that pid to any other process, every llmzero-start on that host was
    refused as 'already running', however old the lease."""
    import socket
    import subprocess
    store = new_run(tmp_path)
    other = subprocess.Popen(["sleep", "60"])
    try:
        lease = store.root / Lease.FILE
        lease.write_text(json.dumps({"host": socket.gethostname(), "pid": other.pid,
                                     "token": "dead", "heartbeat_at": 0}))
        stale = time.time() - 3600
        os.utime(lease, (stale, stale))
        taker = Lease(store)
        taker.acquire()
        assert taker.read()["token"] == taker.token
        taker.release()
        lease.write_text(json.dumps({"host": socket.gethostname(), "pid": other.pid,
                                     "token": "beating"}))       # fresh: a live holder
        with pytest.raises(LeaseHeld, match="already running"):
            Lease(store).acquire()
    finally:
        other.kill()
        other.wait()


def test_a_requeued_controller_job_takes_over_its_own_earlier_runs_lease_at_once(
        tmp_path, monkeypatch):
    """Review: a controller job SIGKILLed (its node failed, or Slurm's KillWait ran out) left
    a fresh lease; requeued and started on another host within the lease's expiry, the job
    was refused (exit 6) and nothing ever started it again. The lease names the Slurm job and
    its restart count, and a later run of the same job takes it over at once: Slurm never runs
    two at a time. A process of another job, or of the same run of it (a second start inside
    one allocation), is still refused."""
    store = new_run(tmp_path)
    (store.root / Lease.FILE).write_text(json.dumps({      # fresh, from another host
        "host": "compute-1", "pid": 4321, "token": "killed", "heartbeat_at": time.time(),
        "slurm_job_id": "4242", "slurm_restart_count": 0}))
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    with pytest.raises(LeaseHeld, match="already running"):
        Lease(store).acquire()                                # the same run of the job
    monkeypatch.setenv("SLURM_JOB_ID", "4243")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    with pytest.raises(LeaseHeld, match="already running"):
        Lease(store).acquire()                                # another job
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    again = Lease(store)
    again.acquire()
    try:
        info = again.read()
        assert (info["token"], info["slurm_job_id"], info["slurm_restart_count"]) == (
            again.token, "4242", 1)
    finally:
        again.release()
    monkeypatch.delenv("SLURM_JOB_ID")
    outside = Lease(store)
    outside.acquire()            # on a login node: the record names no job of an earlier holder
    try:
        assert outside.read()["slurm_job_id"] is None
    finally:
        outside.release()


def test_a_paused_controller_taken_over_writes_nothing_when_it_resumes(tmp_path):
    store = new_run(tmp_path)
    store.add_node(lambda i: _node(i))
    first = Lease(store)
    first.acquire()
    store.fence = first.verify
    # Paused (SIGSTOP) past its expiry: its beats stop and the file ages, seen from elsewhere.
    first._stop.set()
    first._thread.join()
    (store.root / Lease.FILE).write_text(json.dumps(elsewhere(first)))
    stale = time.time() - 300
    os.utime(store.root / Lease.FILE, (stale, stale))
    second_store = RunStore.open(store.root)
    second = Lease(second_store)
    second.acquire()
    try:
        # The first one resumes: every write and every sbatch is refused, nothing changes.
        with pytest.raises(LeaseLost, match="taken over"):
            store.update_node(0, lambda n: setattr(n, "diagnosis", "stale writer"))
        with pytest.raises(LeaseLost):
            store.add_node(lambda i: _node(i))
        with pytest.raises(LeaseLost):
            first.heartbeat()
        assert store.read_node(0).diagnosis == "" and store.node_ids() == [0]
        assert second.read()["token"] == second.token
        with pytest.raises(LeaseHeld, match="already running"):
            Lease(RunStore.open(store.root)).acquire()
    finally:
        second.release()


def test_a_controller_taken_over_never_rewrites_or_removes_the_new_holders_lease(tmp_path):
    """Audit D1: release() cleared its held flag before stopping the heartbeat, so a beat
    waiting for the lock during the takeover passed its check, wrote the old token back, and
    release() then saw that token and removed the new holder's lease. Here the first
    controller's heartbeat waits at the run lock while the second holds it to take over, and
    gets it only once the first has learnt of the loss and begun to release."""
    store = new_run(tmp_path)
    first = Lease(store, expire_s=3.0)      # beats every 0.5 s
    real_lock, beating = store.lock, threading.Event()

    class Watched:
        """The run lock; a hold from the heartbeat thread says so before it waits."""
        @contextmanager
        def hold(self):
            if threading.current_thread() is not threading.main_thread():
                beating.set()
            with real_lock.hold():
                yield

    store.lock = Watched()
    first.acquire()
    second = RunStore.open(store.root)      # another controller, with its own lock handle
    with second.lock.hold():
        (store.root / Lease.FILE).write_text(json.dumps({**elsewhere(first), "token": "second"}))
        assert beating.wait(60), "the first controller's heartbeat never came to the lock"
        with pytest.raises(LeaseLost, match="taken over"):
            first.verify()                  # the first controller's next write learns it...
        releasing = threading.Thread(target=first.release)
        releasing.start()                   # ...and leaves, while its beat waits for the lock
        assert first._stop.wait(60)
    releasing.join(60)
    assert not releasing.is_alive()
    assert json.loads((store.root / Lease.FILE).read_text())["token"] == "second"
    with pytest.raises(LeaseLost):
        first.heartbeat()


@pytest.mark.fault("the lease taken over while the controller runs")
def test_a_controller_that_loses_its_lease_stops_and_its_successor_finishes(tmp_path,
                                                                            fault_outcome):
    store = new_run(tmp_path)

    def taken_over(files: NodeDir) -> None:
        record = json.loads((store.root / Lease.FILE).read_text())
        (store.root / Lease.FILE).write_text(json.dumps({**record, "token": "someone-else"}))

    sched = ScriptedScheduler([["RUNNING", taken_over, "RUNNING", done, "COMPLETED"],
                               ["RUNNING", done, "COMPLETED"], ["RUNNING", done, "COMPLETED"]])
    ctx = MethodContext(store.config, store.node_dir, store.proposals_dir)
    plan = lambda tree: PhasePlan(Action(Kind.SCRATCH, None), {"lr": 1e-3})  # noqa: E731
    with pytest.raises(LeaseLost):
        Controller(store, sched, ScriptedMethod(ctx, [plan] * 3), poll_s=0.001).run()
    assert list(sched.jobs) == ["100"] and sched.cancelled == []
    # The record it left is the new holder's, untouched by the controller that lost it.
    assert json.loads((store.root / Lease.FILE).read_text())["token"] == "someone-else"
    # The successor (its lease expired here) adopts the running job and finishes the search.
    (store.root / Lease.FILE).unlink()
    successor = RunStore.open(store.root)
    assert Controller(successor, sched, ScriptedMethod(ctx, [plan] * 3), poll_s=0.001).run() == 0
    assert list(sched.jobs) == ["100", "101", "102"]
    fault_outcome(successor, sched.job_dirs())


def test_a_takeover_after_the_last_write_is_found_before_the_controller_leaves(tmp_path):
    """A controller taken over after its last fenced write (here while it rebuilds the report)
    returned 0 and, on its way out, cancelled the monitor job, which is the new holder's."""
    store = new_run(tmp_path)

    def taken_over(run_dir, complete) -> None:
        record = json.loads((store.root / Lease.FILE).read_text())
        (store.root / Lease.FILE).write_text(json.dumps({**record, "token": "someone-else"}))

    class Monitor:
        stopped = False

        def stop(self) -> None:
            self.stopped = True

    ctx = MethodContext(store.config, store.node_dir, store.proposals_dir)
    plan = lambda tree: PhasePlan(Action(Kind.SCRATCH, None), {"lr": 1e-3})  # noqa: E731
    monitor = Monitor()
    ctl = Controller(RunStore.open(store.root), ScriptedScheduler([["RUNNING", done, "COMPLETED"]]),
                     ScriptedMethod(ctx, [plan]), poll_s=0.001, on_finish=taken_over,
                     monitor=monitor)
    with pytest.raises(LeaseLost, match="taken over"):
        ctl.run()
    assert not monitor.stopped
    assert json.loads((store.root / Lease.FILE).read_text())["token"] == "someone-else"


def done(files: NodeDir) -> None:
    """A phase's validation point and checkpoint."""
    files.metrics_file.write_text('{"step": 10, "data": {"val-core/addition/acc/mean@1": 0.4}}\n')
    (files.ckpt / "global_step_10").mkdir(parents=True)


def _node(i: int) -> Node:
    return Node(i, None, Kind.SCRATCH, {"lr": 1e-3})


def test_a_lease_file_that_cannot_be_read_for_a_moment_is_not_a_takeover(tmp_path, monkeypatch):
    """A transient I/O error (EIO from a soft NFS mount) reading the lease was taken as a
    takeover 'by nobody': the controller stopped with exit 6 and, believing the file another's,
    left it behind, so a restart waited out the expiry. Another controller's start read it as
    no lease at all and took over a live one."""
    store = new_run(tmp_path)
    holder = Lease(store)
    holder.acquire()
    lease_file = store.root / Lease.FILE
    real_read_text = type(lease_file).read_text
    failing = {"on": True}

    def read_text(path, *args, **kwargs):
        if failing["on"] and path == lease_file:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
        return real_read_text(path, *args, **kwargs)

    try:
        monkeypatch.setattr(type(lease_file), "read_text", read_text)
        with pytest.raises(StateError, match="cannot read"):
            holder.heartbeat()
        with pytest.raises(StateError, match="cannot read"):
            Lease(RunStore.open(store.root)).acquire()     # no takeover of a live holder
        failing["on"] = False
        holder.heartbeat()                                 # the lease is still this one's
        assert json.loads(lease_file.read_text())["token"] == holder.token
    finally:
        failing["on"] = False
        holder.release()
    assert not lease_file.exists()


def test_a_lease_read_error_of_a_moment_is_read_again_and_status_names_a_lasting_one(
        tmp_path, monkeypatch, capsys):
    """Review: one EIO reading the lease ended a live controller (its loop's heartbeat) and
    llmzero-status; a lasting one must be named, not taken for no controller."""
    from llmzero_slurm.cli import status

    store = new_run(tmp_path)
    holder = Lease(store)
    holder.acquire()
    lease_file = store.root / Lease.FILE
    real_read_text = type(lease_file).read_text
    failures = {"left": 1}

    def read_text(path, *args, **kwargs):
        if path == lease_file and failures["left"]:
            failures["left"] -= 1
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
        return real_read_text(path, *args, **kwargs)

    try:
        monkeypatch.setattr(type(lease_file), "read_text", read_text)
        holder.heartbeat()                       # read again: still this controller's
        failures["left"] = 1_000_000
        assert status.main([str(store.root)]) == 0
        out = capsys.readouterr().out
        assert "controller state unknown" in out
        assert f"note: {lease_file}: cannot read: Input/output error" in out
    finally:
        failures["left"] = 0
        holder.release()

