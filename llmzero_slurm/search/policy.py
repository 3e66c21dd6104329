"""Where the search goes next: UCT selection with the virtual new child (Appendix D.3),
terminal pruning and debug-chain reparenting (§3.2), forced from-scratch injection (§3.3) and
the best strategy path (Algorithm 1, line 21).

Every function takes a Tree snapshot and returns a decision; the controller applies it to the
store. Pending phases are never expanded (they have no checkpoint or verdict yet) but count
against their parent's branching limit and add a virtual loss, so parallel selections spread out.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from .scoring import (ScoreRange, Visits, fair_visits, prior, q_value, score_range,
                      subtree_visits, uct)
from .settings import SearchSettings
from .tree import Kind, Node, Resume, Status, Tree


@dataclass(frozen=True)
class Action:
    """Create a child of `parent` (None: a root from the base model) of the given kind."""

    kind: Kind
    parent: int | None
    injected: bool = False   # forced scratch: hide checkpoints from the proposer


@dataclass(frozen=True)
class Reparent:
    """A successful debug fix moves beside the oldest failed node of its chain; that node
    becomes terminal (it has been fixed) and the rest of its debug subtree is pruned."""

    node: int
    new_parent: int | None
    kind: Kind            # the fixed node's kind: the fix now plays its role
    fixed_from: int
    prune: tuple[int, ...]

    def apply(self, tree: Tree) -> list[Node]:
        """Changed copies of the affected nodes, in the order to write them: the fix last, since
        once it names the failure it fixes the move is not planned again."""
        fix = dataclasses.replace(tree[self.node], parent=self.new_parent, kind=self.kind,
                                  fixed_from=self.fixed_from)
        origin = dataclasses.replace(tree[self.fixed_from], terminal=True)
        pruned = [dataclasses.replace(tree[i], pruned=True) for i in self.prune]
        return [*pruned, origin, fix]


@dataclass
class Analysis:
    """Everything selection derives from a snapshot, computed once per decision."""

    tree: Tree
    settings: SearchSettings
    rng: ScoreRange | None = None
    visits: dict[int, Visits] = field(default_factory=dict)
    terminal: dict[int, bool] = field(default_factory=dict)

    @classmethod
    def of(cls, tree: Tree, settings: SearchSettings) -> "Analysis":
        a = cls(tree, settings, score_range(tree), subtree_visits(tree, settings))
        for node in sorted(tree, key=lambda n: n.id, reverse=True):
            if not node.pruned:
                a.terminal[node.id] = a._is_terminal(node)
        return a

    def limit_children(self, node: Node) -> list[Node]:
        """Children charged to the node's branching limit (its kind decides which): the k of
        N_fair and of k < k_max (Appendix D.3). A child a person cancelled is not: it gave no
        verdict, so its slot is free again. Nor is an injected scratch child (§3.3) or a
        reparented fix (the failure it replaces already is). A terminal child stays charged:
        were it not, a node whose children all ended could always expand again and never
        become terminal (§3.2)."""
        kids = [k for k in self.tree.children(node.id) if k.status is not Status.CANCELLED]
        if node.status is Status.FAILED:
            return [k for k in kids if k.kind is Kind.DEBUG and k.fixed_from is None]
        return [k for k in kids if not k.injected and k.fixed_from is None and k.kind is not Kind.DEBUG]

    def child_kind(self, node: Node) -> Kind | None:
        """The kind of child the node could get now, or None when it can have no more."""
        s = self.settings
        if node.pruned or node.terminal or node.closed is not None:
            return None
        k = len(self.limit_children(node))
        if node.status in (Status.COMPLETED, Status.EARLY_STOPPED):
            return Kind.EVOLVE if k < s.max_evolve_children else None
        if node.status is Status.FAILED:
            # One fix at a time: the next attempt should learn from the last one's outcome.
            busy = any(c.status.pending for c in self.limit_children(node))
            if not busy and k < s.max_debug_children and node.debug_depth < s.max_debug_depth:
                return Kind.DEBUG
        return None

    def _is_terminal(self, node: Node) -> bool:
        """Cannot grow and every child is terminal (pending children are still alive)."""
        if node.pruned or node.terminal:
            return True
        if node.status.pending or self.child_kind(node) is not None:
            return False
        return all(self.terminal[c.id] for c in self.tree.children(node.id))

    def n(self, node_id: int | None) -> float:
        if node_id is None:
            return sum(self.visits[r.id].total for r in self.tree.roots())
        return self.visits[node_id].total

    def child_uct(self, parent: int | None, child: Node) -> float:
        return uct(q_value(self.visits[child.id], self.settings), self.n(parent),
                   self.visits[child.id].total, self.settings.exploration_c)

    def new_child_uct(self, node: Node) -> float:
        k = len(self.limit_children(node))
        return uct(prior(node, self.rng, self.settings), self.n(node.id),
                   fair_visits(self.n(node.id), k), self.settings.exploration_c)


def scratch_ratio(tree: Tree) -> float:
    """n_scratch / n_evolve over unpruned nodes a person did not cancel (infinite before the
    first evolve), §3.3. Nodes count by kind: the root and every scratch child (injected or the
    proposer's choice) are scratch, debug nodes neither, a reparented fix the kind it took
    over, a failed phase its own kind."""
    kinds = [n.kind for n in tree if not n.pruned and n.status is not Status.CANCELLED]
    evolve = kinds.count(Kind.EVOLVE)
    return math.inf if evolve == 0 else kinds.count(Kind.SCRATCH) / evolve


def best_node(tree: Tree) -> Node | None:
    """The node with the highest strategy score (oldest wins ties): validation only, of a
    completed or early-stopped phase (Algorithm 1, line 21); test scores are never read."""
    scored = [(s, -n.id, n) for n in tree if (s := n.strategy_score) is not None]
    return max(scored, key=lambda t: t[:2])[2] if scored else None


def select(tree: Tree, settings: SearchSettings) -> Action | None:
    """The next phase to create, or None when every branch is terminal or waiting on a job."""
    roots = tree.roots()
    # An unreadable root stands in unparented and pruned (no root): that is no empty search.
    if not len(tree) or (roots and all(r.status is Status.CANCELLED for r in roots)):
        return Action(Kind.SCRATCH, None)
    best = best_node(tree)
    # A closed best node takes no more children, an injected one included.
    if best is not None and best.closed is None and scratch_ratio(tree) < settings.min_scratch_ratio:
        return Action(Kind.SCRATCH, best.id, injected=True)
    analysis = Analysis.of(tree, settings)
    return _descend(analysis, None)


def _descend(a: Analysis, node: Node | None) -> Action | None:
    """Try options best-first: the virtual new child competes with each live child's UCT.

    Expansion wins only when it beats every child (ties descend), as in Appendix D.3, step 3.
    If the best branch is blocked by pending phases, the next-best option is tried, so the
    walk is linear overall. The paper runs one phase at a time and never meets a blocked
    branch; with `search.concurrency` 1 phases run one at a time here too.
    """
    parent_id = node.id if node else None
    options: list[tuple[float, int, Node | None]] = []
    new_kind = a.child_kind(node) if node is not None else None
    if node is not None and new_kind is not None:
        options.append((a.new_child_uct(node), 0, None))
    for child in a.tree.children(parent_id):
        if not a.terminal[child.id] and not child.status.pending:
            options.append((a.child_uct(parent_id, child), 1, child))
    options.sort(key=lambda o: (-o[0], -o[1], o[2].id if o[2] else -1))
    for _, _, option in options:
        if option is None:   # only offered with a node that can take a new child
            assert node is not None and new_kind is not None
            return Action(new_kind, node.id)
        found = _descend(a, option)
        if found is not None:
            return found
    return None


def is_terminal(tree: Tree, settings: SearchSettings) -> dict[int, bool]:
    """Terminal flag of every unpruned node (for status views and reports)."""
    return Analysis.of(tree, settings).terminal


def debug_chain_root(tree: Tree, node_id: int) -> Node:
    """The oldest node of a debug chain: the first non-debug ancestor of a debug node."""
    node = tree[node_id]
    while node.kind is Kind.DEBUG and node.fixed_from is None and node.parent is not None:
        node = tree[node.parent]
    return node


def reparent_fix(tree: Tree, fix_id: int) -> Reparent | None:
    """After a debug node succeeds: move it beside the chain's original failure, prune the rest."""
    fix = tree[fix_id]
    if fix.kind is not Kind.DEBUG or fix.fixed_from is not None or fix.parent is None or fix.pruned:
        return None
    if fix.status not in (Status.COMPLETED, Status.EARLY_STOPPED):
        return None
    origin = debug_chain_root(tree, fix.parent)
    if origin.unreadable:   # a stand-in ends every walk (it has no parent): wait for repair
        return None
    # The fix moves with whatever was built on it (a controller settles fixes before it
    # selects, so that is nothing as a rule): only the other attempts are the debug subtree.
    moving = {n.id for n in tree.subtree(fix_id)}
    prune = tuple(n.id for n in tree.subtree(origin.id) if n.id != origin.id and n.id not in moving)
    return Reparent(fix_id, origin.parent, origin.kind, origin.id, prune)


def make_child(tree: Tree, action: Action, node_id: int, hparams: dict[str, Any],
               resume_step: int | None = None, diagnosis: str = "", now: float = 0.0) -> Node:
    """The record of a new phase for `action`.

    An evolve child resumes from its parent's checkpoint at `resume_step`; a debug child
    starts where the failed parent started, or at `resume_step` from the failed parent's own
    checkpoint (a phase cut off by its time limit goes on rather than starting over); a
    scratch child starts from the base model.
    """
    resume = None
    depth = 0
    if action.kind is Kind.EVOLVE and resume_step is None:
        raise ValueError("an evolve child needs a parent and a checkpoint step")
    if action.kind is Kind.DEBUG:
        failed = tree[action.parent]  # type: ignore[index]
        resume = failed.resume
        depth = failed.debug_depth + 1
    if action.kind is not Kind.SCRATCH and resume_step is not None:
        if action.parent is None or resume_step not in tree[action.parent].results.checkpoints:
            raise ValueError(f"node {action.parent} has no checkpoint at step {resume_step}")
        resume = Resume(action.parent, resume_step)
    return Node(id=node_id, parent=action.parent, kind=action.kind, hparams=dict(hparams),
                resume=resume, diagnosis=diagnosis, debug_depth=depth,
                injected=action.injected, created_at=now)


def best_path(tree: Tree) -> list[Node]:
    """The strategy: follow resume links from the best node back to the phase that started
    from the base model, and return it scratch-first."""
    node = best_node(tree)
    path: list[Node] = []
    while node is not None:
        path.append(node)
        node = tree[node.resume.node] if node.resume else None
    return path[::-1]
