"""The monitor job: every `early_stop_interval_s` it asks the early stopper about each running
phase and cancels the dominated ones (paper §3.5).

It runs as its own batch job (submitit: Slurm on a cluster, a local process otherwise) so the
login node does no plotting or LLM calls on a timer. It writes a heartbeat; the controller's
`MonitorKeeper` (keeper.py) resubmits it when it dies, hangs or reaches its time limit. The
decision is recorded in the node's early_stop.json before `scancel`, which is how the
controller tells an early stop from a person's cancel.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..metrics import MetricsLog, strategy_curves
from ..metrics_reader import MetricsReader
from ..schedulers import make_scheduler
from ..schedulers.base import Scheduler
from ..search.policy import best_path
from ..search.tree import Node, Status, Tree
from ..errors import SchedulerError, StateError, full_storage
from ..job_names import node_job_name
from ..store.atomic import read_json, write_json
from ..stop_reason import stop_line
from ..store.run_store import RunStore
from . import llm_key
from .lease import Lease
from .signals import StopSignals

if TYPE_CHECKING:
    from ..agents.stopper import Stopper

HEARTBEAT_S = 5.0          # the monitor's heartbeat period while it waits
HEARTBEAT_FILE = "heartbeat.json"   # in the run's monitor/ folder: time, host, pid, job_id, ...
LEASE_GRACE_S = 30.0       # the monitor outlives a vanished controller lease this long


class Monitor:
    """One pass per interval over the running phases of a run."""

    def __init__(self, store: RunStore, scheduler: Scheduler, cut_off: str | None = None,
                 key: str | None = None):
        """`cut_off`: why the LLM cannot be reached (the offline stopper judges until it can);
        `key`: the LLM key the controller handed over (llm_key.py)."""
        # Imported here, in the monitor job: the LLM clients and matplotlib take seconds to
        # import, which llmzero-status (reading monitor_heartbeat) must not pay on every call.
        from ..agents.llm import choose_backend
        from ..agents.stopper import Stopper
        self.store, self.scheduler, self.cut_off, self.key = store, scheduler, cut_off, key
        cfg = store.config
        self.stopper: Stopper = Stopper(cfg.agents, None if cut_off else choose_backend(cfg.agents, key))
        self.seen: dict[int, int | None] = {}   # node -> last step judged
        self.cancelled: set[int] = set()
        self.readers: dict[int, MetricsReader] = {}   # node -> its metrics, read incrementally

    def metrics(self, node_id: int) -> MetricsLog:
        """A node's metrics; each pass reads only what its phase appended since the last."""
        reader = self.readers.get(node_id)
        if reader is None:
            reader = self.readers[node_id] = self.store.node_dir(node_id).metrics_reader()
        return reader.read()

    def best_strategy(self, tree: Tree) -> tuple[MetricsLog | None, float | None, int | None]:
        """The best finished strategy's curves on the global-step axis, its best score and
        the node that scored it."""
        path = best_path(tree)
        if not path:
            return None, None, None
        return strategy_curves(path, self.metrics), path[-1].score, path[-1].id

    def reach_llm(self) -> None:
        """A monitor cut off from its LLM tries the route again before each pass, and its
        stopper asks the LLM once it can: one started during an outage (or before the
        server) judged offline for its whole life, days under the local scheduler."""
        from ..agents.llm import choose_backend, endpoint, unreachable
        agents = self.store.config.agents
        self.cut_off = unreachable(agents)
        if self.cut_off is None:
            self.stopper.llm = choose_backend(agents, self.key)
            print(f"monitor: the LLM endpoint {endpoint(agents)} can be reached again; the "
                  "early stopper asks the LLM from now on", file=sys.stderr, flush=True)

    def check_once(self, alive: Callable[[], object] = lambda: None) -> list[int]:
        """Judge every running phase with new metrics; return the nodes cancelled. `alive` is
        called before each phase: a pass over many phases with a slow LLM outlasts the
        keeper's patience with a silent monitor."""
        if self.cut_off:
            self.reach_llm()
        try:
            tree = self.store.load_tree()
            best = self.best_strategy(tree)
        except (StateError, OSError) as exc:
            # A listing failing for a moment (ESTALE on NFS) must not end the job: its
            # replacement may wait in the queue for hours while nothing is judged.
            print(f"monitor: pass skipped, the run's tree could not be read: {_why(exc)}",
                  file=sys.stderr, flush=True)
            return []
        stopped = []
        for node in tree:
            if node.status is not Status.RUNNING or not node.submission.job_id:
                continue
            alive()
            # A STOP stays the last word: the phase is not judged again while its cancel takes
            # effect, and a monitor restarted between the record and scancel cancels it once.
            files = self.store.node_dir(node.id)
            try:
                stop = files.stop_decided() or self._judge(node, *best)
            except Exception as exc:  # see below
                # One phase's torn early_stop.json, full disk or a bug its metrics meet must
                # not end the monitor (its replacements would die the same way): the others
                # are still judged.
                print(f"monitor: node {node.id}: not judged this pass: {_why(exc)}",
                      file=sys.stderr, flush=True)
                continue
            if stop and node.id not in self.cancelled:
                why = stop_line(files)
                print(f"monitor: node {node.id}: {why}; cancelling job {node.submission.job_id}",
                      file=sys.stderr, flush=True)
                try:
                    self.scheduler.cancel(node.submission.job_id,
                                          node_job_name(self.store.config.name, node),
                                          f"llmzero: {why}")
                except SchedulerError as exc:
                    # A job another member of the group submitted is only theirs (or an
                    # operator's) to cancel: the monitor says so in its log and lives on to
                    # judge the other phases, trying again at its next pass.
                    print(f"monitor: node {node.id}: STOP decided, but its job was not "
                          f"cancelled: {exc}", file=sys.stderr, flush=True)
                    continue
                self.cancelled.add(node.id)
                stopped.append(node.id)
        return stopped

    def _judge(self, node: Node, best: MetricsLog | None, best_val: float | None,
               best_node: int | None) -> bool:
        """Ask the stopper about a phase with new metrics; True when it says STOP."""
        current = self.metrics(node.id)
        if current.last_step is None or self.seen.get(node.id) == current.last_step:
            return False
        from ..agents.stopper import StopperInput
        decision = self.stopper.decide(StopperInput.of(node, current, best, best_val, best_node),
                                       self.store.node_dir(node.id).path)
        self.seen[node.id] = current.last_step    # judged once kept: a failed write asks again
        return decision.action == "STOP"


def _why(exc: Exception) -> str:
    """A damaged or unwritable file as its message says; anything else, a bug, with where."""
    if isinstance(exc, (StateError, OSError)):
        return str(full_storage(exc) or exc)
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc().rstrip()}"


class Heartbeat:
    """The monitor's heartbeat.json: when it started and last beat (its host's clock), and on
    a clean way out why it ended, which tells the keeper a crash from an end by design.

    A write that fails (EIO, ESTALE, a full disk) is said once per kind of error, and the
    monitor goes on judging: one that truly stops beating is the keeper's silence check's."""

    def __init__(self, path: Path, cut_off: str | None):
        self.path, self.cut_off = path, cut_off
        self.started = time.time()
        # Which job beats: the keeper trusts an "ended" only from the job it submitted last.
        self.job_id = os.environ.get("SUBMITIT_LOCAL_JOB_ID") or os.environ.get("SLURM_JOB_ID")
        self.failed: set[tuple[str, int | None]] = set()

    def __call__(self, **extra: Any) -> None:
        try:
            write_json(self.path, {"time": time.time(), "started": self.started,
                                   "host": socket.gethostname(), "pid": os.getpid(),
                                   "job_id": self.job_id, **extra,
                                   **({"llm_unreachable": self.cut_off} if self.cut_off else {})})
        except (StateError, OSError) as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
            kind = (type(exc).__name__, getattr(cause, "errno", None))
            if kind not in self.failed:
                self.failed.add(kind)
                print(f"monitor: heartbeat not written, going on (said once): {exc}",
                      file=sys.stderr, flush=True)


def monitor_heartbeat(store: RunStore) -> dict[str, Any]:
    """What the monitor job last said about itself ({} before it first ran)."""
    try:
        data = read_json(store.root / "monitor" / HEARTBEAT_FILE)
    except StateError:
        return {}
    return data if isinstance(data, dict) else {}


def run_monitor(run_dir: str, scheduler_kind: str, interval_s: float, lifetime_s: float) -> str:
    """The monitor job's body: loop until the controller is gone or the lifetime is up."""
    from ..agents.llm import choose_backend, unreachable
    store = RunStore.open(run_dir)
    agents = store.config.agents
    key = llm_key.take(store.root / "monitor", agents)
    # Compute nodes often have no route to the internet: find out in seconds, and judge with
    # the offline stopper while there is none, instead of every call spending minutes on retries.
    cut_off = unreachable(agents) if choose_backend(agents, key) else None
    monitor = Monitor(store, make_scheduler(scheduler_kind, store.root), cut_off, key)
    (store.root / "monitor").mkdir(exist_ok=True)
    beat = Heartbeat(store.root / "monitor" / HEARTBEAT_FILE, cut_off)
    ended = _watch(monitor, Lease(store), beat, interval_s, lifetime_s)
    beat(ended=ended)
    return ended


def _watch(monitor: Monitor, lease: Lease, beat: Heartbeat, interval_s: float,
           lifetime_s: float) -> str:
    """The monitor's loop; why it ended."""
    # submitit ignores SIGTERM (it waits for the SIGKILL) and fails the job on its time-limit
    # USR2 when the function cannot be checkpointed; a monitor must instead stop at once when
    # cancelled, and end cleanly near its limit for the keeper to replace it.
    # A cancel while the stopper waits on its LLM interrupts the call (signals.py).
    stop = StopSignals((signal.SIGTERM, signal.SIGUSR2))
    stop.install()
    beat()
    started = beat.started
    gone_since: float | None = None
    next_check = started
    while time.time() - started < lifetime_s:
        if stop.received is not None:
            return f"stopped by {signal.Signals(stop.received).name}"
        info = lease.peek()     # unreadable for longer than the grace: as good as gone
        if info is None or not lease.holder_alive(info):
            gone_since = gone_since or time.time()
            if time.time() - gone_since > LEASE_GRACE_S:
                return "the controller is gone"
        else:
            gone_since = None
        if time.time() >= next_check:
            stopped = stop.unless_stopped(lambda: monitor.check_once(beat))
            if stopped is None:
                continue       # cancelled while judging: the loop's top returns
            beat.cut_off = monitor.cut_off
            beat(stopped=stopped)
            next_check = time.time() + interval_s
        else:
            beat()
        stop.sleep(min(HEARTBEAT_S, max(0.1, next_check - time.time())))
    return "lifetime reached"
