"""Phase scripts run through both schedulers: the local one and the real local Slurm cluster.

Each test renders a real phase script (the CPU template around a tiny real trainer), submits
it, and checks that the scheduler's verdict, the job's own status.json and the files the
trainer wrote all agree.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from llmzero_slurm.config import SlurmConfig, TaskConfig
from llmzero_slurm.errors import SchedulerError, StateError
from llmzero_slurm.job_names import phase_job_name
from llmzero_slurm.processes import alive
from llmzero_slurm.render import PhaseSpec, write_phase_script
from llmzero_slurm.schedulers import LocalScheduler, SlurmScheduler, job_state
from llmzero_slurm.schedulers.base import CallJob
from llmzero_slurm.schedulers.directives import read_directives
from llmzero_slurm.schedulers.slurm import LOST_AFTER_MISSES
from llmzero_slurm.search.tree import Status
from llmzero_slurm.store.node_dir import NodeDir

from conftest import (TinyBackend, files_of, finish, local_phases, slurm_clients, status_json,
                      tiny_phase, wait_for)
from full_disk import on_full_disk

BACKENDS = [pytest.param("local"), pytest.param("slurm", marks=pytest.mark.slurm)]


@pytest.fixture(params=BACKENDS)
def sched(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "slurm":
        return SlurmScheduler(min_poll_s=0, retry_wait_s=0.5)
    return LocalScheduler(tmp_path / "local-jobs")


def phase(tmp_path: Path, program: str, node_id: int = 1, hparams: dict | None = None,
          time: str = "00:05:00", token: str = "tok-1", **trainer: Any) -> Path:
    spec = PhaseSpec("sched", node_id, "scratch", tmp_path / f"node{node_id}", token,
                     hparams or {"total_training_steps": 3, "seed": 1},
                     slurm=SlurmConfig(time=time, cpus_per_task=1),
                     trainer={"program": program, **trainer})
    return write_phase_script(spec, TinyBackend())


def steps(script: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (script.parent / "metrics.jsonl").read_text().splitlines()]


def test_completed_phase_agrees_with_status_json(sched, tmp_path, tiny_program):
    script = phase(tmp_path, tiny_program)
    job = sched.submit(script, "tok-1")
    state = finish(sched, job)
    assert (state.raw, state.status, state.exit_code) == ("COMPLETED", Status.COMPLETED, 0)
    status = status_json(script)
    assert status["state"] == "completed" and status["exit_code"] == 0
    assert status["job_id"] == job and status["restart_count"] == 0
    assert status["finished_at"] >= status["started_at"] > 0
    assert steps(script) == [1, 2, 3]
    assert (script.parent / f"slurm-{job}.out").read_text().count("tiny trainer: done") == 1


def test_failing_phase_is_failed_with_its_exit_code(sched, tmp_path, tiny_program):
    script = phase(tmp_path, tiny_program, fail_at=2)
    job = sched.submit(script, "tok-1")
    state = finish(sched, job)
    assert (state.raw, state.status, state.exit_code) == ("FAILED", Status.FAILED, 3)
    status = status_json(script)
    assert (status["state"], status["exit_code"]) == ("failed", 3)
    assert "exited with code 3" in status["reason"]
    assert "failing at step 2" in (script.parent / f"slurm-{job}.out").read_text()


def test_failing_setup_line_is_recorded_before_the_trainer_starts(sched, tmp_path, tiny_program):
    spec = PhaseSpec("sched", 1, "scratch", tmp_path / "node1", "tok-1", {},
                     slurm=SlurmConfig(cpus_per_task=1, setup=["module_that_is_missing load x"]),
                     trainer={"program": tiny_program})
    script = write_phase_script(spec, TinyBackend())
    state = finish(sched, sched.submit(script, "tok-1"))
    assert (state.status, state.exit_code) == (Status.FAILED, 127)
    status = status_json(script)
    assert status["state"] == "failed" and "during setup" in status["reason"]
    assert not (script.parent / "metrics.jsonl").exists()


def test_cancelled_running_phase(sched, tmp_path, tiny_program):
    script = phase(tmp_path, tiny_program, hparams={"total_training_steps": 100}, step_s=0.5)
    job = sched.submit(script, "tok-1")
    wait_for(lambda: (script.parent / "metrics.jsonl").exists(), 30, "the first step")
    sched.cancel(job, phase_job_name("sched", 1, "scratch"))
    state = finish(sched, job)
    assert (state.raw, state.status) == ("CANCELLED", Status.CANCELLED)
    status = status_json(script)
    assert status["state"] == "cancelled" and status["exit_code"] == 143
    assert len(steps(script)) < 100


def test_a_cancel_of_a_job_that_ended_or_is_unknown_is_done(sched, tmp_path, tiny_program):
    """Review: scancel refuses a job that has ended ("Invalid job id specified", while squeue
    still lists it too) and the local scheduler one its table does not know; either raised,
    so a stop or a monitor's replacement failed on a job already gone. Both schedulers now
    take a cancel of a job that is gone as done, and leave its end as it was."""
    script = phase(tmp_path, tiny_program)
    job = sched.submit(script, "tok-1")
    assert finish(sched, job).raw == "COMPLETED"
    sched.cancel(job, phase_job_name("sched", 1, "scratch"))
    sched.cancel("999999", "llmz-never-submitted")
    assert sched.states([job])[job].raw == "COMPLETED"


def training(tmp_path: Path, tiny_program: Path) -> tuple[LocalScheduler, Path, str, int, int]:
    """A local job past its first step: its scheduler, script, id, supervisor and group."""
    sched = LocalScheduler(tmp_path / "local-jobs")
    script = phase(tmp_path, tiny_program, hparams={"total_training_steps": 100}, step_s=0.5)
    job = sched.submit(script, "tok-1")
    wait_for(lambda: (script.parent / "metrics.jsonl").exists(), 30, "the first step")
    return (sched, script, job, *started(sched, job))


def test_a_local_job_killed_with_its_supervisor_is_lost_not_running(tmp_path, tiny_program):
    """A job that died (its supervisor and itself killed, as by a reboot) with status.json
    still saying "running" was shown as `failed (RUNNING)`. (Review: this test killed the
    supervisor alone, its job training on in its own session; both are killed now.)"""
    sched, script, job, supervisor, pgid = training(tmp_path, tiny_program)
    os.kill(supervisor, signal.SIGKILL)
    os.killpg(pgid, signal.SIGKILL)
    state = wait_for(lambda: next((s for s in sched.states([job]).values() if s.final), None),
                     30, "the job to be seen gone")
    assert (state.status, state.raw) == (Status.FAILED, "LOST")
    assert "status.json still says 'running'" in state.reason


def test_a_local_job_whose_output_cannot_be_opened_fails_saying_so(tmp_path, tiny_program):
    """Its supervisor died opening the output, and the job was shown as a node failure
    ('the local supervisor died before the job ended'), the cause only in a log nobody reads.
    Like slurmstepd, it now fails the job and its end record names the file and the error."""
    sched = LocalScheduler(tmp_path / "local-jobs")
    script = phase(tmp_path, tiny_program)
    missing = tmp_path / "gone" / "slurm-%j.out"
    text = script.read_text()
    script.write_text(text.replace(f"--output={script.parent}/slurm-%j.out",
                                   f"--output={missing}"))
    job = sched.submit(script, "tok-1")
    state = finish(sched, job)
    assert (state.raw, state.status) == ("FAILED", Status.FAILED)
    assert f"{tmp_path / 'gone' / f'slurm-{job}.out'}" in state.reason
    assert "No such file or directory" in state.reason
    assert not (script.parent / "metrics.jsonl").exists()


FILL_THE_DISK = r"""
import pathlib, sys
out = pathlib.Path(sys.argv[sys.argv.index("--output-dir") + 1])
try:
    with open(out / "ckpt.bin", "wb") as fh:
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
except OSError as exc:
    sys.exit(f"error: {exc}")
"""
# Submit the script argv[2] under the token argv[3] and print its end state, inside the mount
# namespace of the full disk.
SUBMIT_AND_WAIT = r"""
import json, sys, time
from pathlib import Path
from llmzero_slurm.schedulers import LocalScheduler
sched = LocalScheduler(Path(sys.argv[1]))
job = sched.submit(Path(sys.argv[2]), sys.argv[3])
for _ in range(600):
    state = sched.states([job]).get(job)
    if state is not None and state.final:
        break
    time.sleep(0.1)
print(json.dumps([job, state.raw, state.exit_code, state.reason]))
"""


def test_a_local_job_that_fills_the_disk_ends_with_the_cause_on_record(tmp_path):
    """On a full disk the local scheduler's supervisor could not write <id>.result.json and
    died with a traceback nobody reads: the job was shown as lost, "died without recording
    its end", and nothing said the disk was full. The supervisor now keeps space for the end
    record, and frees it to say why: the state, the exit code and a reason naming the full
    disk, which a line in the job's output repeats for the error analyzer, and llmzero-status
    shows before a controller has recorded it."""
    from llmzero_slurm.config import parse_config
    from llmzero_slurm.paths import ROOT
    from llmzero_slurm.store.run_store import RunStore
    program = tmp_path / "fill.py"
    program.write_text(FILL_THE_DISK)
    store = RunStore.create(tmp_path / "run", parse_config({"name": "demo", "scheduler": "local"}))
    node, script = tiny_phase(store, str(program), 1)
    local_jobs = store.root / "local-jobs"
    ended = on_full_disk(store.root, [sys.executable, "-c", SUBMIT_AND_WAIT, str(local_jobs),
                                      str(script), node.submission.token], fill=False)
    assert ended.returncode == 0, ended.stdout[-2000:] + ended.stderr[-2000:]
    job, raw, exit_code, reason = json.loads(ended.stdout.splitlines()[-1])
    assert (raw, exit_code) == ("FAILED", 1), reason
    assert reason == f"the disk holding {local_jobs} was full when the job ended " \
                     "(No space left on device)"
    log = (script.parent / f"slurm-{job}.out").read_text()
    assert f"llmzero-local: error: {reason}" in log
    assert sorted(p.name for p in local_jobs.glob(f"{job}.*")) == [
        f"{job}.result.json", f"{job}.supervisor.log"]
    store.update_node(0, lambda n: (setattr(n.submission, "job_id", job),
                                    setattr(n, "status", Status.RUNNING)))
    (store.node_dir(0).path / "ckpt.bin").unlink()
    shown = subprocess.run([str(ROOT / "bin" / "llmzero-status"), str(store.root)],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "LLMZERO_PYTHON": sys.executable})
    assert shown.returncode == 0, shown.stderr
    assert f"note: node 0: job {job} ended FAILED (exit 1): {reason}" in shown.stdout


def test_find_by_token_after_a_controller_restart(sched, tmp_path, tiny_program):
    token = f"tok-{uuid.uuid4().hex[:12]}"           # unique, as the controller's tokens are
    script = phase(tmp_path, tiny_program, hparams={"total_training_steps": 20}, step_s=0.5,
                   token=token)
    with pytest.raises(SchedulerError, match="token=tok-other"):
        sched.submit(script, "tok-other")
    job = sched.submit(script, token)
    fresh = (SlurmScheduler() if isinstance(sched, SlurmScheduler)
             else LocalScheduler(sched.dir))          # what a restarted controller builds
    name = phase_job_name("sched", 1, "scratch")
    assert fresh.find_by_token(token, name) == job
    assert fresh.find_by_token(f"{token}-never-submitted", name) is None
    sched.cancel(job, phase_job_name("sched", 1, "scratch"))
    finish(sched, job)


def test_rerun_by_hand_gives_the_same_metrics(sched, tmp_path, tiny_program):
    script = phase(tmp_path, tiny_program, hparams={"total_training_steps": 4, "seed": 5})
    job = sched.submit(script, "tok-1")
    finish(sched, job)
    first = (script.parent / "metrics.jsonl").read_text()
    for name in ("metrics.jsonl", "status.json"):
        (script.parent / name).unlink()
    subprocess.run(["rm", "-rf", str(script.parent / "ckpt")], check=True)
    if isinstance(sched, SlurmScheduler):
        subprocess.run(["sbatch", "--wait", str(script)], check=True, capture_output=True,
                       timeout=120)
        by_hand = status_json(script)
        assert by_hand["job_id"] != job and by_hand["state"] == "completed"
    else:
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert status_json(script)["job_id"].startswith("manual-")
    assert (script.parent / "metrics.jsonl").read_text() == first


def test_status_json_stands_in_for_a_forgotten_job(sched, tmp_path):
    node = tmp_path / "forgotten"
    node.mkdir()
    (node / "status.json").write_text(json.dumps(
        {"state": "timeout", "job_id": "987654", "exit_code": 143, "reason": "time_limit"}))
    state = sched.states(["987654"], {"987654": node})["987654"]
    assert (state.raw, state.status, state.exit_code, state.source) == (
        "TIMEOUT", Status.FAILED, 143, "status.json")
    # A status.json written by another job (e.g. a rerun by hand) proves nothing about this one.
    assert "987655" not in sched.states(["987655"], {"987655": node})


def test_local_time_limit_is_a_timeout(tmp_path, tiny_program):
    sched = LocalScheduler(tmp_path / "local-jobs")
    script = phase(tmp_path, tiny_program, hparams={"total_training_steps": 100}, step_s=0.5,
                   time="0:02")
    job = sched.submit(script, "tok-1")
    state = finish(sched, job, timeout=30)
    assert (state.raw, state.status) == ("TIMEOUT", Status.FAILED)
    status = status_json(script)
    assert status["state"] == "timeout" and "time_limit" in status["reason"]


def test_real_cpu_phase_then_the_same_script_by_hand(sched, tmp_path, base_cache):
    """The embedded CPU trainer as a scheduled job, then the same script run by hand with bash."""
    spec = PhaseSpec("real", 0, "scratch", tmp_path / "0000", "tok-real",
                     {"total_training_steps": 2, "save_freq": 1, "test_freq": 1, "seed": 3},
                     slurm=SlurmConfig(cpus_per_task=1), task=TaskConfig(builtin="addition"),
                     trainer={"cache_dir": str(base_cache)})
    script = write_phase_script(spec)
    job = sched.submit(script, "tok-real")
    state = finish(sched, job, timeout=240)
    out = (script.parent / f"slurm-{job}.out").read_text()
    assert state.status == Status.COMPLETED, out[-2000:]
    assert status_json(script)["state"] == "completed"
    first = rows(script.parent / "metrics.jsonl")
    assert [row["step"] for row in first] == [0, 1, 2]     # step 0: validation before training
    assert (script.parent / "ckpt" / "global_step_2" / "adapter_config.json").exists()
    assert "val-core/addition/acc/mean@1" in first[-1]["data"]
    subprocess.run(["rm", "-rf", str(script.parent / "ckpt"), str(script.parent / "metrics.jsonl")],
                   check=True)
    # By hand from a shell whose threads and math-library mode differ from the scheduled job's:
    # the script itself fixes what the numbers depend on.
    other = "AVX2" if os.environ.get("MKL_CBWR") == "COMPATIBLE" else "COMPATIBLE"
    shell = {**os.environ, "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2",
             "SLURM_CPUS_PER_TASK": "2", "MKL_CBWR": other}
    shell.pop("CUDA_VISIBLE_DEVICES", None)   # every GPU of the host visible: not "none"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=240,
                          env=shell)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert " gpus=all\n" in proc.stdout + proc.stderr
    again = rows(script.parent / "metrics.jsonl")
    # The same metrics at every step; only wall-clock and memory figures may differ.
    assert [r["step"] for r in again] == [0, 1, 2]
    assert learning(again) == learning(first)


def learning(rows: list[dict]) -> list[dict]:
    """Metrics rows without wall-clock and memory figures: what a rerun must reproduce."""
    return [{k: v for k, v in r["data"].items() if not k.startswith(("timing", "perf"))}
            for r in rows]


def rows(metrics: Path) -> list[dict]:
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def test_a_finished_cpu_phase_reruns_from_its_start_into_another_folder(sched, tmp_path,
                                                                       base_cache):
    """LLMZ_RERUN_DIR: a finished evolve phase trains again from its parent's checkpoint into a
    folder of its own, step for step as scheduled, leaving its node folder and the parent's
    as they were (under Slurm without --output too: the job's log moves to the new folder)."""
    def scheduled(node_id: int, parent: Path | None = None) -> Path:
        spec = PhaseSpec("real", node_id, "evolve" if parent else "scratch",
                         tmp_path / "nodes" / f"{node_id:04d}", f"tok-{node_id}",
                         {"total_training_steps": 2, "save_freq": 1, "test_freq": 1, "seed": 3},
                         slurm=SlurmConfig(cpus_per_task=1), task=TaskConfig(builtin="addition"),
                         trainer={"cache_dir": str(base_cache)}, resume_dir=parent,
                         resume_step=1 if parent else 0)
        script = write_phase_script(spec)
        job = sched.submit(script, spec.token)
        out = script.parent / f"slurm-{job}.out"
        assert finish(sched, job, timeout=240).status == Status.COMPLETED, out.read_text()[-2000:]
        return script.parent
    parent = scheduled(0)
    node = scheduled(1, parent)
    first = rows(node / "metrics.jsonl")
    assert [r["step"] for r in first] == [1, 2, 3]          # from the parent's step 1
    before = {folder: files_of(folder) for folder in (parent, node)}
    rerun = tmp_path / "scratch" / "rerun-0001"             # not there yet: the job makes it
    if isinstance(sched, SlurmScheduler):      # as the README says, without --output
        job = subprocess.run(["sbatch", "--parsable", "--wait",
                              f"--export=ALL,LLMZ_RERUN_DIR={rerun}", str(node / "phase.sbatch")],
                             capture_output=True, text=True, timeout=300,
                             check=True).stdout.strip().split(";")[0]
        assert "llmzero: job" in (rerun / f"slurm-{job}.out").read_text()
    else:
        proc = subprocess.run(["bash", str(node / "phase.sbatch")], capture_output=True,
                              env={**os.environ, "LLMZ_RERUN_DIR": str(rerun)}, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads((rerun / "status.json").read_text())["state"] == "completed"
    again = rows(rerun / "metrics.jsonl")
    assert [r["step"] for r in again] == [1, 2, 3]
    assert learning(again) == learning(first)
    assert (rerun / "ckpt" / "global_step_3" / "adapter_config.json").exists()
    assert {folder: files_of(folder) for folder in (parent, node)} == before


@pytest.mark.parametrize("raw, status", [
    ("PENDING", Status.QUEUED), ("REQUEUED", Status.QUEUED), ("PREEMPTED", Status.FAILED),
    ("RUNNING", Status.RUNNING), ("COMPLETING", Status.RUNNING), ("COMPLETED", Status.COMPLETED),
    ("CANCELLED by 1000", Status.CANCELLED), ("TIMEOUT", Status.FAILED),
    ("OUT_OF_MEMORY", Status.FAILED), ("NODE_FAIL", Status.FAILED), ("BOOT_FAIL", Status.FAILED),
    ("DEADLINE", Status.FAILED)])
def test_slurm_states_map_to_node_statuses_keeping_the_raw_name(raw, status):
    state = job_state("5", raw, 0, None, "sacct")
    assert state.status == status and state.raw == raw.split()[0]
    assert state.final == status.finished


@pytest.fixture
def as_another_user(slurm_env: str) -> Any:
    """Runs a Slurm client as another user of the local cluster (nobody), the way a group
    member shares a run: its slurm.conf and munge socket live in root's home, so that user
    gets a readable copy of the one and a hard link to the other."""
    if os.geteuid() != 0:
        pytest.skip("acting as another user needs root")
    conf = Path(slurm_env).read_text()
    socket = conf.split("AuthInfo=socket=", 1)[1].split(",", 1)[0].split()[0]
    public = Path(tempfile.mkdtemp(prefix="llmz-other-user-"))
    public.chmod(0o755)
    try:
        os.link(socket, public / "munge.socket")
    except OSError as exc:
        shutil.rmtree(public)
        pytest.skip(f"cannot link the cluster's munge socket where another user reaches it: {exc}")
    (public / "slurm.conf").write_text(conf.replace(socket, str(public / "munge.socket")))
    (public / "slurm.conf").chmod(0o644)

    def run(argv: list[str]) -> str:
        proc = subprocess.run(["runuser", "-u", "nobody", "--", "env",
                               f"SLURM_CONF={public / 'slurm.conf'}", *argv],
                              capture_output=True, text=True, cwd=public, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    yield run
    shutil.rmtree(public)


@pytest.mark.slurm
def test_a_group_members_job_is_found_by_its_token(as_another_user):
    """A colleague's controller resuming a shared run adopts the job the owner's sbatch
    registered (its answer never recorded) instead of sending the phase a second time:
    `squeue --me` listed only the asking user's jobs."""
    token, name = f"tok-{uuid.uuid4().hex[:12]}", phase_job_name("shared", 1, "scratch")
    job = as_another_user(["sbatch", "--parsable", "--hold", f"--job-name={name}",
                           f"--comment=token={token}", "--output=/dev/null",
                           "--wrap=sleep 1"]).strip()
    try:
        assert SlurmScheduler().find_by_token(token, name) == job
        assert SlurmScheduler().find_by_token(token, phase_job_name("shared", 2, "scratch")) is None
    finally:
        subprocess.run(["scancel", job], check=True)


@pytest.mark.parametrize("raw", ["STOPPED", "EXPEDITING"])
def test_a_stopped_or_expedited_job_is_alive(raw):
    """`scancel --signal=STOP` shows STOPPED until SIGCONT; EXPEDITING (Slurm 25.11) is a job
    on its way to an expedited requeue. Read as unknown, each was a failure kept for good: a
    debug child started while the job went on training."""
    assert not job_state("5", raw).final


def test_an_unknown_slurm_state_is_a_failure_that_says_so():
    state = job_state("5", "SOMETHING_NEW")
    assert state.status == Status.FAILED and "unrecognised Slurm state SOMETHING_NEW" in state.reason


def test_directives_are_read_back_like_sbatch_does():
    text = ("#!/bin/bash\n#SBATCH --job-name=a\n# a comment\n#SBATCH --time 5:00 --exclusive\n"
            "\necho hi\n#SBATCH --output=ignored-after-the-first-command\n")
    assert read_directives(text) == {"job-name": "a", "time": "5:00", "exclusive": ""}


def test_a_binary_local_job_table_is_named(tmp_path):
    sched = LocalScheduler(tmp_path / "jobs")
    (tmp_path / "jobs" / "jobs.json").write_bytes(b"\xff\xfe")
    with pytest.raises(StateError, match=r"jobs/jobs.json: corrupt JSON: not UTF-8 text"):
        sched.find_by_token("tok", "llmz-x-0001-scratch")


def test_a_damaged_local_job_table_is_named_with_its_repair_and_rebuilt_by_it(tmp_path,
                                                                             tiny_program):
    """A damaged local-jobs/jobs.json (an editor, a disk error) stopped every resume with exit
    3 naming the file only, and nothing rebuilt it. The error now says how, and llmzero-repair
    keeps the damaged file and rebuilds the table from the node records, the jobs' own
    status.json and the supervisors still running: a finished job keeps its end, a running
    one (its id never recorded: a controller killed after the submit) is found by its token and
    can be cancelled, and no job id is given out twice."""
    from llmzero_slurm.config import parse_config
    from llmzero_slurm.paths import ROOT
    from llmzero_slurm.store.run_store import RunStore
    store = RunStore.create(tmp_path / "run", parse_config({"name": "demo", "scheduler": "local"}))
    sched = LocalScheduler(store.root / "local-jobs")
    jobs = local_phases(store, tiny_program, [2, 200])
    names = [read_directives(store.node_dir(i).script.read_text())["job-name"] for i in (0, 1)]
    store.update_node(0, lambda n: (setattr(n.submission, "job_id", jobs[0]),   # 1: never recorded
                                    setattr(n, "status", Status.RUNNING)))
    finish(sched, jobs[0])
    wait_for((store.node_dir(1).metrics_file).exists, 30, "the first step of node 1")
    table = store.root / "local-jobs" / "jobs.json"
    table.write_text('{"jobs": ')

    def command(name: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(ROOT / "bin" / f"llmzero-{name}"), str(store.root)],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "LLMZERO_PYTHON": sys.executable})
    resumed = command("start")
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    assert f"error: {table}: corrupt JSON (line 1, column 10): Expecting value; llmzero-repair " \
           f"{store.root} rebuilds it from the node folders" in resumed.stderr
    repaired = command("repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    [kept] = table.parent.glob("jobs.json.damaged-*")
    assert kept.read_text() == '{"jobs": '
    assert "local-jobs/jobs.json: corrupt JSON (line 1, column 10): Expecting value; rebuilt " \
           "from the node folders (2 job(s), 1 still running; next job id 3), the damaged file " \
           f"kept as {kept.name}" in repaired.stdout
    fresh = LocalScheduler(store.root / "local-jobs")          # what a resumed controller builds
    assert fresh.states([jobs[0]])[jobs[0]].status is Status.COMPLETED
    assert fresh.find_by_token("tok-1", names[1]) == jobs[1]
    assert fresh.states([jobs[1]])[jobs[1]].status is Status.RUNNING
    fresh.cancel(jobs[1], names[1])
    assert finish(fresh, jobs[1]).status is Status.CANCELLED
    again = fresh.submit(store.node_dir(0).script, "tok-0")
    assert int(again) > int(jobs[1])
    finish(fresh, again)


def test_a_failed_monitor_submission_is_a_scheduler_error(tmp_path, monkeypatch):
    """Issue 14.5: a transient sbatch failure escaped as a submitit traceback (exit 1)."""
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: Batch job submission failed: "
                                  "Socket timed out on send/recv operation' >&2\nexit 1\n")
    (shims / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    with pytest.raises(SchedulerError, match="submitting the monitor job mon") as err:
        SlurmScheduler().submit_call(print, (), tmp_path / "monitor", CallJob("mon", 5))
    assert err.value.retryable and err.value.exit_code == 5


def test_the_monitor_job_carries_no_wckey_of_its_own(tmp_path, monkeypatch):
    """submitit adds `--wckey=submitit` unless told not to: where a site enforces workload
    characterization keys (AccountingStorageEnforce=wckeys) that unknown key is refused, and
    every poll's monitor submission failed; elsewhere it lands in the site's accounting."""
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "sbatch").write_text(f"#!/bin/sh\ncp \"$1\" {tmp_path}/submitted.sh\n"
                                  "echo 'Submitted batch job 4242'\n")
    (shims / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    job = SlurmScheduler().submit_call(print, (), tmp_path / "monitor",
                                       CallJob("mon", 5, comment="llmz:monitor,run=r"))
    script = (tmp_path / "submitted.sh").read_text()
    assert job == "4242" and "--job-name=mon" in script
    assert "wckey" not in script


def killing(killed: tuple[str, ...], squeue: str = ""):
    """Slurm clients of which those named end by a real SIGTERM, as a scancel of the
    controller's job ends its children; squeue lists `squeue`."""
    def clients(argv):
        if argv[0] in killed:
            return subprocess.run(["sh", "-c", "kill -TERM $$"], capture_output=True, text=True)
        return subprocess.CompletedProcess(argv, 0, squeue if argv[0] == "squeue" else "", "")
    return clients


@pytest.fixture
def token_script(tmp_path) -> Path:
    script = tmp_path / "phase.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --comment=llmz:node=0000,token=tok-k\n")
    return script


@pytest.mark.parametrize("killed, message", [
    (("sbatch",), "sbatch was ended by signal 15.*looked for by its token"),
    (("sbatch", "squeue"), "squeue kept failing.*signal 15")])
def test_an_sbatch_killed_by_a_signal_is_unsure_not_a_refusal(token_script, killed, message):
    """CI stop 26: `scancel` of the controller's job also hit the sbatch it was running; the
    signal was read as a refusal and the node failed, never submitted. The job may have
    reached slurmctld, so the token is looked for and the error is retryable."""
    sched = SlurmScheduler(runner=killing(killed), retries=1, retry_wait_s=0)
    with pytest.raises(SchedulerError, match=message) as err:
        sched.submit(token_script, "tok-k")
    assert err.value.retryable


def test_an_sbatch_that_times_out_is_unsure_too(token_script):
    def clients(argv):
        if argv[0] == "sbatch":
            raise subprocess.TimeoutExpired(argv, 120)
        return subprocess.CompletedProcess(argv, 0, "", "")
    with pytest.raises(SchedulerError, match="did not answer.*looked for by its token") as err:
        SlurmScheduler(runner=clients, retry_wait_s=0).submit(token_script, "tok-k")
    assert err.value.retryable


def test_an_sbatch_whose_answer_was_cut_off_is_unsure(token_script):
    """"Zero Bytes were transmitted or received" (a busy slurmctld dropped the connection) was
    taken for a refusal and the node failed, though the job may have been registered and run
    in the node's folder beside the debug phase the failure led to."""
    def clients(argv):
        if argv[0] == "sbatch":
            return subprocess.CompletedProcess(argv, 1, "", "sbatch: error: Batch job submission "
                                               "failed: Zero Bytes were transmitted or received\n")
        return subprocess.CompletedProcess(argv, 0, "", "")
    with pytest.raises(SchedulerError, match="Zero Bytes.*looked for by its token") as err:
        SlurmScheduler(runner=clients, retries=1, retry_wait_s=0).submit(token_script, "tok-k")
    assert err.value.retryable


POLICY = "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy " \
         "(job submit limit, user's size and/or time limits)"


@pytest.mark.parametrize("reason, retryable", [
    ("QOSMaxSubmitJobPerUserLimit", True), ("AssocMaxSubmitJobLimit", True),
    ("AssocGrpSubmitJobsLimit", True), ("AssocMaxWallDurationPerJobLimit", False),
    ("QOSMaxGRESPerJob", False), ("", False)])
def test_only_a_limit_on_queued_jobs_is_waited_out(token_script, reason, retryable):
    """Slurm refuses every job over an association or QOS limit with one message, which
    names 'job submit limit' whatever the limit: a phase asking for more time than its QOS
    allows was sent again every minute for ever, never failed, never analysed. Only the
    reason that names a limit on submitted jobs goes away with waiting."""
    def clients(argv):
        return subprocess.CompletedProcess(argv, 1, "", f"sbatch: error: {reason}\n{POLICY}\n")
    with pytest.raises(SchedulerError, match="violates accounting/QOS policy") as err:
        SlurmScheduler(runner=clients, retry_wait_s=0).submit(token_script, "tok-k")
    assert err.value.retryable is retryable


@pytest.mark.parametrize("code", [errno.EAGAIN, errno.ENOMEM, errno.EINTR])
def test_a_client_the_system_cannot_start_for_a_moment_is_tried_again(token_script, code):
    """Review: EAGAIN from a busy login node's process limit (or ENOMEM, EINTR) starting
    sbatch was a refusal no waiting cures: the node failed, and the controller planned and
    failed every phase of its budget in one poll. The client never ran, so nothing reached
    slurmctld: retried, then a retryable error the submitter backs off on."""
    calls = []

    def clients(argv):
        calls.append(argv[0])
        if argv[0] == "sbatch" and calls.count("sbatch") == 1:
            raise OSError(code, os.strerror(code))
        return subprocess.CompletedProcess(argv, 0, "77\n" if argv[0] == "sbatch" else "", "")
    assert SlurmScheduler(runner=clients, retry_wait_s=0).submit(token_script, "tok-k") == "77"

    def never(argv):
        if argv[0] == "sbatch":
            raise OSError(code, os.strerror(code))
        return subprocess.CompletedProcess(argv, 0, "", "")
    with pytest.raises(SchedulerError, match="cannot run sbatch") as err:
        SlurmScheduler(runner=never, retries=1, retry_wait_s=0).submit(token_script, "tok-k")
    assert err.value.retryable and not err.value.unsure


def test_a_client_that_is_not_there_is_a_refusal(token_script):
    def missing(argv):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")
    with pytest.raises(SchedulerError, match="cannot run sbatch: No such file") as err:
        SlurmScheduler(runner=missing, retry_wait_s=0).submit(token_script, "tok-k")
    assert not err.value.retryable


def test_an_sbatch_killed_after_it_got_through_is_found_by_its_token(token_script):
    clients = killing(("sbatch",), squeue="77|PENDING|None|0|llmz:node=0000,token=tok-k\n")
    assert SlurmScheduler(runner=clients, retry_wait_s=0).submit(token_script, "tok-k") == "77"


UNREACHABLE = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"


@pytest.mark.parametrize("stop_at_s", [0.0, 0.5])
def test_a_stop_ends_a_clients_retries_and_their_waits(stop_at_s):
    """Review: a Ctrl-C while slurmctld did not answer waited out the client's retries (2 + 4 +
    8 + 16 + 32 s of sleep), and the controller job's SIGTERM was followed by Slurm's SIGKILL
    30 s later, its lease never released. Once the stop is asked for (before the call, or
    during a wait between tries) the call makes no further try: a retryable error at once."""
    stop_at = time.monotonic() + stop_at_s
    calls = []

    def down(argv):
        calls.append(argv[0])
        return subprocess.CompletedProcess(argv, 1, "", UNREACHABLE)
    sched = SlurmScheduler(runner=down, retry_wait_s=20.0)
    sched.give_up_when(lambda: time.monotonic() >= stop_at)
    began = time.monotonic()
    with pytest.raises(SchedulerError, match="Unable to contact.*not tried again") as err:
        sched.states(["41"])
    # the wait it cut short was 20 s: a bound well under it, with room for a loaded machine
    assert time.monotonic() - began < stop_at_s + 5.0
    assert err.value.retryable and calls == ["squeue"]


SLOW = "sleep 30 & echo $$ $! >>\"$0.pids\"\nwait"   # a wrapper script and the client it waits on


@pytest.mark.parametrize("clients", [{"squeue": SLOW}, {"squeue": "true", "sacct": SLOW}])
def test_a_stop_ends_a_query_under_way_as_no_answer(tmp_path, monkeypatch, clients):
    """Review: an squeue or sacct under way when the stop signal came held the stopping
    controller until slurmctld answered, up to the clients' 120 s timeout (Slurm's SIGKILL
    may come first, the lease never released). The query is ended at once, with the
    processes it started, and the poll has no answer: no job is reported, nor counted as
    unknown (a sacct stopped is not a sacct that found nothing)."""
    slurm_clients(tmp_path, monkeypatch, **clients)
    stop_at = time.monotonic() + 0.5
    sched = SlurmScheduler(retries=0, min_poll_s=0)
    sched.give_up_when(lambda: time.monotonic() >= stop_at)
    with pytest.raises(SchedulerError, match="was ended unanswered: stopping") as err:
        sched.states(["41"])
    # the client would have slept 30 s: ended at once is well under that, on a loaded machine too
    assert time.monotonic() - stop_at < 10.0 and err.value.retryable
    [slow] = [client for client, body in clients.items() if body == SLOW]
    started = (tmp_path / "bin" / f"{slow}.pids").read_text().split()
    assert len(started) == 2
    # killed at once; the kernel may take a moment to end them on a loaded machine
    wait_for(lambda: not any(alive(int(pid)) for pid in started), 5, "the query's processes to end")


def test_a_stop_lets_an_sbatch_under_way_and_a_later_lookup_answer(token_script, tmp_path,
                                                                    monkeypatch):
    """sbatch is not ended by the stop: a request killed half sent leaves it unknown whether
    slurmctld took the job. Nor is a query started once the stop came: a stopping controller
    looks its unconfirmed jobs up by token to cancel them."""
    slurm_clients(tmp_path, monkeypatch, sbatch="sleep 1.5\necho 77",
                  squeue="sleep 1\necho '77|PENDING|None|0|llmz:node=0000,token=tok-k'")
    stop_at = time.monotonic() + 0.3
    sched = SlurmScheduler(retries=0)
    sched.give_up_when(lambda: time.monotonic() >= stop_at)
    assert sched.submit(token_script, "tok-k") == "77"
    assert sched.find_by_token("tok-k", "phase.sbatch") == "77"


FORGOTTEN = "scancel: error: Kill job error on job id 4242: Invalid job id specified"


def test_a_stop_cancelled_again_does_not_repeat_its_reason_in_the_comment(tmp_path, monkeypatch):
    """Review: the monitor cancels again at its next pass when a scancel failed after the
    comment was set; each try appended the same reason to the job's comment once more."""
    why = "llmzero: stopped early at step 20 by the heuristic stopper: flat, below node 1"
    slurm_clients(tmp_path, monkeypatch,
                  squeue=f"echo '7|RUNNING|None|0|llmz:node=0001,token=t,{why}'",
                  scontrol=f'echo "$@" >>{tmp_path}/scontrol.log', scancel="exit 0")
    SlurmScheduler(min_poll_s=0).cancel("7", "llmz-x-0001-scratch", why)
    assert not (tmp_path / "scontrol.log").exists()


def test_cancelling_a_job_slurm_has_forgotten_is_done():
    """Review: scancel of a job Slurm had forgotten (ended past MinJobAge) exits 1 with
    "Invalid job id specified" (Slurm 22.05). Read as a failure, a resumed controller could not
    replace the previous session's monitor for 15 minutes (the keeper cancels it first) and
    `llmzero-stop --cancel` of a phase that had just ended exited 5. The job is gone either
    way; any other refusal still fails."""
    asked = []

    def scancel(argv):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 1, "", FORGOTTEN + "\n")
    sched = SlurmScheduler(runner=scancel, retry_wait_s=0)
    sched.cancel("4242", "llmz-x-0001-scratch")
    sched.cancel_call("4242", "llmz-x-monitor")
    assert [a[0] for a in asked] == ["scancel", "scancel"]

    def denied(argv):
        return subprocess.CompletedProcess(argv, 1, "", "scancel: error: Kill job error on job "
                                           "id 4242: Access/permission denied")
    with pytest.raises(SchedulerError, match="permission denied"):
        SlurmScheduler(runner=denied, retry_wait_s=0).cancel("4242", "llmz-x-0001-scratch")


class Clients:
    """squeue and sacct answering as scripted, in their real output formats."""

    def __init__(self, squeue: str = "", sacct: str | None = ""):
        self.squeue, self.sacct = squeue, sacct

    def __call__(self, argv):
        if argv[0] == "squeue":
            return subprocess.CompletedProcess(argv, 0, self.squeue, "")
        if self.sacct is None:
            return subprocess.CompletedProcess(argv, 1, "", "sacct: error: Problem talking to "
                                               "the database: Connection refused")
        return subprocess.CompletedProcess(argv, 0, self.sacct if "--allocations" in argv else "", "")


def test_a_live_job_squeue_omits_is_alive_when_sacct_says_so(tmp_path):
    """Issue 14.4: sacct's RUNNING row was dropped, status.json said running: failed for good."""
    status_file = tmp_path / "status.json"
    status_file.write_text(json.dumps({"state": "running", "job_id": "41"}))
    sched = SlurmScheduler(runner=Clients(sacct="41|RUNNING|0:0\n"), min_poll_s=0)
    state = sched.states(["41"], {"41": tmp_path})["41"]
    assert (state.raw, state.status, state.final) == ("RUNNING", Status.RUNNING, False)


def test_a_runaway_accounting_row_gives_way_to_the_jobs_own_end(tmp_path):
    """After a slurmctld crash slurmdbd may keep a job as running that the controller no
    longer knows (sacctmgr show runawayjobs): its RUNNING row kept the phase running for
    ever, and the end the job itself wrote was never read."""
    (tmp_path / "status.json").write_text(json.dumps({"state": "failed", "job_id": "41",
                                                      "exit_code": 1}))
    sched = SlurmScheduler(runner=Clients(sacct="41|RUNNING|0:0|llmz-x-0001-scratch\n"),
                           min_poll_s=0, lost_after_s=0)
    polls = [sched.states(["41"], {"41": tmp_path}, {"41": "llmz-x-0001-scratch"}).get("41")
             for _ in range(LOST_AFTER_MISSES)]
    assert not any(s is not None and s.final for s in polls[:-1])   # squeue may have missed it
    state = polls[-1]
    assert (state.status, state.source, state.exit_code) == (Status.FAILED, "status.json", 1)


def test_an_accounting_row_of_another_name_is_another_jobs(tmp_path):
    """sacct -c ignores --name: its row for a recorded id that another job (of another name)
    has since taken was read as the phase's end; the phase's own status.json says it."""
    (tmp_path / "status.json").write_text(json.dumps({"state": "completed", "job_id": "41",
                                                      "exit_code": 0}))
    sched = SlurmScheduler(runner=Clients(sacct="41|FAILED|1:0|someone-elses-training\n"),
                           min_poll_s=0)
    state = sched.states(["41"], {"41": tmp_path}, {"41": "llmz-x-0001-scratch"})["41"]
    assert (state.raw, state.source) == ("COMPLETED", "status.json")
    same = SlurmScheduler(runner=Clients(sacct="41|FAILED|1:0|llmz-x-0001-scratch\n"),
                          min_poll_s=0)
    assert same.states(["41"], {"41": tmp_path}, {"41": "llmz-x-0001-scratch"})["41"].raw == \
        "FAILED"


@pytest.mark.parametrize("shown, code, reason", [
    ("512", 2, None), ("9", 0, "signal 9"),         # Slurm before 23.02: a raw wait status
    ("2:0", 2, None), ("0:9", 0, "signal 9")])      # 23.02 and later: code:signal, as sacct
def test_squeue_exit_codes_are_read_in_either_format(shown, code, reason):
    """squeue's exit_code became 'code:signal' in Slurm 23.02; read as a wait status, it gave
    no exit code at all, so a trainer's exit 2 (bad input) looked retryable."""
    sched = SlurmScheduler(runner=Clients(squeue=f"41|FAILED|None|{shown}|llmz:node=1\n"),
                           min_poll_s=0)
    state = sched.states(["41"])["41"]
    assert (state.exit_code, state.reason) == (code, reason)


@pytest.mark.parametrize("status", [None, "running"])
def test_a_job_no_source_knows_is_unknown_for_a_while_then_lost(tmp_path, status):
    """Issue 14.4: absent from squeue, sacct down, no status.json: queued for ever."""
    if status:
        (tmp_path / "status.json").write_text(json.dumps({"state": status, "job_id": "41"}))
    sched = SlurmScheduler(runner=Clients(sacct=None), min_poll_s=0, retries=0, lost_after_s=0.2)
    assert sched.states(["41"], {"41": tmp_path}) == {}
    assert sched.states(["41"], {"41": tmp_path}) == {}       # two misses in quick succession
    time.sleep(0.25)
    state = sched.states(["41"], {"41": tmp_path})["41"]
    assert (state.raw, state.status) == ("LOST", Status.FAILED) and "lost" in state.reason
    # It was only late: once squeue lists it again it is alive.
    sched = SlurmScheduler(runner=Clients(sacct=None), min_poll_s=0, retries=0, lost_after_s=0.2)
    sched.states(["41"], {"41": tmp_path})
    sched.run = Clients(squeue="41|RUNNING|None|0|llmz:node=1,token=t\n")
    assert sched.states(["41"])["41"].status is Status.RUNNING


def test_a_poll_for_other_jobs_keeps_an_unknown_jobs_clock(tmp_path):
    """The monitor keeper asks about its own job through the controller's scheduler; each of
    its polls wiped the first-seen time of every unknown phase job, so one its sources had all
    forgotten was never declared lost while proposals kept the keeper polling."""
    sched = SlurmScheduler(runner=Clients(squeue="77|RUNNING|None|0|llmz:monitor\n",
                                          sacct=None), min_poll_s=0, retries=0, lost_after_s=0.2)
    assert "41" not in sched.states(["41"], {"41": tmp_path})
    assert sched.states(["77"])["77"].status is Status.RUNNING      # the keeper's poll
    assert "41" not in sched.states(["41"])
    time.sleep(0.25)
    assert sched.states(["41"])["41"].raw == "LOST"


ENV_DUMP = """import os
node = os.environ["LLMZ_NODE_DIR"]
with open(os.path.join(node, "environs"), "wb") as fh:
    for pid in ("self", str(os.getppid())):     # the trainer, and the phase script's shell
        with open(f"/proc/{pid}/environ", "rb") as env:
            fh.write(env.read() + b"\\n")
"""


@pytest.mark.parametrize("kind", BACKENDS)
def test_no_llm_key_of_any_name_reaches_a_phase_job(kind, tmp_path, monkeypatch):
    """Issue 15.7: sbatch exported the controller's environment and the script's `unset` left
    the key in /proc/<pid>/environ; a key under a custom agents.api_key_env was not unset."""
    keys = {"ANTHROPIC_API_KEY": "sk-ant-test-0001112223", "OPENAI_API_KEY": "sk-test-4445556667",
            "MY_LLM_CRED": "cred-8889990001", "COPY_OF_IT": "sk-ant-test-0001112223"}
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    sched = (SlurmScheduler(min_poll_s=0, secret_names=["MY_LLM_CRED"]) if kind == "slurm"
             else LocalScheduler(tmp_path / "local-jobs", ["MY_LLM_CRED"]))
    program = tmp_path / "env_dump.py"
    program.write_text(ENV_DUMP)
    script = phase(tmp_path, str(program))
    assert finish(sched, sched.submit(script, "tok-1")).status is Status.COMPLETED
    dumped = (script.parent / "environs").read_bytes()
    assert b"LLMZ_NODE_DIR=" in dumped and b"HOME=" in dumped
    for value in set(keys.values()):
        assert value.encode() not in dumped


def test_sbatch_input_variables_of_the_users_shell_never_reach_sbatch(tmp_path, monkeypatch,
                                                                     caplog):
    """sbatch reads SBATCH_* variables with precedence over the script's #SBATCH lines: a
    .bashrc's SBATCH_JOB_NAME renamed every phase (the controller finds its jobs by name),
    SBATCH_PARTITION or SBATCH_TIMELIMIT silently replaced the experiment's. The controller
    says once which it leaves out, by name."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text(f"#!/bin/bash\nenv >>{tmp_path}/sbatch-env.txt\necho 123\n")
    (fake / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    shell = {"SBATCH_JOB_NAME": "my-notebook", "SBATCH_PARTITION": "debug",
             "SBATCH_TIMELIMIT": "0:10:00"}
    for name, value in shell.items():
        monkeypatch.setenv(name, value)
    sched = SlurmScheduler(min_poll_s=0)
    for node in (1, 2):
        assert sched.submit(phase(tmp_path, "unused", node_id=node), "tok-1") == "123"
    seen = (tmp_path / "sbatch-env.txt").read_text()
    assert "SBATCH_" not in seen and "PATH=" in seen
    [said] = [r.getMessage() for r in caplog.records if "SBATCH_" in r.getMessage()]
    assert "SBATCH_JOB_NAME, SBATCH_PARTITION, SBATCH_TIMELIMIT" in said
    assert not any(value in said for value in shell.values())


def test_a_slow_squeue_backs_the_polls_off(monkeypatch):
    """Issue 14: sites ask login-node tools to ask a busy slurmctld less often."""
    monkeypatch.setattr("llmzero_slurm.schedulers.slurm.SLOW_QUERY_S", 5.0)
    # The scheduler module's own clock (not the interpreter's), so a loaded host's real delays
    # cannot move the window.
    clock = [1000.0]
    monkeypatch.setattr("llmzero_slurm.schedulers.slurm.time",
                        SimpleNamespace(monotonic=lambda: clock[0]))
    calls: list[str] = []
    answer = Clients(squeue="41|RUNNING|None|0|llmz:node=1,token=t\n")

    def slow(argv):
        calls.append(argv[0])
        clock[0] += 6.0                     # this squeue takes 6 s: poll at most every 60 s
        return answer(argv)
    sched = SlurmScheduler(runner=slow, min_poll_s=0)
    assert sched.states(["41"])["41"].raw == "RUNNING"
    clock[0] += 59.0
    assert sched.states(["41"])["41"].raw == "RUNNING"     # the cached answer
    assert calls == ["squeue"]
    clock[0] += 2.0
    sched.states(["41"])
    assert calls == ["squeue", "squeue"]


def test_polls_resume_soon_after_slurmctld_comes_back(monkeypatch):
    """An outage is no slow squeue: the retries' failed attempts and waits (130 s here) were
    counted as one squeue's duration, and the next poll came ten times that later (15 min on
    a real cluster), so phases that ended meanwhile were not seen."""
    clock = [1000.0]
    fake_time = SimpleNamespace(monotonic=lambda: clock[0],
                                sleep=lambda s: clock.__setitem__(0, clock[0] + s))
    # the retries' waits (wait_unless, in base) pass on this clock too, not in real seconds
    monkeypatch.setattr("llmzero_slurm.schedulers.slurm.time", fake_time)
    monkeypatch.setattr("llmzero_slurm.schedulers.base.time", fake_time)
    calls: list[str] = []
    answer = Clients(squeue="41|RUNNING|None|0|llmz:node=1,token=t\n")

    def outage_then_quick(argv):
        calls.append(argv[0])
        if len(calls) <= 3:                 # slurmctld down: each attempt waits for its connect
            clock[0] += 20.0
            return subprocess.CompletedProcess(argv, 1, "", "slurm_load_jobs error: Unable to "
                                               "contact slurm controller (connect failure)")
        return answer(argv)                 # back: it answers at once
    sched = SlurmScheduler(runner=outage_then_quick, min_poll_s=0, retry_wait_s=10.0)
    assert sched.states(["41"])["41"].raw == "RUNNING"
    assert len(calls) == 4
    clock[0] += sched.max_poll_s + 1
    sched.states(["41"])
    assert len(calls) == 5


@pytest.mark.slurm
def test_a_phase_submitted_from_inside_a_job_sees_only_its_own_job(tmp_path, monkeypatch):
    """A controller job (llmzero-start --submit) requeued once passed SLURM_RESTART_COUNT=1 to
    every phase it submitted ("restart 1" in status.json), and its SLURM_MEM_PER_NODE to a
    phase that sets no mem, where srun would take it as the steps' memory request."""
    enclosing = {"SLURM_JOB_ID": "999999", "SLURM_RESTART_COUNT": "1",
                 "SLURM_MEM_PER_NODE": "4321", "SLURMD_NODENAME": "login-job-node"}
    for name, value in enclosing.items():
        monkeypatch.setenv(name, value)
    program = tmp_path / "env_dump.py"
    program.write_text(ENV_DUMP)
    script = phase(tmp_path, str(program))
    sched = SlurmScheduler(min_poll_s=0, retry_wait_s=0.5)
    job = sched.submit(script, "tok-1")
    assert finish(sched, job).status is Status.COMPLETED
    dumped = (script.parent / "environs").read_bytes()
    assert f"SLURM_JOB_ID={job}".encode() in dumped
    for name, value in enclosing.items():
        assert f"{name}={value}".encode() not in dumped
    assert status_json(script)["restart_count"] == 0


def test_a_rerun_by_hand_waits_its_turn_while_the_nodes_job_trains(sched, tmp_path, tiny_program):
    """Audit F13: `sbatch phase.sbatch` while the scheduled job still ran trained the whole
    phase a second time into the same checkpoints and metrics.jsonl, and left status.json
    naming the by-hand job."""
    script = phase(tmp_path, tiny_program, hparams={"total_training_steps": 40, "seed": 5},
                   step_s=0.1)
    job = sched.submit(script, "tok-1")
    wait_for(lambda: (script.parent / "metrics.jsonl").exists(), 30, "the scheduled job's training")
    by_hand = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert by_hand.returncode == 3, by_hand.stdout + by_hand.stderr
    assert f"another job is training in {script.parent} (status.json: job {job})" in by_hand.stderr
    assert finish(sched, job).status is Status.COMPLETED
    assert status_json(script)["job_id"] == job
    assert steps(script) == list(range(1, 41))
    again = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr      # its turn now


@pytest.mark.slurm
def test_a_scancel_after_the_time_limit_warning_is_a_cancel(tmp_path, tiny_program):
    """Audit F14: once a phase had its USR1 time-limit warning, every later scancel was
    recorded in status.json as a time-out."""
    sched = SlurmScheduler(min_poll_s=0, retry_wait_s=0.5)
    # A limit of 3 minutes: the warning (120 s before it) falls due a minute in and comes at
    # slurmctld's next 30-s check. One due at once could come before the batch shell was up
    # on a loaded machine, where Slurm drops it (CI: none came in 100 s, a 2-minute limit).
    script = phase(tmp_path, tiny_program, hparams={"total_training_steps": 600}, step_s=0.5,
                   time="3")
    job = sched.submit(script, "tok-1")
    output = script.parent / f"slurm-{job}.out"
    wait_for(lambda: "time limit warning (USR1)" in (output.read_text() if output.exists() else ""),
             150, "Slurm's warning")
    sched.cancel(job, phase_job_name("sched", 1, "scratch"))
    assert finish(sched, job).raw == "CANCELLED"
    status = status_json(script)
    assert (status["state"], status["exit_code"]) == ("cancelled", 143), status


def test_a_run_killed_before_its_end_record_counts_until_its_last_metrics_write(tmp_path,
                                                                                 tiny_program):
    """A run killed outright (SIGKILL, a node lost) writes no finished_at; its requeue carried
    on none of the time it had held the devices, as if it had never run."""
    script = phase(tmp_path, tiny_program, hparams={"total_training_steps": 12, "seed": 1},
                   step_s=0.3)
    env = {**os.environ, "SLURM_JOB_ID": "4243", "SLURM_RESTART_COUNT": "0"}
    first = subprocess.Popen(["bash", str(script)], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: len(steps(script)) >= 6 if (script.parent / "metrics.jsonl").exists()
             else False, 30, "six steps")
    os.killpg(first.pid, signal.SIGKILL)              # no trap runs: no end record
    first.wait(timeout=30)
    before = status_json(script)
    assert "finished_at" not in before
    held = (script.parent / "metrics.jsonl").stat().st_mtime - before["started_at"]
    assert held > 1.5
    rerun = subprocess.run(["bash", str(script)], env={**env, "SLURM_RESTART_COUNT": "1"},
                           capture_output=True, text=True, timeout=60)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert status_json(script)["earlier_s"] == pytest.approx(held, abs=0.05)


def test_a_requeued_phase_counts_the_device_time_of_every_run(tmp_path, tiny_program):
    """A requeue runs the phase's script again under its job id, and each run rewrote
    status.json with its own start: the phase's device-hours (the report's cost, the
    budget_gpu_hours budget) counted the last run only, so a phase preempted after hours of
    training was charged the minutes of its rerun."""
    script = phase(tmp_path, tiny_program, hparams={"total_training_steps": 8, "seed": 1},
                   step_s=0.3)
    env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_RESTART_COUNT": "0"}
    first = subprocess.Popen(["bash", str(script)], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: (script.parent / "ckpt" / "global_step_3").exists(), 30, "a checkpoint")
    os.killpg(first.pid, signal.SIGTERM)              # what Slurm sends on a requeue
    first.wait(timeout=30)
    before = status_json(script)
    earlier = before["finished_at"] - before["started_at"]
    assert earlier > 0.5
    rerun = subprocess.run(["bash", str(script)], env={**env, "SLURM_RESTART_COUNT": "1"},
                           capture_output=True, text=True, timeout=60)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    after = status_json(script)
    assert after["state"] == "completed" and after["restart_count"] == 1
    status = NodeDir(script.parent).status()
    assert status is not None
    assert status.device_hours(nodes=1) * 3600 == pytest.approx(
        earlier + after["finished_at"] - after["started_at"], abs=1e-3)
    again = subprocess.run(["bash", str(script)], env={**os.environ}, capture_output=True,
                           text=True, timeout=60)      # a rerun by hand starts its own count
    assert again.returncode == 0 and status_json(script)["earlier_s"] == 0


def test_ctrl_c_on_a_phase_run_by_hand_stops_its_trainer(tmp_path, tiny_program):
    """Ctrl-C (SIGINT to the terminal's process group) on `bash phase.sbatch`: the script
    recorded 'cancelled' and passed SIGINT on to the trainer, which a background job of a
    non-interactive shell ignores, so training went on to its end under a cancelled record."""
    script = phase(tmp_path, tiny_program, hparams={"total_training_steps": 100, "seed": 1},
                   step_s=0.3)
    log = tmp_path / "by_hand.log"
    with log.open("wb") as out:
        # As a terminal's shell starts it, SIGINT at its default: a bash that finds it ignored
        # (pytest run as a background job, `make test &`) may not trap it, nor could Ctrl-C
        # reach such a job.
        by_hand = subprocess.Popen(["bash", str(script)], start_new_session=True,
                                   stdout=out, stderr=subprocess.STDOUT,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for(lambda: (script.parent / "metrics.jsonl").exists(), 30, "the first step")
    os.killpg(by_hand.pid, signal.SIGINT)
    try:
        by_hand.wait(timeout=20)
    except subprocess.TimeoutExpired:
        group = subprocess.run(["ps", "-o", "pid,stat,wchan:20,args", "-g", str(by_hand.pid)],
                               capture_output=True, text=True).stdout
        os.killpg(by_hand.pid, signal.SIGKILL)
        pytest.fail(f"still running 20 s after SIGINT\n{group}\n{log.read_text()}\n"
                    f"{(script.parent / 'status.json').read_text()}")
    assert by_hand.returncode == 130, log.read_text()
    status = status_json(script)
    assert (status["state"], status["exit_code"]) == ("cancelled", 130), status
    trained = len(steps(script))
    time.sleep(1.0)
    assert len(steps(script)) == trained < 100          # the trainer is gone too


# -- the local scheduler says what Slurm would say ------------------------------------------

def plain_job(tmp_path: Path, body: str, node: str = "plain") -> tuple[LocalScheduler, str]:
    """A bare batch script (`body` after its #SBATCH lines) submitted to a local scheduler of
    `tmp_path`: the scheduler and the job id."""
    script = tmp_path / node / "phase.sbatch"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!/bin/bash\n#SBATCH --job-name={node}\n"
                      f"#SBATCH --comment=llmz:node=0001,token=tok-{node}\n"
                      f"#SBATCH --output={script.parent}/slurm-%j.out\n#SBATCH --time=1:00\n{body}\n")
    sched = LocalScheduler(tmp_path / "local-jobs")
    return sched, sched.submit(script, f"tok-{node}")


def started(sched: LocalScheduler, job: str) -> tuple[int, int]:
    """The pid of the job's supervisor and its process group, once its script runs."""
    result = sched.dir / f"{job}.result.json"
    wait_for(result.exists, 30, f"job {job} to start")
    table = json.loads((sched.dir / "jobs.json").read_text())
    return table["jobs"][job]["supervisor_pid"], json.loads(result.read_text())["pgid"]


def test_a_local_job_whose_shell_a_signal_killed_reads_as_slurm_shows_it(tmp_path):
    """Review: a local job whose batch shell was killed by a signal read FAILED with exit code
    137 (128 + 9), where Slurm shows 0:9 (exit code 0, "signal 9"), so the error analyzer saw
    two different failures. The local job now reads as the Slurm path reads Slurm's answer."""
    sched, job = plain_job(tmp_path, "kill -KILL $$")
    local = finish(sched, job)
    slurm = SlurmScheduler(runner=Clients(squeue=f"{job}|FAILED|None|0:9|llmz:node=1\n"),
                           min_poll_s=0).states([job])[job]
    assert (local.raw, local.status, local.exit_code, local.reason) == (
        slurm.raw, slurm.status, slurm.exit_code, slurm.reason) == (
        "FAILED", Status.FAILED, 0, "signal 9")


def test_a_local_job_that_ended_before_its_cancel_arrived_is_completed(tmp_path):
    """Review: a cancel that reached the supervisor after the job had exited 0, but before the
    supervisor saw it exit, recorded the job CANCELLED, though nothing was signalled. Slurm
    shows such a job COMPLETED; the local job now reads so too."""
    sched, job = plain_job(tmp_path, "sleep 1; exit 0")
    supervisor, pgid = started(sched, job)
    os.kill(supervisor, signal.SIGSTOP)           # a supervisor slow to see the job exit
    try:
        wait_for(lambda: not alive(pgid), 30, "the job to exit")
        sched.cancel(job, "plain")
    finally:
        os.kill(supervisor, signal.SIGCONT)
    state = finish(sched, job)
    assert (state.raw, state.status, state.exit_code) == ("COMPLETED", Status.COMPLETED, 0)


def test_a_local_submit_the_system_cannot_fork_for_is_a_retryable_error(tmp_path, monkeypatch):
    """Review: a fork the system refused (EAGAIN, ENOMEM under load) escaped the local submit
    as a traceback, left the table a row for a job that never ran (adopted after a restart
    by its token and read NODE_FAIL) and the supervisor log's file open. It is now a
    retryable SchedulerError, with no row and no file left open."""
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise BlockingIOError(11, "Resource temporarily unavailable")
    monkeypatch.setattr(subprocess, "Popen", refused)
    opened = len(os.listdir("/proc/self/fd"))
    with pytest.raises(SchedulerError, match="Resource temporarily unavailable") as refusal:
        plain_job(tmp_path, "true")
    assert refusal.value.retryable and not refusal.value.unsure
    assert len(os.listdir("/proc/self/fd")) == opened
    monkeypatch.undo()
    assert LocalScheduler(tmp_path / "local-jobs").find_by_token("tok-plain", "plain") is None


def test_a_dead_local_jobs_pid_taken_by_another_supervisor_or_call_is_not_that_job(tmp_path):
    """Review: a local job was alive while its recorded supervisor pid ran any process whose
    command line held the module's name, and a call job (the monitor) while its pid ran
    anything holding "submitit": after a reboot, another run's supervisor or monitor that got
    a dead one's pid read as it (RUNNING), and cancelling the dead one killed it. Now only
    the supervisor of that folder and job id, and submitit's local job for a folder of this
    run, count."""
    sched, dead = plain_job(tmp_path / "run", "sleep 60")
    supervisor, pgid = started(sched, dead)
    os.kill(supervisor, signal.SIGKILL)             # the host went down under it
    os.killpg(pgid, signal.SIGKILL)
    wait_for(lambda: not alive(pgid) and not alive(supervisor), 30, "the job to be gone")
    others = [plain_job(tmp_path / "run", "sleep 60", "same-run"),
              plain_job(tmp_path / "other", "sleep 60")]  # job 1 of another run
    other_run = LocalScheduler(tmp_path / "other" / "local-jobs")
    call = other_run.submit_call(time.sleep, (60,), tmp_path / "other" / "monitor" / "%j",
                                 CallJob("mon", 5))
    try:
        for other, job in others:
            table = json.loads((sched.dir / "jobs.json").read_text())
            table["jobs"][dead]["supervisor_pid"] = started(other, job)[0]   # its pid, reused
            (sched.dir / "jobs.json").write_text(json.dumps(table))
            assert sched.states([dead])[dead].final
            sched.cancel(dead, "plain")
            time.sleep(0.5)
            assert other.states([job])[job].raw == "RUNNING"
        assert sched.call_state(call) is None     # another run's monitor at our monitor's pid
        sched.cancel_call(call, "mon")
        time.sleep(0.5)
        assert other_run.call_state(call) is Status.RUNNING
    finally:
        os.kill(int(call), signal.SIGKILL)      # only the process matters here, not its end
        wait_for(lambda: other_run.call_state(call) is None, 30, "the other run's call to end")
        for other, job in others:
            other.cancel(job, "same-run" if other.dir == sched.dir else "plain")


def test_a_monitor_an_earlier_release_started_with_submitits_own_local_job_is_still_known(
        tmp_path):
    """Call jobs now run as llmzero_slurm.schedulers.local_call; one an upgrade left running
    under submitit's own local module read as gone, and the controller started a second
    monitor beside it."""
    import submitit
    sched = LocalScheduler(tmp_path / "run" / "local-jobs")
    ex = submitit.LocalExecutor(folder=tmp_path / "run" / "monitor" / "%j")
    ex.update_parameters(timeout_min=5)
    old = str(ex.submit(time.sleep, 60).job_id)
    try:
        wait_for(lambda: sched.call_state(old) is Status.RUNNING, 30, "the old monitor to be known")
    finally:
        os.kill(int(old), signal.SIGKILL)
    wait_for(lambda: sched.call_state(old) is None, 30, "the old monitor to be gone")


def test_a_local_job_cancelled_as_it_is_submitted_is_cancelled(tmp_path):
    """Review: a cancel right after the submit reached the supervisor before it had set its
    TERM handler: the signal killed it, and the job read NODE_FAIL ("the local supervisor died
    before the job ended") where Slurm shows CANCELLED. The cancel is now recorded before the
    signal: a supervisor that finds it starts nothing, and one the signal killed reads
    CANCELLED."""
    sched, job = plain_job(tmp_path, "echo started; sleep 30")
    sched.cancel(job, "plain")
    state = finish(sched, job)
    assert (state.raw, state.status) == ("CANCELLED", Status.CANCELLED)


def test_a_local_job_whose_supervisor_was_killed_trains_on_and_is_cancelled(tmp_path,
                                                                           tiny_program):
    """Review: a local job whose supervisor alone was killed trains on in its own session,
    yet read NODE_FAIL (or LOST) at once, and a cancel signalled the dead supervisor only, so
    nothing could stop it. Its process group, told by the job's mark in their environment
    from a group that took its id since, now keeps it RUNNING, and a cancel stops the group
    as the supervisor would have."""
    sched, script, job, supervisor, pgid = training(tmp_path, tiny_program)
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not alive(supervisor), 10, "the supervisor to die")
    trained = len(steps(script))
    wait_for(lambda: len(steps(script)) > trained, 10, "another step")
    assert sched.states([job])[job].raw == "RUNNING"
    sched.cancel(job, phase_job_name("sched", 1, "scratch"))
    state = finish(sched, job)
    assert (state.raw, state.status) == ("CANCELLED", Status.CANCELLED)
    assert status_json(script)["state"] == "cancelled" and not alive(pgid)
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)   # takes the pgid
    try:
        (sched.dir / f"{job}.result.json").write_text(json.dumps(
            {"state": "RUNNING", "pgid": stranger.pid, "started_at": time.time()}))
        assert sched.states([job])[job].raw == "CANCELLED"
        sched.cancel(job, phase_job_name("sched", 1, "scratch"))
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_a_slurm_poll_below_the_sites_floor_is_raised_to_it_with_a_note(tmp_path, monkeypatch,
                                                                       caplog):
    """Review: `scheduler: auto` (or --poll) turning out to be Slurm polled as often as told, 0.05
    s gave 20 squeue calls a second; it is now raised to 5 s, saying so. The local scheduler
    keeps a fast poll."""
    from llmzero_slurm.schedulers import make_scheduler
    monkeypatch.setattr(SlurmScheduler, "available", staticmethod(lambda: True))
    monkeypatch.setattr(SlurmScheduler, "ping", staticmethod(lambda timeout_s=15.0: "up"))
    monkeypatch.setattr("llmzero_slurm.schedulers.conf_problem", lambda: None)
    sched = make_scheduler("auto", tmp_path, poll_s=0.05)
    assert (sched.min_poll_s, sched.max_poll_s) == (5.0, 5.0)
    assert "polling Slurm every 5 s, not 0.05 s" in caplog.text
    assert isinstance(make_scheduler("local", tmp_path, poll_s=0.05), LocalScheduler)


def test_a_listed_scheduler_make_scheduler_cannot_build_is_refused(tmp_path, monkeypatch):
    """A third scheduler added to the list experiment.yaml is checked against was built as a
    LocalScheduler by make_scheduler, which asked only whether the kind was "slurm": a cluster's
    phases would have run on the login node."""
    from llmzero_slurm import schedulers
    monkeypatch.setattr(schedulers, "SCHEDULER_KINDS", (*schedulers.SCHEDULER_KINDS, "pbs"))
    monkeypatch.setattr(schedulers, "conf_problem", lambda: None)
    with pytest.raises(NotImplementedError, match="pbs"):
        schedulers.make_scheduler("pbs", tmp_path)


def orphaned_job(tmp_path: Path, leader: list[str], env: dict[str, str]
                 ) -> tuple[LocalScheduler, Path, subprocess.Popen]:
    """Local job 1 of a run whose supervisor is gone, its process group led by `leader`."""
    table, node = tmp_path / "local-jobs", tmp_path / "nodes" / "0000"
    table.mkdir(parents=True)
    node.mkdir(parents=True)
    group = subprocess.Popen(leader, env={**os.environ, **env}, start_new_session=True)
    (table / "jobs.json").write_text(json.dumps({"next_id": 2, "jobs": {"1": {
        "token": "t", "script": str(node / "phase.sbatch"), "name": "x",
        "output": str(node / "slurm-1.out"), "submit_dir": str(node), "time_limit_s": None,
        "cpus_per_task": "1", "submitted_at": 0, "supervisor_pid": group.pid}}}))
    (table / "1.result.json").write_text(json.dumps({"state": "RUNNING", "pgid": group.pid,
                                                     "started_at": 0}))
    return LocalScheduler(table), node, group


def test_a_local_job_a_previous_release_started_reads_running_after_an_upgrade(tmp_path):
    """Review: the supervisor moved to its own module; one still running from the release
    before, under the old module's name, was not recognised, so its job (phases go on
    through `llmzero-stop` without --cancel and an upgrade) read LOST while it trained."""
    table = tmp_path / "local-jobs"
    sched, node, group = orphaned_job(tmp_path, [
        sys.executable, "-c", "import time; time.sleep(60)", "-m",
        "llmzero_slurm.schedulers.local", str(table), "1"], {})
    try:
        wait_for(lambda: b"schedulers.local" in Path(f"/proc/{group.pid}/cmdline").read_bytes(),
                 10, "the old supervisor")
        assert sched.states(["1"], {"1": node})["1"].raw == "RUNNING"
    finally:
        group.kill()
        group.wait()


def test_an_orphaned_local_job_whose_script_ended_is_not_kept_running_by_a_leftover(tmp_path):
    """Review: with its supervisor dead, a job counted as running while any process of its
    group lived: a `sleep &` its script left behind kept a finished phase RUNNING, holding a
    slot. The script's own process, which leads the group, decides, as for the supervisor."""
    from llmzero_slurm.schedulers.local_table import MARK, job_mark
    env = {MARK: job_mark(tmp_path / "local-jobs", "1")}
    sched, node, leader = orphaned_job(tmp_path, ["bash", "-c", "sleep 60 & exit 0"], env)
    leader.wait()
    (node / "status.json").write_text(json.dumps({"job_id": "1", "state": "completed",
                                                  "exit_code": 0}))
    try:
        assert sched.states(["1"], {"1": node})["1"].raw == "COMPLETED"
    finally:
        os.killpg(leader.pid, signal.SIGKILL)


def test_two_squeues_are_never_closer_than_the_least_poll(monkeypatch):
    """The monitor's state is asked apart from the phases' (its own squeue): right after a
    phase poll it went out 4 s after it on the local cluster, under the 5 s that README
    promises sites. A query now waits out the rest of the least poll period since the last."""
    clock = [1000.0]
    monkeypatch.setattr("llmzero_slurm.schedulers.slurm.time", SimpleNamespace(
        monotonic=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s)))
    times: list[float] = []

    def timed(argv):
        times.append(clock[0])
        asked = next(a for a in argv if a.startswith("--jobs=")).split("=")[1].split(",")
        return subprocess.CompletedProcess(argv, 0, "".join(
            f"{j}|RUNNING|None|0|\n" for j in asked), "")
    sched = SlurmScheduler(runner=timed)
    monkeypatch.setattr(sched, "_pause", lambda s: clock.__setitem__(0, clock[0] + max(s, 0)))
    sched.states(["41"])                  # the phases' poll
    clock[0] += 1.0
    sched.call_state("42")                # the monitor's, a second later
    sched.listed(["42"], "mon")           # and whether it still bears its name
    assert len(times) == 3
    assert all(b - a >= SlurmScheduler.least_poll_s for a, b in zip(times, times[1:]))
