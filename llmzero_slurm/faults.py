"""Fault points for the controller's crash and disk-full tests.

`LLMZERO_FAULT=<point>[:<n>]` makes the process SIGKILL itself the n-th time (default first) it
passes the named point -- a real kill -9 at an exact instruction, which a timer cannot give.
Points: creating_node (node id taken, its folder and record not yet written), before_sbatch,
after_sbatch, while_ingesting, while_pruning (checkpoints recorded as removed, their folders
not yet). `LLMZERO_FAULT=enospc:<file name>[:<n>]` makes the n-th atomic write of a file of
that name fail as a full disk does. Unset, a point costs one dict lookup.
"""
from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

_passed: dict[str, int] = {}


def _due(name: str) -> bool:
    """Whether LLMZERO_FAULT names `name` and this is the n-th time it is passed."""
    spec = os.environ.get("LLMZERO_FAULT")
    if not spec:
        return False
    target, _, nth = spec.rpartition(":")
    if not nth.isdigit():
        target, nth = spec, "1"
    if target != name:
        return False
    _passed[name] = _passed.get(name, 0) + 1
    return _passed[name] == int(nth)


def point(name: str) -> None:
    if _due(name):
        os.kill(os.getpid(), signal.SIGKILL)


def disk_full(path: Path) -> None:
    if _due(f"enospc:{path.name}"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (injected)", str(path))
