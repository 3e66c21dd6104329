"""The search budget in training samples: what a finished, an early-stopped and a pending phase
are charged, how much of a new phase still fits, and when the controller may ask for one."""
from __future__ import annotations

import io

from llmzero_slurm.controller.admission import Admission
from llmzero_slurm.controller.progress import Progress
from llmzero_slurm.methods.base import PhasePlan
from llmzero_slurm.search.budget import Budget, node_samples
from llmzero_slurm.search.policy import Action
from llmzero_slurm.search.tree import Kind, Node, Resume, Results, Status, Tree
from llmzero_slurm.search.usage import gain_line, usage

DEFAULTS = {"train_batch_size": 32, "rollout_n": 8}


def node(i: int, status: Status, last_step: int | None, steps: int = 20,
         resume: Resume | None = None, finished_at: float | None = None, **hp) -> Node:
    return Node(i, resume.node if resume else None, Kind.EVOLVE if resume else Kind.SCRATCH,
                {"total_training_steps": steps, **hp}, resume=resume, status=status,
                results=Results(last_step=last_step), finished_at=finished_at)


def test_phases_are_charged_what_they_trained_or_still_plan():
    done = node(0, Status.COMPLETED, 20)
    stopped = node(1, Status.EARLY_STOPPED, 25, resume=Resume(0, 20))   # 5 of 20 steps
    running = node(2, Status.RUNNING, 3, rollout_n=4)                   # planned 20 steps
    assert node_samples(done, DEFAULTS) == 20 * 256
    assert node_samples(stopped, DEFAULTS) == 5 * 256
    assert node_samples(stopped, DEFAULTS, planned=True) == 20 * 256
    assert node_samples(running, DEFAULTS) == 20 * 128


def test_a_new_phase_gets_what_is_left_and_nothing_once_it_is_spent():
    budget = Budget(iterations=100, samples=30 * 256, defaults=DEFAULTS)
    tree = Tree([node(0, Status.COMPLETED, 20)])
    assert budget.spent(tree) is None
    assert budget.fit_steps(tree, {"total_training_steps": 20}) == 10
    assert budget.fit_steps(tree, {"total_training_steps": 20, "train_batch_size": 64}) == 5
    assert budget.fit_steps(tree, {}) is None          # length in epochs: charged as it trains
    tree = Tree([*tree, node(1, Status.QUEUED, None, steps=10)])
    assert budget.fit_steps(tree, {"total_training_steps": 20}) == 0
    assert "7,680 of 7,680 training samples" in (budget.spent(tree) or "")


def test_without_a_sample_budget_phases_keep_their_length():
    budget = Budget(iterations=2, defaults=DEFAULTS)
    tree = Tree([node(0, Status.COMPLETED, 20)])
    assert budget.fit_steps(tree, {"total_training_steps": 500}) == 500
    assert budget.spent(tree) is None
    assert "2 of 2 phases" in (budget.spent(Tree([*tree, node(1, Status.QUEUED, None)])) or "")


def test_cancelled_phases_do_not_use_up_the_phase_count():
    """A person's cancel gives no verdict, so the search may create a phase in its place."""
    budget = Budget(iterations=2, defaults=DEFAULTS)
    tree = Tree([node(0, Status.COMPLETED, 20), node(1, Status.CANCELLED, 3, resume=Resume(0, 20))])
    assert budget.spent(tree) is None
    tree = Tree([*tree, node(2, Status.QUEUED, None, resume=Resume(0, 20))])
    assert budget.spent(tree) == "2 of 2 phases created (1 cancelled, not counted)"


def test_no_room_for_a_step_closes_the_budget_until_an_early_stop_gives_samples_back():
    """Asking the method again (an LLM call) with the same samples left would only repeat it."""
    out = io.StringIO()
    admission = Admission(Budget(iterations=100, samples=20 * 256 + 100, defaults=DEFAULTS),
                          Progress(out))
    running = Tree([node(0, Status.RUNNING, 2)])
    plan = PhasePlan(Action(Kind.EVOLVE, 0), {"total_training_steps": 20}, 10)
    assert admission.closed(running) is None
    assert admission.admit(running, plan) is None
    assert "needs 256 training samples a step and the budget has 100 left" in out.getvalue()
    assert admission.closed(running) == "less than a step of training samples is left (100)"
    stopped = Tree([node(0, Status.EARLY_STOPPED, 15)])      # 5 of its 20 steps given back
    assert admission.closed(stopped) is None
    admitted = admission.admit(stopped, plan)
    assert admitted is not None and admitted.hparams["total_training_steps"] == 5


def test_usage_counts_what_early_stopping_gave_back_against_the_planned_ends():
    """What search_quality.py reports per search (samples, the stopper's saving), for any run:
    a stopped phase's unrun steps are the saving; a running phase's unrun plan is no saving
    yet, but the budget holds it."""
    tree = Tree([node(0, Status.COMPLETED, 20, finished_at=100.0),
                 node(1, Status.EARLY_STOPPED, 25, resume=Resume(0, 20), finished_at=160.0),
                 node(2, Status.EARLY_STOPPED, 28, steps=10, resume=Resume(0, 20),
                      finished_at=130.0),
                 node(3, Status.RUNNING, 3, rollout_n=4)])
    budget = Budget(16, samples=100_000, defaults=DEFAULTS, started_at=40.0)
    use = usage(tree, budget, now=400.0)
    assert use.trained == (20 + 5 + 8) * 256 + 3 * 128
    assert use.saved == (15 + 2) * 256 and use.early_stopped == 2
    assert use.planned == use.trained + use.saved
    assert use.committed == (20 + 5 + 8) * 256 + 20 * 128
    assert use.wall_s == 360.0                       # a phase still runs: until now
    done = usage(Tree([n for n in tree if n.id != 3]), budget, now=400.0)
    assert done.wall_s == 120.0                      # all finished: until the last end
    assert done.saved_share == (17 * 256) / ((20 + 5 + 8 + 17) * 256)
    lines = [*done.lines(), *gain_line("validation", 0.4, 0.6)]
    assert lines[0] == ("training samples: 8,448 trained of 100,000; early stopping saved "
                        "4,352 of 12,800 planned (34%, 2 phases)")
    assert lines[1] == "device-hours 0.00; wall time 0:02:00 since the run was created"
    assert lines[3] == "gain: validation 0.400 -> 0.600 (+0.200, +50% over the base)"
    assert gain_line("test", None, 0.6) == []
    assert usage(Tree([tree.nodes[0]]), Budget(16), now=0.0).lines() == [
        "training samples: 0 trained; early stopping saved none",
        "device-hours 0.00; wall time 0:00:00 since the run was created",
        "phases: 1 created of 16"]


def test_a_record_that_cannot_be_read_closes_every_budget():
    """A damaged node.json stood in the tree as a placeholder charged nothing, so the samples
    and device-hours of that phase were free again until it was repaired. Review: under a
    budget of phases alone the search went on blind: with the root unreadable llmzero started
    a fresh root, and a trial that may have been cancelled may be one to run again."""
    from llmzero_slurm.search.tree import quarantined
    tree = Tree([node(0, Status.COMPLETED, 20), quarantined(1, "corrupt JSON")])
    for budget in (Budget(iterations=100, samples=100 * 256, defaults=DEFAULTS),
                   Budget(iterations=100, gpu_hours=10.0, defaults=DEFAULTS),
                   Budget(iterations=100, defaults=DEFAULTS)):
        assert budget.spent(tree) == ("node 1's record cannot be read, so what it used of the "
                                      "budget is unknown: no phase is created until it is rebuilt")


def test_usage_says_the_phases_created_against_budget_iterations():
    """llmzero-status, the report and the controller's last lines said what a search spent
    of its sample, device-hour and wall-time budgets, but never of budget_iterations: a run
    stopped at 3 phases did not say whether it had 3 or 13 left."""
    tree = Tree([node(0, Status.COMPLETED, 20), node(1, Status.CANCELLED, 5),
                 node(2, Status.RUNNING, 3, resume=Resume(0, 20))])
    lines = usage(tree, Budget(16, defaults=DEFAULTS), now=0.0).lines()
    assert lines[2] == "phases: 2 created of 16 (1 cancelled, not counted)"
    assert usage(Tree([tree.nodes[0]]), Budget(4), now=0.0).lines()[2] == \
        "phases: 1 created of 4"


def test_a_wall_clock_budget_reached_says_it_counts_from_the_runs_creation():
    """Walkthrough: budget_wall_hours raised in a run's experiment.yaml after a long stop
    ended the resume at once with 'wall-clock budget of 2.0 h reached', though the search had
    run for minutes: the clock counts from the run's creation, stops included, unsaid."""
    import time
    budget = Budget(10, None, None, 2.0, {}, started_at=time.time() - 3.5 * 3600)
    said = budget.spent(Tree([]))
    assert said is not None and said.startswith("wall-clock budget of 2.0 h reached")
    assert "counted from the run's creation 3.5 h ago, stops included" in said, said
