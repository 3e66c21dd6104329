"""What the controller and the monitor need from a batch system, and nothing more.

Four calls for phases: submit a rendered script under a token, ask the states of many jobs at
once, cancel one, and find a job by its token after a controller crash (exactly-once
submission). Three for the monitor job, a Python function run with submitit: submit it, ask
whether it still lives, cancel it.
States are reported in Slurm's own vocabulary (`JobState.raw`) plus the node status it means.

A monitor's cancellation ends as CANCELLED here like any other; the caller turns it into
EARLY_STOPPED when the node's early_stop.json records a STOP decision (the scheduler does not
know why a job was cancelled).
"""
from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Mapping, Sequence

from ..errors import SchedulerError
from ..search.tree import Status
from ..store.node_dir import NodeDir
from .directives import read_directives

# Slurm job states and the node status each one means. Failure states keep their raw name
# in JobState.raw so the error analyzer can tell a time limit from an out-of-memory kill.
SLURM_STATUS: dict[str, Status] = {
    "PENDING": Status.QUEUED,
    "CONFIGURING": Status.QUEUED,
    "REQUEUED": Status.QUEUED,
    "REQUEUE_HOLD": Status.QUEUED,
    "REQUEUE_FED": Status.QUEUED,
    "EXPEDITING": Status.QUEUED,     # on its way to an expedited requeue (Slurm 25.11)
    "RESV_DEL_HOLD": Status.QUEUED,
    "SUSPENDED": Status.RUNNING,
    "STOPPED": Status.RUNNING,       # scancel --signal=STOP: it holds its nodes until SIGCONT
    "RUNNING": Status.RUNNING,
    "COMPLETING": Status.RUNNING,
    "SIGNALING": Status.RUNNING,
    "STAGE_OUT": Status.RUNNING,
    "RESIZING": Status.RUNNING,
    "COMPLETED": Status.COMPLETED,
    "CANCELLED": Status.CANCELLED,
    "FAILED": Status.FAILED,
    # A job requeued after a preemption shows COMPLETING/REQUEUED, then PENDING (sacct without
    # --duplicates gives its newest instance): PREEMPTED shown means it ended for good
    # (PreemptMode=CANCEL, or a job that may not be requeued).
    "PREEMPTED": Status.FAILED,
    "TIMEOUT": Status.FAILED,
    "OUT_OF_MEMORY": Status.FAILED,
    "NODE_FAIL": Status.FAILED,
    "BOOT_FAIL": Status.FAILED,
    "DEADLINE": Status.FAILED,
    "SPECIAL_EXIT": Status.FAILED,
    "REVOKED": Status.FAILED,
}

# Set in the environment of every job a scheduler submits for the controller (not of a rerun
# by hand): the phase script then claims its node directory for its job id (job.claim).
SCHEDULED_ENV = "LLMZ_SCHEDULED"
# Our state, not Slurm's, for a job that no source can show ended: it failed, how is unknown.
LOST = "LOST"

# status.json "state" (written by the job) -> the Slurm state it corresponds to.
STATUS_FILE_STATES = {
    "completed": "COMPLETED", "failed": "FAILED", "cancelled": "CANCELLED",
    "timeout": "TIMEOUT", "preempted": "PREEMPTED", "running": "RUNNING",
}


@dataclass(frozen=True)
class JobState:
    job_id: str
    raw: str                    # Slurm's state name, e.g. TIMEOUT
    status: Status              # what it means for the node
    exit_code: int | None = None
    reason: str | None = None
    source: str = ""            # squeue | sacct | sacct -c | status.json | local

    @property
    def final(self) -> bool:
        return self.status.finished

    @property
    def pending_reason(self) -> str | None:
        """Why a waiting job waits (Priority, Resources, Dependency, JobHeldUser...)."""
        return self.reason if self.raw == "PENDING" else None

    @property
    def held(self) -> bool:
        """A waiting job someone held (JobHeldUser, JobHeldAdmin, "job requeued in held
        state"): unlike any other wait, it never ends by itself, only by `scontrol release`."""
        return "held" in (self.pending_reason or "").lower()

    def shown(self) -> str:
        """The state as a person reads it, a waiting job's reason beside it."""
        return f"{self.raw} ({self.pending_reason})" if self.pending_reason else self.raw


def job_state(job_id: str, raw: str, exit_code: int | None = None, reason: str | None = None,
              source: str = "") -> JobState:
    """Map a raw Slurm state ("CANCELLED by 0" included) to a JobState; unknown names fail."""
    name = raw.split()[0].upper() if raw.strip() else "UNKNOWN"
    status = SLURM_STATUS.get(name)
    if status is None:
        status = Status.FAILED
        reason = f"unrecognised Slurm state {name}" + (f"; {reason}" if reason else "")
    return JobState(job_id, name, status, exit_code, reason or None, source)


def state_from_status_file(job_id: str, node_dir: Path) -> JobState | None:
    """The job's own status.json, for a job the scheduler no longer remembers.

    Only a file written by this very job id counts (a rerun by hand writes another id). A job
    the scheduler has forgotten cannot come back, so "running" or "preempted" there means the
    job died without finishing its record: that is a failure, with the last state kept.
    """
    status = NodeDir(node_dir).status()
    if status is None or status.job_id != str(job_id):
        return None
    raw = STATUS_FILE_STATES.get(status.state)
    if raw is None:
        return None
    if raw in ("RUNNING", "PREEMPTED"):
        return JobState(job_id, LOST, Status.FAILED, status.exit_code,
                        f"the scheduler no longer knows the job and status.json still says "
                        f"'{status.state}' (the job died without recording its end)", "status.json")
    return job_state(job_id, raw, status.exit_code, status.reason, "status.json")


_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_time(text: str) -> int:
    """Seconds in a Slurm time limit: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; raises ValueError."""
    match = _TIME.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a Slurm time (M, M:S, H:M:S, D-H, D-H:M or D-H:M:S)")
    days, first, second, third = match.groups()
    a, b, c = int(first), int(second) if second else None, int(third) if third else None
    if days is not None:
        hours, minutes, seconds = a, b or 0, c or 0
    elif c is not None:
        hours, minutes, seconds = a, b or 0, c
    elif b is not None:
        hours, minutes, seconds = 0, a, b
    else:
        hours, minutes, seconds = 0, a, 0
    total = ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError(f"{text!r} is not a positive time limit")
    return total


def read_submission(script: Path, token: str) -> dict[str, str]:
    """The script's #SBATCH options, after checking its --comment carries `token`: the token
    is how a restarted controller finds the job, so a mismatch would break exactly-once."""
    try:
        directives = read_directives(script.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SchedulerError(f"submitting {script}: cannot read it: {exc.strerror}") from None
    except ValueError as exc:
        raise SchedulerError(f"submitting {script}: unreadable #SBATCH line: {exc}") from None
    if f"token={token}" not in directives.get("comment", "").split(","):
        raise SchedulerError(f"submitting {script}: its --comment does not carry token={token}; "
                             "render the script with the token it is submitted under")
    return directives


@dataclass(frozen=True)
class CallJob:
    """How to run a Python function as a batch job (the monitor), whatever the scheduler."""

    name: str
    minutes: int                        # the job's time limit
    comment: str = ""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    setup: Sequence[str] = ()
    setup_dir: str | None = None        # where `setup` runs (job_settings.setup_script)
    cpus: int = 1
    mem: str = "2G"


class Scheduler(ABC):
    """A batch system: Slurm on a cluster, or local processes where there is none."""

    name: ClassVar[str]
    time_limited: ClassVar[bool] = True     # every job needs a time limit (a cluster's rule)
    # Its jobs run on the machine that submits them, with its Python and packages: --check
    # asks this machine's, not a compute node's.
    on_this_machine: ClassVar[bool] = False
    # How long after an unconfirmed submission the job may still appear (a slow slurmctld
    # registers it after the client gave up): not resubmitted before then.
    settle_s: ClassVar[float] = 0.0
    default_poll_s: ClassVar[float] = 10.0   # the controller's poll period unless configured

    @abstractmethod
    def submit(self, script: Path, token: str) -> str:
        """Submit a rendered phase script; return the job id. Its directory is the node dir."""

    @abstractmethod
    def states(self, job_ids: Iterable[str], node_dirs: Mapping[str, Path] | None = None,
               names: Mapping[str, str] | None = None) -> dict[str, JobState]:
        """States of many jobs in one round trip. `node_dirs` (job id -> node dir) lets a job's
        status.json stand in when the scheduler has forgotten it; jobs submitted by this object
        are known already. `names` (job id -> the name it was submitted under) keeps a job that
        has since taken a recorded id from standing in for it. A job whose state cannot be
        learnt yet is absent from the result."""

    def listed(self, job_ids: Iterable[str], name: str) -> dict[str, JobState]:
        """What the scheduler lists of those jobs that bear `name`, asked now (Slurm's
        `states` may answer from its last poll, which still holds a job since gone)."""
        ids = list(job_ids)
        return self.states(ids, names={j: name for j in ids})

    @abstractmethod
    def cancel(self, job_id: str, name: str, why: str | None = None) -> None:
        """Ask the job to stop (TERM, then KILL after a grace period), provided it still has
        the `name` it was submitted with: a recorded id may since belong to another job.
        `why` (the stopper's) goes with the job where its scheduler shows it (Slurm's comment,
        the local job's end reason): a bare CANCELLED reads as a person's cancel."""

    @abstractmethod
    def find_by_token(self, token: str, name: str) -> str | None:
        """The id of the job named `name` submitted with `token`, if the scheduler still knows
        one, whoever submitted it: a group member's controller resuming a run must adopt the
        job the owner's sbatch registered, not send the phase a second time."""

    @abstractmethod
    def submit_call(self, fn: Callable[..., Any], args: Sequence[Any], folder: Path,
                    job: CallJob) -> str:
        """Run `fn(*args)` as a job with submitit (its files under `folder`); the job id."""

    def call_state(self, job_id: str) -> Status | None:
        """QUEUED while a `submit_call` job is listed as waiting, RUNNING while it runs or no
        source lists it (too new, or a scheduler that lost track: its heartbeat decides),
        None once it is gone."""
        state = self.states([job_id]).get(job_id)
        if state is None:
            return Status.RUNNING
        return None if state.final else state.status

    def cancel_call(self, job_id: str, name: str) -> None:
        """Stop a `submit_call` job, the `name` of its CallJob."""
        self.cancel(job_id, name)

    stopping: Callable[[], bool] = staticmethod(lambda: False)   # see give_up_when

    def give_up_when(self, stopping: Callable[[], bool]) -> None:
        """Once `stopping()` is true (a stop signal came), a failing call is neither tried
        again nor waited on: a stopping controller must leave before Slurm's SIGKILL (KillWait)
        or the user's patience ends. A scheduler that never retries has nothing to give up."""
        self.stopping = stopping


def wait_unless(seconds: float, stopping: Callable[[], bool]) -> None:
    """Sleep for `seconds`, cut short (within 0.2 s) once `stopping()` is true: the waits of a
    controller, its Slurm client and its monitor all end promptly on a stop signal."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0 and not stopping():
        time.sleep(min(left, 0.2))
