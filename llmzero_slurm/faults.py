"""Crash points for the controller's crash tests.

`LLMZERO_FAULT=<point>[:<n>]` makes the process SIGKILL itself the n-th time (default first) it
passes the named point -- a real kill -9 at an exact instruction, which a timer cannot give.
Points: creating_node (node id taken, its folder and record not yet written), before_sbatch,
after_sbatch, while_ingesting. Unset, a point costs one dict lookup.
"""
from __future__ import annotations

import os
import signal

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
