"""Is a process alive, and is it the one we think it is?

Pid files, leases and lock files outlive the processes that wrote them, and pids get reused,
so every liveness check in the package goes through here. (The verl metrics copier keeps its
own copy: it runs by file path on GPU nodes without importing this package.)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _is_pid(pid: Any) -> bool:
    return not isinstance(pid, bool) and isinstance(pid, int) and pid > 0


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name (state, ppid, pgrp, ...); OSError
    when it cannot be read."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2:].split()


def alive(pid: Any) -> bool:
    """True while `pid` runs on this host; a zombie (exited, not yet reaped) counts as gone."""
    if not _is_pid(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True   # someone else's process: alive, and not ours to judge further
    try:
        return _stat(pid)[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


def runs(pid: Any, marker: str) -> bool:
    """True when `pid` is alive and its command line contains `marker` (not a reused pid)."""
    if not alive(pid):
        return False
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def leads_with(pgid: Any, entry: str) -> bool:
    """True while process `pgid` lives, leads its process group and has `entry` (NAME=value)
    in its environment: the group is still the one that was given it, not another that has
    since taken its id, and a process its leader left behind does not count. A process of
    another user, whose environment cannot be read, counts (not ours to judge)."""
    if not _is_pid(pgid):
        return False
    try:
        state, _, group = _stat(pgid)[:3]
        return int(group) == pgid and state not in ("Z", "X") and os.fsencode(entry) in \
            Path(f"/proc/{pgid}/environ").read_bytes().split(b"\0")
    except PermissionError:
        return True
    except (OSError, ValueError):
        return False


def arguments(pid: Any) -> list[str] | None:
    """The command line of `pid` while it is alive, else None."""
    if not alive(pid):
        return None
    try:
        return [os.fsdecode(a) for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
    except OSError:
        return None


def command_lines(markers: tuple[str, ...]) -> dict[int, list[str]]:
    """The arguments of each live process of this host whose command line holds one of
    `markers` as one of them (a supervisor whose record of its pid was lost, found by its
    module's name)."""
    found: dict[int, list[str]] = {}
    wanted = {os.fsencode(m) for m in markers}
    for entry in Path("/proc").iterdir():
        try:
            raw = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if wanted.intersection(raw) and alive(int(entry.name)):
            found[int(entry.name)] = [os.fsdecode(a) for a in raw]
    return found
