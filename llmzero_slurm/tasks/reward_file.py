"""Loading a reward function from a file, as verl's `reward.custom_reward_function` does."""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import DataError

RewardFn = Callable[..., Any]


def fingerprint(path: str | Path, name: str = "compute_score") -> str:
    """What names a reward function's code: its file's bytes and the function's name."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise DataError(Path(path), f"cannot be read ({exc.strerror or exc})") from None
    return hashlib.sha256(text + b"\0" + name.encode()).hexdigest()[:16]


def load_reward(path: str | Path, name: str = "compute_score") -> RewardFn:
    """Import `name` from the Python file at `path`; errors name the file and the function."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "reward file does not exist")
    # One module per file, not per file name: two reward.py files must not share an entry.
    where = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]
    spec = importlib.util.spec_from_file_location(f"llmzero_reward_{path.stem}_{where}", path)
    if spec is None or spec.loader is None:
        raise DataError(path, "cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # importlib's recipe: dataclasses looks the module up there
    try:
        try:
            spec.loader.exec_module(module)
        except ModuleNotFoundError as exc:
            raise MissingPackage(path, exc) from None
        except (Exception, SystemExit) as exc:  # the user's file: any import failure, by name
            raise DataError(path, f"cannot import reward file: {type(exc).__name__}: "
                                  f"{exc}") from None
        fn = getattr(module, name, None)
        if not callable(fn):
            raise DataError(path, f"defines no function {name}{EXPECTED}")
        _check_signature(path, name, fn)
    except DataError:
        sys.modules.pop(spec.name, None)    # a file refused leaves no module behind
        raise
    return fn


EXPECTED = "(data_source, solution_str, ground_truth, extra_info=None)"


class MissingPackage(DataError):
    """The reward file imports a package this Python lacks: a verl reward runs in the GPU
    nodes' verl environment, which may hold packages (ray, math_verify) a login node does not."""

    def __init__(self, path: Path, exc: ModuleNotFoundError):
        super().__init__(path, f"cannot import reward file: ModuleNotFoundError: {exc}")
        self.module = exc.name or str(exc)


def _check_signature(path: Path, name: str, fn: RewardFn) -> None:
    """verl calls the function with these keywords, the CPU trainer by position: both must
    bind, or every phase would fail on its first reward with a bare TypeError."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return   # a builtin or C function: nothing to inspect
    args: tuple[Any, ...] = ("openai/gsm8k", "text", "42", {})
    try:
        signature.bind(*args)
        signature.bind(**dict(zip(("data_source", "solution_str", "ground_truth", "extra_info"),
                                  args)))
    except TypeError as exc:
        raise DataError(path, f"{name}{signature} cannot be called the way verl calls it, "
                        f"{name}{EXPECTED}: {exc}") from None


@dataclass(frozen=True)
class Judgement:
    """What one response earned. As in verl's reward managers: a number is both the reward and
    the accuracy; a dict's 'score' is the reward, and its 'acc' (when given) is the accuracy that
    validation reports as its core metric, so a task can train on partial credit while
    validation counts exact answers."""

    score: float
    acc: float | None = None   # only when the reward reports an accuracy apart from its score

    @property
    def accuracy(self) -> float:
        return self.score if self.acc is None else self.acc


def _scalar(value: Any) -> Any:
    """A numpy or torch scalar (np.float32, np.bool_, a 0-d tensor) as the Python number it
    holds: verl writes what compute_score returns into its reward tensor, so these, and bools,
    are rewards there. Anything else, arrays included, is returned as it is."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        try:
            return item()
        except (TypeError, ValueError):
            return value
    return value


def _number(path: Any, data_source: str, what: str, value: Any) -> float:
    value = _scalar(value)
    if not isinstance(value, (bool, int, float)) or not math.isfinite(value):
        raise DataError(path, f"reward for {data_source!r} must be a finite number or a dict "
                        f"with a numeric 'score' (and optional 'acc'), got {what}{value!r:.80}")
    return float(value)


def judge(fn: RewardFn, path: Any, data_source: str, text: str, ground_truth: Any,
          extra_info: dict) -> Judgement:
    result = fn(data_source, text, ground_truth, extra_info)
    if isinstance(result, dict):
        acc = result.get("acc")
        return Judgement(_number(path, data_source, "'score' ", result.get("score")),
                         None if acc is None else _number(path, data_source, "'acc' ", acc))
    return Judgement(_number(path, data_source, "", result))


class RewardTimeout(BaseException):
    """A reward call ran past its time limit; a BaseException, so that the reward's own
    `except Exception` cannot swallow it."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise RewardTimeout inside the block once it has run `seconds`, and again every second
    until it unwinds (a reward that catches one is interrupted again). A signal interrupts the
    call itself, so nothing of it runs on after the block, as a thread left behind would;
    signals need the main thread, and elsewhere the block runs without a limit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise RewardTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
