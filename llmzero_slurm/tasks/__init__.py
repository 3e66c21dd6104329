"""Built-in tasks for the embedded CPU trainer, each a self-contained module.

A task module defines DATA_SOURCE (its name: task.builtin and the rows' data_source), ABILITY
(the rows' ability), BASE_BAND (the greedy accuracy the CPU trainer's warm-started base is
calibrated to), `sample(rng)` and verl's `compute_score(data_source, solution_str, ground_truth,
extra_info=None)`, using only the standard library, so its file doubles as a verl custom reward
function; its DESCRIPTION is for people (no code, prompt or data row reads it). Nothing here imports
torch: the login node lists and materialises tasks too.
"""
from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ..errors import ConfigError
from . import addition, arithmetic, expand, reverse, sort

TASKS: dict[str, ModuleType] = {m.DATA_SOURCE: m
                                 for m in (addition, arithmetic, expand, reverse, sort)}


def get_task(name: str) -> ModuleType:
    """The task module called `name`, or an error listing the known ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise ConfigError("task", f"unknown task {name!r} (known: {', '.join(TASKS)})") from None


def reward_path(name: str) -> Path:
    """The file to give verl (or --reward-path) as the task's reward function."""
    return Path(str(get_task(name).__file__))
