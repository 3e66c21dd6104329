"""What a search has spent, against its budget, what early stopping gave back, and what it
gained over the base model: the figures benchmarks/search_quality.py compares methods by, for
any run (llmzero-status, the controller's last lines, the report).

A phase's samples are counted as the budget counts them (budget.py): the steps it trained.
Early stopping's saving is measured against the same phases run to their planned ends, so it
says how much of the tree's planned compute the stopper did not spend.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Mapping

from ..elapsed import duration
from .budget import Budget, node_samples, trained_steps
from .tree import Status, Tree


@dataclass(frozen=True)
class Usage:
    trained: int            # samples trained: the phases that ended, and the running ones so far
    saved: int              # planned but never trained samples of early-stopped phases
    committed: int          # what the budget holds: trained, plus the rest of pending plans
    early_stopped: int      # phases the stopper ended
    gpu_hours: float
    wall_s: float           # from the run's creation to its last finished phase (or now)
    budget: Budget
    running: int = 0        # of `trained`: what the running phases have logged so far
    phases: int = 0         # created, as budget_iterations counts them (Budget.phases)
    cancelled: int = 0      # cancelled by a person: not counted
    no_stopper: str | None = None   # why the run has no early stopper (its method, a setting)

    @property
    def planned(self) -> int:
        """The samples trained had every early-stopped phase run to its planned end."""
        return self.trained + self.saved

    @property
    def saved_share(self) -> float | None:
        """Early stopping's saving as a share of the planned samples; None before any plan."""
        return self.saved / self.planned if self.planned else None

    def lines(self) -> list[str]:
        """Samples against the budget and the stopper's saving; device-hours and wall time;
        phases created against budget_iterations (the limit every run sets)."""
        b, n = self.budget, self.early_stopped
        saved = (f"early stopping saved {self.saved:,} of {self.planned:,} planned "
                 f"({self.saved_share:.0%}, {n} phase{'s' * (n != 1)})" if n and self.planned
                 else f"no early stopping: {self.no_stopper}" if self.no_stopper
                 else "early stopping saved none")
        planned = (f" ({self.committed:,} with the running phases' plans)"
                   if self.committed > self.trained else "")
        running = f" ({self.running:,} so far in running phases)" if self.running else ""
        return [f"training samples: {self.trained:,} trained{running}{_of(b.samples)}{planned}; "
                f"{saved}",
                f"device-hours {self.gpu_hours:.2f}{_of(b.gpu_hours)}; wall time "
                f"{duration(self.wall_s, hours=True)}{_of(b.wall_hours, ' h')} since the run was created",
                f"phases: {self.phases} created of {b.iterations:,}"
                + (f" ({self.cancelled} cancelled, not counted)" if self.cancelled else "")]


def _of(limit: float | None, unit: str = "") -> str:
    return f" of {limit:,}{unit}" if limit is not None else ""


def gain_line(split: str, base: float | None, best: float | None) -> list[str]:
    """e.g. ['gain: validation 0.527 -> 0.775 (+0.248, +47% over the base)']; none while
    either score is unknown."""
    if base is None or best is None:
        return []
    relative = f", {(best - base) / base:+.0%} over the base" if base > 0 else ""
    return [f"gain: {split} {base:.3f} -> {best:.3f} ({best - base:+.3f}{relative})"]


def usage(tree: Tree, budget: Budget, now: float | None = None,
          logged: Mapping[int, int] | None = None) -> Usage:
    """`logged`: the last step the metrics log holds of each phase whose record does not have
    its steps yet (it has them only once a controller records its end); of those, the pending
    ones count as running."""
    defaults = budget.defaults
    logged = logged or {}
    so_far = {n.id: max(trained_steps(n), logged[n.id] - n.start_step)
              * budget.step_samples(n.hparams) for n in tree if n.id in logged}
    stopped = [n for n in tree if n.status is Status.EARLY_STOPPED]
    ends = [n.finished_at for n in tree if n.finished_at is not None]
    now = time.time() if now is None else now
    end = now if any(n.status.pending for n in tree) or not ends else max(ends)
    return Usage(trained=sum(so_far.get(n.id, trained_steps(n) * budget.step_samples(n.hparams))
                             for n in tree),
                 saved=sum(node_samples(n, defaults, planned=True)
                           - so_far.get(n.id, node_samples(n, defaults)) for n in stopped),
                 committed=budget.samples_committed(tree), early_stopped=len(stopped),
                 gpu_hours=sum(n.results.gpu_hours for n in tree),
                 wall_s=max(0.0, end - budget.started_at), budget=budget,
                 running=sum(v for i, v in so_far.items() if tree.nodes[i].status.pending),
                 phases=budget.phases(tree), cancelled=len(tree) - budget.phases(tree))
