"""Replay: run the phases of a strategy.yaml from an earlier search on a new task (transfer).

The chain is the strategy's: each phase trains its recorded number of steps with its recorded
hyperparameters (keys the strategy lacks come from this experiment's hparams), and each later
phase resumes from the previous phase's last checkpoint.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..hparams import merge
from ..strategy_file import KEY, load_strategy
from .registry import shown
from .static import Chain, Planned


class ReplayMethod(Chain):
    name = "replay"

    def source(self) -> str:
        return f"{self.ctx.config.search.strategy_file} (the strategy file may have changed)"

    def plan(self) -> list[Planned]:
        cfg = self.ctx.config
        if not cfg.search.strategy_file:
            raise ConfigError(KEY, "is required when search.method is replay")
        # Relative paths are taken from the working directory; the start command freezes the
        # config, so pass an absolute path when the controller may restart elsewhere.
        path = Path(cfg.search.strategy_file).expanduser().absolute()
        phases = load_strategy(path, self.backend)
        planned = []
        for i, phase in enumerate(phases):
            try:
                hparams = merge(self.ctx.hparams, {**phase.hparams, "total_training_steps": phase.steps},
                                self.backend)
            except ConfigError as exc:
                raise ConfigError(KEY, f"{path}: phases[{i}].hparams: {exc}") from None
            source = f" (source node {phase.node})" if phase.node is not None else ""
            planned.append(Planned(hparams, f"replay of {path.name} phase {i + 1}/{len(phases)}"
                                            f"{source}: {phase.steps} steps"))
        self.check_fits(str(path), planned)
        self._overridden = _overridden(self.ctx.config.hparams, [p.hparams for p in planned], path)
        return planned

    def notes(self) -> list[str]:
        return [self._overridden] if self._overridden else []


def _overridden(own: dict[str, Any], phases: list[dict[str, Any]], path: Path) -> str | None:
    """The experiment's hparams the planned `phases` run otherwise. A report's strategy.yaml
    holds every key of each phase, so none of them reaches a phase: a replay "with another
    seed" (hparams: {seed: 7}) ran the source search's seed, or its prompt lengths on a new
    task; and each phase runs its `steps`, whatever total_training_steps says."""
    said, steps = [], ""
    for key in sorted(own):
        values = [p[key] for p in phases if key in p]
        if any(v != own[key] for v in values):
            ran = ", ".join(shown(v) for v in dict.fromkeys(values))
            said.append(f"{key}={ran} (hparams: {shown(own[key])})")
            if key == "total_training_steps":
                steps = " (for total_training_steps, set each phase's steps)"
    if not said:
        return None
    return (f"{path} sets hparams this experiment sets too, and the replay runs the strategy's: "
            f"{', '.join(said)}; to run the experiment's, delete the key from each phase of the "
            f"strategy file{steps}")
