"""One controller per run directory: a lease file with a heartbeat on the shared filesystem.

A second `llmzero-start` on the same run refuses while the holder's heartbeat is fresh; a
holder that died (no heartbeat for `expire_s`, or a dead pid on this host) is taken over, which
is how a restarted controller resumes a run.
"""
from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from ..errors import LLMZeroError, StateError
from ..processes import alive
from ..store.atomic import read_json, write_json
from ..store.run_store import RunStore


class LeaseHeld(LLMZeroError):
    exit_code = 6


def holder_alive(info: dict[str, Any], expire_s: float) -> bool:
    """Whether the lease in `info` still belongs to a live controller."""
    if time.time() - float(info.get("heartbeat_at", 0)) > expire_s:
        return False
    if info.get("host") == socket.gethostname():
        return alive(info.get("pid"))
    return True


class Lease:
    FILE = "controller.json"

    def __init__(self, store: RunStore, expire_s: float = 120.0):
        self.store, self.expire_s = store, expire_s
        self.path = store.root / self.FILE
        self.token = uuid.uuid4().hex[:12]

    def read(self) -> dict[str, Any] | None:
        try:
            data = read_json(self.path)
        except StateError:
            return None
        return data if isinstance(data, dict) else None

    def acquire(self) -> None:
        with self.store.lock.hold():
            info = self.read()
            if info and info.get("token") != self.token and holder_alive(info, self.expire_s):
                raise LeaseHeld(f"{self.store.root}: a controller is already running "
                                f"(host {info.get('host')}, pid {info.get('pid')}); stop it with "
                                f"llmzero-stop or wait {self.expire_s:.0f} s after it died")
            self._write(started_at=time.time())

    def _write(self, **extra: Any) -> None:
        info = self.read() or {}
        info.update({"host": socket.gethostname(), "pid": os.getpid(), "token": self.token,
                     "heartbeat_at": time.time(), **extra})
        write_json(self.path, info)

    def heartbeat(self, **extra: Any) -> None:
        """Refresh the lease; raise if another controller has taken it over."""
        info = self.read()
        if info and info.get("token") != self.token:
            raise LeaseHeld(f"{self.path}: taken over by host {info.get('host')} pid {info.get('pid')}")
        self._write(**extra)

    def release(self) -> None:
        with self.store.lock.hold():
            info = self.read()
            if info and info.get("token") == self.token:
                Path(self.path).unlink(missing_ok=True)
