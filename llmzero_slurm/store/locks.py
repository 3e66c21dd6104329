"""Locks for a run directory on a shared filesystem, behind one context-manager interface.

`flock` uses the kernel's advisory locks (filelock.UnixFileLock): released automatically when
the holder dies, and correct on local disks, Lustre and NFSv4. `soft` suits filesystems where
flock is missing or unreliable: the lock is a file created with O_EXCL that records its holder;
a lock older than `stale_after` whose holder is gone (or that has simply outlived the grace
period) is broken, one breaker at a time, and release renames before unlinking so a breaker
never deletes a newer lock (the scheme of Optuna's journal storage on NFS). Ages are read on
the file server's clock (`server_age`), never the client's against the server's.
"""
from __future__ import annotations

import errno
import inspect
import json
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence, Union

import filelock

from ..errors import LockTimeout, StateError, StorageError
from ..processes import alive
from . import lock_wait


def server_ages(paths: Sequence[Path]) -> list[float | None]:
    """Seconds since each of `paths` (in one folder) was last modified, on the clock of the
    filesystem that holds them: one probe file written beside them now is stamped by the same
    clock, so two hosts' clocks are never compared. None for a path that does not exist."""
    modified: list[float | None] = []
    for path in paths:
        try:
            modified.append(path.stat().st_mtime)
        except FileNotFoundError:
            modified.append(None)
    known = [m for m in modified if m is not None]
    if not known:
        return [None] * len(paths)
    probe = paths[0].with_name(f".{paths[0].name}.probe-{uuid.uuid4().hex}")
    try:
        probe.write_bytes(b"")
        now = probe.stat().st_mtime
    except OSError:
        # A reader without write access to the run (a colleague's llmzero-status): this
        # host's clock is the best it has.
        now = time.time()
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass
    return [None if m is None else max(0.0, now - m) for m in modified]


def server_age(path: Path) -> float | None:
    """`server_ages` of one path."""
    return server_ages([path])[0]


# filelock 4 turns a lock on a filesystem without flock into its own soft lock, which never
# breaks a marker that a holder killed on another host left: that is `soft`'s work, chosen.
_NO_FALLBACK: dict[str, Any] = ({"fallback_to_soft": False} if "fallback_to_soft" in
                inspect.signature(filelock.UnixFileLock.__init__).parameters else {})


RUN_WITHOUT_FLOCK = "create the run with state: {lock: soft} in experiment.yaml"


class FlockLock:
    """`without_flock`: what to do on a filesystem that has none (the run's lock: a soft one)."""

    def __init__(self, path: Path, timeout: float, without_flock: str = RUN_WITHOUT_FLOCK):
        self.path, self.timeout, self.without_flock = path, timeout, without_flock
        self._lock = filelock.UnixFileLock(str(path), timeout=timeout, **_NO_FALLBACK)

    @contextmanager
    def hold(self) -> Iterator[None]:
        try:
            self._acquire()
        except filelock.Timeout:
            raise LockTimeout(lock_wait.timed_out(self.path, self.timeout,
                                                  lock_wait.flock_holder(self.path))) from None
        except (OSError, NotImplementedError) as exc:   # older filelock: NotImplementedError
            if isinstance(exc, NotImplementedError) or exc.errno == errno.ENOSYS:
                _remove_if_empty(self.path)    # flock's empty file, which a soft lock would wait out
                raise StateError(self.path, "cannot be locked: this filesystem has no flock "
                                 f"({os.strerror(errno.ENOSYS)}); {self.without_flock}") from None
            raise unusable(self.path, exc) from None
        try:
            yield
        finally:
            self._lock.release()

    def _acquire(self) -> None:
        """Take the lock, a wait past WAIT_NOTICE_S said (lock_wait) with its holder."""
        first = lock_wait.WAIT_NOTICE_S
        if not lock_wait.noticing() or 0 <= self.timeout <= first:
            self._lock.acquire()
            return
        try:
            self._lock.acquire(timeout=first)
            return
        except filelock.Timeout:
            lock_wait.notice(self.path, self.timeout, lock_wait.flock_holder(self.path))
        self._lock.acquire(timeout=self.timeout - first if self.timeout >= 0 else -1)


def _remove_if_empty(path: Path) -> None:
    try:
        if path.stat().st_size == 0:
            path.unlink()
    except OSError:
        pass


BREAK_GRACE_S = 60.0   # a break takes milliseconds: a turn held longer was a killed breaker's


def _record(path: Path) -> tuple[str | None, dict[str, Any]]:
    """The token of the lock at `path` (None when it is gone) and its holder. A torn or
    foreign record (a holder killed mid-write, an edit) names no holder and is known by its
    bytes, so its age alone can judge it stale and a break still checks it is the one judged."""
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise
    except OSError:
        return None, {}
    try:
        holder = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        holder = None
    if isinstance(holder, dict):
        return str(holder.get("token", "")), holder
    return "unreadable:" + raw.hex(), {}


class SoftLock:
    def __init__(self, path: Path, timeout: float, stale_after: float, poll: float = 0.01):
        self.path, self.timeout, self.stale_after, self.poll = path, timeout, stale_after, poll
        self._depth = 0
        self._owner: int | None = None   # the holding thread: re-entry is per thread
        self._token = ""

    def _try_create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        self._token = uuid.uuid4().hex
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "token": self._token}
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(holder, fh)
        except OSError as exc:
            # A full disk or quota: left there, the empty file would hold the run's lock for
            # every process until judged stale, and the write names no file.
            self.path.unlink(missing_ok=True)
            raise StorageError(self.path, f"could not be written ({exc.strerror}); the lock "
                                          "was not taken") from None
        return True

    def _stale_token(self) -> str | None:
        """The token of a lock past the grace period, or held by a dead local pid; else None."""
        try:
            token, holder = _record(self.path)
            age = server_age(self.path)
        except IsADirectoryError as exc:   # no holder will ever remove it
            raise unusable(self.path, exc) from None
        if token is None or age is None:
            return None
        dead = holder.get("host") == socket.gethostname() and "pid" in holder \
            and not alive(holder["pid"])
        return token if age > self.stale_after or dead else None

    def _break(self, stale: str) -> None:
        """Remove the stale lock judged by its token. Breakers take turns (`_turn`) and
        look again in theirs: without turns, one that judged the lock stale could move away
        the live lock another breaker had just put in its place, and a third process take
        the freed path, beside that holder. Rename first, then look: if a fresh lock was moved
        after all (a live holder past stale_after released it, and another came), put it back
        where nobody has taken the place since."""
        turn = self._turn()
        if turn is None:
            return
        try:
            if _record(self.path)[0] != stale:
                return
            grave = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex}.broken")
            try:
                os.rename(self.path, grave)
            except FileNotFoundError:
                return
            if _record(grave)[0] not in (stale, None):
                try:
                    os.link(grave, self.path)    # fails if someone created a lock meanwhile
                except OSError:
                    pass
            grave.unlink(missing_ok=True)
        finally:
            turn.unlink(missing_ok=True)

    def _turn(self) -> Path | None:
        """The breakers' turn: a marker beside the lock, made with O_EXCL, to remove when the
        break is done; None while another breaker has it. A marker older than BREAK_GRACE_S
        or stale_after, whichever is longer, left by a breaker killed in its turn, is removed
        for whoever polls next."""
        marker = self.path.with_name(f".{self.path.name}.break")
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return marker
        except FileExistsError:
            pass
        age = server_age(marker)
        if age is not None and age > max(BREAK_GRACE_S, self.stale_after):
            marker.unlink(missing_ok=True)
        return None

    def _holder_named(self) -> str | None:
        """The holder the lock file records, in words; None when it cannot be read."""
        try:
            return lock_wait.recorded(_record(self.path)[1])
        except OSError:
            return None

    def _release(self) -> None:
        """Remove our own lock only: a breaker may have replaced it after a long stall."""
        if _record(self.path)[0] == self._token:
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
        if self._depth and self._owner == threading.get_ident():  # re-entrant within a thread
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        started = time.monotonic()
        deadline, said = started + self.timeout, False
        judged = 0.0      # staleness is judged once a second: each look writes a probe file
        while not self._try_create():
            if not said and lock_wait.noticing() and time.monotonic() - started >= lock_wait.WAIT_NOTICE_S:
                said = True
                lock_wait.notice(self.path, self.timeout, self._holder_named())
            if time.monotonic() - judged >= 1.0:
                judged = time.monotonic()
                stale = self._stale_token()
                if stale is not None:
                    self._break(stale)
                    continue
            if time.monotonic() > deadline:
                raise LockTimeout(lock_wait.timed_out(self.path, self.timeout, self._holder_named())
                                  + "; if its holder is gone, remove the file by hand")
            time.sleep(self.poll)
        self._depth, self._owner = 1, threading.get_ident()
        try:
            yield
        finally:
            self._depth, self._owner = 0, None
            self._release()


RunLock = Union[FlockLock, SoftLock]


def unusable(path: Path, exc: OSError) -> StateError:
    """A lock file that cannot be taken at all (a folder in its place, no permission):
    waiting would not help, so it is named as damaged state."""
    hint = "; it must be a plain file, not a folder" if isinstance(exc, IsADirectoryError) else ""
    return StateError(path, f"cannot be locked ({exc.strerror}){hint}")


def make_lock(kind: str, path: Path, timeout: float = 120.0, stale_after: float = 30.0) -> RunLock:
    if kind == "flock":
        return FlockLock(path, timeout)
    if kind == "soft":
        return SoftLock(path, timeout, stale_after)
    raise ValueError(f"unknown lock kind {kind!r} (use flock or soft)")
