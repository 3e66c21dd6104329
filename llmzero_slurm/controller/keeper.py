"""The controller's side of the monitor job: keep exactly one alive while phases run.

The monitor (monitor.py) is submitted through the run's scheduler as a Python function, and
resubmitted when it is gone, silent (its heartbeat stopped: hung in a call, or its host froze)
or past its time limit. Everything scheduler-specific goes through the `Scheduler` interface.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from ..errors import SchedulerError, StateError
from ..job_names import monitor_job_name
from ..schedulers.base import CallJob, Scheduler, parse_time
from ..search.tree import Status
from ..store.atomic import read_json, write_json
from ..store.locks import server_ages
from ..store.run_store import RunStore
from . import llm_key
from .monitor import HEARTBEAT_FILE, monitor_heartbeat, run_monitor

STALE_S = 120.0            # silence allowed a running monitor beyond an interval and an LLM call
# The wait before replacing a monitor that ended before its first heartbeat (a broken
# environment fails every one the same way), or that crashed well before its lifetime (a bug
# its replacements meet too); it doubles with each such end in a row, up to MAX_RETRY_S.
START_RETRY_S = 60.0
MAX_RETRY_S = 1800.0
UNLIMITED_S = 7 * 24 * 3600.0   # a monitor's lifetime where jobs need no time limit
# The monitor jobs' folders (submitit's files, the log) kept to read; older ones are removed
# as another is submitted: one a phase time limit, they gathered thousands in a long run.
KEPT_MONITOR_FOLDERS = 3


class MonitorKeeper:
    """Keeps one monitor job alive while phases run; resubmits it when it is dead or silent."""

    def __init__(self, store: RunStore, scheduler: Scheduler):
        """`scheduler` is the controller's own, so its back-off and state cache are shared."""
        self.store, self.scheduler = store, scheduler
        self.dir = store.root / "monitor"
        self.dir.mkdir(exist_ok=True)
        cfg = store.config
        self.interval = cfg.search.early_stop_interval_s
        # A monitor does not beat while its stopper waits on the LLM, which may take all of
        # agents.timeout_s: a slow LLM (or a timeout raised for one) must not read as a hang.
        self.patience = STALE_S + self.interval + cfg.agents.timeout_s
        # A time-limited monitor lives as long as a phase may; the keeper replaces it after that.
        self.lifetime = (max(parse_time(cfg.slurm.time), 4 * self.interval)
                         if scheduler.time_limited else UNLIMITED_S)
        self._judged: str | None = None     # the last ended monitor job looked at
        self._early_ends = 0                # monitors in a row that ended too early
        self._retry_at = 0.0

    def _record(self) -> dict[str, Any]:
        try:
            data = read_json(self.dir / "monitor.json")
        except StateError:
            return {}
        return data if isinstance(data, dict) else {}

    def _state(self, record: dict[str, Any]) -> Status | None:
        """QUEUED or RUNNING while the monitor job lives, None when it is gone."""
        job = record.get("job_id")
        return self.scheduler.call_state(str(job)) if job else None

    def _silent(self) -> bool:
        """A monitor whose heartbeat stopped (hung in a call, its host froze, or it is gone
        without the scheduler saying so): neither its heartbeat nor its record (written when
        it was submitted and when it was first seen running) was written for a while, by the
        file server's clock."""
        known = [a for a in server_ages([self.dir / HEARTBEAT_FILE, self.dir / "monitor.json"])
                 if a is not None]
        return not known or min(known) > self.patience

    def _said_ended(self, job: str) -> bool:
        """The monitor job `job` wrote its last heartbeat, saying why it ended, and no source
        lists it (a job requeued and listed running again has not beaten yet in its new run)."""
        beat = monitor_heartbeat(self.store)
        return ("ended" in beat and str(beat.get("job_id")) == job
                and job not in self.scheduler.listed([job], self.job_name))

    @property
    def job_name(self) -> str:
        return monitor_job_name(self.store.config.name)

    def ensure(self, needed: bool) -> str | None:
        """Submit a monitor when `needed` and none lives; news for the user, or None.
        SchedulerError says, as the controller's log line, whether the job could not be
        checked (none is submitted then: it may live) or not submitted."""
        record = self._record()
        job = str(record.get("job_id") or "")
        try:
            state = self._state(record)
            if state is Status.RUNNING and self._said_ended(job):
                state = None    # no source lists it ended (scancelled, no accounting): it said so
        except SchedulerError as exc:
            raise SchedulerError(f"the monitor job {job} was not checked, checked again at the "
                                 f"next poll: {exc}", exc.retryable) from exc
        news = None
        if state is Status.RUNNING and not record.get("seen_running"):
            # Its silence counts from here, not from its submission: it may have queued for
            # longer than a silence is allowed to last.
            write_json(self.dir / "monitor.json", {**record, "seen_running": time.time()})
        elif state is Status.RUNNING and self._silent():
            self.scheduler.cancel_call(job, self.job_name)
            state, self._judged = None, job     # replaced at once: it did start
        elif state is None:
            news = self._judge_end(job)
        if needed and state is None and time.monotonic() >= self._retry_at:
            try:
                self._submit()
            except SchedulerError as exc:
                raise SchedulerError(f"monitor job not submitted, tried again at the next poll: "
                                     f"{exc}", exc.retryable, exc.unsure) from exc
        return news

    def _judge_end(self, job_id: str) -> str | None:
        """A monitor job that ended without the keeper cancelling it: one that never beat, or
        that crashed well before its lifetime, holds the next back."""
        if not job_id or job_id == self._judged:
            return None
        self._judged = job_id
        ages = server_ages([self.dir / HEARTBEAT_FILE, self.dir / "monitor.json"])
        if ages[0] is not None and ages[1] is not None and ages[0] <= ages[1]:
            why = self._crashed(monitor_heartbeat(self.store))
            if why is None:
                self._early_ends = 0
                return None
        else:
            why = "ended before its first heartbeat"
        self._early_ends += 1
        wait = min(START_RETRY_S * 2 ** (self._early_ends - 1), MAX_RETRY_S)
        self._retry_at = time.monotonic() + wait
        return (f"the monitor job {job_id} {why} (its log is in {self.dir.name}/{job_id}/); "
                f"submitting another in {wait:.0f} s")

    def _crashed(self, beat: dict[str, Any]) -> str | None:
        """How a monitor that beat ended early without saying why (a crash, or killed), or
        None: one that said why ended by design (cancelled by a person or the last
        controller, its controller gone, its lifetime up), and one that lived half its
        lifetime is replaced at once. The two times are its own host's clock."""
        started, last = beat.get("started"), beat.get("time")
        if "ended" in beat or not isinstance(started, (int, float)) \
                or not isinstance(last, (int, float)) or last - started >= self.lifetime / 2:
            return None
        return (f"ended after {last - started:.0f} s of its {self.lifetime:.0f} s lifetime "
                "without saying why")

    def _submit(self) -> None:
        cfg = self.store.config
        s, m = cfg.slurm, cfg.monitor
        job = CallJob(self.job_name, int(self.lifetime // 60) + 1,
                      f"llmz:monitor,run={cfg.name}", m.partition or s.partition,
                      m.account or s.account, m.qos or s.qos, s.setup, s.setup_dir)
        args = (str(self.store.root), self.scheduler.name, self.interval, self.lifetime)
        llm_key.hand_over(self.dir, cfg.agents)
        job_id = self.scheduler.submit_call(run_monitor, args, self.dir / "%j", job)
        write_json(self.dir / "monitor.json", {"job_id": job_id, "kind": self.scheduler.name,
                                               "submitted_at": time.time()})
        _prune(self.dir)

    def recorded_job(self) -> str | None:
        """The id of the last monitor job submitted, alive or not (None: none on file)."""
        job = self._record().get("job_id")
        return str(job) if job else None

    def stop(self) -> str | None:
        """Cancel the monitor job (the controller is leaving, or llmzero-stop found it gone)
        and take the key back; the id of the monitor job cancelled, None when none was alive."""
        llm_key.withdraw(self.dir)
        record = self._record()
        if self._state(record) is None:
            return None
        job_id = str(record.get("job_id"))
        self.scheduler.cancel_call(job_id, self.job_name)
        return job_id


def _prune(folder: Path) -> None:
    """Remove all but the newest KEPT_MONITOR_FOLDERS job folders (named by job id) and
    submitit's links to scripts no longer there. Tidying only: what cannot be removed (a
    colleague's files, a filesystem error) is left, and the monitor just submitted stands."""
    try:
        jobs = sorted((p for p in folder.iterdir() if p.name.isdigit() and p.is_dir()),
                      key=lambda p: p.stat().st_mtime)
        for old in jobs[:-KEPT_MONITOR_FOLDERS]:
            shutil.rmtree(old, ignore_errors=True)
        for link in folder.glob(".submission_file_*"):
            if link.is_symlink() and not link.exists():
                link.unlink(missing_ok=True)
    except OSError:
        pass
