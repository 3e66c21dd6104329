"""Whether the search's budget admits a planned phase, and for how many steps.

The plan's steps are cut to the samples left. When not even one step fits, asking the method
again (an LLM call) before a phase gives samples back (stopped early) would only repeat the
answer, so the budget counts as closed until then.
"""
from __future__ import annotations

from dataclasses import replace

from ..methods.base import PhasePlan
from ..search.budget import Budget, cut_note, planned_steps
from ..search.tree import Tree
from .progress import Progress


class Admission:
    def __init__(self, budget: Budget, progress: Progress):
        self.budget, self.progress = budget, progress
        self._short_at: int | None = None   # samples left when a plan last had no room

    def closed(self, tree: Tree) -> str | None:
        """Why no new phase may be created now, or None."""
        spent = self.budget.spent(tree)
        left = self.budget.samples_left(tree)
        if spent is None and self._short_at is not None and left is not None \
                and left <= self._short_at:
            return f"less than a step of training samples is left ({left:,})"
        return spent

    def halted(self, tree: Tree) -> bool:
        """Closed only until unreadable records are rebuilt (no limit is reached): a search
        that ends here has stopped, not finished."""
        return bool(self.budget.uncounted(tree)) and self.budget.limit_reached(tree) is None

    def admit(self, tree: Tree, plan: PhasePlan) -> PhasePlan | None:
        """The plan, its steps cut to what the sample budget has left; None when nothing is
        (said, with where the agents' records of the plan stay)."""
        steps = self.budget.fit_steps(tree, plan.hparams)
        if steps == 0:
            self._short_at = left = self.budget.samples_left(tree)
            self.progress.event(
                f"a proposed {plan.action.kind.value} phase was not created: it needs "
                f"{self.budget.step_samples(plan.hparams):,} training samples a step and the "
                f"budget has {left:,} left" + (f"; its agent records stay in {plan.records_dir}"
                                               if plan.records_dir else ""))
            return None
        if steps is None or steps == plan.hparams.get("total_training_steps"):
            return plan
        planned = planned_steps({**self.budget.defaults, **plan.hparams}) or steps
        return replace(plan, hparams={**plan.hparams, "total_training_steps": steps},
                       diagnosis=f"{plan.diagnosis} {cut_note(steps, planned)}".lstrip())
