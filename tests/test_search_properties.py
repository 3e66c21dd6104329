"""Invariants of selection on random trees and over long simulated searches."""
import math
import random
from typing import Callable

from hypothesis import given, settings, strategies as st

from llmzero_slurm.search.policy import (Action, Analysis, best_path, make_child, reparent_fix,
                                         scratch_ratio, select)
from llmzero_slurm.search.settings import SearchSettings
from llmzero_slurm.search.tree import Kind, Node, Results, Resume, Status, Tree

SET = SearchSettings()
STATUSES = list(Status)


@st.composite
def random_trees(draw) -> Tree:
    """Arbitrary (but well-formed) trees: parents older than children, debug under failures."""
    size = draw(st.integers(1, 40))
    nodes: list[Node] = []
    for i in range(size):
        parent = None if i == 0 else draw(st.integers(0, i - 1))
        status = draw(st.sampled_from(STATUSES))
        if parent is None:
            kind, resume, depth = Kind.SCRATCH, None, 0
        elif nodes[parent].status is Status.FAILED and draw(st.booleans()):
            kind, resume, depth = Kind.DEBUG, nodes[parent].resume, nodes[parent].debug_depth + 1
        elif draw(st.integers(0, 4)) == 0:
            kind, resume, depth = Kind.SCRATCH, None, 0
        else:
            kind, resume, depth = Kind.EVOLVE, Resume(parent, 10), 0
        scored = status in (Status.COMPLETED, Status.EARLY_STOPPED) and draw(st.booleans())
        score = draw(st.floats(0, 1)) if scored else None
        nodes.append(Node(id=i, parent=parent, kind=kind, hparams={}, resume=resume,
                          status=status, results=Results(best_val=score, checkpoints=[10]),
                          debug_depth=depth, injected=kind is Kind.SCRATCH and parent is not None))
    return Tree(nodes)


@settings(max_examples=300, deadline=None)
@given(random_trees(), st.integers(1, 3), st.integers(1, 3))
def test_selection_never_picks_a_terminal_or_full_node(tree, k_evolve, k_debug):
    s = SearchSettings(max_evolve_children=k_evolve, max_debug_children=k_debug, min_scratch_ratio=0)
    action = select(tree, s)
    if action is None:
        return
    if action.parent is None:     # a new root: only when every root was cancelled by a person
        assert action.kind is Kind.SCRATCH
        assert all(r.status is Status.CANCELLED for r in tree.roots())
        return
    parent = tree[action.parent]
    analysis = Analysis.of(tree, s)
    assert not analysis.terminal[parent.id]
    assert not parent.status.pending and parent.status is not Status.CANCELLED
    limit = k_debug if parent.status is Status.FAILED else k_evolve
    assert len(analysis.limit_children(parent)) < limit
    assert (action.kind is Kind.DEBUG) == (parent.status is Status.FAILED)


def simulate(seed: int, iterations: int, s: SearchSettings,
             selected: Callable[[Tree, Action], object] = lambda tree, action: None
             ) -> tuple[Tree, list[bool]]:
    """Run a search where every phase ends at once with a random outcome; `selected` is shown
    each selection with the tree it was made on."""
    rnd = random.Random(seed)
    nodes: dict[int, Node] = {}
    ratio_ok: list[bool] = []
    for i in range(iterations):
        tree = Tree(nodes.values())
        action = select(tree, s)
        if action is None:
            break
        selected(tree, action)
        if action.kind is Kind.EVOLVE:
            ratio_ok.append(scratch_ratio(tree) >= s.min_scratch_ratio)
        step = rnd.choice(tree[action.parent].results.checkpoints) if action.kind is Kind.EVOLVE else None
        child = make_child(tree, action, i, {}, resume_step=step)
        child.status = rnd.choices([Status.COMPLETED, Status.EARLY_STOPPED, Status.FAILED],
                                   [0.6, 0.25, 0.15])[0]
        if child.status is not Status.FAILED:
            child.results = Results(best_val=rnd.random(), checkpoints=[child.start_step + 10])
        nodes[i] = child
        plan = reparent_fix(Tree(nodes.values()), i)
        if plan:
            nodes.update({n.id: n for n in plan.apply(Tree(nodes.values()))})
    return Tree(nodes.values()), ratio_ok


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000))
def test_long_searches_keep_the_scratch_ratio_and_start_strategies_from_scratch(seed):
    tree, ratio_ok = simulate(seed, 80, SET)
    assert all(ratio_ok)  # every evolve happened with n_scratch/n_evolve >= rho_min
    path = best_path(tree)
    assert path and path[0].kind is Kind.SCRATCH and path[0].resume is None
    assert all(b.resume and b.resume.node == a.id for a, b in zip(path, path[1:]))
    assert sum(n.injected for n in tree) >= 1  # long enough for injection to act


def _paper_select(tree: Tree, s: SearchSettings) -> Action | None:
    """Appendix D transcribed on its own, for a serial search: Eq. 7's min-max
    and f_T, Eq. 8's Q over each subtree, Eq. 5-6's UCT, D.3's walk. It shares only the
    branching bookkeeping (`limit_children`, `child_kind`, terminality) with the code."""
    analysis = Analysis.of(tree, s)
    live = [n for n in tree if not n.pruned and n.status is not Status.CANCELLED]
    scores = [n.score for n in live if n.score is not None]
    low, high = (min(scores), max(scores)) if scores else (0.0, 0.0)

    def norm(v: float) -> float:
        return 0.5 if high <= low else (v - low) / (high - low)

    def f(x: float) -> float:
        return (math.exp(x / s.temperature) - 1) / (math.exp(1 / s.temperature) - 1)

    def visits(n: Node) -> tuple[int, int, int, int, float]:
        total = val = fail = early = 0
        norm_sum = 0.0
        for m in tree.subtree(n.id):
            if m.status is Status.CANCELLED:
                continue
            total += 1
            if m.status is Status.FAILED:
                fail += 1
                continue
            early += m.status is Status.EARLY_STOPPED
            if m.score is not None:
                val += 1
                norm_sum += norm(m.score)
        return total, val, fail, early, norm_sum

    def q(n: Node) -> float:
        total, val, fail, early, norm_sum = visits(n)
        mean = norm_sum / val if val else 0.0
        return (val / total * f(mean) - s.fail_penalty * max(0, fail - s.fail_forgiven) / total
                - s.early_penalty * early / total)

    def explore(n_parent: float, n_child: float) -> float:
        return 0.0 if n_parent <= 1 else s.exploration_c * math.sqrt(math.log(n_parent) / n_child)

    # A fixed root's fix is a second root: the roots compete by UCT alone, under N = the sum
    # of their visits, with no virtual child (the paper has one root).
    roots = [r for r in tree.roots() if not analysis.terminal[r.id]]
    n_roots = sum(visits(r)[0] for r in tree.roots())
    top = max(((q(r) + explore(n_roots, visits(r)[0]), -r.id, r) for r in roots),
              key=lambda t: t[:2], default=None)
    if top is None:
        return None
    node = top[2]
    while True:
        n_p = visits(node)[0]
        kids = [c for c in tree.children(node.id) if not analysis.terminal[c.id]]
        ucts = [(q(c) + explore(n_p, visits(c)[0]), -c.id, c) for c in kids]
        best = max(ucts, key=lambda t: t[:2], default=None)
        k = len(analysis.limit_children(node))
        prior = f(norm(node.score)) if node.score is not None else 0.0
        kind = analysis.child_kind(node)
        if kind is not None and (best is None or prior + explore(n_p, n_p / (k + 1)) > best[0]):
            return Action(kind, node.id)
        if best is None:
            return None
        node = best[2]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000))
def test_serial_selection_is_appendix_d_as_written(seed):
    """Outside injection, every selection of a one-phase-at-a-time search is the one a plain
    transcription of Eq. 5-8 and D.3 makes (README: "How `llmzero` searches")."""
    compared = []

    def as_the_paper_selects(tree: Tree, action: Action) -> None:
        if len(tree) and not action.injected:
            assert action == _paper_select(tree, SET), f"selection {len(tree)}"
            compared.append(action)
    simulate(seed, 30, SET, as_the_paper_selects)
    assert compared
