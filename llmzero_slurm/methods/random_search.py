"""Random search: budget_iterations static trials drawn from a space (paper Appendix B.2).

Each trial is a pure function of (search.seed, trial index), so the plan is the same after a
controller restart and a run can be reproduced from its config alone.
"""
from __future__ import annotations

from .distribution import sample
from .space import RANDOM_SPACES, full_config, parse_random_space
from .static import IndependentTrials, Planned, describe


class RandomSearchMethod(IndependentTrials):
    name = "random"

    def plan(self) -> list[Planned]:
        cfg = self.ctx.config
        space = parse_random_space(cfg.search.space or RANDOM_SPACES[self.backend], self.backend)
        trials = cfg.search.budget_iterations
        planned = []
        for i in range(trials):
            values = sample(space, cfg.search.seed, i)
            hparams = full_config(self.ctx.hparams, values, self.backend, f"random trial {i}")
            planned.append(Planned(hparams, f"random trial {i + 1}/{trials} "
                                            f"(seed {cfg.search.seed}): {describe(values)}"))
        return planned
