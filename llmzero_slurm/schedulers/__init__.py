"""Batch systems behind one interface: Slurm where it exists, local process groups elsewhere."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable, Sequence

from ..errors import ConfigError, SchedulerError
from .base import JobState, Scheduler, job_state
from .local import LocalScheduler
from .slurm import SlurmScheduler, conf_problem

__all__ = ["JobState", "Scheduler", "LocalScheduler", "SlurmScheduler", "job_state", "LOCAL_JOBS",
           "SCHEDULERS", "SCHEDULER_KINDS", "check_scheduler_kind", "make_scheduler",
           "resolve_scheduler_kind", "slurm_poll", "slurm_floor"]

# The one list of scheduler names experiment.yaml may give: "auto" or a scheduler's own name.
SCHEDULERS: dict[str, type[Scheduler]] = {cls.name: cls for cls in (SlurmScheduler, LocalScheduler)}
SCHEDULER_KINDS = ("auto", *SCHEDULERS)
LOCAL_JOBS = "local-jobs"   # the local scheduler's folder in a run (its job table, results)
_log = logging.getLogger(__name__)
# Each poll asks slurmctld (squeue).
_SITES_ASK = "Slurm sites ask client tools to leave seconds between their calls"


def check_scheduler_kind(kind: str) -> None:
    if kind not in SCHEDULER_KINDS:
        raise ConfigError("scheduler", f"must be {', '.join(SCHEDULER_KINDS)} (got {kind!r})")


def slurm_floor(poll_s: float | None) -> float | None:
    """`poll_s` for Slurm, silently: no shorter than SlurmScheduler.least_poll_s (a resume
    compares a config with the run it froze so)."""
    least = SlurmScheduler.least_poll_s
    return poll_s if poll_s is None or poll_s >= least else least


def slurm_poll(poll_s: float | None) -> float | None:
    """`poll_s` for Slurm: a period shorter than a site accepts (`scheduler: auto` that turned
    out to be Slurm, --poll) is raised to SlurmScheduler.least_poll_s, saying so."""
    raised = slurm_floor(poll_s)
    if raised != poll_s:
        _log.warning("note: polling Slurm every %g s, not %g s: %s", raised, poll_s, _SITES_ASK)
    return raised


def resolve_scheduler_kind(kind: str) -> str:
    """'slurm' or 'local' for experiment.yaml's scheduler; 'auto' picks Slurm when its
    clients are installed and a controller answers (installed is not configured)."""
    check_scheduler_kind(kind)
    problem = conf_problem() if kind != "local" else None
    if problem and SlurmScheduler.available():
        # Meant for a cluster: auto would quietly run every phase on this machine instead.
        raise ConfigError("scheduler", f"is {kind!r}, but {problem}: fix or unset it")
    if kind == "auto":
        answer = SlurmScheduler.ping() if SlurmScheduler.available() else None
        if answer is not None and answer != "up":
            # A cluster whose controller is down, not the absence of one: auto would freeze
            # the run as local and train every phase on this (login) node.
            raise SchedulerError(f"scheduler is 'auto' and this machine is a Slurm cluster's, "
                                 f"but no slurmctld answers (scontrol ping: {answer}); nothing "
                                 "was created: start again once it answers, or set scheduler: "
                                 "local to run the phases on this machine")
        return "slurm" if answer == "up" else "local"
    if kind == "slurm" and not SlurmScheduler.available():
        raise ConfigError("scheduler", "is 'slurm' but sbatch/squeue/scancel are not on PATH")
    return kind


def make_scheduler(kind: str, run_dir: Path, secret_names: Sequence[str] = (),
                   poll_s: float | None = None, kept_names: Iterable[str] = ()) -> Scheduler:
    """The scheduler of a run; the local one keeps its job table in <run_dir>/local-jobs.
    `secret_names`: credential variables (beyond the usual names) its jobs must not inherit;
    `kept_names`: credential variables its phases' trainer reads (a logger's key).
    `poll_s`: a poll period the user set, which Slurm's answers are then kept for, no back-off
    (the default backs off while nothing changes)."""
    kind = resolve_scheduler_kind(kind)
    if kind == "slurm":
        poll_s = slurm_poll(poll_s)
        if poll_s is not None:
            return SlurmScheduler(secret_names=secret_names, kept_names=kept_names,
                                  min_poll_s=poll_s, max_poll_s=poll_s)
        return SlurmScheduler(secret_names=secret_names, kept_names=kept_names)
    if kind == "local":
        return LocalScheduler(Path(run_dir) / LOCAL_JOBS, secret_names, kept_names)
    # A scheduler added to SCHEDULERS is built here too, or its phases would run locally.
    raise NotImplementedError(f"make_scheduler does not build the {kind} scheduler")
