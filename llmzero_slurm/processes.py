"""Is a process alive, and is it the one we think it is?

Pid files, leases and lock files outlive the processes that wrote them, and pids get reused,
so every liveness check in the package goes through here. (The verl metrics copier keeps its
own copy: it runs by file path on GPU nodes without importing this package.)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def alive(pid: Any) -> bool:
    """True while `pid` runs on this host; a zombie (exited, not yet reaped) counts as gone."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True   # someone else's process: alive, and not ours to judge further
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X")


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
    if isinstance(pgid, bool) or not isinstance(pgid, int) or pgid <= 0:
        return False
    proc = Path(f"/proc/{pgid}")
    try:
        stat = (proc / "stat").read_text()
        state, _, group = stat[stat.rfind(")") + 2:].split()[:3]
        return int(group) == pgid and state not in ("Z", "X") \
            and os.fsencode(entry) in (proc / "environ").read_bytes().split(b"\0")
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


def command_lines(marker: str) -> dict[int, list[str]]:
    """The arguments of each process of this host whose command line holds `marker` as one of
    them (a supervisor whose record of its pid was lost, found by its module's name)."""
    found: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        argv = arguments(int(entry.name)) if entry.name.isdigit() else None
        if argv is not None and marker in argv:
            found[int(entry.name)] = argv
    return found
