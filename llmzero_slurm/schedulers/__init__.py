"""Batch systems behind one interface: Slurm where it exists, local process groups elsewhere."""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .base import JobState, Scheduler, job_state
from .local import LocalScheduler
from .slurm import SlurmScheduler

__all__ = ["JobState", "Scheduler", "LocalScheduler", "SlurmScheduler", "job_state", "make_scheduler"]


def make_scheduler(kind: str, run_dir: Path) -> Scheduler:
    """The scheduler named in experiment.yaml: 'auto' picks Slurm when its clients are installed."""
    if kind == "auto":
        kind = "slurm" if SlurmScheduler.available() else "local"
    if kind == "slurm":
        if not SlurmScheduler.available():
            raise ConfigError("scheduler", "is 'slurm' but sbatch/squeue/scancel are not on PATH")
        return SlurmScheduler()
    if kind == "local":
        return LocalScheduler(Path(run_dir) / "local-jobs")
    raise ConfigError("scheduler", f"must be auto, slurm or local (got {kind!r})")
