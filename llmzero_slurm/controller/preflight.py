"""`llmzero-start --check`: everything that can be checked before a single job is submitted.

Each check returns a line; the first problem of each kind is reported with the key, file or
command to fix, and the whole list is printed so a user fixes everything in one round.
"""
from __future__ import annotations

import functools
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..agents.probe import Unverified
from ..config import ExperimentConfig
from ..errors import ConfigError, LLMZeroError, SchedulerError
from ..methods import make_method
from ..methods.grid import GridMethod
from ..methods.static import Chain
from ..methods.base import MethodContext, SearchMethod
from ..methods.registry import unread_note
from ..backends import get_backend
from ..backends.spec import PhaseSpec
from ..paths import ROOT_FIRST
from ..render import CONTROLLER_SCRIPT, render_controller, write_phase_script
from ..sbatch_options import WARN_SIGNAL_S
from ..schedulers import SCHEDULERS, SlurmScheduler
from ..schedulers.base import parse_time
from ..search.tree import Kind, Node, Resume
from ..store.inputs import INPUTS, check_unchanged
from ..store.new_run import refuse_nested
from ..store.node_dir import NodeDir
from .data_checks import NotChecked, check_data, check_lengths
from .llm_trial import LLM_TRIAL_TIMEOUT_S, trial_backend


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    checked: bool = True    # False: could not be checked here ([skip]; no failure)

    def line(self) -> str:
        mark = "FAIL" if not self.ok else "ok" if self.checked else "skip"
        return f"[{mark}] {self.name}: {self.detail}"


def run_check(name: str, fn: Callable[[], str]) -> Check:
    try:
        return Check(name, True, fn())
    except NotChecked as exc:
        return Check(name, True, str(exc), checked=False)
    except LLMZeroError as exc:
        return Check(name, False, str(exc))
    except Exception as exc:  # a preflight reports, it does not crash
        return Check(name, False, f"{type(exc).__name__}: {exc}")


def sample_specs(cfg: ExperimentConfig, root: Path,
                 first: dict[str, Any] | None = None) -> list[PhaseSpec]:
    """A scratch, an evolve and a debug phase of this config, their node folders under `root`:
    every kind of script the search can render, with the values it runs (the trainer's
    defaults under the config's: a micro-batch that divides none of theirs is refused here).
    `first`: the scratch phase's values, where the method's first phase is known."""
    backend = get_backend(cfg.backend)
    hparams = backend.effective_hparams(cfg.hparams)
    nodes = [Node(0, None, Kind.SCRATCH, hparams if first is None else first),
             Node(1, 0, Kind.EVOLVE, hparams, resume=Resume(0, 10)),
             Node(2, 1, Kind.DEBUG, hparams, resume=Resume(0, 10), debug_depth=1)]
    backend.record_start(root / "0000", 0)   # the parent, as if it ran
    return [PhaseSpec.for_node(cfg, node, root / f"{node.id:04d}", "preflight",
                               root / "0000" if node.resume else None) for node in nodes]


def _parse(script: Path, what: str) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    if done.returncode:
        raise LLMZeroError(f"rendered {what} script does not parse: {done.stderr}")


def check_scripts(cfg: ExperimentConfig) -> str:
    """Render a scratch, an evolve and a debug phase and let bash parse them."""
    with tempfile.TemporaryDirectory(prefix="llmz-check-") as tmp:
        for spec in sample_specs(cfg, Path(tmp)):
            _parse(write_phase_script(spec), spec.kind)
    said = "scratch, evolve and debug phase scripts render and parse"
    if cfg.scheduler != "local":   # the local scheduler sends no warning
        said += _within_lead(cfg.slurm.time)
    return said


def _within_lead(time: str) -> str:
    """A note when slurm.time leaves no room before the USR1 warning sbatch sends a phase
    WARN_SIGNAL_S before its limit: the warning then comes as the phase starts, and the
    script reads an end without a Slurm notice as that limit. Said, not refused: a site may
    run short phases on purpose (a smoke test); controller.time is refused (render.py)."""
    limit = parse_time(time)
    if limit > WARN_SIGNAL_S:
        return ""
    return (f"; note: slurm.time is {time} ({limit} s), within the {WARN_SIGNAL_S} s before its "
            "limit at which Slurm warns a phase (USR1), so the warning comes at its start: the "
            "job's output says its time limit is near, and an end with no Slurm notice is "
            f"recorded as a time limit; give it more than {WARN_SIGNAL_S} s")


def check_controller(cfg: ExperimentConfig, run_dir: Path) -> str:
    """Render the controller job's script (`--submit`) for the real run directory: it checks
    the `controller:` section, and that the run directory can go into #SBATCH --output lines,
    as every phase's node folder under it must; a new one, that it is in no other run."""
    if not (run_dir / "meta.json").exists():
        refuse_nested(run_dir)
    root = run_dir.resolve()
    with tempfile.TemporaryDirectory(prefix="llmz-check-") as tmp:
        script = Path(tmp) / CONTROLLER_SCRIPT
        script.write_text(render_controller(cfg.name, root, cfg.controller,
                                            ["llmzero-start", str(root)], "check"),
                          encoding="utf-8")
        _parse(script, "controller job")
    return f"the controller job's script renders and parses; run directory {root}"


def script_checks(cfg: ExperimentConfig, run_dir: Path) -> list[tuple[str, Callable[[], str]]]:
    """What rendering refuses, by check name: llmzero-start runs these before it creates a run
    directory too, so a config no script can be made from is never frozen into one."""
    return [("phase scripts", lambda: check_scripts(cfg)),
            ("run directory and controller job", lambda: check_controller(cfg, run_dir))]


def check_scheduler(cfg: ExperimentConfig, kind: str) -> str:
    """Slurm answers, and would take a phase job as rendered (`sbatch --test-only`): an unknown
    partition, or more CPUs, memory or GPUs than any node has, fails here instead of as the
    run's first phase."""
    if kind == "local":
        return "no Slurm cluster: phases run as local processes"
    done = subprocess.run(["sinfo", "-h", "-o", "%P %a %D %G"], capture_output=True, text=True,
                          timeout=30)
    if done.returncode:
        raise LLMZeroError(f"sinfo failed: {done.stderr.strip()}")
    partitions = "; ".join(done.stdout.splitlines()[:5])
    with tempfile.TemporaryDirectory(prefix="llmz-check-") as tmp:
        script = write_phase_script(sample_specs(cfg, Path(tmp))[0])
        try:
            answer = SlurmScheduler().test_submit(script)
        except SchedulerError as exc:
            raise LLMZeroError(f"Slurm would refuse a phase job (partitions: {partitions}): "
                               f"{exc}") from None
    return f"Slurm reachable; partitions: {partitions}; a phase job would run ({answer})"


# Whether each named package can be found, without importing it (torch takes seconds).
_FIND = ("import importlib.util, sys; "
         "print(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n) is None))")


def check_trainer(cfg: ExperimentConfig) -> str:
    """A local run's phases use this machine's Python: it must find the trainer's packages,
    which a login-node install leaves out (on Slurm, --on-cluster asks a compute node)."""
    from ..cluster_probe import TRAINER_PACKAGES
    python = get_backend(cfg.backend).python(cfg.trainer)
    names = TRAINER_PACKAGES[cfg.backend]
    try:
        done = subprocess.run([python, "-c", _FIND, *names], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LLMZeroError(f"the phases' Python {python} cannot be run: "
                           f"{getattr(exc, 'strerror', None) or exc}") from None
    missing = done.stdout.split() if done.returncode == 0 else list(names)
    if missing:
        raise LLMZeroError(f"{python} cannot import {', '.join(missing)}: local phases run with "
                           f"it (trainer.python names another); {_install_hint(cfg.backend)}")
    return f"{python} finds {', '.join(names)}"


def _install_hint(backend: str) -> str:
    """From a checkout the extra installs from `.`; a site install has no checkout, so by name.
    PyPI's Linux torch is a CUDA build of gigabytes: the cpu extra wants the CPU wheel first."""
    extra = f"-e '.[{backend}]'" if ROOT_FIRST else f"'llmzero-slurm[{backend}]'"
    first = ("install torch from PyTorch's CPU index (https://download.pytorch.org/whl/cpu), then "
             if backend == "cpu" else "install ")
    return f"{first}the {backend} extra: pip install {extra}"


def check_llm(cfg: ExperimentConfig) -> str:
    """The agents' backend, and for an LLM one request for one token (a fraction of a cent),
    once and briefly: a key or model the service refuses would send every agent call to the
    heuristics."""
    llm = trial_backend(cfg.agents)
    if llm is None:
        return "offline heuristic agents (no API key configured)"
    said = f"{llm.name} backend, model {cfg.agents.model}"
    try:
        return f"{said}: {llm.probe(LLM_TRIAL_TIMEOUT_S)}"
    except Unverified as exc:
        raise NotChecked(f"{said}: not verified from here: {exc}") from None


def method_notes(cfg: ExperimentConfig) -> tuple[SearchMethod, list[str]]:
    """Build the search method (a static method checks its whole plan: space, strategy file),
    and what it sets aside of the config: said, not refused (registry.unread_note)."""
    with tempfile.TemporaryDirectory(prefix="llmz-check-") as tmp:
        ctx = MethodContext(cfg, lambda i: NodeDir(Path(tmp) / f"{i:04d}"), Path(tmp))
        method = make_method(cfg.search.method, ctx)
    unread = unread_note(cfg.search)
    return method, [*method.notes(), *([unread] if unread is not None else [])]


def check_method(cfg: ExperimentConfig) -> str:
    """The search method, its budget, and method_notes."""
    method, notes = method_notes(cfg)
    search = cfg.search
    limits = [f"{search.budget_iterations} phases"] + [
        f"{value:,} {unit}" if isinstance(value, int) else f"{value:g} {unit}"
        for value, unit in ((search.budget_samples, "training samples"),
                            (search.budget_gpu_hours, "device-hours"),
                            (search.budget_wall_hours, "wall-clock hours")) if value is not None]
    said = f"{method.name}, budget {' or '.join(limits)}, concurrency {search.concurrency}"
    if isinstance(method, Chain):   # an edited strategy file read as its user meant
        steps = (str(p.hparams.get("total_training_steps", "?")) for p in method.phases)
        said += f": a chain of {len(method.phases)} phases, {' + '.join(steps)} steps"
    if isinstance(method, GridMethod) and method.points > len(method.phases):
        said += (f": runs {len(method.phases)} of its {method.points} points (a larger "
                 "search.budget_iterations runs more)")
    return "".join([said, *(f"; note: {note}" for note in notes)])


def preflight(cfg: ExperimentConfig, scheduler_kind: str, run_dir: Path) -> list[Check]:
    """Every check of `--check` on this machine, for a run in `run_dir` (created or not)."""
    from ..tasks.dataset import read_examples
    read = functools.lru_cache(maxsize=None)(read_examples)   # each file read once per check
    config = Check("config", True, f"{cfg.source or 'config'} is valid")
    try:
        cfg.task.require()
    except ConfigError as exc:
        # Every check that reads the task or renders a phase would restate this in its words.
        config = Check("config", False, str(exc))
        task_checks = [Check("data and reward, lengths, phase scripts, run directory and "
                             "controller job, scheduler", True, "not checked without a task",
                             checked=False)]
    else:
        task_checks = [
            run_check("data and reward", lambda: check_data(cfg, read)),
            run_check("lengths", lambda: check_lengths(cfg, read)),
            *([run_check("inputs since the run was created", lambda: check_unchanged(run_dir))]
              if (run_dir / INPUTS).exists() else []),
            *(run_check(name, check) for name, check in script_checks(cfg, run_dir)),
            run_check("scheduler", lambda: check_scheduler(cfg, scheduler_kind))]
    return [config, run_check("search method", lambda: check_method(cfg)), *task_checks,
            *([run_check("trainer", lambda: check_trainer(cfg))]
              if SCHEDULERS[scheduler_kind].on_this_machine else []),
            run_check("agents", lambda: check_llm(cfg))]
