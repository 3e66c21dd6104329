"""Loading a reward function from a file, as verl's `reward.custom_reward_function` does."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any, Callable

from ..errors import DataError

RewardFn = Callable[..., Any]


def load_reward(path: str | Path, name: str = "compute_score") -> RewardFn:
    """Import `name` from the Python file at `path`; errors name the file and the function."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "reward file does not exist")
    spec = importlib.util.spec_from_file_location(f"llmzero_reward_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: report any import failure by name
        raise DataError(path, f"cannot import reward file: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise DataError(path, f"defines no function {name}(data_source, solution_str, "
                        "ground_truth, extra_info)")
    return fn


def score(fn: RewardFn, path: Any, data_source: str, text: str, ground_truth: str,
          extra_info: dict) -> float:
    """One reward as a float; a dict result uses its 'score' entry, as verl does."""
    result = fn(data_source, text, ground_truth, extra_info)
    if isinstance(result, dict):
        result = result.get("score")
    if isinstance(result, bool) or not isinstance(result, (int, float)) or not math.isfinite(result):
        raise DataError(path, f"reward for {data_source!r} must be a finite number or a dict "
                        f"with a numeric 'score', got {result!r:.80}")
    return float(result)
