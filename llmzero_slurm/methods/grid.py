"""Grid search: one static trial per point of a grid (paper Appendix E.1: lr x LoRA rank),
in a fixed order, at most budget_iterations of them."""
from __future__ import annotations

from .space import GRID_SPACES, full_config, grid_points
from .static import IndependentTrials, Planned, describe


class GridMethod(IndependentTrials):
    name = "grid"
    points: int = 0     # the grid's size; budget_iterations may run fewer (--check says so)

    def plan(self) -> list[Planned]:
        cfg = self.ctx.config
        points = grid_points(cfg.search.space or GRID_SPACES[self.backend], self.backend)
        self.points = len(points)
        used = points[:cfg.search.budget_iterations]
        return [Planned(full_config(self.ctx.hparams, p, self.backend, f"grid point {i}"),
                        f"grid point {i + 1}/{len(used)} of {len(points)}: {describe(p)}")
                for i, p in enumerate(used)]
