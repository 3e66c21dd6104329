"""`llmzero-start --check`: everything that can be checked before a single job is submitted.

Each check returns a line; the first problem of each kind is reported with the key, file or
command to fix, and the whole list is printed so a user fixes everything in one round.
"""
from __future__ import annotations

import functools
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ..agents.llm import choose_backend
from ..config import ExperimentConfig, TaskConfig
from ..errors import DataError, LLMZeroError, SchedulerError
from ..methods import make_method
from ..methods.base import MethodContext
from ..methods.space import length_limit
from ..backends import get_backend
from ..backends.spec import PhaseSpec
from ..render import CONTROLLER_SCRIPT, render_controller, write_phase_script
from ..schedulers import SlurmScheduler
from ..search.tree import Kind, Node, Resume
from ..store.node_dir import NodeDir

ROWS_CHECKED = 3
# Per reward call: a string comparison takes microseconds, a symbolic math verifier (verl's
# math_verify) a few seconds at worst; a call past this would stall every training step.
REWARD_TIMEOUT_S = 10.0
IMPORT_TIMEOUT_S = 120.0   # the reward file's imports (torch, sympy) on a slow shared filesystem
LLM_TRIAL_TIMEOUT_S = 15.0
EMPTY_RESPONSE = "an empty response (a model may answer with nothing)"
PROBE_TIMEOUT_S = 120.0    # the reward on every probe row of the warm start (at most 512)


@dataclass
class Check:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"[{'ok' if self.ok else 'FAIL'}] {self.name}: {self.detail}"


def _run(name: str, fn: Callable[[], str]) -> Check:
    try:
        return Check(name, True, fn())
    except LLMZeroError as exc:
        return Check(name, False, str(exc))
    except Exception as exc:  # noqa: BLE001 - a preflight reports, it does not crash
        return Check(name, False, f"{type(exc).__name__}: {exc}")


Reader = Callable[[str, str], list[Any]]     # (path, the config key naming it) -> rows


def dataset_files(task: TaskConfig) -> list[tuple[str, str]]:
    """(config key, path) of each dataset file the task names, so a message names both."""
    return [(f"task.{key}", path) for key in ("train_files", "val_files", "test_files")
            for path in getattr(task, key)]


def check_data(cfg: ExperimentConfig, read: Reader | None = None) -> str:
    """Dataset files follow verl's schema; the reward function scores their ground truths."""
    from ..tasks import get_task
    from ..tasks.dataset import read_examples
    from ..tasks.splits import check_splits
    from ..tasks.reward_file import RewardTimeout, judge, load_reward, time_limit

    read = read or read_examples
    task = cfg.task
    if task.builtin:
        module = get_task(task.builtin)
        reward, source, files = module.compute_score, f"builtin task {task.builtin}", []
    else:
        if not task.train_files or not task.val_files:
            raise LLMZeroError("task: give `builtin` or both train_files and val_files")
        if not task.reward_path:
            raise LLMZeroError("task.reward_path: a reward file with compute_score() is required")
        try:
            with time_limit(IMPORT_TIMEOUT_S):
                reward, source = load_reward(task.reward_path, task.reward_name), task.reward_path
        except RewardTimeout:
            raise DataError(task.reward_path, f"importing the reward file did not finish within "
                            f"{IMPORT_TIMEOUT_S:g} s") from None
        files = dataset_files(task)
    if cfg.backend == "verl" and not task.test_files:
        raise LLMZeroError("task.test_files: give a held-out test split (scores for the report)")
    rows = 0
    train: list[Any] = []       # every training file's rows, as the warm start reads them
    prompts: dict[str, set[Any]] = {}
    notes: list[str] = []
    for key, path in files:   # train, val, test (dataset_files' order)
        examples = read(path, key)
        notes += check_splits(key, path, examples, prompts)
        # Its own ground truth, and an answer that is wrong (a model's first answers mostly
        # are): a reward that returns None or raises on those would fail every phase.
        checks = [(row, ex, answer, scoring) for row, ex in enumerate(examples[:ROWS_CHECKED], 1)
                  for answer, scoring in ((ex.answer, "its own ground truth"),
                                          ("", EMPTY_RESPONSE))]
        for row, ex, answer, scoring in checks:
            try:
                with time_limit(REWARD_TIMEOUT_S):
                    judge(reward, source, ex.data_source, answer, ex.ground_truth, ex.extra_info)
            except DataError as exc:
                raise DataError(source, f"row {row} of {path}, scoring {scoring}: "
                                f"{exc.problem}") from None
            except RewardTimeout:
                raise DataError(source, f"{task.reward_name} did not return within "
                                f"{REWARD_TIMEOUT_S:g} s on row {row} of {path}, scoring {scoring}"
                                "; a reward must answer in well under a second") from None
            except (Exception, SystemExit) as exc:  # the user's code: any failure, by name
                raise DataError(source, f"{task.reward_name} failed on row {row} of {path}, "
                                f"scoring {scoring}: {type(exc).__name__}: {exc}") from None
        if key == "task.train_files":
            train += examples
        rows += len(examples)
    if cfg.backend == "cpu" and not task.builtin and task.warm_start.steps is None:
        _check_probe(cfg, reward, source, train)
    if task.builtin:
        return f"builtin task {task.builtin}"
    return "; ".join([f"{len(files)} files, {rows} rows", *notes])


def _check_probe(cfg: ExperimentConfig, reward: Any, source: str, train: list[Any]) -> None:
    """What the cpu warm start checks of a user's files before it trains (its probe rows, its
    band), here on the login node: the band must be within reach of the ground truths."""
    from ..cputrain.defaults import WARM_START_BAND
    from ..cputrain.probe import check_written, split_probe
    from ..tasks.reward_file import RewardTimeout, time_limit

    low = (cfg.task.warm_start.band or WARM_START_BAND)[0]
    probe = split_probe(train)[1]
    try:
        with time_limit(PROBE_TIMEOUT_S):
            check_written(reward, source, probe, low)
    except DataError:
        raise
    except RewardTimeout:
        raise DataError(source, f"scoring the warm start's {len(probe)} probe rows did not "
                        f"finish within {PROBE_TIMEOUT_S:g} s") from None
    except (Exception, SystemExit) as exc:  # the user's code: any failure, by name
        raise DataError(source, f"{cfg.task.reward_name} failed on a probe row of the training "
                        f"split: {type(exc).__name__}: {exc}") from None


def check_lengths(cfg: ExperimentConfig, read: Reader | None = None) -> str:
    """Every prompt fits max_prompt_length and every ground truth max_response_length (unset:
    the trainer's default), counted with its tokenizer: a prompt too long is cut (verl) or fails
    the job, an answer too long is cut off in every rollout and can never score."""
    from ..tasks.dataset import read_examples

    read = read or read_examples
    task = cfg.task
    if task.builtin:
        return f"builtin task {task.builtin}: its answer lengths are part of its design"
    backend = get_backend(cfg.backend)
    hp = backend.effective_hparams(cfg.hparams)
    limits = {key: hp.get(key) for key in ("max_prompt_length", "max_response_length")}
    fixes: dict[str, str] = {}    # where a limit other than hparams' comes from, and the fix
    for key in limits:
        bound = length_limit(cfg.search.method, cfg.search.space, cfg.backend, key)
        if bound is not None:
            limits[key], fixes[key] = bound[0], f"{bound[1]}: raise it"
        elif limits[key] is None and (own := backend.own_default(key)) is not None:
            limits[key], fixes[key] = own, f"it is {cfg.backend}'s default: set hparams.{key} higher"
    try:
        count = backend.token_counter(cfg.model_path)
    except LLMZeroError as exc:
        return f"not checked: {exc}"
    longest = {"max_prompt_length": 0, "max_response_length": 0}
    for key, path in dataset_files(task):
        examples = read(path, key)
        sizes = {"max_prompt_length": [count.prompt(ex.messages) for ex in examples],
                 "max_response_length": [count.answer(ex.answer) for ex in examples]}
        unwritable = [count.unwritable(ex.answer) for ex in examples]
        if any(unwritable):
            chars = ", ".join(repr(c) for c in sorted(set().union(*unwritable))[:5])
            raise LLMZeroError(f"{path}: {sum(map(bool, unwritable))} of {len(examples)} "
                               f"ground-truth answers hold characters that are not among "
                               f"{count.name} ({chars}): it can never write them, so these "
                               "answers never score")
        for key, values in sizes.items():
            longest[key] = max(longest[key], *values)
            limit = limits[key]
            over = sum(v > limit for v in values) if limit else 0
            if over:
                what = "prompts" if key == "max_prompt_length" else "ground-truth answers"
                raise LLMZeroError(f"{path}: {over} of {len(values)} {what} need more than {key}={limit} tokens "
                                   f"(the longest {max(values)}, counted with {count.name}); "
                                   f"{fixes.get(key, f'raise hparams.{key}')} or shorten them")
    within = ", ".join(f"{k}={v}" for k, v in limits.items() if v)
    return (f"longest prompt {longest['max_prompt_length']} and answer "
            f"{longest['max_response_length']} tokens ({count.name}): "
            + (f"within {within}" if within else "no length setting to check them against"))


def sample_specs(cfg: ExperimentConfig, root: Path) -> list[PhaseSpec]:
    """A scratch, an evolve and a debug phase of this config, their node folders under `root`:
    every kind of script the search can render, with the values it runs (the trainer's
    defaults under the config's: a micro-batch that divides none of theirs is refused here)."""
    backend = get_backend(cfg.backend)
    hparams = backend.effective_hparams(cfg.hparams)
    nodes = [Node(0, None, Kind.SCRATCH, hparams),
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
    return "scratch, evolve and debug phase scripts render and parse"


def check_controller(cfg: ExperimentConfig, run_dir: Path) -> str:
    """Render the controller job's script (`--submit`) for the real run directory: it checks
    the `controller:` section, and that the run directory can go into #SBATCH --output lines,
    as every phase's node folder under it must."""
    root = run_dir.resolve()
    with tempfile.TemporaryDirectory(prefix="llmz-check-") as tmp:
        script = Path(tmp) / CONTROLLER_SCRIPT
        script.write_text(render_controller(cfg.name, root, cfg.controller,
                                            ["llmzero-start", str(root)], "check"))
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
                           f"it (trainer.python names another); install the {cfg.backend} "
                           f"extra, e.g. pip install -e '.[{cfg.backend}]'")
    return f"{python} finds {', '.join(names)}"


def check_llm(cfg: ExperimentConfig) -> str:
    """The agents' backend, and for an LLM one request for one token (a fraction of a cent),
    once and briefly: a key or model the service refuses would send every agent call to the
    heuristics."""
    agents = replace(cfg.agents, max_retries=0, timeout_s=min(cfg.agents.timeout_s, LLM_TRIAL_TIMEOUT_S))
    llm = choose_backend(agents)
    if llm is None:
        return "offline heuristic agents (no API key configured)"
    return f"{llm.name} backend, model {cfg.agents.model}: {llm.probe()}"


def check_method(cfg: ExperimentConfig) -> str:
    """Build the search method: a static method checks its whole plan (space, strategy file)."""
    with tempfile.TemporaryDirectory(prefix="llmz-check-") as tmp:
        ctx = MethodContext(cfg, lambda i: NodeDir(Path(tmp) / f"{i:04d}"), Path(tmp))
        method = make_method(cfg.search.method, ctx)
    samples = cfg.search.budget_samples
    return f"{method.name}, budget {cfg.search.budget_iterations} phases" \
           + (f" or {samples:,} training samples" if samples else "") \
           + f", concurrency {cfg.search.concurrency}"


def preflight(cfg: ExperimentConfig, scheduler_kind: str, run_dir: Path) -> list[Check]:
    """Every check of `--check` on this machine, for a run in `run_dir` (created or not)."""
    from ..tasks.dataset import read_examples
    read = functools.lru_cache(maxsize=None)(read_examples)   # each file read once per check
    return [Check("config", True, f"{cfg.source or 'config'} is valid"),
            _run("search method", lambda: check_method(cfg)),
            _run("data and reward", lambda: check_data(cfg, read)),
            _run("lengths", lambda: check_lengths(cfg, read)),
            *(_run(name, check) for name, check in script_checks(cfg, run_dir)),
            _run("scheduler", lambda: check_scheduler(cfg, scheduler_kind)),
            *([_run("trainer", lambda: check_trainer(cfg))] if scheduler_kind == "local" else []),
            _run("agents", lambda: check_llm(cfg))]
