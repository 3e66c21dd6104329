"""`llmzero-stop` asks a controller on any host to stop through a file in the run directory."""
from __future__ import annotations

import os
import time
from typing import Any

from ..store.atomic import read_json, write_json
from ..store.run_store import RunStore

STOP_FILE = "stop.json"


def request_stop(store: RunStore, cancel: bool) -> None:
    write_json(store.root / STOP_FILE, {"cancel": cancel, "requested_at": time.time(),
                                        "by_pid": os.getpid()})


def read_stop_request(store: RunStore) -> dict[str, Any] | None:
    path = store.root / STOP_FILE
    if not path.exists():
        return None
    data = read_json(path)
    return data if isinstance(data, dict) else {}


def clear_stop_request(store: RunStore) -> None:
    (store.root / STOP_FILE).unlink(missing_ok=True)
