"""status.json, as a phase's job writes it (the base template's shell): at its start (state
"running") and again at its end, with what device-hours and the controller read from it."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JobStatus:
    """status.json as the job wrote it: at start (state "running") and again at its end."""

    state: str
    job_id: str | None = None
    host: str | None = None
    restart_count: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    earlier_s: float = 0.0          # a requeued job's earlier runs: their time held, carried on
    gpus: str = ""
    exit_code: int | None = None
    reason: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> "JobStatus | None":
        """The record, or None for something that is not one (a job's own file is
        written by a shell script: every field is checked, none is trusted)."""
        if not isinstance(data, dict):
            return None

        def number(key: str) -> float | None:
            value = data.get(key)
            try:
                return float(value) if value is not None and not isinstance(value, bool) else None
            except (TypeError, ValueError):
                return None

        code = data.get("exit_code")
        restarts = data.get("restart_count")
        job = data.get("job_id")
        return cls(state=str(data.get("state")), job_id=str(job) if job else None,
                   host=data.get("host") or None,
                   restart_count=restarts if isinstance(restarts, int) else 0,
                   started_at=number("started_at"), finished_at=number("finished_at"),
                   earlier_s=earlier if (earlier := number("earlier_s")) is not None
                   and math.isfinite(earlier) and earlier > 0 else 0.0,
                   gpus=str(data.get("gpus") or ""),
                   exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                   reason=data.get("reason") or None)

    @property
    def by_hand(self) -> bool:
        """Run by a person with `bash phase.sbatch` (no scheduler job id)."""
        return self.job_id is None or self.job_id.startswith("manual-")

    def device_hours(self, nodes: int, last_write: float | None = None) -> float:
        """Wall time times the devices held (GPUs, or one CPU slot without GPUs), a requeued
        job's earlier runs included. A run that died without its end record (finished_at) is
        counted until `last_write`, when the phase's files were last written."""
        if self.started_at is None:
            return 0.0
        gpus = [g for g in self.gpus.split(",") if g.strip()]
        end = self.finished_at if self.finished_at is not None else last_write
        held = max((end or self.started_at) - self.started_at, 0.0) + self.earlier_s
        return held / 3600.0 * max(1, len(gpus)) * max(1, nodes)
