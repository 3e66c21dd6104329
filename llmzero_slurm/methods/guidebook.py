"""The capacity guidebook (paper Table 13): a fixed schedule where response length and rollouts
grow phase by phase and everything else stays at the experiment's hparams. Phase 1 starts from
the base model; each later phase resumes from the previous one's last checkpoint."""
from __future__ import annotations

from .space import GUIDEBOOK_SCHEDULES, full_config, schedule_phases
from .static import Chain, Planned, describe


class GuidebookMethod(Chain):
    name = "guidebook"

    def plan(self) -> list[Planned]:
        cfg = self.ctx.config
        phases = schedule_phases(cfg.search.space or GUIDEBOOK_SCHEDULES[self.backend], self.backend)
        planned = [Planned(full_config(self.ctx.hparams, p, self.backend, f"guidebook phase {i}"),
                           f"guidebook phase {i + 1}/{len(phases)}: {describe(p)}")
                   for i, p in enumerate(phases)]
        self.check_fits("search.space" if cfg.search.space else "the guidebook method's default "
                        "space (search.space replaces it)", planned)
        return planned
