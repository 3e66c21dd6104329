"""Behaviour only a real Slurm cluster shows: squeue names, GRES, time limits, requeue, and
what polling costs in client calls. Runs against bin/llmzero-local-slurm's cluster."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from llmzero_slurm.config import SlurmConfig, TaskConfig
from llmzero_slurm.errors import SchedulerError
from llmzero_slurm.job_names import phase_job_name
from llmzero_slurm.render import PhaseSpec, write_phase_script
from llmzero_slurm.schedulers import SlurmScheduler
from llmzero_slurm.schedulers.slurm import run_command
from llmzero_slurm.search.tree import Status

from conftest import CLUSTER_SCRIPT, TinyBackend, finish, status_json, wait_for

pytestmark = pytest.mark.slurm


def phase(root: Path, program: str, node_id: int, hparams: dict, slurm: SlurmConfig | None = None,
          **trainer: Any) -> Path:
    spec = PhaseSpec("clu", node_id, "scratch", root / f"{node_id:04d}", f"tok-{node_id}", hparams,
                     slurm=slurm or SlurmConfig(cpus_per_task=1),
                     trainer={"program": program, **trainer})
    return write_phase_script(spec, TinyBackend())


@pytest.fixture(scope="module")
def timed_out(tmp_path_factory, tiny_program, slurm_cluster):
    """Submitted first, checked last: Slurm enforces a 1-minute limit about 30-70 s late."""
    sched = SlurmScheduler(min_poll_s=0)
    script = phase(tmp_path_factory.mktemp("timeout"), tiny_program, 1,
                   {"total_training_steps": 1000}, SlurmConfig(time="1", cpus_per_task=1),
                   step_s=1.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", slurm_cluster)
        return sched, script, sched.submit(script, "tok-1")


@pytest.fixture(scope="module")
def forgotten(tmp_path_factory, tiny_program, slurm_cluster):
    """A phase that fails at once, submitted first: by the module's end squeue has dropped
    it (MinJobAge), and only the accounting sources can tell how it ended."""
    script = phase(tmp_path_factory.mktemp("forgotten"), tiny_program, 9,
                   {"total_training_steps": 3}, fail_at=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", slurm_cluster)
        return script, SlurmScheduler().submit(script, "tok-9")


def test_cluster_script_reports_status_and_environment(slurm_cluster, forgotten):
    status = subprocess.run([str(CLUSTER_SCRIPT), "status"], capture_output=True, text=True)
    assert status.returncode == 0, status.stdout + status.stderr
    for daemon in ("munged", "slurmctld", "slurmd"):
        assert f"{daemon}: running (pid " in status.stdout
    env = subprocess.run([str(CLUSTER_SCRIPT), "env"], capture_output=True, text=True, check=True)
    assert env.stdout == f"export SLURM_CONF={slurm_cluster}\n"
    again = subprocess.run([str(CLUSTER_SCRIPT), "start"], capture_output=True, text=True)
    assert again.returncode == 0 and "cluster up" in again.stdout
    after = subprocess.run([str(CLUSTER_SCRIPT), "status"], capture_output=True, text=True)
    assert after.stdout.splitlines()[:3] == status.stdout.splitlines()[:3]   # same daemons


def test_reachable_only_while_a_slurmctld_answers(slurm_cluster, tmp_path, monkeypatch):
    """`squeue -j 0` was the probe, and squeue refuses job id 0 itself, without asking any
    controller: with slurmctld down, status and stop spent minutes in retries and the
    controller job's "nothing answers" guard never fired. The same configuration with the
    controller's port moved to one nobody listens on must read as unreachable, at once."""
    monkeypatch.setenv("SLURM_CONF", slurm_cluster)
    assert SlurmScheduler.reachable()
    text = Path(slurm_cluster).read_text()
    dead = tmp_path / "slurm.conf"
    dead.write_text("\n".join("SlurmctldPort=1" if line.startswith("SlurmctldPort=") else line
                              for line in text.splitlines()) + "\n")
    monkeypatch.setenv("SLURM_CONF", str(dead))
    assert not SlurmScheduler.reachable()


def test_phase_appears_in_squeue_under_its_name(tmp_path, tiny_program, timed_out):
    sched = SlurmScheduler(min_poll_s=0)
    script = phase(tmp_path, tiny_program, 7, {"total_training_steps": 30}, step_s=0.5)
    job = sched.submit(script, "tok-7")
    listed = subprocess.run(["squeue", "--noheader", "--name=llmz-clu-0007-scratch",
                             "--format=%i %j %k"], capture_output=True, text=True, check=True)
    assert f"{job} llmz-clu-0007-scratch llmz:node=0007,token=tok-7" in listed.stdout
    assert sched.states([job])[job].status in (Status.QUEUED, Status.RUNNING)
    sched.cancel(job, phase_job_name("clu", 7, "scratch"))
    assert finish(sched, job).status == Status.CANCELLED


def test_a_phase_the_stopper_cancels_says_why_in_its_slurm_comment(tmp_path, tiny_program):
    """Walkthrough "why was my phase cancelled?": squeue and sacct showed a bare CANCELLED,
    as for a person's scancel. The monitor now sets the job's comment, its token kept, before
    its scancel; a person's cancel leaves the comment as it was."""
    sched = SlurmScheduler(min_poll_s=0)
    jobs = []
    # Node ids no other test submits: squeue lists an ended job for MinJobAge, and a later
    # test that looks a token up by its job's name (a resubmission's check) would find these.
    for node_id, why in ((25, "llmzero: stopped early at step 20 by the heuristic stopper"),
                         (26, None)):
        script = phase(tmp_path, tiny_program, node_id, {"total_training_steps": 300}, step_s=0.5)
        jobs.append(job := sched.submit(script, f"tok-{node_id}"))
        sched.cancel(job, phase_job_name("clu", node_id, "scratch"), why)
        assert finish(sched, job).raw == "CANCELLED"
    listed = subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={','.join(jobs)}",
                             "--format=%i|%k"], capture_output=True, text=True, check=True).stdout
    assert f"{jobs[0]}|llmz:node=0025,token=tok-25,llmzero: stopped early at step 20 by the " \
           "heuristic stopper" in listed, listed
    assert f"{jobs[1]}|llmz:node=0026,token=tok-26\n" in listed, listed


@pytest.mark.parametrize("directive", ["gpus-per-node", "gres"])
def test_gpu_directives_give_the_job_gpus(tmp_path, tiny_program, directive):
    sched = SlurmScheduler(min_poll_s=0)
    script = phase(tmp_path, tiny_program, 2, {"total_training_steps": 1},
                   SlurmConfig(gpus_per_node=2, gpu_directive=directive, cpus_per_task=1))
    job = sched.submit(script, "tok-2")
    assert finish(sched, job).status == Status.COMPLETED
    gpus = status_json(script)["gpus"].split(",")
    assert len(gpus) == 2 and all(g.isdigit() for g in gpus)
    assert f"CUDA_VISIBLE_DEVICES={','.join(gpus)}" in (script.parent / f"slurm-{job}.out").read_text()


def test_requeued_phase_reruns_and_resumes_its_checkpoint(tmp_path, base_cache):
    """The real CPU trainer: `scontrol requeue` mid-run, the rerun continues from its own
    newest checkpoint, and metrics.jsonl ends up one unbroken curve."""
    sched = SlurmScheduler(min_poll_s=0)
    spec = PhaseSpec("clu", 3, "scratch", tmp_path / "0003", "tok-3",
                     {"total_training_steps": 30, "save_freq": 3, "test_freq": 30, "seed": 1},
                     slurm=SlurmConfig(cpus_per_task=1), task=TaskConfig(builtin="addition"),
                     trainer={"cache_dir": str(base_cache)})
    script = write_phase_script(spec)
    job = sched.submit(script, "tok-3")
    wait_for(lambda: (script.parent / "ckpt" / "global_step_3").exists(), 180, "a checkpoint")
    subprocess.run(["scontrol", "requeue", job], check=True, capture_output=True)
    wait_for(lambda: status_json(script)["state"] == "preempted", 30, "the requeue recorded")
    assert "requeue" in status_json(script)["reason"]
    assert sched.states([job])[job].status in (Status.QUEUED, Status.RUNNING)
    state = finish(sched, job, timeout=240)
    out = (script.parent / f"slurm-{job}.out").read_text()
    assert state.status == Status.COMPLETED, out[-3000:]
    status = status_json(script)
    assert status["state"] == "completed" and status["restart_count"] == 1
    assert "DUE TO JOB REQUEUE" in out and "resumed own checkpoint global_step_" in out
    steps = [json.loads(line)["step"] for line in (script.parent / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(31)), steps      # step 0 is the validation before training


def test_polling_twenty_jobs_costs_one_squeue_call_per_poll(tmp_path, tiny_program):
    calls: list[Sequence[str]] = []

    def counting(argv: Sequence[str]) -> subprocess.CompletedProcess:
        calls.append(list(argv))
        return run_command(argv)

    sched = SlurmScheduler(runner=counting, min_poll_s=0)
    jobs = [sched.submit(phase(tmp_path, tiny_program, i, {"total_training_steps": 60},
                               step_s=0.5), f"tok-{i}") for i in range(100, 120)]
    calls.clear()
    for poll in range(1, 4):
        states = sched.states(jobs)
        assert set(states) == set(jobs)
        assert all(not s.final for s in states.values())
        assert [c[0] for c in calls] == ["squeue"] * poll
    for node_id, job in zip(range(100, 120), jobs):
        sched.cancel(job, phase_job_name("clu", node_id, "scratch"))
    calls.clear()
    wait_for(lambda: all(s.final for s in sched.states(jobs).values()), 60, "all 20 cancelled")
    polls = len(calls)
    assert [c[0] for c in calls] == ["squeue"] * polls
    sched.states(jobs)     # final states are cached: no further client call
    assert len(calls) == polls


def test_polls_back_off_while_nothing_changes(tmp_path, tiny_program):
    calls: list[Sequence[str]] = []
    sched = SlurmScheduler(runner=lambda a: calls.append(a) or run_command(a), min_poll_s=30)
    job = sched.submit(phase(tmp_path, tiny_program, 5, {"total_training_steps": 40}, step_s=0.5),
                       "tok-5")
    sched.states([job])
    sched.states([job])
    assert [c[0] for c in calls] == ["sbatch", "squeue"]
    sched.cancel(job, phase_job_name("clu", 5, "scratch"))   # our own action ends the back-off
    finish(sched, job)


def test_transient_errors_are_retried_then_reported(tmp_path, tiny_program, slurm_cluster):
    # A controller that does not answer: the same cluster's configuration with a closed port.
    dead = tmp_path / "dead.conf"
    dead.write_text(Path(slurm_cluster).read_text().replace("SlurmctldPort=", "SlurmctldPort=1")
                    + "MessageTimeout=1\n")
    calls: list[tuple[str, bool]] = []

    def client(argv: Sequence[str], reachable: bool) -> subprocess.CompletedProcess:
        calls.append((argv[0], reachable))
        env = {**os.environ, "SLURM_CONF": slurm_cluster if reachable else str(dead)}
        return subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=60)

    sched = SlurmScheduler(runner=lambda a: client(a, False), retries=2, retry_wait_s=0.1)
    with pytest.raises(SchedulerError, match="transient error after 3 attempts"):
        sched.states(["1"])
    assert calls == [("squeue", False)] * 3

    # The controller comes back between attempts: the poll goes through on the retry.
    calls.clear()
    sched = SlurmScheduler(runner=lambda a: client(a, bool(calls)), retries=2, retry_wait_s=0.1)
    job = sched.submit(phase(tmp_path, tiny_program, 6,
                             {"total_training_steps": 1}), "tok-6")
    # Before resubmitting, the scheduler asks whether the first sbatch got through after all.
    assert calls[:3] == [("sbatch", False), ("squeue", True), ("sbatch", True)]
    assert finish(sched, job).status == Status.COMPLETED


def test_a_job_past_its_time_limit_is_timed_out(timed_out):
    sched, script, job = timed_out
    state = finish(sched, job, timeout=150)
    assert (state.raw, state.status) == ("TIMEOUT", Status.FAILED)
    status = status_json(script)
    assert status["state"] == "timeout" and "time_limit" in status["reason"]


def test_a_job_squeue_forgot_is_read_from_the_completion_log(forgotten):
    script, job = forgotten
    def listed() -> bool:
        out = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%i"],
                             capture_output=True, text=True, check=True).stdout
        return job in out.split()
    wait_for(lambda: not listed(), 180, f"squeue to forget job {job}", every=2)
    fresh = SlurmScheduler()                       # a controller that never saw the job
    state = fresh.states([job])[job]
    assert (state.raw, state.status, state.exit_code, state.source) == (
        "FAILED", Status.FAILED, 3, "sacct -c")


def test_status_says_why_a_phase_is_waiting(tmp_path, tiny_program):
    """Issue 16: llmzero-status showed PENDING with no reason (held, priority, resources...)."""
    from llmzero_slurm.config import parse_config
    from llmzero_slurm.paths import ROOT
    from llmzero_slurm.search.tree import Kind, Node, Submission
    from llmzero_slurm.store.run_store import RunStore
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "why", "backend": "cpu", "scheduler": "slurm", "task": {"builtin": "addition"}}))
    script = phase(tmp_path, tiny_program, 0, {"total_training_steps": 1})
    # under the name of this run's node 0: a job of another name under its id is not the phase
    named = f"--job-name={phase_job_name('why', 0, 'scratch')}"
    job = subprocess.run(["sbatch", "--parsable", "--hold", named, str(script)],
                         capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    try:
        store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {}, status=Status.QUEUED,
                                      submission=Submission("tok-0", job)))
        cmd = [str(ROOT / "bin" / "llmzero-status"), str(store.root)]
        env = {**os.environ, "LLMZERO_PYTHON": sys.executable}
        table = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        assert f"{job:<10} PENDING (JobHeldUser)" in table.stdout, table.stdout + table.stderr
        data = json.loads(subprocess.run([*cmd, "--json"], capture_output=True, text=True,
                                         env=env, timeout=120).stdout)
        assert data["pending_reasons"] == {job: "JobHeldUser"}
        assert data["slurm_states"] == {job: "PENDING"}
    finally:
        subprocess.run(["scancel", job], check=False)


WAIT_IN_QUEUE = "--begin=now+1days"     # a job that waits in the queue whatever the load


def controller_job_run(tmp_path: Path, name: str, **controller: Any) -> tuple[Any, Callable]:
    """A Slurm run for the controller-job tests (`llmzero-start --submit`), and a function
    running bin/llmzero-<command> on it as a user does. Its phases are submitted to begin
    tomorrow (extra_directives refuses --hold, which would hold a run's phases for ever): none
    ever runs."""
    import yaml
    from llmzero_slurm.config import load_config
    from llmzero_slurm.paths import ROOT
    from llmzero_slurm.store.run_store import RunStore
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({
        "name": name, "scheduler": "slurm", "task": {"builtin": "addition"},
        "search": {"poll_interval_s": 5}, "agents": {"backend": "heuristic"},
        "slurm": {"extra_directives": [WAIT_IN_QUEUE]},
        "controller": {"time": "00:10:00", "mem": "1G", **controller}}))
    store = RunStore.create(tmp_path / "run", load_config(config))
    env = {**os.environ, "LLMZERO_PYTHON": sys.executable}

    def tool(command: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(ROOT / "bin" / f"llmzero-{command}"), str(store.root), *args],
                              capture_output=True, text=True, env=env, timeout=180)
    return store, tool


def test_the_controller_runs_as_a_slurm_job(tmp_path):
    """Issue 16: llmzero-start --submit puts the controller in its own Slurm job, which resumes
    the run from its directory (here it is asked to stop as soon as it holds the run)."""
    from llmzero_slurm.controller.stop_request import read_stop_request, request_stop
    store, tool = controller_job_run(tmp_path, "ctljob")
    run_dir = store.root
    submitted = tool("start", "--submit")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = submitted.stdout.split("controller submitted as job ")[1].split()[0]
    # A request is aimed at a live controller: made once the job's controller holds the run,
    # with --cancel for the phases it submitted by then.
    wait_for(lambda: request_stop(store, cancel=True), 120, "the controller job to hold the run")
    state = finish(SlurmScheduler(min_poll_s=0), job, timeout=120)
    output = (run_dir / f"controller-{job}.out").read_text()
    assert state.raw == "COMPLETED", output
    assert f"controller job {job}" in output and "stopped; cancelled" in output
    for node in store.load_tree():       # no held phase is left in the queue
        if node.submission.job_id:
            assert finish(SlurmScheduler(min_poll_s=0), node.submission.job_id).raw == "CANCELLED"
    assert read_stop_request(store) is None and not (run_dir / "controller.json").exists()


def test_a_controller_job_still_queued_is_shown_by_status_and_cancelled_by_stop(tmp_path):
    """Audit: a controller job waiting in the queue holds no lease, so llmzero-status did not
    show it and llmzero-stop said "no controller is running" and left it to start later."""
    store, tool = controller_job_run(tmp_path, "ctlq", extra_directives=[WAIT_IN_QUEUE])
    run_dir = store.root
    record = run_dir / "controller-jobs.json"
    record.write_text('{"jobs": [{"job_id": "41"')       # damaged: kept aside, not lost

    submitted = tool("start", "--submit")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = submitted.stdout.split("controller submitted as job ")[1].split()[0]
    try:
        [kept] = run_dir.glob("controller-jobs.json.damaged-*")
        assert kept.read_text() == '{"jobs": [{"job_id": "41"'
        assert "controller-jobs.json cannot be read (corrupt JSON" in submitted.stdout
        assert f"moved to {kept}, a new one begun" in submitted.stdout
        assert [j["job_id"] for j in json.loads(record.read_text())["jobs"]] == [job]
        status = tool("status")
        assert status.returncode == 0, status.stderr
        assert status.stdout.startswith(f"experiment ctlq (llmzero), controller job {job} "
                                        f"PENDING (BeginTime), not started yet\n"), status.stdout
        data = json.loads(tool("status", "--json").stdout)
        assert data["controller_running"] is False and data["waiting_controller_jobs"] == {job: "PENDING"}
        stop = tool("stop")
        assert stop.returncode == 0, stop.stderr
        assert f"cancelled controller job {job} PENDING (BeginTime), not started yet\n" \
            in stop.stdout
        assert finish(SlurmScheduler(min_poll_s=0), job).raw == "CANCELLED"
        after = tool("status")
        assert "controller not running" in after.stdout and f"job {job}" not in after.stdout
    finally:
        subprocess.run(["scancel", job], check=False)


def test_a_second_submit_while_a_controller_job_waits_in_the_queue_is_refused(tmp_path):
    """Walkthrough: `llmzero-start RUN --submit` again while the first controller job still
    waited in the queue (no lease held yet) said "controller submitted as job N" and queued a
    second job, which could only exit 6 once both started."""
    store, tool = controller_job_run(tmp_path, "ctlsub2", extra_directives=[WAIT_IN_QUEUE])
    submitted = tool("start", "--submit")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = submitted.stdout.split("controller submitted as job ")[1].split()[0]
    try:
        again = tool("start", "--submit")
        assert again.returncode == 6, again.stdout + again.stderr
        assert "submitted" not in again.stdout
        assert f"controller job {job} PENDING (BeginTime), not started yet" in again.stderr
        assert f"llmzero-stop {store.root}" in again.stderr
        jobs = json.loads((store.root / "controller-jobs.json").read_text())["jobs"]
        assert [j["job_id"] for j in jobs] == [job]
    finally:
        subprocess.run(["scancel", job], check=False)


def test_stopping_a_controller_cancels_a_second_controller_job_still_queued(tmp_path):
    """A controller job submitted while another controller ran would start once llmzero-stop
    had stopped that one, and resume the run the user had stopped; with --wait 0 it was left
    in the queue."""
    from llmzero_slurm.controller.lease import Lease
    store, tool = controller_job_run(tmp_path, "ctl2")
    run_dir = store.root

    submitted = tool("start", "--submit")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    running = submitted.stdout.split("controller submitted as job ")[1].split()[0]
    script = submitted.stdout.split("(script ")[1].split(")")[0]
    jobs = [running]
    try:
        wait_for(lambda: Lease(store).read(), 120, "the controller job to hold the run")
        # A second submission, held so that it waits in the queue whatever the cluster's load,
        # recorded as llmzero-start --submit records it.
        second = subprocess.run(["sbatch", "--parsable", "--hold", script], capture_output=True,
                                text=True, check=True).stdout.strip().split(";")[0]
        jobs.append(second)
        record = run_dir / "controller-jobs.json"
        listed = json.loads(record.read_text())
        record.write_text(json.dumps({"jobs": [*listed["jobs"], {"job_id": second}]}))
        stop = tool("stop", "--cancel", "--wait", "0")
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert f"cancelled controller job {second} PENDING" in stop.stdout, stop.stdout
        assert finish(SlurmScheduler(min_poll_s=0), second).raw == "CANCELLED"
        assert finish(SlurmScheduler(min_poll_s=0), running, timeout=120).raw == "COMPLETED"
    finally:
        subprocess.run(["scancel", *jobs], check=False)


def test_a_search_survives_its_controller_job_being_requeued_cancelled_and_resubmitted(
        tmp_path, base_cache):
    """Issue 16: the controller as a Slurm job, requeued (`scontrol requeue`) once phases run
    and later cancelled and submitted again mid-search, ends the search with one job per
    node and no node lost or left unfinished."""
    import yaml
    from llmzero_slurm.paths import ROOT
    from llmzero_slurm.store.run_store import RunStore
    name = f"ctlrq{os.getpid()}"        # sacct below counts this run's jobs by name
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({
        "name": name, "backend": "cpu", "scheduler": "slurm", "task": {"builtin": "addition"},
        "hparams": {"total_training_steps": 10, "test_freq": 10, "save_freq": 5, "rollout_n": 4},
        "trainer": {"cache_dir": str(base_cache)},
        "search": {"budget_iterations": 2, "concurrency": 1, "poll_interval_s": 5,
                   "early_stop_interval_s": 2},
        "agents": {"backend": "heuristic"},
        "slurm": {"cpus_per_task": 1, "time": "00:15:00"},
        "controller": {"time": "00:30:00", "mem": "1G"}}))
    run_dir = tmp_path / "run"
    env = {**os.environ, "LLMZERO_PYTHON": sys.executable}

    def submit(target: Path) -> str:
        done = subprocess.run([str(ROOT / "bin" / "llmzero-start"), str(target), "--run-dir",
                               str(run_dir), "--submit"], capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.split("controller submitted as job ")[1].split()[0]

    def tree() -> list:
        return list(RunStore.open(run_dir).load_tree()) if (run_dir / "meta.json").exists() else []

    def output(job: str) -> str:
        path = run_dir / f"controller-{job}.out"
        return path.read_text() if path.exists() else ""

    first = submit(config)
    wait_for(lambda: any(n.status is Status.RUNNING for n in tree()), 400, "a running phase")
    subprocess.run(["scontrol", "requeue", first], check=True, capture_output=True)
    wait_for(lambda: "(restart 1)" in output(first), 180, "the requeued controller to start again")
    wait_for(lambda: len(tree()) >= 2, 400, "a second phase")
    subprocess.run(["scancel", first], check=True, capture_output=True)
    sched = SlurmScheduler(min_poll_s=0)
    assert finish(sched, first, timeout=120).raw == "CANCELLED"
    second = submit(run_dir)
    state = finish(sched, second, timeout=900)
    assert state.raw == "COMPLETED", output(second)[-3000:]
    assert "search finished" in output(second)
    store = RunStore.open(run_dir)
    nodes = list(store.load_tree())
    assert len(nodes) == 2 and all(n.status.finished for n in nodes), [n.status for n in nodes]
    assert not store.corrupt
    jobs = [n.submission.job_id for n in nodes]
    assert len(set(jobs)) == 2 and None not in jobs
    for node in nodes:      # one job ran in each node folder
        assert len(list(store.node_dir(node.id).log_files())) == 1, node.id
    names = subprocess.run(["sacct", "-c", "-n", "-X", "-o", "JobName%60"],   # completion log
                           capture_output=True, text=True).stdout.split()
    for node in nodes:
        assert sum(job.startswith(f"llmz-{name}-{node.id:04d}") for job in names) == 1


@pytest.mark.parametrize("slurm, refusal", [
    (SlurmConfig(partition="nosuch"), "invalid partition"),
    (SlurmConfig(cpus_per_task=64), "node configuration is not available"),
    (SlurmConfig(mem="500G"), "node configuration is not available"),
    (SlurmConfig(), None)])
def test_sbatch_judges_a_phase_job_without_submitting_it(tmp_path, tiny_program, slurm, refusal):
    """An unknown partition, or more CPUs or memory than any node has, passed --check and then
    failed the run's first phase; `sbatch --test-only` refuses them and registers no job."""
    sched = SlurmScheduler()
    script = phase(tmp_path, tiny_program, 1, {"total_training_steps": 1}, slurm)
    before = run_command(["squeue", "-h", "-o", "%i"]).stdout.split()
    if refusal is None:
        assert "to start at" in sched.test_submit(script)
    else:
        with pytest.raises(SchedulerError, match=refusal):
            sched.test_submit(script)
    assert run_command(["squeue", "-h", "-o", "%i"]).stdout.split() == before
    assert not list(tmp_path.glob("**/slurm-*.out"))


def test_a_stop_cancels_no_job_that_has_since_taken_a_recorded_id(tmp_path):
    """A recorded job id was trusted: after a cluster's ids wrapped or were reset, or with a
    run copied to another cluster, `llmzero-stop --cancel` scancelled whatever job had that id
    now. Only a job that still bears the phase's name is cancelled."""
    from llmzero_slurm.search.tree import Kind, Node, Submission
    store, tool = controller_job_run(tmp_path, "reused")
    held = ["sbatch", "--parsable", "--hold", "--output=/dev/null", "--wrap=sleep 300"]
    other = subprocess.run([*held, "--job-name=someone-elses-training"], capture_output=True,
                           text=True, check=True).stdout.strip()
    ours = subprocess.run([*held, f"--job-name={phase_job_name('reused', 1, 'scratch')}"],
                          capture_output=True, text=True, check=True).stdout.strip()
    try:
        for job in (other, ours):       # node 0's phase ended long ago; its id is another's now
            store.add_node(lambda i, job=job: Node(i, None, Kind.SCRATCH, {}, status=Status.RUNNING,
                                                   submission=Submission(f"tok-{i}", job)))
        stop = tool("stop", "--cancel")
        assert stop.returncode == 0, stop.stdout + stop.stderr
        sched = SlurmScheduler(min_poll_s=0)
        assert finish(sched, ours).raw == "CANCELLED"
        assert sched.states([other])[other].raw == "PENDING"
    finally:
        subprocess.run(["scancel", other, ours], check=False)


def test_two_runs_of_one_experiment_share_job_names_and_never_each_others_jobs(tmp_path):
    """Walkthrough, a second seed under another --run-dir: both runs' jobs bear the same names
    in squeue, so status and stop must go by each run's own recorded ids alone."""
    from llmzero_slurm.search.tree import Kind, Node, Submission
    held = ["sbatch", "--parsable", "--hold", "--output=/dev/null", "--wrap=sleep 300",
            f"--job-name={phase_job_name('twin', 0, 'scratch')}"]
    runs, jobs = [], []
    try:
        for seed in ("seed1", "seed2"):
            (tmp_path / seed).mkdir()
            store, tool = controller_job_run(tmp_path / seed, "twin")
            jobs.append(subprocess.run(held, capture_output=True, text=True,
                                       check=True).stdout.strip())
            store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {}, status=Status.RUNNING,
                                          submission=Submission(f"tok-{i}", jobs[-1])))
            runs.append(tool)
        shown = [tool("status").stdout for tool in runs]
        for mine, theirs, said in zip(jobs, reversed(jobs), shown):
            assert f" {mine} " in said and f" {theirs} " not in said, said
        stop = runs[0]("stop", "--cancel")
        assert stop.returncode == 0, stop.stdout + stop.stderr
        sched = SlurmScheduler(min_poll_s=0)
        assert finish(sched, jobs[0]).raw == "CANCELLED"
        assert sched.states([jobs[1]])[jobs[1]].raw == "PENDING"
    finally:
        subprocess.run(["scancel", *jobs], check=False)


def test_a_phase_whose_job_id_is_now_anothers_is_read_from_its_own_status_file(tmp_path):
    """A recorded phase job id was polled as it stood: with a run copied to another cluster
    (or ids wrapped or reset), a phase that had ended showed, and was watched, as the foreign
    job now holding its id (here waiting in the queue for ever). Only a job that still bears
    the phase's name is the phase's; its own status.json says how it ended."""
    from llmzero_slurm.search.tree import Kind, Node, Submission
    store, tool = controller_job_run(tmp_path, "phreused")
    other = subprocess.run(["sbatch", "--parsable", "--hold", "--output=/dev/null",
                            "--job-name=someone-elses-training", "--wrap=sleep 300"],
                           capture_output=True, text=True, check=True).stdout.strip()
    try:
        node = store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {}, status=Status.RUNNING,
                                             submission=Submission(f"tok-{i}", other)))
        folder = store.node_dir(node.id).path
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "status.json").write_text(json.dumps(
            {"state": "completed", "job_id": other, "exit_code": 0, "finished_at": 2.0}))
        status = tool("status", "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["slurm_states"] == {other: "COMPLETED"}
        assert SlurmScheduler(min_poll_s=0).states([other])[other].raw == "PENDING"
    finally:
        subprocess.run(["scancel", other], check=False)


def test_a_recorded_controller_job_id_now_anothers_is_neither_shown_nor_cancelled(tmp_path):
    """llmzero-status showed another job that had since taken a recorded controller job's id
    as this run's controller waiting in the queue, and llmzero-stop said it cancelled it (the
    scancel, by name, left it alone). Only a job that bears the controller's name counts."""
    store, tool = controller_job_run(tmp_path, "ctlreused")
    other = subprocess.run(["sbatch", "--parsable", "--hold", "--output=/dev/null",
                            "--job-name=someone-elses-training", "--wrap=sleep 300"],
                           capture_output=True, text=True, check=True).stdout.strip()
    try:
        (store.root / "controller-jobs.json").write_text(
            json.dumps({"jobs": [{"job_id": other, "submitted_at": 1.0}]}))
        status = tool("status")
        assert status.returncode == 0, status.stderr
        assert "controller not running" in status.stdout and other not in status.stdout
        assert json.loads(tool("status", "--json").stdout)["waiting_controller_jobs"] == {}
        stop = tool("stop")
        assert stop.returncode == 0, stop.stderr
        assert other not in stop.stdout, stop.stdout
        assert SlurmScheduler(min_poll_s=0).states([other])[other].raw == "PENDING"
    finally:
        subprocess.run(["scancel", other], check=False)


def test_a_stop_tries_every_phase_when_slurm_refuses_one(tmp_path, monkeypatch):
    """Audit: in a run a group shares, `llmzero-stop --cancel` met a phase of another member
    (scancel: Access/permission denied) and stopped there, the rest of the phases running on.
    Every phase is tried, the refusal named, exit 5."""
    from llmzero_slurm.search.tree import Kind, Node, Submission
    from slurm_shims import Shims
    shims = Shims(tmp_path / "bin")
    shims.fail("scancel", (1, 1), "scancel: error: Kill job error on job id 1: "
                                  "Access/permission denied")
    monkeypatch.setenv("PATH", f"{shims.dir}:{os.environ['PATH']}")
    store, tool = controller_job_run(tmp_path, "shared")
    held = ["sbatch", "--parsable", "--hold", "--output=/dev/null", "--wrap=sleep 300"]
    jobs = [subprocess.run([*held, f"--job-name={phase_job_name('shared', i, 'scratch')}"],
                           capture_output=True, text=True, check=True).stdout.strip()
            for i in (0, 1)]
    try:
        for job in jobs:
            store.add_node(lambda i, job=job: Node(i, None, Kind.SCRATCH, {}, status=Status.RUNNING,
                                                   submission=Submission(f"tok-{i}", job)))
        stop = tool("stop", "--cancel")
        assert stop.returncode == 5, stop.stdout + stop.stderr
        assert f"cancelled 1 queued or running phase(s): jobs {jobs[1]}\n" in stop.stdout
        assert stop.stderr.startswith(f"error: cancelling job {jobs[0]} "
                                      f"(llmz-shared-0000-scratch): scancel failed (exit 1)")
        assert finish(SlurmScheduler(min_poll_s=0), jobs[1]).raw == "CANCELLED"
    finally:
        subprocess.run(["scancel", *jobs], check=False)
