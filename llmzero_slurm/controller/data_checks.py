"""`--check`'s look at a task from files: its splits follow verl's schema and do not overlap,
its reward scores what a model may answer (and, for the cpu warm start, the ground truths as
written), and its prompts and answers fit the length settings the search runs with.
"""
from __future__ import annotations

from typing import Any, Callable

from ..backends import get_backend
from ..config import ExperimentConfig
from ..errors import ConfigError, DataError, LLMZeroError
from ..methods.space import length_limit
from ..tasks.reward_file import RewardFn


class NotChecked(Exception):
    """A check this machine cannot make (no tokenizer, no route to the LLM): no failure, and
    no pass either, so --check must not print it as one."""

ROWS_CHECKED = 3
# Per reward call: a string comparison takes microseconds, a symbolic math verifier (verl's
# math_verify) a few seconds at worst; a call past this would stall every training step.
REWARD_TIMEOUT_S = 10.0
IMPORT_TIMEOUT_S = 120.0   # the reward file's imports (torch, sympy) on a slow shared filesystem
EMPTY_RESPONSE = "an empty response (a model may answer with nothing)"
# A sampled answer is often not in the form the reward parses (a tiny or early model writes
# '====', an LLM prose): a reward that raises on it fails the phase mid-training.
MALFORMED = "I do not know."
MALFORMED_RESPONSE = f"an answer not in the expected form ({MALFORMED!r})"
PROBE_TIMEOUT_S = 120.0    # the reward on every probe row of the warm start (at most 512)

Reader = Callable[[str, str], list[Any]]     # (path, the config key naming it) -> rows


def task_reward(cfg: ExperimentConfig) -> tuple[RewardFn | None, str, list[tuple[str, str]]]:
    """The task's reward function, the name messages give it, and its dataset files: the
    reward file imported as verl imports it, its signature checked. Every problem is exit 2,
    but a package a verl reward imports that this Python lacks (no function, then): the
    phases import it in the verl environment."""
    from ..tasks import get_task
    from ..tasks.reward_file import MissingPackage, RewardTimeout, load_reward, time_limit

    task = cfg.task
    found: tuple[RewardFn | None, str, list[tuple[str, str]]]
    if task.builtin:
        found = get_task(task.builtin).compute_score, f"builtin task {task.builtin}", []
    else:
        task.require()
        assert task.reward_path     # TaskConfig.check: one's own task gives every file
        try:
            with time_limit(IMPORT_TIMEOUT_S):
                found = load_reward(task.reward_path, task.reward_name), task.reward_path, \
                    task.data_files()
        except RewardTimeout:
            raise DataError(task.reward_path, f"importing the reward file did not finish within "
                            f"{IMPORT_TIMEOUT_S:g} s") from None
        except MissingPackage as exc:
            if cfg.backend != "verl":      # the cpu phases run this Python
                raise
            found = None, f"{task.reward_path} not tried here: it imports {exc.module}, which " \
                "this Python lacks (the phases import it with the verl environment's Python)", \
                task.data_files()
    if cfg.backend == "verl" and not task.test_files:
        raise ConfigError("task.test_files", "give a held-out test split (scores for the report)")
    return found


def check_inputs(cfg: ExperimentConfig) -> None:
    """What a plain start checks before it creates a run, in moments on a login node: the
    reward file imports with verl's signature, and each data file is there and is parquet with
    verl's columns, read from its footer (check_data reads every row, as --check does)."""
    from ..tasks.dataset import check_footer

    train: dict[str, int] = {}
    for key, path in task_reward(cfg)[2]:
        rows = check_footer(path, key)
        if key == "task.train_files":
            train[path] = rows
    check_train_rows(cfg, train)


def check_train_rows(cfg: ExperimentConfig, rows: dict[str, int]) -> None:
    """The training files (path -> rows) hold a batch for the largest train_batch_size a
    phase may run (tasks.dataset.short_of_a_batch)."""
    from ..tasks.dataset import short_of_a_batch

    if not rows:        # a builtin task: its own sizes
        return
    batch = get_backend(cfg.backend).effective_hparams(cfg.hparams).get("train_batch_size")
    where = "hparams.train_batch_size"
    bound = length_limit(cfg.search.method, cfg.search.space, cfg.backend, "train_batch_size")
    if bound is not None and (batch is None or bound[0] > batch):
        batch, where = bound
    problem = short_of_a_batch(sum(rows.values()), batch)
    if problem:
        raise DataError(", ".join(rows), f"{problem} ({where}); lower it, or give the task "
                        "more training rows")


def check_data(cfg: ExperimentConfig, read: Reader | None = None) -> str:
    """Dataset files follow verl's schema; the reward function scores their ground truths."""
    from ..tasks.dataset import read_examples
    from ..tasks.splits import check_splits

    read = read or read_examples
    task = cfg.task
    reward, source, files = task_reward(cfg)
    rows = 0
    train: list[Any] = []       # every training file's rows, as the warm start reads them
    train_rows: dict[str, int] = {}
    prompts: dict[str, set[Any]] = {}
    notes: list[str] = []
    for key, path in files:   # train, val, test (data_files' order)
        examples = read(path, key)
        notes += check_splits(key, path, examples, prompts)
        if reward is not None:
            _try_reward(cfg, reward, source, path, examples)
        if key == "task.train_files":
            train += examples
            train_rows[path] = len(examples)
        rows += len(examples)
    check_train_rows(cfg, train_rows)
    if cfg.backend == "cpu" and not task.builtin and task.warm_start.steps is None:
        _check_probe(cfg, reward, source, train)
    if task.builtin:
        return f"builtin task {task.builtin}"
    return "; ".join([f"{len(files)} files, {rows} rows", *notes,
                      *([source] if reward is None else [])])


def _try_reward(cfg: ExperimentConfig, reward: RewardFn, source: str, path: str,
                examples: list[Any]) -> None:
    """The reward on a file's first rows: a failure names the row and the answer scored."""
    from ..tasks.reward_file import RewardTimeout, judge, time_limit

    task = cfg.task
    # Its own ground truth, and answers that are wrong (a model's first answers mostly
    # are): a reward that returns None or raises on those would fail every phase.
    checks = [(row, ex, answer, scoring) for row, ex in enumerate(examples[:ROWS_CHECKED], 1)
              for answer, scoring in ((ex.answer, "its own ground truth"),
                                      ("", EMPTY_RESPONSE),
                                      (MALFORMED, MALFORMED_RESPONSE))]
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


def _check_probe(cfg: ExperimentConfig, reward: Any, source: str, train: list[Any]) -> None:
    """What the cpu warm start checks of a user's files before it trains (its probe rows, its
    band), here on the login node: the band must be within reach of the ground truths."""
    from ..cputrain.defaults import WARM_START_BAND
    from ..cputrain.probe import check_written, split_probe
    from ..tasks.reward_file import RewardTimeout, time_limit

    low = (cfg.task.warm_start.band or WARM_START_BAND)[0]
    probe = split_probe(train, ", ".join(cfg.task.train_files))[1]
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
        raise NotChecked(f"not checked: {exc}") from None
    longest = {"max_prompt_length": 0, "max_response_length": 0}
    for key, path in task.data_files():
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
