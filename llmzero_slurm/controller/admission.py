"""Whether the search admits a planned phase, and for how many steps.

The plan's steps are cut to the samples left. When not even one step fits, asking the method
again (an LLM call) before a phase gives samples back (stopped early) would only repeat the
answer, so the budget counts as closed until then.

The scheduler closes it too: refusals no wait cures, several in a row with no job taken
between, are the run's settings (an unknown partition or account), which every phase the
method plans would meet; the search stops creating phases rather than fail its budget's worth.
"""
from __future__ import annotations

from dataclasses import replace

from ..errors import SchedulerError, StateError
from ..methods.base import PhasePlan
from ..search.budget import Budget, cut_note, planned_steps
from ..search.tree import Tree
from .progress import Progress

REFUSALS_IN_A_ROW = 3   # definite submission refusals, no job taken between, that close the search


class Admission:
    def __init__(self, budget: Budget, progress: Progress):
        self.budget, self.progress = budget, progress
        self._short_at: int | None = None   # samples left when a plan last had no room
        self._refused_in_a_row = 0          # definite refusals since a job was last taken
        self._last_refusal = ""

    def closed(self, tree: Tree) -> str | None:
        """Why no new phase may be created now, or None."""
        spent = self.budget.spent(tree)
        left = self.budget.samples_left(tree)
        if spent is None and self._short_at is not None and left is not None \
                and left <= self._short_at:
            return f"less than a step of training samples is left ({left:,})"
        return spent or self._refused()

    def _refused(self) -> str | None:
        if self._refused_in_a_row < REFUSALS_IN_A_ROW:
            return None
        return (f"the scheduler refused the last {self._refused_in_a_row} phases, each for good "
                f"(the last: {self._last_refusal}); mend the cause, then resume the run")

    def submitted(self, refusal: str | None) -> None:
        """A submission's outcome: a job taken (None), or why the scheduler refused it for good."""
        self._refused_in_a_row = self._refused_in_a_row + 1 if refusal is not None else 0
        self._last_refusal = refusal or ""

    def halted(self, tree: Tree) -> int | None:
        """The exit code of a search closed by something a person must mend rather than by a
        limit reached (it has stopped, not finished): unreadable records to rebuild, or the
        scheduler refusing every phase; None when it is not."""
        if self.budget.limit_reached(tree) is not None:
            return None
        if self.budget.uncounted(tree):
            return StateError.exit_code
        return SchedulerError.exit_code if self._refused() else None

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
