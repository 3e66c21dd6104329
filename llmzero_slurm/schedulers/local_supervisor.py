"""The local job's supervisor, one detached process per job: runs the phase script as
slurmstepd would.

It starts `bash script` in its own process group with the SLURM_* variables a batch job would
see, writes the job's output to the --output path, enforces the --time limit, and records the
outcome (in space it holds from the start: a job that fills the disk still has its end, and
the cause, on record). Like slurmstepd, it writes "*** JOB <id> ON <host> CANCELLED AT <time>
[DUE TO TIME LIMIT] ***" to the output before signalling, so the script can tell a cancel from
a time-out.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import FULL, StorageError
from ..store.atomic import read_json, write_json
from .base import SCHEDULED_ENV
from .local_table import MARK, cancel_request, job_mark

KILL_WAIT_S = 10.0      # TERM -> KILL grace, as Slurm's KillWait


def _job_env(state_dir: Path, job_id: str, job: Mapping[str, Any]) -> dict[str, str]:
    host = socket.gethostname().split(".")[0]
    env = dict(os.environ)
    env.update({
        "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_JOB_NAME": job["name"],
        "SLURM_SUBMIT_DIR": job["submit_dir"], "SLURM_RESTART_COUNT": "0",
        "SLURM_CPUS_PER_TASK": str(job["cpus_per_task"]), "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NNODES": "1", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": host,
        "SLURM_NODELIST": host, "SLURMD_NODENAME": host, "SLURM_JOB_PARTITION": "local",
        "SLURM_CLUSTER_NAME": "local", SCHEDULED_ENV: "1", MARK: job_mark(state_dir, job_id)})
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

    if cancel_request(state_dir, job_id).exists():   # cancelled before it started
        return end({"state": "CANCELLED", "exit_code": 0, "reason": None, "pgid": None})
    _hold_space(reserve)
    try:
        with open(output, "ab") as out:
            proc = subprocess.Popen(["bash", job["script"]], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, cwd=job["submit_dir"],
                                    env=_job_env(state_dir, job_id, job), start_new_session=True)
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
    # A stop decides the state only when it met a live job: one that had already exited
    # ended on its own (Slurm shows a job that exits before its scancel COMPLETED).
    stopped = bool(stop_reason) and proc.poll() is None
    if stopped:
        stop_group(proc.pid, output, job_id, stop_reason[0] == "TIMEOUT",
                   lambda: proc.poll() is not None)
    rc = proc.wait()
    try:   # like proctrack/pgid: nothing the job left in the background outlives it
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    # A shell a signal killed: exit code 0 and the signal, as Slurm shows it (0:9).
    code, reason = (rc, None) if rc >= 0 else (0, f"signal {-rc}")
    state = stop_reason[0] if stopped else ("COMPLETED" if rc == 0 else "FAILED")
    return end({"state": state, "exit_code": code, "reason": reason, "pgid": proc.pid})


def stop_group(pgid: int, output: Path, job_id: str, timeout: bool,
               ended: Callable[[], bool]) -> None:
    """What slurmstepd does: announce in the job's output, TERM the group, KILL it unless the
    job has `ended()` within a grace. A group already gone is no error."""
    when = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    host = socket.gethostname().split(".")[0]
    _append(output, f"llmzero-local: error: *** JOB {job_id} ON {host} CANCELLED AT {when}"
                    f"{' DUE TO TIME LIMIT' if timeout else ''} ***")
    deadline = time.monotonic() + KILL_WAIT_S
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
        while not ended():
            if time.monotonic() > deadline:
                os.killpg(pgid, signal.SIGKILL)
                return
            time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1]), sys.argv[2]))
