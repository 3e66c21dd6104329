"""A run's budget as its config sets it, and what it has spent and gained, read from its
directory: one reading for the controller's last lines, llmzero-status and the report."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .backends import get_backend
from .methods.registry import no_stopper
from .metrics import base_scores
from .search.budget import Budget
from .search.policy import best_node
from .search.tree import Node, Results, Status, Tree
from .search.usage import Usage, gain_line, usage
from .store.run_store import RunStore


def run_budget(store: RunStore) -> Budget:
    """The trainer's defaults fill the batch shape a phase leaves unset; the wall clock counts
    from the run's creation, across restarts."""
    return Budget.of(store.config.search, get_backend(store.config.backend).defaults(),
                     store.created_at)


@dataclass(frozen=True)
class Spent:
    usage: Usage
    base_val: float | None      # the base model's scores, at step 0 of the oldest phase
    base_test: float | None     # that started from it (None when it did not validate there)
    best: Node | None           # the headline best (search/policy.py's best_node)
    logged: dict[int, int]      # the last step each running phase's metrics log holds

    def lines(self, test: bool = False) -> list[str]:
        """usage's lines and the gain of the best validation score over the base's; with
        `test`, of the test score at that step as well (reports only: no agent sees it)."""
        best = self.best.results if self.best else Results()
        return [*self.usage.lines(), *gain_line("validation", self.base_val, best.best_val),
                *(gain_line("test", self.base_test, best.test_at_best) if test else [])]


def spent(store: RunStore, tree: Tree, budget: Budget | None = None,
          shown: Tree | None = None) -> Spent:
    """`shown`: llmzero-status's copy of `tree` with each phase whose job ended since a
    controller recorded it in the status its scheduler says; it is counted in `tree`'s place,
    the steps such a phase logged as trained, no longer as running."""
    base_val, base_test = base_scores(tree, lambda i: store.node_dir(i).metrics_start())
    logged = {n.id: last for n in tree if n.status is Status.RUNNING
              and (last := store.node_dir(n.id).metrics_reader().last_step()) is not None}
    used = replace(usage(shown or tree, budget or run_budget(store), logged=logged),
                   no_stopper=no_stopper(store.config.search))
    return Spent(used, base_val, base_test, best_node(tree), logged)
