"""One controller per run directory: a lease file on the shared filesystem that fences.

The holder's heartbeat runs on its own thread, so a long LLM call, slow sbatch retries or a
report rebuild never make a live controller look dead. Whether a holder is alive is judged
without comparing two hosts' clocks: on its own host by its pid, elsewhere by the lease file's
age on the file server's clock (`server_age`). A holder that lost its lease (paused past the
expiry and taken over) learns it under the run lock before its next state write or sbatch
(`verify`, which the run store calls as its fence) and stops instead of writing; from then on
it never writes or removes the lease file again, which is the new holder's.

A controller job names itself in the lease (its Slurm job id and restart count): requeued after
a run that could not release it (SIGKILLed, its node failed), a later run of that job takes the
lease over at once, wherever it starts, since Slurm never runs one job twice at a time.
"""
from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from ..errors import LLMZeroError, StateError
from ..processes import alive, runs
from ..store.atomic import read_json, write_json
from ..store.locks import server_age
from ..store.run_store import RunStore

EXPIRE_S = 120.0     # a lease file untouched this long (file server's clock) is a dead holder
READ_TRIES, READ_RETRY_S = 3, 0.5   # reading a lease through a filesystem hiccup
CONTROLLER_COMMAND = "llmzero_slurm.cli.start"   # in every controller's command line


def slurm_run() -> tuple[str | None, int]:
    """The Slurm job this process runs in (None outside one) and that job's restart count."""
    try:
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        restarts = 0
    return os.environ.get("SLURM_JOB_ID") or None, restarts


class LeaseHeld(LLMZeroError):
    exit_code = 6


class LeaseLost(LeaseHeld):
    """Another controller took this run over: whatever this one meant to write, it must not."""


class Lease:
    FILE = "controller.json"

    def __init__(self, store: RunStore, expire_s: float = EXPIRE_S):
        self.store, self.expire_s = store, expire_s
        self.path = store.root / self.FILE
        self.token = uuid.uuid4().hex[:12]
        self.beat_s = expire_s / 6
        self._held = False
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read(self) -> dict[str, Any] | None:
        """The lease record; None where there is none (no file, or not a lease). A file the
        filesystem failed to hand back (EIO from a soft NFS mount) raises StateError: taken
        for no lease, it made a live holder believe itself taken over and let a second
        controller take the run from it."""
        tries = READ_TRIES
        while True:
            tries -= 1
            try:
                data = read_json(self.path)
            except StateError as exc:
                if not isinstance(exc.__cause__, OSError):
                    return None
                if not tries:
                    raise
                time.sleep(READ_RETRY_S)    # an NFS hiccup of a moment is read through
            else:
                return data if isinstance(data, dict) else None

    def peek(self) -> dict[str, Any] | None:
        """`read` for a look that is repeated anyway (a wait, a monitor's poll): a lease that
        cannot be read now reads as none."""
        try:
            return self.read()
        except StateError:
            return None

    def silent_for(self) -> float | None:
        """Seconds since the holder last beat, on the file server's clock (None: no lease)."""
        return server_age(Path(self.path))

    def holder_alive(self, info: dict[str, Any]) -> bool:
        """Whether the lease in `info` still belongs to a live controller. On its host a pid
        gone is a holder gone, and a controller's command a holder alive (beating or not:
        stopped with Ctrl-Z); a pid running anything else (given to another program since,
        or a controller inside one, a notebook) is judged by the lease's age, as elsewhere."""
        if info.get("host") == socket.gethostname():
            if not alive(info.get("pid")):
                return False
            if runs(info.get("pid"), CONTROLLER_COMMAND):
                return True
        silent = self.silent_for()
        return silent is not None and silent <= self.expire_s

    def refuse_if_held(self) -> None:
        """LeaseHeld while a live controller other than this one holds the run: also asked
        before starting one in the background or as a job, which would only exit 6."""
        info = self.read()
        if info and info.get("token") != self.token and not _earlier_run(info) \
                and self.holder_alive(info):
            raise LeaseHeld(f"{self.store.root}: a controller is already running "
                            f"(host {info.get('host')}, pid {info.get('pid')}); stop it with "
                            f"llmzero-stop or wait {self.expire_s:.0f} s after it died")

    def acquire(self) -> None:
        """Take the lease (refused while a live holder has it) and start beating."""
        with self.store.lock.hold():
            self.refuse_if_held()
            self._write(started_at=time.time(), beat=0)
            self._held = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat_loop, name="llmzero-lease", daemon=True)
        self._thread.start()

    def _write(self, **extra: Any) -> None:
        if self._lost is not None:      # the file is the new holder's: never write it again
            raise LeaseLost(self._lost)
        info = self.read() or {}
        job, restarts = slurm_run()
        info.update({"host": socket.gethostname(), "pid": os.getpid(), "token": self.token,
                     "heartbeat_at": time.time(), "beat": int(info.get("beat", 0)) + 1,
                     "expire_s": self.expire_s, "slurm_job_id": job,
                     "slurm_restart_count": restarts, **extra})
        write_json(self.path, info)

    def _beat_loop(self) -> None:
        while not self._stop.wait(self.beat_s):
            try:
                self.heartbeat()
            except LeaseLost:
                return
            except (LLMZeroError, OSError):
                continue      # a busy lock or a filesystem hiccup: the next beat tries again

    def heartbeat(self, **extra: Any) -> None:
        """Refresh the lease under the run lock; raise LeaseLost if it was taken over. A lease
        not held (released) has nothing to refresh."""
        with self.store.lock.hold():
            self.verify()
            if self._held:
                self._write(**extra)

    def verify(self) -> None:
        """Raise LeaseLost if this lease was taken and is no longer ours (call under the lock).
        Once lost it stays lost, released or not: nothing may pass this fence again."""
        if self._held and self._lost is None:
            info = self.read()
            if info is None or info.get("token") != self.token:
                holder = f"host {info.get('host')} pid {info.get('pid')}" if info else "nobody"
                self._lost = f"{self.path}: this controller's lease was taken over ({holder})"
        if self._lost is not None:
            raise LeaseLost(self._lost)

    def release(self) -> None:
        """Stop the heartbeat first (a beat must never run after the lease stops checking that
        it is still ours), then remove the lease file under the run lock if it still holds
        this lease's token: compare-and-delete, so a new holder's lease is never removed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self.store.lock.hold():
            if self._held and self._lost is None:
                info = self.peek()     # unreadable: unknown whose it is, left to expire
                if info and info.get("token") == self.token:
                    Path(self.path).unlink(missing_ok=True)
            self._held = False


def _earlier_run(info: dict[str, Any]) -> bool:
    """Whether the lease in `info` was this very Slurm job's in an earlier run (a lower
    restart count): gone, as Slurm starts a job again only once its last run has ended. Two
    processes in one run of a job (a second start inside an allocation) do not count."""
    job, restarts = slurm_run()
    held = info.get("slurm_restart_count")
    return job is not None and info.get("slurm_job_id") == job and isinstance(held, int) \
        and held < restarts
