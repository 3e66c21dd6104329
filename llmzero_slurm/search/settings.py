"""Search constants, with the paper's defaults (Appendix B.6)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError


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
    early_stop_interval_s: float = 900.0
    # How often the controller asks the scheduler; unset: the scheduler's own default (Slurm:
    # 30 s, as sites ask of login-node tools; local processes: 10 s).
    poll_interval_s: float | None = None
    seed: int = 0
    strategy_file: str | None = None   # replay: a strategy.yaml from an earlier search
    # random / grid / guidebook: replaces the method's default space (methods/space.py).
    space: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Ranges; the method's name (and whether it reads `space`) is its registry's to check."""
        positive = {"budget_iterations": self.budget_iterations, "concurrency": self.concurrency,
                    "temperature": self.temperature, "early_stop_interval_s": self.early_stop_interval_s}
        if self.poll_interval_s is not None:
            positive["poll_interval_s"] = self.poll_interval_s
        if self.budget_samples is not None:
            positive["budget_samples"] = self.budget_samples
        for key, value in positive.items():
            if value <= 0:
                raise ConfigError(f"search.{key}", "must be > 0")
        for key in ("exploration_c", "fail_penalty", "early_penalty", "virtual_loss",
                    "min_scratch_ratio"):
            if getattr(self, key) < 0:
                raise ConfigError(f"search.{key}", "must be >= 0")
        for key in ("fail_forgiven", "max_evolve_children", "max_debug_children", "max_debug_depth"):
            if getattr(self, key) < 0:
                raise ConfigError(f"search.{key}", "must be >= 0")
        if self.method == "replay" and not self.strategy_file:
            raise ConfigError("search.strategy_file", "is required when search.method is replay")
