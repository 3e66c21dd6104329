"""Fault points for the controller's crash and disk-full tests.

`LLMZERO_FAULT=<point>[:<n>]` makes the process SIGKILL itself the n-th time (default first) it
passes the named point -- a real kill -9 at an exact instruction, which a timer cannot give.
Points: creating_node (node id taken, its folder and record not yet written), before_sbatch,
after_sbatch, while_ingesting. `LLMZERO_FAULT=enospc:<file name>[:<n>]` makes the n-th atomic
write of a file of that name fail as a full disk does. Unset, a point costs one dict lookup.
"""
from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

_passed: dict[str, int] = {}


def point(name: str) -> None:
    spec = os.environ.get("LLMZERO_FAULT")
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    _passed[name] = _passed.get(name, 0) + 1
    if _passed[name] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)


def disk_full(path: Path) -> None:
    spec = os.environ.get("LLMZERO_FAULT")
    if not spec or not spec.startswith("enospc:"):
        return
    name, _, nth = spec[len("enospc:"):].partition(":")
    if path.name != name:
        return
    key = f"enospc:{name}"
    _passed[key] = _passed.get(key, 0) + 1
    if _passed[key] == int(nth or 1):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (injected)", str(path))
