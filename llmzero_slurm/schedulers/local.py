"""Run phase scripts as local process groups: the same rendered script, no cluster needed.

Each job gets a small supervisor process (this module run with -m) that starts `bash script`
in its own process group with the SLURM_* variables a batch job would see, writes the job's
output to the --output path, enforces the --time limit, and records the outcome (in space it
holds from the start: a job that fills the disk still has its end, and the cause, on record). Like
slurmstepd, it writes "*** JOB <id> ON <host> CANCELLED AT <time> [DUE TO TIME LIMIT] ***" to
the output before signalling, so the script can tell a cancel from a time-out. The job table
(jobs.json, under a lock) survives a controller restart, so jobs can be found by token.
"""
from __future__ import annotations

import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import FULL, SchedulerError, StateError, StorageError
from ..processes import runs
from ..search.tree import Status
from ..store.atomic import read_json, write_json
from .base import SCHEDULED_ENV, CallJob, JobState, Scheduler, job_state, state_from_status_file
from .job_env import credentials_withheld, new_job_environment
from .local_table import SUPERVISOR, job_entry, read_table
from .local_table import lock as table_lock

KILL_WAIT_S = 10.0      # TERM -> KILL grace, as Slurm's KillWait


def _alive(pid: int | None) -> bool:
    """True when `pid` is one of our supervisors (a reused pid is not mistaken for one)."""
    return runs(pid, SUPERVISOR)


def _terminate(pid: int, what: str) -> None:
    """SIGTERM `pid`. A process of another user (a colleague's job, in a run the group shares)
    is refused by name, as scancel refuses another user's job, not as a PermissionError."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    except PermissionError:
        try:
            owner = pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
        except (OSError, KeyError):
            owner = "another user"
        raise SchedulerError(f"{what}: its process {pid} runs as {owner}; only that user (or "
                             "root) can cancel it") from None


class LocalScheduler(Scheduler):
    name = "local"
    time_limited = False

    def __init__(self, state_dir: str | Path, secret_names: Sequence[str] = (),
                 kept_names: Iterable[str] = ()):
        self.secret_names = tuple(secret_names)
        self.kept_names = frozenset(kept_names)
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = table_lock(self.dir)
        self._children: list[subprocess.Popen] = []

    # -- the job table ----------------------------------------------------------------------

    def _table(self) -> dict[str, Any]:
        return read_table(self.dir)

    def _result(self, job_id: str) -> dict[str, Any] | None:
        try:
            return read_json(self.dir / f"{job_id}.result.json")
        except StateError:
            return None

    # -- interface --------------------------------------------------------------------------

    def submit(self, script: Path, token: str) -> str:
        script = Path(script).resolve()
        with self._lock.hold():
            table = self._table()
            job_id = str(table["next_id"])
            table["jobs"][job_id] = job_entry(script, token, job_id, os.getcwd(), time.time())
            table["next_id"] += 1
            write_json(self.dir / "jobs.json", table)
            log = open(self.dir / f"{job_id}.supervisor.log", "ab")
            proc = subprocess.Popen(
                [sys.executable, "-m", SUPERVISOR, str(self.dir), job_id],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                env=new_job_environment(names=self.secret_names, keep=self.kept_names))
            log.close()
            self._children.append(proc)
            table["jobs"][job_id]["supervisor_pid"] = proc.pid
            write_json(self.dir / "jobs.json", table)
        return job_id

    def cancel(self, job_id: str, name: str) -> None:
        job = self._table()["jobs"].get(str(job_id))
        if job is None:
            raise SchedulerError(f"cancelling job {job_id}: no such local job in {self.dir}")
        if job["name"] == name and _alive(job["supervisor_pid"]):
            _terminate(job["supervisor_pid"], f"cancelling job {job_id}")   # and its group

    def submit_call(self, fn: Callable[..., Any], args: Sequence[Any], folder: Path,
                    job: CallJob) -> str:
        """A local submitit process; its job id is its pid."""
        import submitit

        ex = submitit.LocalExecutor(folder=folder)
        ex.update_parameters(timeout_min=job.minutes)
        with credentials_withheld(self.secret_names):
            return str(ex.submit(fn, *args).job_id)

    def call_state(self, job_id: str) -> Status | None:
        return Status.RUNNING if runs(int(job_id), "submitit") else None

    def cancel_call(self, job_id: str, name: str) -> None:
        """Its pid, while it is still a submitit process: a pid the system has since given to
        another program is left alone."""
        if job_id.isdigit() and runs(int(job_id), "submitit"):
            _terminate(int(job_id), f"cancelling the call job {job_id}")

    def find_by_token(self, token: str, name: str) -> str | None:
        """The newest job submitted with the token (unique to one phase script, so the name
        adds nothing here)."""
        found = [int(j) for j, job in self._table()["jobs"].items() if job["token"] == token]
        return str(max(found)) if found else None

    def states(self, job_ids: Iterable[str], node_dirs: Mapping[str, Path] | None = None,
               names: Mapping[str, str] | None = None) -> dict[str, JobState]:
        # `names` adds nothing here: the run's own job table never gives an id out twice.
        self._children = [c for c in self._children if c.poll() is None]
        jobs = self._table()["jobs"]
        out: dict[str, JobState] = {}
        for job_id in (str(j) for j in job_ids):
            job = jobs.get(job_id)
            result = self._result(job_id) if job else None
            if result and result["state"] != "RUNNING":
                out[job_id] = job_state(job_id, result["state"], result.get("exit_code"),
                                        result.get("reason"), "local")
            elif job and _alive(job["supervisor_pid"]):
                out[job_id] = job_state(job_id, "RUNNING" if result else "PENDING", source="local")
            else:
                node_dir = (node_dirs or {}).get(job_id) or (
                    Path(job["script"]).parent if job else None)
                state = state_from_status_file(job_id, Path(node_dir)) if node_dir else None
                if state is None and job:
                    state = job_state(job_id, "NODE_FAIL", None,
                                      "the local supervisor died before the job ended", "local")
                if state is not None:
                    out[job_id] = state
        return out


# -- the supervisor (runs detached, one per job) --------------------------------------------

def _job_env(job_id: str, job: Mapping[str, Any]) -> dict[str, str]:
    host = socket.gethostname().split(".")[0]
    env = dict(os.environ)
    env.update({
        "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_JOB_NAME": job["name"],
        "SLURM_SUBMIT_DIR": job["submit_dir"], "SLURM_RESTART_COUNT": "0",
        "SLURM_CPUS_PER_TASK": str(job["cpus_per_task"]), "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NNODES": "1", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": host,
        "SLURM_NODELIST": host, "SLURMD_NODENAME": host, "SLURM_JOB_PARTITION": "local",
        "SLURM_CLUSTER_NAME": "local", SCHEDULED_ENV: "1"})
    return env


RESERVE_BYTES = 64 * 1024   # disk space a supervisor holds for the job's end record
RETRY_S = 5.0               # between tries of an end record a full disk refuses


def _append(path: Path, line: str) -> None:
    """Add a line to a file (the job's output), quietly giving up on a full disk."""
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError:
        pass


def _hold_space(reserve: Path) -> None:
    """Fill `reserve` with zeros, on disk: space a job that fills the disk cannot take from
    its end record. None to hold (a disk full already) leaves no file."""
    try:
        with open(reserve, "wb") as fh:
            fh.write(bytes(RESERVE_BYTES))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError:
        reserve.unlink(missing_ok=True)


def _record_end(result_path: Path, record: dict[str, Any], output: Path, reserve: Path) -> None:
    """Write the job's end record. A full disk frees the space held for it, and the record
    and the job's output (the log the error analyzer reads) say so; while even that space is
    not enough, tried again every RETRY_S, so the end is on record once space is freed."""
    told = False
    while True:
        try:
            write_json(result_path, record)
            return
        except StorageError as exc:
            cause = exc.__cause__
            if not isinstance(cause, OSError) or cause.errno not in FULL:
                raise
            if told:
                time.sleep(RETRY_S)
                continue
            full = f"the disk holding {result_path.parent} was full when the job ended " \
                   f"({cause.strerror})"
            record = {**record, "reason": "; ".join(filter(None, (record["reason"], full)))}
            reserve.unlink(missing_ok=True)
            _append(output, f"llmzero-local: error: {full}")
            told = True


def supervise(state_dir: Path, job_id: str) -> int:
    job = read_json(state_dir / "jobs.json")["jobs"][job_id]
    result_path = state_dir / f"{job_id}.result.json"
    reserve = state_dir / f"{job_id}.reserve"
    output = Path(job["output"])
    stop_reason: list[str] = []
    signal.signal(signal.SIGTERM, lambda *_: stop_reason.append("CANCELLED"))
    started = time.time()

    def end(record: dict[str, Any]) -> int:
        _record_end(result_path, {**record, "started_at": started, "finished_at": time.time()},
                    output, reserve)
        reserve.unlink(missing_ok=True)
        return 0

    _hold_space(reserve)
    try:
        with open(output, "ab") as out:
            proc = subprocess.Popen(["bash", job["script"]], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, cwd=job["submit_dir"],
                                    env=_job_env(job_id, job), start_new_session=True)
    except OSError as exc:    # as slurmstepd fails a job whose output or folder it cannot open
        return end({"state": "FAILED", "exit_code": 1, "pgid": None,
                    "reason": f"could not start the job: {exc}"})
    try:
        write_json(result_path, {"state": "RUNNING", "pgid": proc.pid, "started_at": started})
    except StorageError:
        pass        # the job runs on, supervised; its end is recorded in the space held for it
    limit = job["time_limit_s"]
    while proc.poll() is None and not stop_reason:
        if limit is not None and time.time() - started > limit:
            stop_reason.append("TIMEOUT")
            break
        time.sleep(0.1)
    if stop_reason and proc.poll() is None:
        _stop(proc, output, job_id, stop_reason[0] == "TIMEOUT")
    rc = proc.wait()
    try:   # like proctrack/pgid: nothing the job left in the background outlives it
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    code, reason = (rc, None) if rc >= 0 else (128 - rc, f"signal {-rc}")
    state = stop_reason[0] if stop_reason else ("COMPLETED" if rc == 0 else "FAILED")
    return end({"state": state, "exit_code": code, "reason": reason, "pgid": proc.pid})


def _stop(proc: subprocess.Popen, output: Path, job_id: str, timeout: bool) -> None:
    """What slurmstepd does: announce in the job's output, TERM the group, KILL after a grace."""
    when = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    host = socket.gethostname().split(".")[0]
    _append(output, f"llmzero-local: error: *** JOB {job_id} ON {host} CANCELLED AT {when}"
                    f"{' DUE TO TIME LIMIT' if timeout else ''} ***")
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1]), sys.argv[2]))
