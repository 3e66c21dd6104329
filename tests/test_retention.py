"""search.keep_checkpoints: which of a finished phase's checkpoints the search can still use."""
from llmzero_slurm.search.retention import removable
from llmzero_slurm.search.tree import Kind, Node, Results, Resume, Status, Tree

STEPS = [10, 20, 30, 40, 50]


def phase(node_id: int, status: Status = Status.COMPLETED, best_step: int | None = 34,
          resume: Resume | None = None, parent: int | None = None,
          kind: Kind = Kind.SCRATCH) -> Node:
    results = Results(best_val=0.5 if best_step is not None else None, best_val_step=best_step,
                      last_step=50, checkpoints=list(STEPS))
    return Node(node_id, parent, kind, {}, resume=resume, status=status, results=results)


def test_keeps_the_last_the_one_before_the_best_step_and_every_resume_point():
    tree = Tree([phase(0), phase(1, resume=Resume(0, 10), parent=0, kind=Kind.EVOLVE,
                                 status=Status.RUNNING)])
    # 50: the last; 30: the latest at or before the best validation step (34); 10: node 1's start.
    assert removable(tree) == {0: [20, 40]}


def test_a_debug_child_keeps_what_its_failed_parent_resumed_from():
    # A debug fix of node 1 starts where node 1 did (node 0, step 20), not from node 1.
    tree = Tree([phase(0), phase(1, Status.FAILED, resume=Resume(0, 20), parent=0,
                               kind=Kind.EVOLVE),
                 phase(2, Status.PROPOSED, resume=Resume(0, 20), parent=1, kind=Kind.DEBUG)])
    assert removable(tree)[0] == [10, 40]
    # The failed phase keeps its own last checkpoint, which its fix may go on from.
    assert removable(tree)[1] == [10, 20, 40]


def test_only_finished_phases_lose_checkpoints():
    for status in (Status.PROPOSED, Status.SUBMITTING, Status.QUEUED, Status.RUNNING):
        assert removable(Tree([phase(0, status)])) == {}
    for status in (Status.COMPLETED, Status.EARLY_STOPPED, Status.FAILED, Status.CANCELLED):
        assert removable(Tree([phase(0, status)])) == {0: [10, 20, 40]}


def test_without_a_score_or_before_any_checkpoint_only_the_last_is_kept():
    assert removable(Tree([phase(0, best_step=None)])) == {0: [10, 20, 30, 40]}
    assert removable(Tree([phase(0, best_step=5)])) == {0: [10, 20, 30, 40]}
    assert removable(Tree([phase(0, best_step=50)])) == {0: [10, 20, 30, 40]}


def test_nothing_left_to_remove_is_no_entry():
    node = phase(0)
    node.results.checkpoints = [30, 50]
    assert removable(Tree([node])) == {}
