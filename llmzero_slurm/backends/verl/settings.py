"""The `trainer:` section of experiment.yaml when `backend: verl` (see the package docstring)."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...errors import ConfigError
from .grammar import parse_override
from .keys import LOGGERS
from .traps import check_raw_overrides

ROLLOUT_ENGINES = ("vllm", "sglang")
# The variables each of verl 0.9.1's loggers (verl/utils/tracking.py) logs in with, read from
# the job's environment.
LOGGER_CREDENTIALS: dict[str, tuple[str, ...]] = {
    "wandb": ("WANDB_API_KEY",),
    "swanlab": ("SWANLAB_API_KEY",),
    "mlflow": ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD"),
    "clearml": ("CLEARML_API_ACCESS_KEY", "CLEARML_API_SECRET_KEY"),
    "vemlp_wandb": ("VOLC_ACCESS_KEY_ID", "VOLC_SECRET_ACCESS_KEY"),
}


@dataclass
class VerlSettings:
    """The `trainer:` section of an experiment config when `backend: verl`."""

    rollout_engine: str = "vllm"
    overrides: list[str] = field(default_factory=list)
    extra_loggers: list[str] = field(default_factory=list)
    test_data_sources: list[str] = field(default_factory=list)

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> "VerlSettings":
        known = {"rollout_engine", "overrides", "extra_loggers", "test_data_sources"}
        for key in section:
            if key not in known:
                raise ConfigError(f"trainer.{key}", f"unknown key for the verl backend "
                                  f"(known: {', '.join(sorted(known))})")
        settings = cls(**section)
        if settings.rollout_engine not in ROLLOUT_ENGINES:
            raise ConfigError("trainer.rollout_engine", f"must be one of {list(ROLLOUT_ENGINES)}")
        for key in ("overrides", "extra_loggers", "test_data_sources"):
            value = getattr(settings, key)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"trainer.{key}", "must be a list of strings")
        for i, logger in enumerate(settings.extra_loggers):
            if logger not in LOGGERS:
                close = difflib.get_close_matches(logger, LOGGERS, n=1)
                raise ConfigError(f"trainer.extra_loggers[{i}]", f"{logger!r} is not a verl "
                                  "logger" + (f"; did you mean {close[0]!r}?" if close else "")
                                  + f" (verl 0.9.1 has {', '.join(LOGGERS)})")
        check_raw_overrides(settings.overrides, keep=settings.logger_credentials())
        return settings

    def trusts_remote_code(self) -> bool:
        """Whether the overrides let the model run its own code, as verl's merger must too."""
        value = None
        for text in self.overrides:
            _, key, given = parse_override(text)
            if key == "actor_rollout_ref.model.trust_remote_code":
                value = given
        # what OmegaConf reads as true for a bool field
        return (value or "").strip().strip("'\"").lower() in ("true", "yes", "y", "on", "1")

    def logger_credentials(self) -> frozenset[str]:
        """The variables the configured loggers log in with (wandb: WANDB_API_KEY)."""
        return frozenset(name for logger in self.extra_loggers
                         for name in LOGGER_CREDENTIALS.get(logger, ()))
