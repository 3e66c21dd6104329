"""Locks for a run directory on a shared filesystem, behind one context-manager interface.

`flock` uses the kernel's advisory locks (filelock.UnixFileLock): released automatically when
the holder dies, and correct on local disks, Lustre and NFSv4. `soft` suits filesystems where
flock is missing or unreliable: the lock is a file created with O_EXCL that records its holder;
a lock older than `stale_after` whose holder is gone (or that has simply outlived the grace
period) is broken, and release renames before unlinking so a breaker never deletes a newer lock
(the scheme of Optuna's journal storage on NFS).
"""
from __future__ import annotations

import json
import os
import socket
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Union

import filelock

from ..errors import LockTimeout
from ..processes import alive


class FlockLock:
    def __init__(self, path: Path, timeout: float):
        self.path, self.timeout = path, timeout
        self._lock = filelock.UnixFileLock(str(path), timeout=timeout)

    @contextmanager
    def hold(self) -> Iterator[None]:
        try:
            self._lock.acquire()
        except filelock.Timeout:
            raise LockTimeout(f"{self.path}: still held by another process after "
                              f"{self.timeout:.0f} s") from None
        try:
            yield
        finally:
            self._lock.release()


class SoftLock:
    def __init__(self, path: Path, timeout: float, stale_after: float, poll: float = 0.01):
        self.path, self.timeout, self.stale_after, self.poll = path, timeout, stale_after, poll
        self._depth = 0
        self._token = ""

    def _try_create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        self._token = uuid.uuid4().hex
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "token": self._token}
        with os.fdopen(fd, "w") as fh:
            json.dump(holder, fh)
        return True

    def _holder_gone(self) -> bool:
        """True when the lock file is past the grace period, or its holder is a dead local pid."""
        try:
            age = time.time() - self.path.stat().st_mtime
            holder = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return False
        if age > self.stale_after:
            return True
        return holder.get("host") == socket.gethostname() and "pid" in holder \
            and not alive(holder["pid"])

    def _release(self) -> None:
        """Remove our own lock only: a breaker may have replaced it after a long stall."""
        try:
            holder = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return
        if holder.get("token") == self._token:
            self._remove()

    def _remove(self) -> None:
        """Rename-then-unlink: only the file we renamed away is deleted."""
        grave = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex}.released")
        try:
            os.rename(self.path, grave)
        except FileNotFoundError:
            return
        grave.unlink(missing_ok=True)

    @contextmanager
    def hold(self) -> Iterator[None]:
        if self._depth:  # re-entrant within one process
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        deadline = time.monotonic() + self.timeout
        while not self._try_create():
            if self._holder_gone():
                self._remove()
                continue
            if time.monotonic() > deadline:
                raise LockTimeout(f"{self.path}: still held after {self.timeout:.0f} s "
                                  f"(remove it by hand if its holder is gone)")
            time.sleep(self.poll)
        self._depth = 1
        try:
            yield
        finally:
            self._depth = 0
            self._release()


RunLock = Union[FlockLock, SoftLock]


def make_lock(kind: str, path: Path, timeout: float = 120.0, stale_after: float = 30.0) -> RunLock:
    if kind == "flock":
        return FlockLock(path, timeout)
    if kind == "soft":
        return SoftLock(path, timeout, stale_after)
    raise ValueError(f"unknown lock kind {kind!r} (use flock or soft)")
