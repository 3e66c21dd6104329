"""llmzero-start: start (or resume) a search from an experiment config or a run directory."""
from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from pathlib import Path

from ..backends import get_backend
from ..config import ExperimentConfig
from ..controller.controller import Controller
from ..controller.cluster_check import cluster_checks
from ..controller.controller_job import (refuse_needless, submit_controller, take_key,
                                         withdraw_key)
from ..controller.keeper import MonitorKeeper
from ..controller.lease import Lease, LeaseHeld, LeaseLost
from ..controller.llm_trial import trial_warning
from ..controller.preflight import Check, preflight, run_check
from ..controller.samples import refuse_unless_empty, render_samples
from ..controller.signals import STOP_SIGNALS
from ..errors import ConfigError, SchedulerError, UsageError
from ..hparams import validate_hparams
from ..methods import make_method
from ..methods.base import MethodContext
from ..report import write_report
from ..report.logs import MetricsLogs
from ..report.node_curves import REFRESH_DRAW_S
from ..report.tensorboard import export_tensorboard
from ..search.tree import Tree
from ..schedulers import SlurmScheduler, make_scheduler, resolve_scheduler_kind
from ..store.new_run import CHECK_DIR
from ..store.run_store import RunStore
from ..store.schema import release_note
from .background import controller_command, detach
from .common import group_note, run_dir_conflict, run_main, seconds
from .config_change import check_note
from .open_run import config_of, open_or_create, run_dir_of

DESCRIPTION = """Start a search, or resume one after a crash or a stop.

CONFIG is an experiment.yaml (a new run is created under --run-dir, default runs/<name>) or an
existing run directory (resumed where it is, with its frozen config). With
`scheduler: auto` (the default) and no Slurm cluster answering, the phases run as local
processes with the same rendered scripts."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="llmzero-start", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", type=Path, help="experiment.yaml, or a run directory to resume")
    p.add_argument("--run-dir", type=Path, help="where the run lives (default: runs/<name>)")
    # One way to run: check only, or the controller in the background, or as a Slurm job.
    how = p.add_mutually_exclusive_group()
    how.add_argument("--check", action="store_true",
                     help="validate config, data, reward, scripts, scheduler and agents on this "
                          "machine; submit nothing (unless --on-cluster)")
    p.add_argument("--on-cluster", action="store_true",
                   help="with --check, once its checks pass: check from the cluster too, "
                        "in two short jobs (files in <run>/preflight/). One, in the controller: "
                        "section's placement, runs slurm.setup and the phases' Python: imports "
                        "the trainer (verl: its version and verl's own validation of a scratch, "
                        "an evolve and a debug phase) and reads the model, data and reward "
                        "files. The other, where the monitor runs, asks the LLM endpoint for any "
                        "answer. Exit 0 all ok, 2 a check failed, 5 the batch system failed")
    p.add_argument("--render", type=Path, metavar="DIR",
                   help="with --check: also write the phase scripts the search would submit into "
                        "DIR (a new or empty folder), to read or diff: its first phase as the "
                        "search method proposes it, an evolve and a debug sample. Each refuses "
                        "to run; a run's own are <run>/nodes/NNNN/phase.sbatch")
    p.add_argument("--cluster-timeout", type=seconds, default=900.0, metavar="S",
                   help="with --on-cluster: cancel the check jobs and fail after S seconds, "
                        "queue wait included (default 900)")
    how.add_argument("--detach", action="store_true",
                     help="run the controller in the background; its log is <run>/controller.log")
    how.add_argument("--submit", action="store_true",
                     help="run the controller as a Slurm job (the config's controller: section): "
                          "it resumes the run whenever it starts and requeues itself near its "
                          "time limit; its log is <run>/controller-<jobid>.out")
    p.add_argument("--cancel-on-stop", action="store_true",
                   help="on SIGINT/SIGTERM also cancel the running phases (default: leave "
                        "them; not with --submit)")
    p.add_argument("--poll", type=seconds, default=None, metavar="S",
                   help="seconds between scheduler polls (default: search.poll_interval_s; "
                        "unset: 30 on Slurm, asking less often while nothing changes, 10 for "
                        "local processes; at least 5 on Slurm)")
    args = p.parse_args(argv)
    if (conflict := run_dir_conflict(args.config, args.run_dir)) is not None:
        p.error(conflict)
    if args.on_cluster and not args.check:
        p.error("--on-cluster goes with --check (it submits checks, never the search)")
    if args.render is not None and not args.check:
        p.error("--render goes with --check (it writes scripts, and starts nothing)")
    if args.cancel_on_stop and args.submit:
        p.error("--cancel-on-stop does not go with --submit: Slurm ends a controller job with "
                "SIGTERM for its requeue near the time limit and for a preemption too, which "
                "would cancel every running phase; cancel them with llmzero-stop --cancel")
    return args


def checked_config(args: argparse.Namespace) -> tuple[ExperimentConfig | None, list[Check]]:
    """--check's config; or, when it has problems, a FAIL line for each and one saying that
    the checks which read it did not run. A file that cannot be read is an error, as ever."""
    try:
        return config_of(args), []
    except ConfigError as exc:
        if exc.key == "<file>":
            raise
        return None, [*(Check("config", False, str(error)) for error in exc.errors),
                      Check("other checks", False, "not run: fix the config first")]


def build_controller(store: RunStore, poll_s: float | None = None) -> Controller:
    """Wire a run directory to its scheduler, search method, monitor and report."""
    cfg = store.config
    backend = get_backend(cfg.backend)
    base = validate_hparams(backend.effective_hparams(cfg.hparams), backend.name)
    if resolve_scheduler_kind(cfg.scheduler) == "slurm" and not SlurmScheduler.reachable():
        raise SchedulerError("scheduler is slurm, but no slurmctld answers squeue (is SLURM_CONF "
                             "set?); nothing was submitted: start again once it answers")
    configured = poll_s or cfg.search.poll_interval_s
    scheduler = make_scheduler(cfg.scheduler, store.root, [cfg.agents.key_env], configured,
                               backend.kept_credentials(cfg.trainer))
    ctx = MethodContext(cfg, store.node_dir, store.proposals_dir, base_hparams=base)
    method = make_method(cfg.search.method, ctx)
    if method.agents is not None:
        print(f"agents: {method.agents}", flush=True)
        if (warning := trial_warning(cfg.agents)) is not None:
            print(warning, file=sys.stderr, flush=True)
    monitor = MonitorKeeper(store, scheduler) if method.early_stopping else None
    def curves(tree: Tree) -> None:
        export_tensorboard(store.root, tree, lambda i: store.node_dir(i).metrics(),
                           lambda i: store.node_dir(i).metrics_stamp())
    return Controller(store, scheduler, method,
                      configured or scheduler.default_poll_s,
                      on_finish=partial(_report, logs=MetricsLogs(), store=RunStore.open(store.root, reading=True)),
                      monitor=monitor, on_poll=curves)


def _report(root: Path, complete: bool, logs: MetricsLogs, store: RunStore | None = None) -> Path:
    """The controller's report: every curve grid drawn at the end of a search, after a poll
    only for REFRESH_DRAW_S (the search waits on it), through one MetricsLogs, which parses
    only the logs that changed since, and one `store`, which opens only the records that did."""
    if complete:     # may take minutes at hundreds of nodes: say how far it got
        return write_report(root, logs=logs, say=partial(print, flush=True), store=store)
    return write_report(root, logs=logs, draw_budget_s=REFRESH_DRAW_S, store=store)


def check_on_cluster(cfg: ExperimentConfig, kind: str, args: argparse.Namespace,
                     login_ok: bool) -> list[Check]:
    """--on-cluster: the checks a compute node answers, once the login node's have passed (a
    job would only repeat their failures). Each is printed as it comes."""
    if not login_ok:
        checks = [Check("cluster", False, "not checked: fix the failures above first")]
    elif kind != "slurm":
        checks = [Check("cluster", False, "--on-cluster needs a Slurm cluster, and this config "
                        f"runs its phases as local processes (scheduler: {cfg.scheduler}; no "
                        "slurmctld answered, or scheduler: local)")]
    else:
        checks = cluster_checks(cfg, run_dir_of(args, cfg).resolve() / CHECK_DIR,
                                args.cluster_timeout, lambda line: print(line, flush=True))
    for check in checks:
        print(check.line(), flush=True)
    return checks


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.check:
        if args.render is not None:
            refuse_unless_empty(args.render)
        cfg, checks = checked_config(args)
        if cfg is None:
            print("\n".join(check.line() for check in checks))
            return 2
        kind = resolve_scheduler_kind(cfg.scheduler)
        checks = preflight(cfg, kind, run_dir_of(args, cfg))
        if args.render is not None:
            checks.append(run_check("rendered scripts", partial(render_samples, cfg,
                                                            run_dir_of(args, cfg), args.render)))
        for check in checks:
            print(check.line(), flush=True)
        said = check_note(args.config, cfg, run_dir_of(args, cfg))
        if isinstance(said, Check):
            checks.append(said)
        if said is not None:
            print(said.line() if isinstance(said, Check) else said, flush=True)
        if args.on_cluster:
            checks += check_on_cluster(cfg, kind, args, all(c.ok for c in checks))
        return 0 if all(c.ok for c in checks) else 2
    store = open_or_create(args)
    try:
        return start(store, args)
    except LeaseHeld as exc:   # from a config, the user may have meant a second run beside it
        if isinstance(exc, LeaseLost) or (args.config / "meta.json").exists():
            raise
        raise LeaseHeld(f"{exc}; to run {args.config} a second time beside this run, give "
                        "another --run-dir") from None


def start(store: RunStore, args: argparse.Namespace) -> int:
    """Run (or detach, or submit) the controller of the run just opened or created."""
    if (note := group_note(store.root)) is not None:
        print(note, flush=True)
    if (note := release_note(store.root)) is not None:   # its plan and defaults may differ
        print(f"note: {note}", flush=True)
    if args.detach or args.submit:   # refused now, not by the background process or the job
        Lease(store).refuse_if_held()
    if args.submit and store.config.scheduler != "slurm":
        raise UsageError(f"{store.root} was frozen as scheduler: local: its controller job would "
                         f"run every phase inside itself; resume with llmzero-start {store.root}")
    if args.detach:
        return detach(store, args)
    if args.submit:   # the job recorded, so status and stop see it queued
        refuse_needless(store)
        submit_controller(store, controller_command(store, args))
        print(f"watch: llmzero-status {store.root}   stop: llmzero-stop {store.root}")
        return 0
    print(f"run directory: {store.root.resolve()} (pid {os.getpid()})", flush=True)
    take_key(store)
    controller = build_controller(store, args.poll)
    code = controller.run(cancel_on_stop=args.cancel_on_stop)
    ended = code - 128 not in STOP_SIGNALS   # ended or stopped, not by a signal (a requeue, a preemption)
    if ended:
        withdraw_key(store)
    report = controller.refresh_report(complete=ended)
    if report is not None:
        print(f"report: {report}")
    return code


if __name__ == "__main__":
    run_main(main)
