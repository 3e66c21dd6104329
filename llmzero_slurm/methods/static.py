"""Static schedules: a list of phases fixed before the search starts.

Two shapes cover every baseline. Independent trials (practitioner, random, grid) are scratch
roots that can all run at once. A chain (guidebook, replay) trains phase i+1 from phase i's last
checkpoint, so it waits for each phase to finish and stops for good when one fails.

The i-th node of the run is the i-th planned phase, and a node past the plan reruns a trial a
person cancelled: methods write nothing, so a restarted controller rebuilds the same plan and
finds its place from the tree alone.
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..search.budget import Budget, planned_steps
from ..search.policy import Action
from ..search.tree import Kind, Node, Status, Tree
from .base import MethodContext, PhasePlan, SearchMethod


@dataclass(frozen=True)
class Planned:
    hparams: dict[str, Any]        # the phase's full configuration
    diagnosis: str                 # why this phase: shown in status views and the report


def describe(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _cut(key: str, node: Node, planned: dict[str, Any]) -> bool:
    """Fewer steps than planned: the sample budget cut the phase to what was left."""
    steps, meant = node.hparams.get(key), planned.get(key)
    return key == "total_training_steps" and isinstance(steps, int) and isinstance(meant, int) \
        and steps < meant


def _differences(node: Node, planned: dict[str, Any]) -> list[str]:
    """The keys in which `node` did not run `planned` as it is (a budget's cut aside)."""
    return sorted(k for k in node.hparams.keys() | planned.keys()
                  if node.hparams.get(k) != planned.get(k) and not _cut(k, node, planned))


def _lengths(planned: list[Planned]) -> list[int]:
    """Each phase's planned steps; 0 where its length is not set in steps."""
    return [planned_steps(phase.hparams) or 0 for phase in planned]


def admitted_steps(planned: list[Planned], budget: Budget) -> list[int]:
    """The steps each planned phase trains under the sample budget, as the controller admits
    them in order (Budget.steps_within): each cut to what is left, and none from the first
    that has no step left. As planned without a sample budget, or when a phase's length is not
    set in steps (charged as it trains, what it takes is not known up front)."""
    meant = _lengths(planned)
    if budget.samples is None or not all(meant):
        return meant
    left, out = budget.samples, []
    for phase in planned:
        took = 0 if 0 in out else budget.steps_within(left, phase.hparams) or 0
        out.append(took)
        left -= took * budget.step_samples(phase.hparams)
    return out


class StaticMethod(SearchMethod):
    """A method whose phases are all known up front; `plan()` lists them in order."""

    def __init__(self, ctx: MethodContext):
        super().__init__(ctx)
        self.phases = self.plan()   # built (and checked) once: bad spaces fail at start-up
        self._resumes_plan = False

    def follows(self, tree: Tree) -> None:
        """Refuse to go on unless the run's nodes ran this plan's first phases. The plan is
        rebuilt at every start, from code as well as from the frozen config: after an upgrade
        (other trainer defaults, default spaces or sampling) or an edited strategy file, its
        later phases would be another schedule's, mixed silently into this run's results."""
        if self._resumes_plan:
            return
        for node, index in self.trials(tree)[0]:
            if not node.hparams:   # an unreadable record
                continue
            planned = self.phases[index].hparams
            keys = _differences(node, planned)
            if keys:
                shown = ", ".join(f"{k}: {node.hparams.get(k)!r} -> {planned.get(k)!r}"
                                  for k in keys[:4]) + (", ..." if len(keys) > 4 else "")
                raise ConfigError("search", f"node {node.id} ran phase {index + 1} of this "
                                  f"{self.name} plan as it was; this llmzero-slurm plans it "
                                  f"otherwise ({shown}) from {self.source()}, so its later "
                                  "phases would belong to another schedule. Resume with the "
                                  "release and files the run started with, or set the values it "
                                  "ran with in the run's experiment.yaml (hparams, search.space); "
                                  "llmzero-status and -report read the run as it is")
        self._resumes_plan = True

    def trials(self, tree: Tree) -> tuple[list[tuple[Node, int]], list[int]]:
        """Which planned phase each node ran, and the phases whose last run a person cancelled
        (no verdict on the configuration), to run again as new nodes, oldest cancel first.

        Nodes follow the plan in creation order, as next_phase counts them: ids may have gaps
        (an id taken for good by a kill inside run_store.add_node). A rerun holds its trial's
        configuration, which tells it from the next planned trial: reruns follow a plan's own
        trials, but a run given a larger budget_iterations plans more trials after them. The
        trial it reruns is the one whose configuration it holds, since a trial may be
        cancelled after a later one's rerun was created."""
        ran: list[tuple[Node, int]] = []
        again: list[int] = []
        fresh = 0
        for node in sorted(tree, key=lambda n: n.id):
            rerun = next((i for i in again if not _differences(node, self.phases[i].hparams)), None)
            if fresh < len(self.phases) and (
                    rerun is None or not _differences(node, self.phases[fresh].hparams)):
                index, fresh = fresh, fresh + 1
            elif again:
                index = again[0] if rerun is None else rerun
                again.remove(index)
            else:
                continue
            ran.append((node, index))
            if node.status is Status.CANCELLED:
                again.append(index)
        return ran, again

    @staticmethod
    def samples(planned: list[Planned], budget: Budget) -> int:
        """What the planned phases train in full."""
        return sum(steps * budget.step_samples(phase.hparams)
                   for steps, phase in zip(_lengths(planned), planned))

    def source(self) -> str:
        """Where the plan comes from, for messages."""
        return "the run's experiment.yaml and this release's defaults"

    def first_hparams(self) -> dict[str, Any] | None:
        return self.phases[0].hparams if self.phases else None

    @abstractmethod
    def plan(self) -> list[Planned]:
        """Every phase, in creation order."""

    @property
    def backend(self) -> str:
        return self.ctx.config.backend


class IndependentTrials(StaticMethod):
    """Scratch roots only; a failed trial does not hold up the others, and a cancelled one runs
    again once the plan's own trials are created."""

    def next_phase(self, tree: Tree) -> PhasePlan | None:
        left = self.left(tree)
        if not left:
            return None
        self.follows(tree)
        phase = self.phases[left[0]]
        return PhasePlan(Action(Kind.SCRATCH, None), dict(phase.hparams), diagnosis=phase.diagnosis)

    def exhausted(self, tree: Tree) -> bool:
        return not self.left(tree)

    def notes(self) -> list[str]:
        """A sample budget that cuts trials short: trials of other lengths, and fewer of them,
        than the plan's, which a comparison at equal samples must know."""
        budget = Budget.of(self.ctx.config.search, self.ctx.backend.defaults())
        steps = admitted_steps(self.phases, budget)
        planned = _lengths(self.phases)
        if steps == planned:
            return []
        full, not_run = sum(a == p for a, p in zip(steps, planned)), steps.count(0)
        said = [*([f"{full} {'runs' if full == 1 else 'run'} in full"] if full else []),
                *(f"trial {i + 1} is cut to {a} of its {p} steps"
                  for i, (a, p) in enumerate(zip(steps, planned)) if 0 < a < p),
                *([f"{not_run} {'does' if not_run == 1 else 'do'} not run"] if not_run else [])]
        return [f"search.budget_samples ({budget.samples:,}) is short of the {len(steps)} "
                f"trials planned: {', '.join(said)}; {self.samples(self.phases, budget):,} runs "
                "them all in full"]

    def left(self, tree: Tree) -> list[int]:
        """The planned trials still to create, in the order they run."""
        ran, again = self.trials(tree)
        created = {index for _, index in ran}
        return [*(i for i in range(len(self.phases)) if i not in created), *again]


class Chain(StaticMethod):
    """One strategy of several phases, each an evolve child of the one before."""

    def check_fits(self, where: str, planned: list[Planned]) -> None:
        """Refuse a schedule (from `where`) the budget would cut short: its last phases cut
        or never run are another schedule than the one named, and compared under its name."""
        search = self.ctx.config.search
        if len(planned) > search.budget_iterations:
            raise ConfigError("search.budget_iterations", f"is {search.budget_iterations}, and "
                              f"{where} has {len(planned)} phases: the {self.name} would stop "
                              f"after phase {search.budget_iterations}; raise it to "
                              f"{len(planned)}")
        if search.budget_samples is None:
            return
        budget = Budget.of(search, self.ctx.backend.defaults())
        cut = next((i for i, (took, meant) in enumerate(zip(admitted_steps(planned, budget),
                                                            _lengths(planned))) if took < meant), None)
        if cut is not None:
            raise ConfigError("search.budget_samples", f"is {search.budget_samples:,}, and "
                              f"{where} trains {self.samples(planned, budget):,} samples (phase "
                              f"{cut + 1} would be cut): raise it or leave it unset")

    def next_phase(self, tree: Tree) -> PhasePlan | None:
        if not len(tree):
            first = self.phases[0]
            return PhasePlan(Action(Kind.SCRATCH, None), dict(first.hparams),
                             diagnosis=first.diagnosis)
        last = _last(tree)
        if self.exhausted(tree) or last.status.pending:
            return None
        self.follows(tree)
        phase = self.phases[len(tree)]
        return PhasePlan(Action(Kind.EVOLVE, last.id), dict(phase.hparams),
                         resume_step=max(last.results.checkpoints), diagnosis=phase.diagnosis)

    def exhausted(self, tree: Tree) -> bool:
        if len(tree) >= len(self.phases):
            return True
        if not len(tree):
            return False
        last = _last(tree)
        return last.status.finished and not _can_continue(last)


def _last(tree: Tree) -> Node:
    return tree[max(tree.nodes)]


def _can_continue(node: Node) -> bool:
    """A chain goes on from a phase that trained to its end (or was stopped early on purpose)
    and left a checkpoint; a failure or a person's cancel ends it."""
    return node.status in (Status.COMPLETED, Status.EARLY_STOPPED) and bool(node.results.checkpoints)
