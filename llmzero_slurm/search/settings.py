"""Search constants, with the paper's defaults (Appendix B.6)."""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..errors import ConfigError, ConfigProblems
from .retention import KEEP_ALL, KEEP_CHOICES

MIN_TEMPERATURE = 0.01   # of f_T (scoring.shape)


def check_ranges(section: str, settings: object, positive: Iterable[str] = (),
                 non_negative: Iterable[str] = ()) -> None:
    """Refuse a numeric setting of `section` out of its range, by key; unset (None) passes.
    Every config section states its ranges through this, so each bound is written once; every
    value out of range is named at once."""
    problems = ConfigProblems()
    for names, within, bound in ((positive, operator.gt, "> 0"),
                                 (non_negative, operator.ge, ">= 0")):
        for name in names:
            value = getattr(settings, name)
            if value is not None and not within(value, 0):
                problems.errors.append(ConfigError(f"{section}.{name}",
                                                   f"must be {bound} (got {value!r})"))
    problems.raise_all()


@dataclass
class SearchSettings:
    method: str = "llmzero"        # a name in methods/registry.py
    budget_iterations: int = 16
    budget_samples: int | None = None   # sampled responses: steps x train_batch_size x rollout_n
    budget_gpu_hours: float | None = None
    budget_wall_hours: float | None = None
    concurrency: int = 1
    exploration_c: float = 1.414   # C in UCT
    temperature: float = 0.3       # T of the exponential shaping f_T
    fail_penalty: float = 0.5      # w_f
    early_penalty: float = 0.3     # w_e
    fail_forgiven: int = 2         # o_f
    max_evolve_children: int = 2   # k_max
    max_debug_children: int = 3
    max_debug_depth: int = 5
    min_scratch_ratio: float = 0.2  # rho_min
    virtual_loss: float = 1.0      # zero-score visits charged per pending phase
    early_stopping: bool = True    # llmzero's monitor job and its stopper; off for an ablation
    early_stop_interval_s: float = 900.0
    # How often the controller asks the scheduler; unset: the scheduler's own default (Slurm:
    # 30 s, as sites ask of login-node tools; local processes: 10 s).
    poll_interval_s: float | None = None
    seed: int = 0
    strategy_file: str | None = None   # replay: a strategy.yaml from an earlier search
    # random / grid / guidebook: replaces the method's default space; llmzero: bounds its
    # agents (methods/space.py).
    space: dict[str, Any] = field(default_factory=dict)
    keep_checkpoints: str = KEEP_ALL   # retention.py: all, or a finished phase's useful ones

    def check(self) -> None:
        """Ranges; the method's name (and whether it reads `space`) is its registry's to check."""
        problems = ConfigProblems()
        with problems.collect():
            check_ranges("search", self,
                         positive=("budget_iterations", "budget_samples", "budget_gpu_hours",
                                   "budget_wall_hours", "concurrency", "temperature",
                                   "early_stop_interval_s", "poll_interval_s"),
                         non_negative=("exploration_c", "fail_penalty", "early_penalty",
                                       "virtual_loss", "min_scratch_ratio", "fail_forgiven",
                                       "max_debug_children", "max_debug_depth"))
        if self.max_evolve_children < 1:
            # 0 would pass --check, and the search would end after its first phase ("no
            # branch left to grow"): nothing may build on a phase, and no scratch phase is
            # injected before the first evolve one.
            problems.add("search.max_evolve_children", f"must be > 0 (got "
                         f"{self.max_evolve_children}): with none, no phase builds on another "
                         "and the search ends after its first phase")
        if 0 < self.temperature < MIN_TEMPERATURE:
            problems.add("search.temperature", f"must be at least {MIN_TEMPERATURE} (got "
                         f"{self.temperature}): f_T's e^(1/T) overflows below 0.0014, and "
                         "below 0.01 only the best phase counts already")
        if self.keep_checkpoints not in KEEP_CHOICES:
            problems.add("search.keep_checkpoints", f"must be {' or '.join(KEEP_CHOICES)} (got "
                         f"{self.keep_checkpoints!r:.40})")
        if self.method == "replay" and not self.strategy_file:
            problems.add("search.strategy_file", "is required when search.method is replay")
        problems.raise_all()
