"""The practitioner baseline: one static run of the experiment's own hparams (the recipe)."""
from __future__ import annotations

from ..hparams import validate_hparams
from .static import IndependentTrials, Planned


class PractitionerMethod(IndependentTrials):
    name = "practitioner"

    def plan(self) -> list[Planned]:
        hparams = validate_hparams(self.ctx.hparams, self.backend)
        return [Planned(hparams, "practitioner recipe: the experiment's hparams, one static run")]
