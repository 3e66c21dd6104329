"""What a trainer contributes to a phase: its template, its command line, what an unset
hyperparameter means to it, and how its checkpoints are numbered.

Everything else (directives, status bookkeeping, signals, requeue) is the base template's.
A backend returns raw argument strings; the renderer validates and shell-quotes them, so no
backend can let a value escape into the shell.
"""
from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Mapping, Sequence

from ..errors import ConfigError, LLMZeroError
from ..hparams import PARAMS
from ..store.node_dir import NodeDir
from .spec import PhaseSpec

__all__ = ["PhaseSpec", "TokenCounter", "TrainerBackend"]


@dataclass(frozen=True)
class TokenCounter:
    """`prompt(messages)`: tokens of a chat prompt as the trainer feeds it; `answer(text)`:
    tokens of a response that says exactly `text`, its end-of-sequence token included."""

    prompt: Callable[[Sequence[Mapping[str, str]]], int]
    answer: Callable[[str], int]
    name: str
    # The characters of a text the trainer can never generate (a tokenizer without them).
    unwritable: Callable[[str], set[str]] = lambda text: set()


class TrainerBackend(ABC):
    name: ClassVar[str]
    template: ClassVar[str]                 # path under templates/, e.g. "phase/cpu.sbatch.j2"
    trainer_keys: ClassVar[Mapping[str, type]] = {}  # keys the `trainer:` section may hold

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

    def python(self, trainer: Mapping[str, Any]) -> str:
        """The interpreter that runs the phases (`trainer.python`, else this backend's own)."""
        return str(trainer.get("python") or sys.executable)

    def defaults(self) -> dict[str, Any]:
        """The trainer's value for every key an experiment leaves unset (the one source of
        them), so that agents and reports see the configuration a phase really ran with."""
        return {}

    def effective_hparams(self, hparams: Mapping[str, Any]) -> dict[str, Any]:
        """The configuration a phase really runs with: `hparams` over the trainer's defaults,
        so agents reason about (and scale) actual values rather than missing ones."""
        return {**self.defaults(), **hparams}

    def own_default(self, key: str) -> Any:
        """What the trainer itself runs with for `key` when neither the experiment nor
        defaults() sets it, for checks of what a phase will meet; None when unknown here. Not
        in defaults(): it may be read from an install this machine need not have."""
        return None

    def reads(self, key: str) -> bool:
        """Whether this trainer has the vocabulary's hyperparameter `key`."""
        return PARAMS[key].read_by(self.name)

    def plan_problem(self, spec: PhaseSpec) -> str | None:
        """Why the trainer would refuse this phase's hyperparameters, asked before the phase
        is recorded so an agent can mend its answer (a refusal at render time fails the node);
        None when it would run them or cannot tell on this machine. Here: a batch larger than
        the training files, which neither trainer can run."""
        from ..tasks.dataset import short_of_a_batch, train_rows

        rows = train_rows(spec.task.train_files) if spec.task.train_files else None
        problem = None if rows is None else \
            short_of_a_batch(rows, self.effective_hparams(spec.hparams).get("train_batch_size"))
        return f"train_batch_size: {problem}" if problem else None

    @abstractmethod
    def command(self, spec: PhaseSpec) -> list[str]:
        """The trainer's argv for this phase (unquoted)."""

    def env(self, spec: PhaseSpec) -> dict[str, str]:
        """Environment variables the trainer needs, exported before it starts."""
        return {}

    def kept_credentials(self, trainer: Mapping[str, Any]) -> frozenset[str]:
        """Credential variables the trainer itself reads with these `trainer:` settings (a
        logger's key): its jobs keep them, the LLM key's variable aside."""
        return frozenset()

    def token_counter(self, model_path: str | None) -> TokenCounter:
        """Token counts of prompts and answers as this trainer sees them, to check they fit its
        length settings before a job learns otherwise; raises LLMZeroError saying why the
        tokenizer cannot be had on this machine."""
        raise LLMZeroError(f"the {self.name} trainer has no tokenizer to count with here")

    def step_offset(self, node_dir: Path) -> int:
        """What to add to a checkpoint folder's number to get a global step."""
        return 0

    def record_start(self, node_dir: Path, start_step: int) -> None:
        """Leave in `node_dir` what this trainer's job records when it starts, for a render
        that needs a parent before any phase ran (the preflight's evolve script). Most
        trainers record nothing a render reads."""
        return None

    def checkpoint_steps(self, files: NodeDir) -> list[int]:
        """Global steps a child may resume from: the node's checkpoint folders."""
        if not files.ckpt.is_dir():
            return []
        return files.checkpoints(self.step_offset(files.path))

    def checkpoint_dir(self, files: NodeDir, step: int) -> Path:
        """The folder of the node's checkpoint at global `step`. ConfigError when the node's
        step offset is unrecorded (verl's start record)."""
        return files.checkpoint_dir(step - self.step_offset(files.path))

    def lost_checkpoints(self, files: NodeDir, recorded: Iterable[int]) -> list[int]:
        """Of the `recorded` steps, those whose checkpoint is no longer whole on disk (a scratch
        purge, a user's rm): a phase resuming from one would fail only once its job ran.
        ConfigError when the node's checkpoints cannot be listed (verl's start record)."""
        return sorted(set(recorded) - set(self.checkpoint_steps(files)))
