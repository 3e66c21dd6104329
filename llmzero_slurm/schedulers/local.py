"""Run phase scripts as local process groups: the same rendered script, no cluster needed.

Each job gets a small supervisor process (local_supervisor.py, run with -m) that runs it as
slurmstepd would and records how it ended. The job table (jobs.json, under a lock) survives a
controller restart, so jobs can be found by token.
"""
from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import SchedulerError, StateError
from ..processes import arguments, leads_with
from ..search.tree import Status
from ..store.atomic import read_json, write_json
from .base import LOST, CallJob, JobState, Scheduler, job_state, state_from_status_file
from .job_env import credentials_withheld, new_job_environment
from .local_supervisor import stop_group
from .local_table import (CALL_MODULES, MARK, SUPERVISOR, cancel_request, job_entry, job_mark, read_table,
                          supervised_job)
from .local_table import lock as table_lock


def _refusal(pid: int, what: str) -> SchedulerError:
    """A process of another user (a colleague's job, in a run the group shares) is refused by
    name, as scancel refuses another user's job, not as a PermissionError."""
    try:
        owner = pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
    except (OSError, KeyError):
        owner = "another user"
    return SchedulerError(f"{what}: its process {pid} runs as {owner}; only that user (or "
                          "root) can cancel it")


def _terminate(pid: int, what: str) -> None:
    """SIGTERM `pid`, refused by name when it is another user's."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    except PermissionError:
        raise _refusal(pid, what) from None


class LocalScheduler(Scheduler):
    name = "local"
    time_limited = False
    on_this_machine = True

    def __init__(self, state_dir: str | Path, secret_names: Sequence[str] = (),
                 kept_names: Iterable[str] = ()):
        self.secret_names = tuple(secret_names)
        self.kept_names = frozenset(kept_names)
        self.dir = Path(state_dir).resolve()   # as supervisors' command lines name it
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

    def _cancel_why(self, job_id: str) -> str | None:
        """Why the job was cancelled, as its cancel request says (the stopper's line; a
        person's cancel gives none)."""
        try:
            request = read_json(cancel_request(self.dir, job_id))
        except StateError:
            return None
        return request.get("why") if isinstance(request, dict) else None

    def _supervised(self, job_id: str, pid: int | None) -> bool:
        """True while `pid` is the job's supervisor: its command line names this folder and
        the job (a pid since given to another program, or to another job's supervisor, not)."""
        argv = arguments(pid)
        return argv is not None and supervised_job(argv, self.dir) == job_id

    def _unsupervised(self, job_id: str, result: Mapping[str, Any] | None) -> int | None:
        """The job's process group (`result`, its <id>.result.json, has the pgid) while the
        script that leads it lives, the supervisor killed: the job trains on. A group that has
        since taken the id carries no mark of the job (`job_mark`)."""
        pgid = (result or {}).get("pgid")
        return pgid if leads_with(pgid, self._mark(job_id)) else None

    def _mark(self, job_id: str) -> str:
        """The MARK entry in the environment of the job's processes."""
        return f"{MARK}={job_mark(self.dir, job_id)}"

    def _in_run(self, folder: str | Path) -> bool:
        """A call job's folder lies in this run: how its process is told from another run's."""
        return Path(folder).resolve().is_relative_to(self.dir.parent)

    def _call_runs(self, job_id: str) -> bool:
        """True while the call job's pid runs submitit's local job for a folder of this run (a
        pid since given to another program, or to another run's monitor, does not)."""
        argv = arguments(int(job_id)) if job_id.isdigit() else None
        module = next((m for m in CALL_MODULES if argv and m in argv), None)
        if argv is None or module is None:
            return False
        folder = (argv[argv.index(module) + 1:] + [""])[0]
        return bool(folder) and self._in_run(folder)

    # -- interface --------------------------------------------------------------------------

    def submit(self, script: Path, token: str) -> str:
        script = Path(script).resolve()
        with self._lock.hold():
            table = self._table()
            job_id = str(table["next_id"])
            table["jobs"][job_id] = job_entry(script, token, job_id, os.getcwd(), time.time())
            table["next_id"] += 1
            write_json(self.dir / "jobs.json", table)
            try:
                with open(self.dir / f"{job_id}.supervisor.log", "ab") as log:
                    proc = subprocess.Popen(
                        [sys.executable, "-m", SUPERVISOR, str(self.dir), job_id],
                        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                        env=new_job_environment(names=self.secret_names, keep=self.kept_names))
            except OSError as exc:   # no process to be had (EAGAIN, ENOMEM): no job either
                del table["jobs"][job_id]
                write_json(self.dir / "jobs.json", table)
                raise SchedulerError(f"submitting {script}: cannot start its local supervisor: "
                                     f"{exc.strerror}", retryable=True) from None
            self._children.append(proc)
            table["jobs"][job_id]["supervisor_pid"] = proc.pid
            write_json(self.dir / "jobs.json", table)
        return job_id

    def cancel(self, job_id: str, name: str, why: str | None = None) -> None:
        """Recorded (`cancel_request`) before the supervisor is signalled, under the table's
        lock so that no submit is half-way: a job cancelled as it starts is CANCELLED, as
        Slurm shows a job cancelled while pending. A job the table does not know is gone, as
        one Slurm has forgotten: nothing to do."""
        job_id = str(job_id)
        with self._lock.hold():
            job = self._table()["jobs"].get(job_id)
            if job is None or job["name"] != name:
                return
            write_json(cancel_request(self.dir, job_id), {"requested_at": time.time(),
                                                          **({"why": why} if why else {})})
        what = f"cancelling job {job_id}"
        if self._supervised(job_id, job["supervisor_pid"]):
            _terminate(job["supervisor_pid"], what)   # and its group
        elif (pgid := self._unsupervised(job_id, self._result(job_id))) is not None:
            # Its supervisor is gone: stopped here as it would have (a grace of KILL_WAIT_S).
            mark = self._mark(job_id)
            try:
                stop_group(pgid, Path(job["output"]), job_id, False,
                           lambda: not leads_with(pgid, mark))
            except PermissionError:
                raise _refusal(pgid, what) from None

    def submit_call(self, fn: Callable[..., Any], args: Sequence[Any], folder: Path,
                    job: CallJob) -> str:
        """A local submitit process in a session of its own (local_call.py); its job id is its
        pid. Its folder lies in this run: that is how its process is told from another run's
        (`_call_runs`)."""
        from .local_call import SessionExecutor

        if not self._in_run(folder):
            raise SchedulerError(f"the call job's folder {folder} lies outside the run "
                                 f"{self.dir.parent}")
        ex = SessionExecutor(folder=folder)
        ex.update_parameters(timeout_min=job.minutes)
        with credentials_withheld(self.secret_names):
            return str(ex.submit(fn, *args).job_id)

    def call_state(self, job_id: str) -> Status | None:
        return Status.RUNNING if self._call_runs(job_id) else None

    def cancel_call(self, job_id: str, name: str) -> None:
        """Its pid, while it still runs this run's call job."""
        if self._call_runs(job_id):
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
                why = (result["state"] == "CANCELLED" and self._cancel_why(job_id)
                       or result.get("reason"))
                out[job_id] = job_state(job_id, result["state"], result.get("exit_code"), why,
                                        "local")
            elif job and (self._supervised(job_id, job["supervisor_pid"])
                          or self._unsupervised(job_id, result) is not None):
                out[job_id] = job_state(job_id, "RUNNING" if result else "PENDING", source="local")
            else:
                node_dir = (node_dirs or {}).get(job_id) or (
                    Path(job["script"]).parent if job else None)
                state = state_from_status_file(job_id, Path(node_dir)) if node_dir else None
                if job and (state is None or state.raw == LOST) \
                        and cancel_request(self.dir, job_id).exists():
                    state = job_state(job_id, "CANCELLED", 0, self._cancel_why(job_id), "local")
                if state is None and job:
                    state = job_state(job_id, "NODE_FAIL", None,
                                      "the local supervisor died before the job ended", "local")
                if state is not None:
                    out[job_id] = state
        return out
