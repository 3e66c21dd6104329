"""Issue 14's Slurm faults against the real local cluster: the real controller, store and
SlurmScheduler drive few-second phases while shims (tests/slurm_shims.py) first on PATH make
sbatch, squeue and sacct misbehave as a sick cluster does. Each scenario counts the Slurm jobs
of every node from Slurm's own listings: one per node, none lost, none left pending.

Only waits that are minutes on a site are shortened (the controller's poll, the scheduler's
retries, settle and lost times, the submit back-off); the phases run the tiny trainer of
conftest.py, put in the registry in place of the cpu backend.
"""
from __future__ import annotations

import io
import json
import multiprocessing
import os
import re
import signal
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from controller_doubles import ScriptedMethod
from llmzero_slurm.backends.registry import BACKENDS
from llmzero_slurm.config import parse_config
from llmzero_slurm.controller.controller import Controller
from llmzero_slurm.methods.base import MethodContext, PhasePlan
from llmzero_slurm.schedulers.slurm import SlurmScheduler
from llmzero_slurm.search.policy import Action
from llmzero_slurm.search.tree import Kind, Status, Tree
from llmzero_slurm.store.run_store import RunStore
from slurm_shims import Shims

from conftest import finish, wait_for

pytestmark = pytest.mark.slurm

POLL_S = 1.0
TIMED_OUT = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
LIMIT = "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy " \
        "(job submit limit, user's size and/or time limits) QOSMaxSubmitJobPerUserLimit"


@pytest.fixture
def shims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm_env: str) -> Iterator[Shims]:
    """The shims first on PATH (the jobs inherit it: their own client calls go through them
    unfaulted); afterwards every job of the test still live is cancelled."""
    folder = Shims(tmp_path / "shims")
    monkeypatch.setenv("PATH", f"{folder.dir}:{os.environ['PATH']}")
    yield folder
    listed = folder.real("squeue", "--noheader", "--format=%i|%o")
    live = [i for i, _, script in (row.partition("|") for row in listed.splitlines())
            if script.startswith(str(tmp_path))]
    if live:
        folder.real("scancel", *live)


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch, tiny_program: str) -> str:
    """Phases run the tiny trainer: the registry's cpu entry names conftest's TinyBackend, so
    the controller, its renderer and the config check all take it (nothing else changes)."""
    monkeypatch.setitem(BACKENDS, "cpu", "conftest:TinyBackend")
    monkeypatch.setattr("llmzero_slurm.controller.submission.SUBMIT_BACKOFF_S", 1.0)
    monkeypatch.setattr(SlurmScheduler, "settle_s", 1.0)   # as on a site: settle = back-off
    return tiny_program


def new_run(tmp_path: Path, program: str, phases: int = 1, **search: Any) -> RunStore:
    """A run with a name of its own: its jobs are told apart from other tests' by it."""
    return RunStore.create(tmp_path / "run", parse_config({
        "name": f"flt{uuid.uuid4().hex[:8]}", "backend": "cpu", "scheduler": "slurm",
        "task": {"builtin": "addition"},
        "trainer": {"program": program, "step_s": 1.0},
        "slurm": {"cpus_per_task": 1, "time": "10"},
        "search": {"budget_iterations": phases, **search}}))


def scratch(steps: int) -> Callable[[Tree], PhasePlan]:
    """A phase from the base model that lasts `steps` seconds."""
    hparams = {"total_training_steps": steps, "save_freq": 1}
    return lambda tree: PhasePlan(Action(Kind.SCRATCH, None), hparams, diagnosis="root")


def scheduler(retry_wait_s: float = 0.2, lost_after_s: float = 900.0) -> SlurmScheduler:
    """The real scheduler, polling at every controller poll, with one retry per client call
    (a fifth of a second later unless a scenario needs the default wait)."""
    return SlurmScheduler(retries=1, retry_wait_s=retry_wait_s, min_poll_s=0.0,
                          max_poll_s=POLL_S, lost_after_s=lost_after_s)


def controller(store: RunStore, sched: SlurmScheduler, steps: int = 3
               ) -> tuple[Controller, io.StringIO]:
    """The real controller on `store`; its method offers one phase of `steps` steps per node
    the run's budget allows."""
    ctx = MethodContext(store.config, store.node_dir, store.proposals_dir)
    plans = [scratch(steps)] * store.config.search.budget_iterations
    out = io.StringIO()
    return Controller(store, sched, ScriptedMethod(ctx, plans), poll_s=POLL_S, out=out), out


def run(ctl: Controller, limit_s: int = 90) -> int:
    """The controller's exit code; a controller still looping after `limit_s` fails the test."""
    def hung(signum: int, frame: object) -> None:
        raise TimeoutError(f"the controller was still running after {limit_s} s")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(limit_s)
    try:
        return ctl.run()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def slurm_jobs(shims: Shims, store: RunStore) -> dict[str, int]:
    """Every phase job of the run Slurm knows (squeue for live and recent jobs, the completion
    log for older ones): job id -> node id, read from the job name."""
    name = re.compile(rf"^llmz-{store.config.name}-(\d{{4}})-")
    rows = shims.real("squeue", "--noheader", "--states=all", "--format=%i|%j").splitlines()
    rows += shims.real("sacct", "-c", "--noheader", "--parsable2",
                       "--format=JobID,JobName").splitlines()
    jobs = {}
    for job_id, _, job_name in (row.partition("|") for row in rows):
        if match := name.match(job_name):
            jobs[job_id] = int(match[1])
    return jobs


def job_dirs(shims: Shims, store: RunStore) -> list[Path]:
    """One node directory per Slurm job, for fault_outcome."""
    return [store.node_dir(node).path for node in slurm_jobs(shims, store).values()]


# -- an sbatch whose answer was lost --------------------------------------------------------

@pytest.mark.fault("sbatch times out, the job registers before the client's retry")
def test_a_submission_that_timed_out_but_registered_is_found_by_its_token(
        tmp_path, shims, tiny, fault_outcome):
    shims.late("sbatch", (1, 1), 0.5, TIMED_OUT)
    store = new_run(tmp_path, tiny)
    ctl, _ = controller(store, scheduler(retry_wait_s=2.0))     # SlurmScheduler's default
    assert run(ctl) == 0
    [node] = store.load_tree()
    assert [c.action for c in shims.calls("sbatch")] == ["late", "late-answer"]   # sent once
    [late] = [c.argv.split(";")[0] for c in shims.calls("sbatch") if c.action == "late-answer"]
    assert "--name=llmz-" in shims.calls("squeue")[0].argv   # looked up by its token first
    assert (node.status, node.submission.job_id, node.submission.attempts) == \
        (Status.COMPLETED, late, 1)
    assert list(slurm_jobs(shims, store)) == [late]
    fault_outcome(store, job_dirs(shims, store))


def registers_late(tmp_path: Path, shims: Shims, program: str, settle_s: float) -> RunStore:
    """sbatch times out; slurmctld registers the job 5 s later, after the scheduler's first
    retry time (2 s) has passed. Returns once every Slurm job of the node has ended."""
    shims.late("sbatch", (1, 1), 5.0, TIMED_OUT)
    store = new_run(tmp_path, program)
    sched = scheduler(retry_wait_s=2.0)
    sched.settle_s = settle_s
    ctl, _ = controller(store, sched)
    assert run(ctl) == 0
    wait_for(lambda: any(c.action == "late-answer" for c in shims.calls("sbatch")), 30,
             "the late job to register")
    watcher = SlurmScheduler(min_poll_s=0)
    for job in slurm_jobs(shims, store):
        finish(watcher, job)
    return store


def test_a_second_job_for_a_node_exits_at_the_claim_untouched(tmp_path, shims, tiny):
    """A job registered later than settle_s (here 1 s) is sent again by design; the claim
    keeps the second job out of the node's folder."""
    store = registers_late(tmp_path, shims, tiny, settle_s=1.0)
    [node] = store.load_tree()
    files = store.node_dir(0)
    assert node.status is Status.COMPLETED and files.claimed_by() == node.submission.job_id
    for job in set(slurm_jobs(shims, store)) - {node.submission.job_id}:
        assert f"already runs this node; job {job} exits untouched" in \
            (files.path / f"slurm-{job}.out").read_text()
    steps = [json.loads(line)["step"] for line in files.metrics_file.read_text().splitlines()]
    assert steps == [1, 2, 3]


@pytest.mark.fault("sbatch times out, the job registers after the client's retry time")
def test_a_submission_registered_after_the_retry_wait_is_not_sent_again(
        tmp_path, shims, tiny, fault_outcome):
    """Issue 14.3: after a socket timeout the scheduler ran sbatch again once its retry wait
    (2 s) found no job with the token: a job slurmctld registered later was a second job for
    the node. Now sbatch is not run again before settle_s, and the late job is adopted."""
    store = registers_late(tmp_path, shims, tiny, settle_s=10.0)
    [node] = store.load_tree()
    assert [c.action for c in shims.calls("sbatch")] == ["late", "late-answer"]   # sent once
    assert node.status is Status.COMPLETED and len(slurm_jobs(shims, store)) == 1
    fault_outcome(store, job_dirs(shims, store))


@pytest.mark.fault("controller kill -9 during a slow sbatch; the job registers after the kill")
def test_a_controller_killed_during_a_slow_sbatch_adopts_that_job_on_restart(
        tmp_path, shims, tiny, fault_outcome, monkeypatch):
    """Issue 14.3: killed while sbatch waits on a busy slurmctld, the controller leaves an
    sbatch behind that registers the job seconds later. A restart straight away finds no job
    with the token yet; it must wait for it (up to settle_s), not submit the node again."""
    shims.slow("sbatch", (1, 1), 4.0)
    monkeypatch.setattr(SlurmScheduler, "settle_s", 30.0)   # tiny's 1 s would resend by design
    store = new_run(tmp_path, tiny)

    def first_controller() -> None:     # a store of its own: locks are not shared over fork
        run(controller(RunStore.open(store.root), scheduler())[0])
    killed = multiprocessing.get_context("fork").Process(target=first_controller)
    killed.start()
    wait_for(lambda: shims.calls("sbatch"), 30, "the first controller's sbatch")
    os.kill(killed.pid, signal.SIGKILL)     # its sbatch lives on, as a killed shell's child does
    killed.join()
    assert not slurm_jobs(shims, store)     # restarted before slurmctld has the job
    ctl, _ = controller(RunStore.open(store.root), scheduler())
    assert run(ctl) == 0
    [node] = store.load_tree()
    assert [c.action for c in shims.calls("sbatch")] == ["slow"]            # sent once
    assert node.status is Status.COMPLETED and node.submission.attempts == 1
    assert list(slurm_jobs(shims, store)) == [node.submission.job_id]
    fault_outcome(store, job_dirs(shims, store))


# -- scheduler answers that are missing or partial ------------------------------------------

@pytest.mark.fault("squeue omits a live job for five polls, sacct says RUNNING")
def test_a_running_job_squeue_leaves_out_is_kept_while_sacct_lists_it(
        tmp_path, shims, tiny, fault_outcome):
    store = new_run(tmp_path, tiny)
    shims.omit("squeue", (1, 5), store.config.name)     # its rows carry the name in the token
    shims.state("sacct", (1, 5), "RUNNING")
    # Lost after 2 s and 3 misses: without sacct's non-final row the node would be failed.
    ctl, out = controller(store, scheduler(lost_after_s=2.0), steps=8)
    assert run(ctl) == 0
    [node] = store.load_tree()
    assert [c.action for c in shims.calls("squeue")][:6] == ["omit"] * 5 + ["real"]
    assert [c.action for c in shims.calls("sacct")] == ["state"] * 5
    assert (node.status, node.submission.scheduler_state) == (Status.COMPLETED, "COMPLETED")
    assert node.submission.attempts == 1 and "lost" not in out.getvalue()
    assert [c.action for c in shims.calls("sbatch")] == ["real"]
    fault_outcome(store, job_dirs(shims, store))


@pytest.mark.fault("squeue and sacct down (slurmctld unreachable) for three polls")
def test_a_cluster_that_cannot_be_polled_is_waited_out(tmp_path, shims, tiny, fault_outcome):
    sched = scheduler()                                 # two calls a poll: one retry
    shims.fail("squeue", (1, 6), DOWN)
    shims.fail("sacct", (1, 6), DOWN)
    store = new_run(tmp_path, tiny)
    ctl, out = controller(store, sched)
    assert run(ctl) == 0
    [node] = store.load_tree()
    assert out.getvalue().count("could not poll the scheduler") == 3
    # each retry is said as it starts: a site's default (5 retries, 2..32 s apart, each client
    # call up to MessageTimeout) was two silent minutes in the log
    assert out.getvalue().count(f"polling jobs: squeue: {DOWN}; attempt 2 of 2 in 0.2 s") == 3
    assert node.status is Status.COMPLETED and node.submission.attempts == 1
    assert [c.action for c in shims.calls("sbatch")] == ["real"]
    fault_outcome(store, job_dirs(shims, store))


@pytest.mark.fault("sbatch refused twice by a submit limit (QOSMaxSubmitJobPerUserLimit)")
def test_a_submit_limit_backs_off_and_submits_each_node_once(tmp_path, shims, tiny, fault_outcome):
    shims.fail("sbatch", (1, 2), LIMIT)
    store = new_run(tmp_path, tiny, phases=2, concurrency=2)
    ctl, out = controller(store, scheduler())
    assert run(ctl) == 0
    first, second = store.load_tree()
    calls = shims.calls("sbatch")
    assert [c.action for c in calls] == ["fail", "fail", "real", "real"]
    assert all(b.at - a.at >= 1.0 for a, b in zip(calls[:2], calls[1:3]))   # waited each out
    assert out.getvalue().count("node 0: not submitted yet") == 2
    assert "node 1: new" in out.getvalue().split("node 0: submitted as job")[1]   # held back
    assert (first.submission.attempts, second.submission.attempts) == (3, 1)
    assert first.status is second.status is Status.COMPLETED
    fault_outcome(store, job_dirs(shims, store))


# -- the monitor job ------------------------------------------------------------------------

@pytest.mark.fault("the monitor job's sbatch times out once")
def test_a_monitor_submission_that_fails_is_tried_again(tmp_path, shims, tiny, fault_outcome):
    from llmzero_slurm.controller.keeper import MonitorKeeper
    from llmzero_slurm.job_names import monitor_job_name
    shims.fail("sbatch", (2, 2), TIMED_OUT)             # 1: the phase, 2: the monitor
    store = new_run(tmp_path, tiny, early_stop_interval_s=30.0)
    sched = scheduler()
    ctl, out = controller(store, sched, steps=6)      # running for several polls
    ctl.monitor = MonitorKeeper(store, sched)
    ctl.method.early_stopping = True
    assert run(ctl) == 0
    [node] = store.load_tree()
    assert [c.action for c in shims.calls("sbatch")] == ["real", "fail", "real"]
    assert "monitor job not submitted" in out.getvalue()
    monitor = str(json.loads((store.root / "monitor" / "monitor.json").read_text())["job_id"])
    assert node.status is Status.COMPLETED
    assert f"--name={monitor_job_name(store.config.name)} {monitor}" in \
        [c.argv for c in shims.calls("scancel")]                 # it leaves with the controller
    fault_outcome(store, job_dirs(shims, store))
