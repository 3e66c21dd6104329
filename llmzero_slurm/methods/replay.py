"""Replay: run the phases of a strategy.yaml from an earlier search on a new task (transfer).

The chain is the strategy's: each phase trains its recorded number of steps with its recorded
hyperparameters (keys the strategy lacks come from this experiment's hparams), and each later
phase resumes from the previous phase's last checkpoint.
"""
from __future__ import annotations

from itertools import accumulate
from pathlib import Path

from ..errors import ConfigError
from ..hparams import merge
from ..search.budget import Budget
from ..strategy_file import KEY, load_strategy
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
        self._check_budget(path, planned)
        return planned

    def _check_budget(self, path: Path, planned: list[Planned]) -> None:
        """Refuse a strategy the budget would cut short: its last phases cut or never run
        are another schedule than the one replayed, reported under its name."""
        search = self.ctx.config.search
        if len(planned) > search.budget_iterations:
            raise ConfigError("search.budget_iterations", f"is {search.budget_iterations}, and "
                              f"{path} has {len(planned)} phases: the replay would stop after "
                              f"phase {search.budget_iterations}; raise it to {len(planned)}")
        if search.budget_samples is None:
            return
        budget = Budget.of(search, self.ctx.backend.defaults())
        totals = list(accumulate(phase.hparams["total_training_steps"]
                                 * budget.step_samples(phase.hparams) for phase in planned))
        if totals and totals[-1] > search.budget_samples:
            cut = next(i for i, total in enumerate(totals) if total > search.budget_samples)
            raise ConfigError("search.budget_samples", f"is {search.budget_samples:,}, and "
                              f"{path} trains {totals[-1]:,} samples (phase {cut + 1} would be "
                              "cut): raise it or leave it unset")
