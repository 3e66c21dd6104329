"""What a trainer contributes to a phase script: its template and its command line.

Everything else (directives, status bookkeeping, signals, requeue) is the base template's.
A backend returns raw argument strings; the renderer validates and shell-quotes them, so no
backend can let a value escape into the shell.
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..render import PhaseSpec

_CKPT = re.compile(r"^global_step_(\d+)$")


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

    def defaults(self) -> dict[str, Any]:
        """The trainer's value for every key an experiment leaves unset, so that agents and
        reports see the configuration a phase really ran with."""
        return {}

    @abstractmethod
    def command(self, spec: "PhaseSpec") -> list[str]:
        """The trainer's argv for this phase (unquoted)."""

    def env(self, spec: "PhaseSpec") -> dict[str, str]:
        """Environment variables the trainer needs, exported before it starts."""
        return {}

    def step_offset(self, node_dir: Path) -> int:
        """What to add to a checkpoint folder's number to get a global step."""
        return 0

    def checkpoint_steps(self, node_dir: Path) -> list[int]:
        """Global steps with a complete checkpoint folder (ckpt/global_step_N, written
        atomically by the trainer), the steps a child may resume from."""
        ckpt = Path(node_dir) / "ckpt"
        if not ckpt.is_dir():
            return []
        offset = self.step_offset(node_dir)
        return sorted(int(m.group(1)) + offset for e in ckpt.iterdir()
                      if (m := _CKPT.match(e.name)) and e.is_dir())
