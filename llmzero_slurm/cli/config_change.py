"""What a config given for an existing run changes from the run's frozen one: the start
resumes the run with its frozen copy, so a change there is ignored, and said to be; and the
one change to the frozen copy itself that no start takes, another search method."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..config import ExperimentConfig
from ..controller.preflight import Check
from ..errors import ConfigError, StateError, UsageError
from ..schedulers import slurm_floor
from ..store.run_store import RunStore
from ..store.schema import method_edit

# What a run may be given more (or less) of by editing its frozen experiment.yaml.
BUDGET_KEYS = ("budget_iterations", "budget_samples", "budget_gpu_hours", "budget_wall_hours")


def differences(frozen: ExperimentConfig, cfg: ExperimentConfig) -> str:
    """What `cfg` changes from the run's experiment ('' when nothing), by dotted key, so a
    changed budget or hparam is seen to be ignored; `scheduler: auto` was frozen as its choice,
    and a Slurm run's poll under the least a site accepts as that least (slurm_floor)."""
    if cfg.scheduler == "auto":
        cfg = replace(cfg, scheduler=frozen.scheduler)
    if cfg.scheduler == "slurm":
        cfg = replace(cfg, search=replace(cfg.search,
                                          poll_interval_s=slurm_floor(cfg.search.poll_interval_s)))
    old, new = frozen.by_key(), cfg.by_key()
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    shown = ", ".join(f"{k}: {old.get(k)!r:.40} -> {new.get(k)!r:.40}" for k in keys[:5])
    return shown + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def ignored(frozen: ExperimentConfig, cfg: ExperimentConfig, path: Path, root: Path) -> str | None:
    """What a resume says it ignores of `cfg` (from `path`), and where a run's budget is
    raised when that is what differs; None when nothing differs."""
    changed = differences(frozen, cfg)
    if not changed:
        return None
    budget = [f"search.{k}" for k in BUDGET_KEYS
              if getattr(frozen.search, k) != getattr(cfg.search, k)]
    return (f"your {path} differs, ignored: {changed}; use another --run-dir for a new run"
            + (f"; to give this run another budget, set {', '.join(budget)} in "
               f"{root / 'experiment.yaml'}, which each start resumes with" if budget else ""))


def given_for(store: RunStore, cfg: ExperimentConfig, path: Path) -> None:
    """A start from `cfg` (read from `path`) resumes the run in `store`: refused (UsageError,
    nothing changed) where that run is another experiment's, else what it ignores is said."""
    if store.config.name != cfg.name:
        raise UsageError(f"{store.root} holds the run {store.config.name!r}, not {cfg.name!r} "
                         f"(the name in {path}); nothing was changed: resume that run "
                         f"with llmzero-start {store.root}, or give another --run-dir")
    if (said := ignored(store.config, cfg, path, store.root)) is not None:
        print(f"note: {store.root} exists; resuming it with its frozen experiment.yaml ({said})")


def method_refusal(store: RunStore) -> str | None:
    """Why the run cannot go on under the method its experiment.yaml names now
    (schema.method_edit); None while it has no phase of another method to mix with."""
    edited = method_edit(store.root, store.config.search.method)
    return edited if edited is not None and len(store.load_tree()) else None


def check_note(path: Path, cfg: ExperimentConfig, run_dir: Path) -> Check | str | None:
    """--check's word on a `run_dir` that holds a run already: the start resumes that run
    with its frozen config, not with the file just checked (a note), or refuses it when the
    run is another experiment's (a failed check, as the start's exit 2)."""
    if not (run_dir / "meta.json").exists():
        return None
    if path == run_dir:   # the run's own experiment.yaml: checked as its start reads it
        try:
            edited = method_refusal(RunStore(run_dir))
        except (ConfigError, StateError):
            return None   # the start names what it cannot read
        return None if edited is None else Check("run directory", False,
                                                  str(ConfigError("search.method", edited)))
    try:
        frozen = RunStore.config_of(run_dir)
    except (ConfigError, StateError):
        return None   # the start names what it cannot read
    if frozen.name != cfg.name:
        return Check("run directory", False, f"{run_dir} holds the run {frozen.name!r}, not "
                     f"{cfg.name!r} (the name in {path}): a start refuses it; resume that run "
                     f"with llmzero-start {run_dir}, or give another --run-dir")
    said = ignored(frozen, cfg, path, run_dir)
    return None if said is None else (f"note: {run_dir} holds this run already: a start resumes "
                                      f"it with its frozen experiment.yaml ({said})")
