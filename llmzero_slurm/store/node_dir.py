"""One node's directory: where each of its files lives and how each is read.

Like submitit's `JobPaths`, this is the one place that knows the layout, so no caller builds a
node file's path or parses one itself. Who writes what (each file has one writer):

    node.json          the controller (RunStore)          the node record
    phase.sbatch       the controller (render)            the script, rerunnable by hand
    slurm-<jobid>.out  the job                            its output, possibly huge
    metrics.jsonl      the job (trainer)                  {"step": N, "data": {...}} lines
    status.json        the job (base template)            start, end, exit code, reason
    job.claim          the job (base template)            the one scheduled job of the node
    phase.lock         the job (base template)            flock'ed while a job trains here
    ckpt/global_step_N the job (trainer)                  checkpoints children resume from
    best_adapter/      the job (cpu trainer)              the phase's best validation step's
                                                          adapter, with best.json (step, score)
    early_stop.json    the monitor (stopper)              its decisions, one entry each
    proposal.json,     the controller (agents)            what an agent saw and answered
    error_analysis.json, plots/, give_up/, closed/

Readers here never load an unbounded file whole: metrics are read incrementally through a
`MetricsReader`, and the log only as a bounded tail.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable

from ..errors import StateError
from ..metrics import MetricsLog
from ..metrics_reader import MetricsReader
from ..search.tree import Status
from .atomic import read_json
from .job_status import JobStatus

LOG_TAIL_BYTES = 64 * 1024      # what the error analyzer may read of a job's output
_CKPT = re.compile(r"^global_step_(\d+)$")


class NodeDir:
    """The files of one node (`runs/<experiment>/nodes/NNNN/`)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"NodeDir({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodeDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    # -- where things are ----------------------------------------------------------------

    @property
    def record(self) -> Path:
        return self.path / "node.json"

    @property
    def record_copy(self) -> Path:
        """node.json as last written, kept so a record damaged later can be rebuilt."""
        return self.path / "node.json.bak"

    @property
    def script(self) -> Path:
        return self.path / "phase.sbatch"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def status_file(self) -> Path:
        return self.path / "status.json"

    @property
    def claim_file(self) -> Path:
        """Written once by the first scheduled job to start here (its job id)."""
        return self.path / "job.claim"

    @property
    def early_stop_file(self) -> Path:
        return self.path / "early_stop.json"

    @property
    def proposal_file(self) -> Path:
        return self.path / "proposal.json"

    @property
    def error_analysis_file(self) -> Path:
        return self.path / "error_analysis.json"

    @property
    def give_up(self) -> Path:
        """The error analyzer's records (error_analysis.json) when it ended this failed node's
        debug chain; its own error_analysis.json, if any, is the one that made the node."""
        return self.path / "give_up"

    @property
    def closed(self) -> Path:
        """The proposer's record (proposal.json) that found nothing untried to propose from
        this node, which then took no more children."""
        return self.path / "closed"

    @property
    def plots(self) -> Path:
        return self.path / "plots"

    @property
    def ckpt(self) -> Path:
        return self.path / "ckpt"

    @property
    def best_adapter(self) -> Path:
        """The PEFT adapter of the phase's best validation step so far: save_freq rarely falls
        on that step, and it is the model a user wants to load. Never a resume point."""
        return self.path / "best_adapter"

    @property
    def best_adapter_record(self) -> Path:
        return self.best_adapter / "best.json"

    def best_adapter_step(self) -> tuple[int, float] | None:
        """(global step, validation score) of the kept best adapter, or None without one."""
        try:
            data = read_json(self.best_adapter_record)
        except StateError:
            return None
        step, score = (data.get("step"), data.get("val_score")) if isinstance(data, dict) \
            else (None, None)
        if isinstance(step, int) and isinstance(score, (int, float)) \
                and not isinstance(step, bool) and not isinstance(score, bool):
            return step, float(score)
        return None

    def log_files(self) -> list[Path]:
        """The job's output files (one per job id that ran the phase), oldest first."""
        return sorted(self.path.glob("slurm-*.out"), key=lambda p: p.stat().st_mtime)

    # -- reading --------------------------------------------------------------------------

    def last_write(self) -> float | None:
        """When the phase's job last wrote its metrics, output or status (file times): the
        least a run that died without its end record held its devices until."""
        times = []
        for path in (self.metrics_file, self.status_file, *self.path.glob("slurm-*.out")):
            try:
                times.append(path.stat().st_mtime)
            except OSError:
                continue
        return max(times, default=None)

    def status(self) -> JobStatus | None:
        """What the job last wrote in status.json; None when it is missing or unreadable."""
        try:
            return JobStatus.from_dict(read_json(self.status_file))
        except StateError:
            return None

    def claimed_by(self) -> str | None:
        """The job id that claimed the directory: the one scheduled job allowed to run here."""
        try:
            owner = self.claim_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):    # unreadable or binary: no valid claim
            return None
        return owner if owner.isdigit() else None

    def metrics(self, keep: Callable[[str], bool] | None = None) -> MetricsLog:
        """The whole metrics log (a missing file is an empty one); `keep`: MetricsReader's."""
        return MetricsReader(self.metrics_file, keep).read()

    def metrics_start(self) -> MetricsLog:
        """The log's points at step 0 (validation before training), its head read alone."""
        return self.metrics_reader().read_until(0)

    def metrics_stamp(self) -> str:
        """Which version of the metrics file is there (its mtime and size): unchanged, a
        reader that read it before need not read it again."""
        try:
            stat = self.metrics_file.stat()
        except OSError:
            return "none"
        return f"{stat.st_mtime_ns}:{stat.st_size}"

    def metrics_reader(self) -> MetricsReader:
        """An incremental reader: keep it to pay only for new lines on each later read."""
        return MetricsReader(self.metrics_file)

    def stop_records(self) -> list[dict[str, Any]]:
        """The stopper's decisions (entries with a `result` mapping), oldest first. A corrupt
        file raises StateError: its one writer appends, and must not overwrite what it cannot read."""
        if not self.early_stop_file.exists():
            return []
        records = read_json(self.early_stop_file)
        if not isinstance(records, list):
            raise StateError(self.early_stop_file, "expected a list of decisions")
        return [r for r in records if isinstance(r, dict) and isinstance(r.get("result"), dict)]

    def last_stop(self) -> dict[str, Any] | None:
        """The stopper's last STOP record; None without one, or when the file cannot be read
        (a cancel is then not taken for the stopper's)."""
        try:
            records = self.stop_records()
        except StateError:
            return None
        return next((r for r in reversed(records) if r["result"].get("action") == "STOP"), None)

    def stop_decided(self) -> bool:
        """Whether the monitor decided STOP for this phase (then its cancel is an early stop)."""
        return self.last_stop() is not None

    def ended_as(self, status: Status) -> Status:
        """The status a job's end in `status` gives the phase: a cancel the stopper decided is
        an early stop (the controller records it so; status and the report show it so before)."""
        return Status.EARLY_STOPPED if status is Status.CANCELLED and self.stop_decided() else status

    def log_tail(self, max_bytes: int = LOG_TAIL_BYTES) -> str:
        """The end of the newest job output, at most `max_bytes` of it: a failed job's log can
        be gigabytes, and only its end says why it failed."""
        logs = self.log_files()
        if not logs:
            return ""
        try:
            with logs[-1].open("rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(max(0, size - max_bytes))
                data = fh.read(max_bytes)
        except OSError:
            return ""
        if len(data) == max_bytes and size > max_bytes:
            data = data.split(b"\n", 1)[-1]    # drop the partial first line
        return data.decode(errors="replace")

    def checkpoint_dir(self, number: int) -> Path:
        return self.ckpt / f"global_step_{number}"

    def checkpoints(self, step_offset: int = 0) -> list[int]:
        """Global steps with a checkpoint folder (checkpoint_dir, written atomically by the
        trainer): the steps a child may resume from. `step_offset` turns a trainer's folder
        numbers (verl's count from 0 in each phase) into global steps."""
        if not self.ckpt.is_dir():
            return []
        return sorted(int(m.group(1)) + step_offset for e in self.ckpt.iterdir()
                      if (m := _CKPT.match(e.name)) and e.is_dir())
