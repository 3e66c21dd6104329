"""When the search must stop creating phases: phases, training samples, device-hours, wall time.

Training samples are sampled responses (steps x train_batch_size x rollout_n), the unit in
which methods are compared at equal compute: a finished phase counts the steps it trained
(an early-stopped phase gives back what it did not run), a pending phase the steps it plans,
so concurrent phases cannot overrun the budget between two looks at the tree.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from .settings import SearchSettings
from .tree import Node, Status, Tree


# What a phase's charge is computed from (samples_per_step x planned_steps): a phase without
# one is charged nothing, or cannot be cut to what is left.
COUNTED_KEYS = ("train_batch_size", "rollout_n", "total_training_steps")


def samples_per_step(hparams: Mapping[str, Any]) -> int:
    """Responses sampled per training step (prompts x rollouts)."""
    return int(hparams.get("train_batch_size") or 0) * int(hparams.get("rollout_n") or 1)


def trained_steps(node: Node) -> int:
    last = node.results.last_step
    return max(0, (last if last is not None else node.start_step) - node.start_step)


def planned_steps(hparams: Mapping[str, Any]) -> int | None:
    steps = hparams.get("total_training_steps")
    return int(steps) if steps else None


_CUT = re.compile(r"\[cut to \d+(?: of its (\d+))? steps: what is left of the sample budget\]")


def cut_note(steps: int, planned: int) -> str:
    """What a phase's diagnosis says when the sample budget cut its plan (read back below)."""
    return f"[cut to {steps} of its {planned} steps: what is left of the sample budget]"


def planned_length(node: Node, configured: int | None) -> int | None:
    """The steps `node`'s plan asked for before the sample budget cut it: the length a child
    plans (the budget cuts it again only if it must), not the cut one. `configured` (the
    experiment's) stands in where an earlier release recorded a cut without the plan's."""
    cuts = _CUT.findall(node.diagnosis)
    if not cuts:
        return planned_steps(node.hparams)
    return int(cuts[-1]) if cuts[-1] else configured or planned_steps(node.hparams)


def node_samples(node: Node, defaults: Mapping[str, Any], planned: bool = False) -> int:
    """Samples `node` used, or, with `planned` (or while it is pending), the samples it was
    set to use: what a budget must hold back for it."""
    hp = {**defaults, **node.hparams}
    steps = trained_steps(node)
    if planned or node.status.pending:
        steps = max(steps, planned_steps(hp) or 0)
    return steps * samples_per_step(hp)


@dataclass
class Budget:
    """The search's limits; None means unlimited. `defaults` are the trainer's values for keys
    a phase leaves unset (its batch shape decides how many samples a step takes)."""

    iterations: int
    samples: int | None = None
    gpu_hours: float | None = None
    wall_hours: float | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)

    def samples_committed(self, tree: Tree) -> int:
        return sum(node_samples(n, self.defaults) for n in tree)

    @classmethod
    def of(cls, search: SearchSettings, defaults: Mapping[str, Any],
           started_at: float | None = None) -> "Budget":
        """The run's budget: its search settings, the trainer's defaults, its creation time."""
        return cls(search.budget_iterations, search.budget_samples, search.budget_gpu_hours,
                   search.budget_wall_hours, defaults, time.time() if started_at is None
                   else started_at)

    @staticmethod
    def phases(tree: Tree) -> int:
        """Phases created; one a person cancelled gives no verdict and is not counted, but one
        the search itself cancelled as pruned (a fix made it redundant) is."""
        return sum(n.status is not Status.CANCELLED or n.pruned for n in tree)

    @staticmethod
    def gpu_hours_used(tree: Tree) -> float:
        return sum(n.results.gpu_hours for n in tree)

    def left(self, tree: Tree) -> list[str]:
        """What is left of each limit in phases, samples and device-hours the run set (what
        a proposer plans a phase's length within), e.g. '4 of 16 phases'."""
        said = [f"{max(0, self.iterations - self.phases(tree))} of {self.iterations} phases"]
        if self.samples is not None:
            said.append(f"{max(0, self.samples - self.samples_committed(tree)):,} of "
                        f"{self.samples:,} training samples")
        if self.gpu_hours is not None:
            said.append(f"{max(0.0, self.gpu_hours - self.gpu_hours_used(tree)):.2f} of "
                        f"{self.gpu_hours:g} device-hours")
        return said

    def spent(self, tree: Tree) -> str | None:
        """Why no phase may be created now, or None while phases may still be created."""
        return self.limit_reached(tree) or self.unknown(tree)

    def limit_reached(self, tree: Tree) -> str | None:
        """Which limit is used up, or None."""
        created = self.phases(tree)
        if created >= self.iterations:
            cancelled = len(tree) - created
            return (f"{created} of {self.iterations} phases created"
                    + (f" ({cancelled} cancelled, not counted)" if cancelled else ""))
        if self.samples is not None:
            committed = self.samples_committed(tree)
            if committed >= self.samples:
                return f"{committed:,} of {self.samples:,} training samples used or committed"
        used = self.gpu_hours_used(tree)
        if self.gpu_hours is not None and used >= self.gpu_hours:
            return f"{used:.2f} of {self.gpu_hours} device-hours used"
        age = time.time() - self.started_at
        if self.wall_hours is not None and age >= self.wall_hours * 3600:
            return (f"wall-clock budget of {self.wall_hours} h reached (counted from the run's "
                    f"creation {age / 3600:.1f} h ago, stops included)")
        return None

    def uncounted(self, tree: Tree) -> list[int]:
        """The nodes whose record cannot be read: what they used is unknown (samples,
        device-hours, even whether they count as a phase, as a cancelled one does not), and
        counting it as nothing could overspend the budget. So is what the method would build
        on: the branch below an unreadable node, or whether its trial is one to run again."""
        return sorted(n.id for n in tree if n.unreadable)

    def unknown(self, tree: Tree) -> str | None:
        """Why what is left cannot be known (records to rebuild first), or None."""
        ids = self.uncounted(tree)
        if not ids:
            return None
        which = (f"node {ids[0]}'s record cannot be read, so what it used" if len(ids) == 1 else
                 f"the records of nodes {', '.join(map(str, ids))} cannot be read, so what they "
                 "used")
        return (f"{which} of the budget is unknown: no phase is created until "
                f"{'it is' if len(ids) == 1 else 'they are'} rebuilt")

    def fit_steps(self, tree: Tree, hparams: Mapping[str, Any]) -> int | None:
        """The training steps a new phase with `hparams` may take: its planned steps, cut to
        what is left of the sample budget; 0 when not even one step is left; None when the
        phase's length is not set in steps (it is then charged as it trains)."""
        return self.steps_within(self.samples_left(tree), hparams)

    def steps_within(self, left: int | None, hparams: Mapping[str, Any]) -> int | None:
        """fit_steps with `left` samples (None: no sample budget) rather than a tree's; a
        static method's plan is admitted so, phase by phase."""
        steps = planned_steps({**self.defaults, **hparams})
        if left is None or steps is None:
            return steps
        per_step = self.step_samples(hparams)
        return max(0, min(steps, left // per_step if per_step else steps))

    def samples_left(self, tree: Tree) -> int | None:
        return None if self.samples is None else self.samples - self.samples_committed(tree)

    def step_samples(self, hparams: Mapping[str, Any]) -> int:
        """Samples one step of a phase with `hparams` takes (the trainer's batch shape)."""
        return samples_per_step({**self.defaults, **hparams})
