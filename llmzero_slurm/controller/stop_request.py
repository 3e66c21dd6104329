"""`llmzero-stop` asks a controller on any host to stop through a file in the run directory;
with no controller alive, it cancels the phases itself."""
from __future__ import annotations

import os
import time
from typing import Any, Callable

from ..schedulers.base import Scheduler
from ..search.tree import Status, Tree
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


def cancel_phases(tree: Tree, scheduler: Scheduler) -> list[str]:
    """scancel every queued or running phase's job; the job ids cancelled."""
    jobs = [n.submission.job_id for n in tree
            if n.status in (Status.QUEUED, Status.RUNNING) and n.submission.job_id]
    for job_id in jobs:
        scheduler.cancel(job_id)
    return jobs


def stop_phases(store: RunStore, tree: Tree, scheduler: Scheduler, cancel: bool,
                event: Callable[[str], object]) -> None:
    """The controller's side of a stop: cancel its phases when asked (else say they keep
    running, for the next controller to watch) and clear the request it acted on."""
    if cancel:
        cancelled = cancel_phases(tree, scheduler)
        event(f"stopped; cancelled {len(cancelled)} running phase(s)")
    else:
        pending = [n for n in tree if n.status in (Status.QUEUED, Status.RUNNING)]
        event(f"stopped; {len(pending)} phase(s) keep running (llmzero-start resumes watching them)")
    clear_stop_request(store)
