"""Appendix D's scoring: min-max normalisation and exponential shaping (Eq. 7), Q with the
failure and early-stop penalties (Eq. 8), UCT of a child (Eq. 5) and of the virtual new child
(Eq. 6).

All functions are pure. Visit statistics are derived from node statuses in one bottom-up pass,
so scoring a 10,000-node tree is linear and nothing is stored that could drift.

Choices the paper leaves open (README, "How `llmzero` searches"): a node's own phase counts in
its subtree's visits; an early-stopped phase with a score is both validated and early-stopped;
a failed phase is a failure only, though a score it logged still widens the range; a flat
range normalises to 0.5; pending phases add `virtual_loss` visits with no score (concurrency,
which the paper does not have).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .settings import SearchSettings
from .tree import Node, Status, Tree

# Degenerate range (one scored node, or all equal): no evidence that any node is better or
# worse than another, so every score sits in the middle of the scale.
DEGENERATE_NORMALISED = 0.5


@dataclass(frozen=True)
class ScoreRange:
    low: float
    high: float

    def normalise(self, score: float) -> float:
        """ŝ = (s - s_min) / (s_max - s_min), without dividing by zero on a flat range."""
        if self.high <= self.low:
            return DEGENERATE_NORMALISED
        return (score - self.low) / (self.high - self.low)


def score_range(tree: Tree) -> ScoreRange | None:
    """Min and max ranked validation score; None before any score."""
    scores = [s for n in tree if (s := n.ranked_score) is not None]
    if not scores:
        return None
    return ScoreRange(min(scores), max(scores))


def shape(normalised: float, temperature: float) -> float:
    """f_T(ŝ) = (e^{ŝ/T} - 1) / (e^{1/T} - 1): sharpens differences near the top of the range."""
    return math.expm1(normalised / temperature) / math.expm1(1.0 / temperature)


@dataclass(frozen=True)
class Visits:
    """Visit statistics of a subtree (the node and its unpruned descendants)."""

    total: float = 0.0       # v_total; pending phases add `virtual_loss` each
    validated: int = 0       # v_val: finished with a validation score
    failed: int = 0          # v_fail
    early: int = 0           # v_early: early-stopped by the monitor
    score_sum: float = 0.0   # sum of normalised scores of validated nodes

    def __add__(self, other: "Visits") -> "Visits":
        return Visits(self.total + other.total, self.validated + other.validated,
                      self.failed + other.failed, self.early + other.early,
                      self.score_sum + other.score_sum)

    @property
    def mean_score(self) -> float:
        """s̄: mean normalised score of the validated nodes."""
        return self.score_sum / self.validated if self.validated else 0.0


def own_visits(node: Node, rng: ScoreRange | None, settings: SearchSettings) -> Visits:
    """What one node contributes by its status. A person's cancel says nothing, so it counts nothing."""
    if node.pruned or node.status is Status.CANCELLED:
        return Visits()
    if node.status.pending:
        return Visits(total=settings.virtual_loss)
    if node.status is Status.FAILED:
        return Visits(total=1, failed=1)
    early = 1 if node.status is Status.EARLY_STOPPED else 0
    if node.score is None or rng is None:
        return Visits(total=1, early=early)
    return Visits(total=1, validated=1, early=early, score_sum=rng.normalise(node.score))


def subtree_visits(tree: Tree, settings: SearchSettings) -> dict[int, Visits]:
    """Visits of every node's subtree, computed children-first in one pass."""
    rng = score_range(tree)
    out: dict[int, Visits] = {}
    # A parent is always older (smaller id) than its children, reparented fixes included.
    for node in sorted(tree, key=lambda n: n.id, reverse=True):
        if node.pruned:
            continue
        acc = own_visits(node, rng, settings)
        for child in tree.children(node.id):
            acc = acc + out[child.id]
        out[node.id] = acc
    return out


def q_value(visits: Visits, settings: SearchSettings) -> float:
    """Q = (v_val/v_total)·f_T(s̄) − w_f·max(0, v_fail − o_f)/v_total − w_e·v_early/v_total."""
    if visits.total <= 0:
        return 0.0
    exploit = visits.validated / visits.total * shape(visits.mean_score, settings.temperature)
    fail = settings.fail_penalty * max(0, visits.failed - settings.fail_forgiven) / visits.total
    early = settings.early_penalty * visits.early / visits.total
    return exploit - fail - early


def exploration(parent_visits: float, child_visits: float, c: float) -> float:
    """C·sqrt(ln N(p) / N(c)); zero at N(p) = 1 (ln 1 = 0), infinite for an unvisited child."""
    if child_visits <= 0:
        return math.inf
    if parent_visits <= 1:
        return 0.0
    return c * math.sqrt(math.log(parent_visits) / child_visits)


def uct(q: float, parent_visits: float, child_visits: float, c: float) -> float:
    return q + exploration(parent_visits, child_visits, c)


def fair_visits(parent_visits: float, k: int) -> float:
    """N_fair = N(p) / (k + 1): the virtual new child's share of the parent's visits."""
    return parent_visits / (k + 1)


def prior(node: Node, rng: ScoreRange | None, settings: SearchSettings) -> float:
    """Q_prior(p) = f_T(ŝ_p): a new child is expected to do about as well as its parent."""
    if node.score is None or rng is None:
        return 0.0
    return shape(rng.normalise(node.score), settings.temperature)
