"""Selection, branching limits, terminal pruning, debug reparenting, injection, best path."""
import pytest

from llmzero_slurm.search.policy import (Action, Analysis, best_node, best_path, make_child,
                                         reparent_fix, scratch_ratio, select)
from llmzero_slurm.search.scoring import ScoreRange, score_range
from llmzero_slurm.search.settings import SearchSettings
from llmzero_slurm.search.tree import Kind, Resume, Tree, quarantined
from treebuild import N, S, T

SET = SearchSettings()
DBG = Kind.DEBUG


def test_empty_tree_starts_a_root():
    assert select(T(), SET) == Action(Kind.SCRATCH, None)


def test_single_root_expands():
    assert select(T(N(0, None, score=0.5)), SET) == Action(Kind.EVOLVE, 0)


def test_descends_into_a_child_better_than_its_parent():
    # UCT(new@0) = f(0) + C·sqrt(ln2/1) = 1.177 < UCT(1) = f(1) + 1.177
    tree = T(N(0, None, score=0.2), N(1, 0, score=0.6))
    assert select(tree, SET) == Action(Kind.EVOLVE, 1)


def test_expands_when_the_child_underperforms_its_parent():
    tree = T(N(0, None, score=0.6), N(1, 0, score=0.2))
    assert select(tree, SET) == Action(Kind.EVOLVE, 0)


def test_k_max_forces_descent():
    tree = T(N(0, None, score=0.6), N(1, 0, score=0.2), N(2, 0, score=0.3))
    assert select(tree, SET) == Action(Kind.EVOLVE, 2)
    assert select(tree, SearchSettings(max_evolve_children=3)) == Action(Kind.EVOLVE, 0)


def test_injected_scratch_children_do_not_use_the_branching_limit():
    tree = T(N(0, None, score=0.6), N(1, 0, score=0.2),
             N(2, 0, score=0.1, kind=Kind.SCRATCH, injected=True))
    assert len(Analysis.of(tree, SET).limit_children(tree[0])) == 1
    assert select(tree, SET) == Action(Kind.EVOLVE, 0)


def test_a_cancelled_child_gives_its_branching_slot_back():
    """A person's cancel says nothing about the configuration; a search resumed after
    `llmzero-stop --cancel` ended with "no branch left to grow" at half its budget."""
    tree = T(N(0, None, score=0.6), N(1, 0, score=0.2), N(2, 0, S.CANCELLED))
    assert [k.id for k in Analysis.of(tree, SET).limit_children(tree[0])] == [1]
    assert select(tree, SET) == Action(Kind.EVOLVE, 0)
    failed = T(N(0, None, S.FAILED), N(1, 0, S.CANCELLED, kind=DBG, resume=Resume(0, 10),
                                      debug_depth=1))
    assert select(failed, SearchSettings(max_debug_children=1)) == Action(DBG, 0)


def test_a_phase_a_person_cancelled_is_never_the_best():
    """Audit (report): a lucky early score of a phase cancelled by hand became the headline
    best and the end of strategy.yaml, and widened the range every UCT score is normalised
    by, though a person's cancel is no verdict on the configuration."""
    tree = T(N(0, None, score=0.6), N(1, 0, S.CANCELLED, score=0.8), N(2, 0, score=0.4))
    assert best_node(tree).id == 0
    assert score_range(tree) == ScoreRange(0.4, 0.6)
    assert best_node(T(N(0, None, S.CANCELLED, score=0.8))) is None


def test_a_failed_phase_is_never_the_best_strategy():
    """Review: a phase that validated at 0.9 and then hit its time limit was the best node,
    so the stopper's bar fell back to an ancestor, the proposer was told 0.9, and forced
    scratch children hung under the failed node, which can only be debugged, never evolved."""
    tree = T(N(0, None, score=0.5), N(1, 0, score=0.8), N(2, 1, S.FAILED, score=0.9))
    assert best_node(tree).id == 1
    assert [n.id for n in best_path(tree)] == [0, 1]
    assert score_range(tree) == ScoreRange(0.5, 0.9)   # still a measured checkpoint
    assert best_node(T(N(0, None, S.FAILED, score=0.9))) is None
    chain = [N(0, None, score=0.3)] + [N(i, i - 1, score=0.3 + i / 100) for i in range(1, 6)]
    chain.append(N(6, 5, S.FAILED, score=0.99))
    assert select(T(*chain), SET) == Action(Kind.SCRATCH, 5, injected=True)


def test_a_search_whose_every_root_was_cancelled_starts_a_root_again():
    assert select(T(N(0, None, S.CANCELLED)), SET) == Action(Kind.SCRATCH, None)


def test_an_unreadable_root_is_not_a_search_to_start_again():
    """Review: a root whose record cannot be read stands in unparented and pruned, so the tree
    had no root and every one of none counted as cancelled: a fresh root was started and
    the old tree was left orphaned."""
    assert select(T(quarantined(0, "corrupt JSON")), SET) is None
    tree = T(quarantined(0, "corrupt JSON"), N(1, 0, score=0.5))
    assert select(tree, SET) != Action(Kind.SCRATCH, None)


def test_failed_child_gets_a_debug_child():
    tree = T(N(0, None, score=0.5), N(1, 0, S.FAILED), N(2, 0, S.FAILED))
    assert select(tree, SET) == Action(DBG, 1)


def test_one_debug_attempt_at_a_time():
    r = Resume(0, 10)
    tree = T(N(0, None, score=0.5), N(1, 0, S.FAILED), N(2, 0, S.FAILED),
             N(3, 1, S.RUNNING, kind=DBG, resume=r, debug_depth=1))
    a = Analysis.of(tree, SET)
    assert a.child_kind(tree[1]) is None and not a.terminal[1]
    assert select(tree, SET) == Action(DBG, 2)


def test_debug_depth_and_debug_children_limits():
    deep = T(N(0, None, score=0.5), N(1, 0, S.FAILED, debug_depth=5))
    a = Analysis.of(deep, SET)
    assert a.child_kind(deep[1]) is None and a.terminal[1]
    shallow = T(N(0, None, score=0.5), N(1, 0, S.FAILED, debug_depth=4))
    assert Analysis.of(shallow, SET).child_kind(shallow[1]) is DBG
    r = Resume(0, 10)
    full = T(N(0, None, score=0.5), N(1, 0, S.FAILED),
             *(N(i, 1, S.FAILED, kind=DBG, resume=r, debug_depth=5) for i in (2, 3, 4)))
    a = Analysis.of(full, SET)
    assert a.child_kind(full[1]) is None
    assert a.terminal[1]


def test_terminality_propagates_to_the_root():
    tree = T(N(0, None, score=0.5), N(1, 0, S.FAILED, debug_depth=5),
             N(2, 0, S.FAILED, debug_depth=5))
    assert Analysis.of(tree, SET).terminal == {0: True, 1: True, 2: True}
    assert select(tree, SET) is None


def test_a_pending_child_keeps_its_parent_alive():
    tree = T(N(0, None, score=0.5), N(1, 0, S.FAILED, debug_depth=5), N(2, 0, S.RUNNING))
    assert not Analysis.of(tree, SET).terminal[0]
    assert select(tree, SET) is None  # nothing to do until node 2 finishes


def test_pending_phase_is_never_selected_and_second_selection_branches_elsewhere():
    tree = T(N(0, None, score=0.5), N(1, 0, S.RUNNING))
    assert select(tree, SET) == Action(Kind.EVOLVE, 0)


def test_virtual_loss_steers_parallel_selection_away_from_busy_branches():
    tree = T(N(0, None, score=0.1), N(1, 0, score=0.5), N(2, 0, score=0.5), N(3, 1, S.RUNNING))
    assert select(tree, SET) == Action(Kind.EVOLVE, 2)
    assert select(tree, SearchSettings(virtual_loss=0.0)) == Action(Kind.EVOLVE, 1)


def test_injection_when_scratch_ratio_falls_below_rho_min():
    chain = [N(0, None, score=0.3)] + [N(i, i - 1, score=0.3 + i / 100) for i in range(1, 6)]
    assert scratch_ratio(T(*chain)) == pytest.approx(0.2)
    assert select(T(*chain), SET).injected is False
    chain.append(N(6, 5, score=0.2))
    tree = T(*chain)
    assert scratch_ratio(tree) < 0.2
    assert select(tree, SET) == Action(Kind.SCRATCH, 5, injected=True)  # best node n* = 5


def test_a_cancelled_phase_neither_forces_nor_blocks_an_injection():
    """Review: a person's cancel counts for nothing elsewhere in the search, but the scratch
    ratio counted it: a cancelled scratch child held injections off, and cancelled evolve
    phases forced them."""
    chain = [N(0, None, score=0.3)] + [N(i, i - 1, score=0.3 + i / 100) for i in range(1, 6)]
    assert select(T(*chain, N(6, 5, S.CANCELLED)), SET).injected is False
    below = [*chain, N(6, 5, score=0.2)]
    assert select(T(*below, N(7, 5, S.CANCELLED, kind=Kind.SCRATCH, injected=True)),
                  SET).injected is True


def test_a_closed_node_is_offered_no_new_child_and_uct_goes_on_among_the_rest():
    """A node the proposer found nothing untried to propose from is closed: selection neither
    expands it (as an evolve parent or as the injection's best node) nor ends the search while
    its children can still grow; with every node closed, nothing is left to select."""
    why = "no untried proposal is left within search.space"
    open_tree = T(N(0, None, score=0.6), N(1, 0, score=0.2))
    assert select(open_tree, SET) == Action(Kind.EVOLVE, 0)
    assert select(T(N(0, None, score=0.6, closed=why), N(1, 0, score=0.2)), SET) \
        == Action(Kind.EVOLVE, 1)
    chain = [N(0, None, score=0.3)] + [N(i, i - 1, score=0.3 + i / 100) for i in range(1, 6)]
    chain += [N(6, 5, score=0.2)]
    assert select(T(*chain), SET) == Action(Kind.SCRATCH, 5, injected=True)
    elsewhere = select(T(*chain[:5], N(5, 4, score=0.35, closed=why), chain[6]), SET)
    assert elsewhere is not None and not elsewhere.injected and elsewhere.parent != 5
    assert select(T(N(0, None, score=0.6, closed=why), N(1, 0, score=0.2, closed=why)),
                  SET) is None


def test_reparenting_after_a_successful_debug():
    r = Resume(0, 10)
    tree = T(N(0, None, score=0.5), N(1, 0, S.FAILED),
             N(2, 1, S.FAILED, kind=DBG, resume=r, debug_depth=1),
             N(3, 2, S.COMPLETED, score=0.7, kind=DBG, resume=r, debug_depth=2),
             N(4, 1, S.FAILED, kind=DBG, resume=r, debug_depth=1))
    plan = reparent_fix(tree, 3)
    assert (plan.new_parent, plan.kind, plan.fixed_from, set(plan.prune)) == (0, Kind.EVOLVE, 1, {2, 4})
    after = Tree({**tree.nodes, **{n.id: n for n in plan.apply(tree)}}.values())
    assert [c.id for c in after.children(0)] == [1, 3]
    assert after[1].terminal and after[2].pruned and after[4].pruned
    assert Analysis.of(after, SET).terminal[1]
    assert [n.id for n in best_path(after)] == [0, 3]
    assert reparent_fix(after, 3) is None  # applied once only


def test_a_fix_moves_with_its_own_subtree():
    """§3.2 reparents the fixed descendant and prunes the debug subtree below the chain's
    failure; phases built on the fix (a fix not yet moved when a selection ran) move with
    it rather than being pruned as debug attempts."""
    r = Resume(0, 10)
    tree = T(N(0, None, score=0.5), N(1, 0, S.FAILED),
             N(2, 1, S.COMPLETED, score=0.7, kind=DBG, resume=r, debug_depth=1),
             N(3, 2, S.RUNNING), N(4, 1, S.FAILED, kind=DBG, resume=r, debug_depth=1))
    plan = reparent_fix(tree, 2)
    assert set(plan.prune) == {4}
    after = Tree({**tree.nodes, **{n.id: n for n in plan.apply(tree)}}.values())
    assert [n.id for n in after.subtree(2)] == [2, 3] and not after[3].pruned


def test_failed_debug_node_is_not_reparented():
    r = Resume(0, 10)
    tree = T(N(0, None, score=0.5), N(1, 0, S.FAILED), N(2, 1, S.FAILED, kind=DBG, resume=r))
    assert reparent_fix(tree, 2) is None


def test_fixed_root_becomes_a_second_root():
    tree = T(N(0, None, S.FAILED), N(1, 0, S.COMPLETED, score=0.4, kind=DBG, debug_depth=1))
    plan = reparent_fix(tree, 1)
    assert plan.new_parent is None and plan.kind is Kind.SCRATCH
    after = Tree({**tree.nodes, **{n.id: n for n in plan.apply(tree)}}.values())
    assert [r.id for r in after.roots()] == [0, 1]
    assert select(after, SET) == Action(Kind.EVOLVE, 1)


def test_best_path_follows_resume_links_to_a_scratch_phase():
    tree = T(N(0, None, score=0.3), N(1, 0, score=0.4), N(2, 1, score=0.6),
             N(3, 2, score=0.9, kind=Kind.SCRATCH, injected=True), N(4, 3, score=0.95))
    assert [n.id for n in best_path(tree)] == [3, 4]
    assert best_path(T()) == []


def test_make_child_sets_resume_and_depth():
    tree = T(N(0, None, score=0.5), N(1, 0, S.FAILED, debug_depth=1))
    evolve = make_child(tree, Action(Kind.EVOLVE, 0), 2, {"lr": 1e-3}, resume_step=20)
    assert evolve.resume == Resume(0, 20) and evolve.start_step == 20
    debug = make_child(tree, Action(DBG, 1), 3, {})
    assert debug.resume == tree[1].resume and debug.debug_depth == 2
    with pytest.raises(ValueError, match="no checkpoint at step 15"):
        make_child(tree, Action(Kind.EVOLVE, 0), 4, {}, resume_step=15)
