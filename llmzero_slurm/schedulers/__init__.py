"""Batch systems behind one interface: Slurm where it exists, local process groups elsewhere."""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .base import JobState, Scheduler, job_state
from .local import LocalScheduler
from .slurm import SlurmScheduler

__all__ = ["JobState", "Scheduler", "LocalScheduler", "SlurmScheduler", "job_state", "make_scheduler",
           "resolve_scheduler_kind"]


def resolve_scheduler_kind(kind: str) -> str:
    """'auto' means Slurm when its clients are installed and a controller answers, else local."""
    if kind != "auto":
        return kind
    return "slurm" if SlurmScheduler.available() and SlurmScheduler.reachable() else "local"


def make_scheduler(kind: str, run_dir: Path) -> Scheduler:
    """The scheduler named in experiment.yaml (see resolve_scheduler_kind for 'auto')."""
    kind = resolve_scheduler_kind(kind)
    if kind == "slurm":
        if not SlurmScheduler.available():
            raise ConfigError("scheduler", "is 'slurm' but sbatch/squeue/scancel are not on PATH")
        return SlurmScheduler()
    if kind == "local":
        return LocalScheduler(Path(run_dir) / "local-jobs")
    raise ConfigError("scheduler", f"must be auto, slurm or local (got {kind!r})")
