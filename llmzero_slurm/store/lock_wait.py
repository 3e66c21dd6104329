"""What a wait for a lock says: who holds it, a line once the wait is long, and the error when
it times out.

A command waiting on a run's lock (state.lock_timeout_s, 120 s by default) looked hung. The
CLI hands `say_long_waits` its stderr, so a wait past WAIT_NOTICE_S is said once, naming the
file and its holder where that can be known; a process that does not (a phase's job) waits
silently as before. A flock records no holder in its file: on Linux this host's holders are
listed in /proc/locks; one on another host of a shared filesystem is not.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Callable

WAIT_NOTICE_S = 2.0

_say: Callable[[str], None] | None = None


def say_long_waits(say: Callable[[str], None] | None) -> None:
    """Have each wait for a lock that lasts past WAIT_NOTICE_S said once through `say`."""
    global _say
    _say = say


def noticing() -> bool:
    """Whether a long wait is said: only then does a lock wait out WAIT_NOTICE_S first."""
    return _say is not None


def notice(path: Path, timeout: float, holder: str | None) -> None:
    """Say, once per wait, that the lock at `path` is waited for, held by `holder`."""
    if _say is not None:
        limit = f"giving up after {timeout:.0f} s" if timeout >= 0 else "waiting as long as it takes"
        _say(f"waiting for the lock {path}, held by {holder or 'another process'} ({limit})")


def timed_out(path: Path, timeout: float, holder: str | None) -> str:
    """The LockTimeout message: the file, its holder, and what to do."""
    return (f"{path}: still held after {timeout:.0f} s by {holder or 'another process'}: another "
            "llmzero command or a controller of this run is using it; try again once it is done "
            "(llmzero-status names a running controller)")


def flock_holder(path: Path) -> str | None:
    """The process of this host that holds a flock on `path` ("pid N on this host: its
    command"), from /proc/locks; None where it is not listed (another host, not Linux)."""
    try:
        info = path.stat()
        with open("/proc/locks", encoding="utf-8") as fh:
            listed = fh.read().splitlines()
    except OSError:
        return None
    ident = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for fields in map(str.split, listed):
        # "1: FLOCK  ADVISORY  WRITE 4242 00:2a:1234 0 EOF"; a waiter's has "->" after the number
        if len(fields) > 5 and fields[1] != "->" and fields[5] == ident:
            return process(fields[4])
    return None


def recorded(holder: dict[str, Any]) -> str | None:
    """The holder a soft lock's file records, in words; None when it names no pid."""
    if "pid" not in holder:
        return None
    if holder.get("host") == socket.gethostname():
        return process(str(holder["pid"]))
    return f"pid {holder['pid']} on {holder.get('host', 'an unnamed host')}"


def process(pid: str) -> str:
    """`pid` of this host, with its command line where it can be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            command = " ".join(fh.read().decode(errors="replace").replace("\0", " ").split())
    except OSError:
        command = ""
    shown = command if len(command) <= 100 else command[:97] + "..."
    return f"pid {pid} on this host" + (f" ({shown})" if shown else "")
