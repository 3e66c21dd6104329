"""What a trainer contributes to a phase script: its template and its command line.

Everything else (directives, status bookkeeping, signals, requeue) is the base template's.
A backend returns raw argument strings; the renderer validates and shell-quotes them, so no
backend can let a value escape into the shell.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..render import PhaseSpec


class TrainerBackend(ABC):
    name: str
    template: str                        # path under templates/, e.g. "phase/cpu.sbatch.j2"
    trainer_keys: Mapping[str, type] = {}  # keys the experiment's `trainer:` section may hold

    def check_trainer(self, extras: Mapping[str, Any]) -> dict[str, Any]:
        """Refuse unknown or mistyped `trainer:` keys, naming them."""
        out = {}
        for key, value in extras.items():
            kind = self.trainer_keys.get(key)
            if kind is None:
                raise ConfigError(f"trainer.{key}", f"unknown for the {self.name} backend (known: "
                                  f"{', '.join(sorted(self.trainer_keys)) or 'none'})")
            if isinstance(value, bool) or not isinstance(value, kind):
                raise ConfigError(f"trainer.{key}", f"must be of type {kind.__name__}")
            out[key] = value
        return out

    @abstractmethod
    def command(self, spec: "PhaseSpec") -> list[str]:
        """The trainer's argv for this phase (unquoted)."""

    def env(self, spec: "PhaseSpec") -> dict[str, str]:
        """Environment variables the trainer needs, exported before it starts."""
        return {}
