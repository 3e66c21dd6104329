"""Appendix D formulas against values computed by hand."""
import math

import pytest

from llmzero_slurm.search.scoring import (ScoreRange, Visits, exploration, fair_visits, prior,
                                          q_value, score_range, shape, subtree_visits, uct)
from llmzero_slurm.search.settings import SearchSettings
from treebuild import N, S, T

SET = SearchSettings()


def test_shape_at_half_with_paper_temperature():
    # (e^(0.5/0.3) - 1) / (e^(1/0.3) - 1) = 4.294490 / 27.031625 = 0.1588691
    assert shape(0.5, 0.3) == pytest.approx(0.158869, abs=1e-6)
    assert shape(0.0, 0.3) == 0.0
    assert shape(1.0, 0.3) == pytest.approx(1.0)


def test_shape_favours_the_top_at_small_temperature_and_is_linear_at_large():
    assert shape(0.5, 0.3) < 0.5
    assert shape(0.5, 100.0) == pytest.approx(0.5, abs=0.01)


def test_min_max_normalisation():
    rng = ScoreRange(0.2, 0.6)
    assert rng.normalise(0.2) == 0.0
    assert rng.normalise(0.6) == 1.0
    assert rng.normalise(0.5) == pytest.approx(0.75)


def test_degenerate_range_does_not_divide_by_zero():
    rng = ScoreRange(0.4, 0.4)
    assert rng.normalise(0.4) == 0.5
    tree = T(N(0, None, score=0.4))
    assert score_range(tree) == rng
    assert prior(tree[0], rng, SET) == pytest.approx(shape(0.5, 0.3))


def test_no_scores_means_no_range():
    assert score_range(T(N(0, None, S.FAILED))) is None


def test_q_with_failures_within_forgiveness():
    # 3 validated at ŝ=0.5, 2 failed (= o_f, forgiven): Q = 3/5 * f(0.5)
    v = Visits(total=5, validated=3, failed=2, score_sum=1.5)
    assert q_value(v, SET) == pytest.approx(0.6 * 0.158869, abs=1e-6)


def test_q_with_failures_beyond_forgiveness():
    # 4 failed, 2 beyond o_f: Q = 3/7 * f(0.5) - 0.5 * 2/7
    v = Visits(total=7, validated=3, failed=4, score_sum=1.5)
    assert q_value(v, SET) == pytest.approx(3 / 7 * 0.158869 - 1 / 7, abs=1e-6)


def test_q_early_stop_penalty():
    # 2 validated at ŝ=1, one of them early-stopped: Q = 1 - 0.3 * 1/2
    v = Visits(total=2, validated=2, early=1, score_sum=2.0)
    assert q_value(v, SET) == pytest.approx(0.85)


def test_n_fair():
    assert fair_visits(6, 2) == 2.0
    assert fair_visits(1, 0) == 1.0


def test_exploration_is_zero_at_single_parent_visit():
    assert exploration(1, 1, 1.414) == 0.0
    assert uct(0.3, 1, 1, 1.414) == 0.3


def test_exploration_term():
    # C * sqrt(ln 4 / 2)
    assert exploration(4, 2, 1.414) == pytest.approx(1.414 * math.sqrt(math.log(4) / 2))
    assert exploration(4, 0, 1.414) == math.inf


def test_subtree_visits_from_statuses():
    tree = T(N(0, None, score=0.2), N(1, 0, score=0.6), N(2, 0, S.FAILED),
             N(3, 1, S.EARLY_STOPPED, score=0.4), N(4, 1, S.RUNNING), N(5, 0, S.CANCELLED))
    v = subtree_visits(tree, SET)
    assert v[1] == Visits(total=3, validated=2, early=1, score_sum=1.0 + 0.5)
    assert v[0].total == 5 and v[0].validated == 3 and v[0].failed == 1
    assert v[5] == Visits()   # a person's cancel counts nothing


def test_virtual_loss_setting_scales_pending_visits():
    tree = T(N(0, None, score=0.2), N(1, 0, S.QUEUED))
    assert subtree_visits(tree, SearchSettings(virtual_loss=2.0))[0].total == 3.0
    assert subtree_visits(tree, SearchSettings(virtual_loss=0.0))[0].total == 1.0
