"""The run llmzero-start opens: a run directory resumed where it is, or a new one created from
an experiment.yaml once everything a later start would fail on has been checked."""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from ..config import ExperimentConfig, load_config
from ..controller.data_checks import check_inputs
from ..controller.preflight import method_notes, script_checks
from ..errors import ConfigError, DataError, SchedulerError, StateError, UsageError
from ..render import check_run_dir
from ..schedulers import SlurmScheduler, resolve_scheduler_kind, slurm_poll
from ..store import inputs
from ..store.meta_repair import open_run_store
from ..store.run_store import RunStore
from .common import follow_moved_run, refuse_lost_meta, refuse_report_folder
from .config_change import given_for, method_refusal


def config_of(args: argparse.Namespace) -> ExperimentConfig:
    """CONFIG's configuration: a run directory's frozen copy, or the file's."""
    if (args.config / "meta.json").exists():
        return RunStore.config_of(args.config)
    if args.config.is_dir():
        refuse_lost_meta(args.config)
        refuse_report_folder(args.config)
        raise ConfigError("<file>", f"{args.config} is a directory but not a run directory")
    return load_config(args.config)


def run_dir_of(args: argparse.Namespace, cfg: ExperimentConfig) -> Path:
    """Where the run lives: CONFIG when it is a run directory, else --run-dir or runs/<name>."""
    if (args.config / "meta.json").exists():
        return Path(args.config)
    return args.run_dir or Path("runs") / cfg.name


def open_or_create(args: argparse.Namespace) -> RunStore:
    if (args.config / "meta.json").exists():
        return _resume(args.config)
    cfg = config_of(args)
    run_dir = run_dir_of(args, cfg)
    if (run_dir / "meta.json").exists():
        store = _resume(run_dir)
        given_for(store, cfg, args.config)
        return store
    # Frozen, a config no script renders from, its method refuses, or whose task files or reward
    # cannot be read, fails every later start (the phases after their queue wait).
    cfg.task.require()
    for _, check in script_checks(cfg, run_dir):
        check()
    for note in method_notes(cfg)[1]:
        print(f"note: {note}", flush=True)
    try:
        check_inputs(cfg)
    except (ConfigError, DataError) as exc:   # both exit 2
        exc.args = (f"{exc}\nnothing was created; llmzero-start {args.config} --check gives the "
                    "full report",)
        raise
    # `auto` is decided once, here: a restart while slurmctld is down must not watch Slurm jobs
    # as local processes, nor start phases on the login node. Its poll is frozen as Slurm's.
    if args.submit and cfg.scheduler == "local":
        raise UsageError("--submit runs the controller as a Slurm job, and this config asks for "
                         "scheduler: local (its job would run every phase inside itself); "
                         "set scheduler: slurm or auto, or start without --submit")
    kind = resolve_scheduler_kind(cfg.scheduler)
    if args.submit and (kind != "slurm" or cfg.scheduler == "slurm" and not SlurmScheduler.reachable()):
        raise SchedulerError("--submit needs a Slurm cluster (frozen as local, its job would run "
                             "every phase inside itself), but no slurmctld answers (scontrol "
                             "ping); nothing was created: submit again once it answers")
    if kind == "slurm":
        cfg = replace(cfg, search=replace(cfg.search,
                                          poll_interval_s=slurm_poll(cfg.search.poll_interval_s)))
    found = inputs.fingerprints(cfg.task)     # read before the run exists: a failure makes none
    try:
        return RunStore.create(run_dir, replace(cfg, scheduler=kind), found)
    except StateError:   # another start made the run since this one looked: it resumes that run
        if not (run_dir / "meta.json").exists():
            raise
        return open_or_create(args)


def _resume(run_dir: Path) -> RunStore:
    """The run at `run_dir`, refused (exit 2, nothing written) where it was moved to a path
    that cannot go into #SBATCH lines, as a new run there is, or where its reward or data
    file changed since it was created (its scores would mix); moved, its scripts follow it."""
    store = open_run_store(run_dir)
    edited = method_refusal(store)
    if edited is not None:
        raise ConfigError("search.method", edited)
    check_run_dir(store.root)
    inputs.refuse_changed(store.root)
    follow_moved_run(store)
    return store
