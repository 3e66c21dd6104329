"""The monitor job: every `early_stop_interval_s` it asks the early stopper about each running
phase and cancels the dominated ones (paper §3.5).

It runs as its own batch job (submitit: Slurm on a cluster, a local process otherwise) so the
login node does no plotting or LLM calls on a timer. It writes a heartbeat; the controller's
`MonitorKeeper` resubmits it when it dies, hangs or reaches its time limit. The decision is
recorded in the node's early_stop.json before `scancel`, which is how the controller tells an
early stop from a person's cancel.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from ..agents.llm import choose_backend
from ..agents.stopper import Stopper
from ..errors import StateError
from ..metrics import MetricsLog, read_metrics, stitch
from ..processes import runs
from ..schedulers import make_scheduler
from ..schedulers.base import Scheduler, parse_time
from ..search.policy import best_path
from ..search.tree import Node, Status, Tree
from ..store.atomic import read_json, write_json
from ..store.run_store import RunStore
from .lease import Lease, holder_alive

HEARTBEAT_S = 5.0          # the monitor's heartbeat period while it waits
STALE_S = 120.0            # a running monitor silent this long is replaced
LEASE_GRACE_S = 30.0       # the monitor outlives a vanished controller lease this long


def stop_decided(node_dir: Path) -> bool:
    """Whether the monitor decided STOP for this phase (then its cancel is an early stop)."""
    try:
        records = read_json(node_dir / "early_stop.json")
    except StateError:
        return False
    return isinstance(records, list) and any(
        isinstance(r, dict) and (r.get("result") or {}).get("action") == "STOP" for r in records)


def best_strategy(store: RunStore, tree: Tree) -> tuple[MetricsLog | None, float | None]:
    """The best completed strategy's curves on the global-step axis, and its best score."""
    path = [n for n in best_path(tree) if n.status in (Status.COMPLETED, Status.EARLY_STOPPED)]
    if not path:
        return None, None
    logs = []
    for node, nxt in zip(path, path[1:] + [None]):
        until = nxt.resume.step if nxt is not None and nxt.resume else None
        logs.append((read_metrics(store.node_dir(node.id) / "metrics.jsonl"), until))
    return stitch(logs), path[-1].score


class Monitor:
    """One pass per interval over the running phases of a run."""

    def __init__(self, store: RunStore, scheduler: Scheduler):
        self.store, self.scheduler = store, scheduler
        cfg = store.config
        self.stopper = Stopper(cfg.agents, choose_backend(cfg.agents))
        self.seen: dict[int, int | None] = {}   # node -> last step judged
        self.cancelled: set[int] = set()

    def check_once(self) -> list[int]:
        """Judge every running phase with new metrics; return the nodes cancelled."""
        tree = self.store.load_tree()
        best, best_val = best_strategy(self.store, tree)
        stopped = []
        for node in tree:
            if node.status is not Status.RUNNING or not node.submission.job_id:
                continue
            node_dir = self.store.node_dir(node.id)
            # A STOP stays the last word: the phase is not judged again while its cancel takes
            # effect, and a monitor restarted between the record and scancel cancels it once.
            if ((stop_decided(node_dir) or self._judge(node, node_dir, best, best_val))
                    and node.id not in self.cancelled):
                self.scheduler.cancel(node.submission.job_id)
                self.cancelled.add(node.id)
                stopped.append(node.id)
        return stopped

    def _judge(self, node: Node, node_dir: Path, best: MetricsLog | None,
               best_val: float | None) -> bool:
        """Ask the stopper about a phase with new metrics; True when it says STOP."""
        current = read_metrics(node_dir / "metrics.jsonl")
        if current.last_step is None or self.seen.get(node.id) == current.last_step:
            return False
        self.seen[node.id] = current.last_step
        steps = node.hparams.get("total_training_steps")
        planned_end = node.start_step + steps if steps else None
        decision = self.stopper.decide(current, node.start_step, planned_end, best, best_val,
                                       node_dir)
        return decision.action == "STOP"


def run_monitor(run_dir: str, scheduler_kind: str, interval_s: float, lifetime_s: float) -> str:
    """The monitor job's body: loop until the controller is gone or the lifetime is up."""
    store = RunStore.open(run_dir)
    monitor = Monitor(store, make_scheduler(scheduler_kind, store.root))
    lease = Lease(store)
    heartbeat = store.root / "monitor" / "heartbeat.json"
    heartbeat.parent.mkdir(exist_ok=True)
    def beat(**extra: Any) -> None:
        write_json(heartbeat, {"time": time.time(), "host": socket.gethostname(),
                               "pid": os.getpid(), **extra})

    started = time.time()
    beat()
    gone_since: float | None = None
    next_check = started
    while time.time() - started < lifetime_s:
        info = lease.read()
        if info is None or not holder_alive(info, lease.expire_s):
            gone_since = gone_since or time.time()
            if time.time() - gone_since > LEASE_GRACE_S:
                return "the controller is gone"
        else:
            gone_since = None
        if time.time() >= next_check:
            beat(stopped=monitor.check_once())
            next_check = time.time() + interval_s
        else:
            beat()
        time.sleep(min(HEARTBEAT_S, max(0.1, next_check - time.time())))
    return "lifetime reached"


class MonitorKeeper:
    """Keeps one monitor job alive while phases run; resubmits it when it is dead or silent."""

    def __init__(self, store: RunStore, scheduler_kind: str, scheduler: Scheduler):
        """`scheduler` is the controller's own, so its back-off and state cache are shared."""
        self.store, self.kind, self.scheduler = store, scheduler_kind, scheduler
        self.dir = store.root / "monitor"
        self.dir.mkdir(exist_ok=True)
        cfg = store.config
        self.interval = cfg.search.early_stop_interval_s
        # A monitor on Slurm lives as long as a phase may; the keeper replaces it after that.
        self.lifetime = max(parse_time(cfg.slurm.time), 4 * self.interval) if scheduler_kind == "slurm" \
            else 7 * 24 * 3600.0

    def _record(self) -> dict[str, Any]:
        try:
            data = read_json(self.dir / "monitor.json")
        except StateError:
            return {}
        return data if isinstance(data, dict) else {}

    def _state(self, record: dict[str, Any]) -> Status | None:
        """QUEUED or RUNNING while the monitor job lives, None when it is gone."""
        job = record.get("job_id")
        if not job:
            return None
        if record.get("kind") == "local":
            return Status.RUNNING if runs(int(job), "submitit") else None
        state = self.scheduler.states([job]).get(job)
        if state is None:
            return Status.QUEUED   # too new for squeue to list: give it the benefit of the doubt
        return None if state.final else state.status

    def _silent(self, record: dict[str, Any]) -> bool:
        """A running monitor whose heartbeat stopped (hung in a call, or its host froze)."""
        try:
            beat = float(read_json(self.dir / "heartbeat.json")["time"])
        except (StateError, KeyError, TypeError, ValueError):
            beat = 0.0
        last = max(beat, float(record.get("submitted_at", 0)))
        return time.time() - last > STALE_S + self.interval

    def ensure(self, needed: bool) -> None:
        record = self._record()
        state = self._state(record)
        if state is Status.RUNNING and self._silent(record):
            self._cancel(record)
            state = None
        if needed and state is None:
            self._submit()

    def _submit(self) -> None:
        import submitit  # login-node import cost only when a monitor is needed

        cfg = self.store.config
        folder = self.dir / "%j"
        args = (str(self.store.root), self.kind, self.interval, self.lifetime)
        if self.kind == "slurm":
            ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=0)
            s = cfg.slurm
            ex.update_parameters(
                job_name=f"llmz-{cfg.name}-monitor", time=int(self.lifetime // 60) + 1,
                partition=s.partition, account=s.account, qos=s.qos, cpus_per_task=1,
                mem="2G", setup=list(s.setup), comment=f"llmz:monitor,run={cfg.name}")
        else:
            ex = submitit.LocalExecutor(folder=folder)
            ex.update_parameters(timeout_min=int(self.lifetime // 60) + 1)
        job = ex.submit(run_monitor, *args)
        write_json(self.dir / "monitor.json", {"job_id": str(job.job_id), "kind": self.kind,
                                               "submitted_at": time.time()})

    def _cancel(self, record: dict[str, Any]) -> None:
        job = str(record.get("job_id"))
        if record.get("kind") == "local":
            try:
                os.kill(int(job), 15)
            except (ProcessLookupError, ValueError):
                pass
        else:
            self.scheduler.cancel(job)

    def stop(self) -> None:
        """Cancel the monitor job (the controller is leaving)."""
        record = self._record()
        if self._state(record) is not None:
            self._cancel(record)
