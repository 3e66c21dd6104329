"""search.keep_checkpoints: which of a finished phase's checkpoints the search can still use,
and their removal from a verl phase's folders (its real runs are in test_search_e2e.py)."""
from llmzero_slurm.backends.verl import VerlBackend
from llmzero_slurm.config import parse_config
from llmzero_slurm.controller.retention import Retention
from llmzero_slurm.search.retention import removable
from llmzero_slurm.search.tree import Kind, Node, Results, Resume, Status, Tree
from llmzero_slurm.store.run_store import RunStore
from verl_stubs import verl_checkpoint

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


def test_verl_folders_go_by_their_phase_numbers_and_the_tracker_and_exports_stay(tmp_path):
    """verl numbers a phase's checkpoints from 0 (verl_step_offset holds its first global
    step); its tracker names the last, which stays, as do the adapters exported for children."""
    cfg = parse_config({"name": "t", "search": {"keep_checkpoints": "useful"}})
    store = RunStore.create(tmp_path / "run", cfg)
    backend, said = VerlBackend(), []
    for node_id, resume, best in ((0, None, 20), (1, Resume(0, 20), 44)):
        store.add_node(lambda i, resume=resume, best=best: Node(
            i, resume and resume.node, Kind.EVOLVE if resume else Kind.SCRATCH, {},
            resume=resume, status=Status.COMPLETED, results=Results(0.5, best)))
        files = store.node_dir(node_id)
        backend.record_start(files.path, resume.step if resume else 0)
        for local in (10, 20, 30):
            verl_checkpoint(files.path, local, None)
        store.update_node(node_id, lambda n, files=files: setattr(
            n.results, "checkpoints", backend.checkpoint_steps(files)))
    export = store.node_dir(0).path / "export" / "global_step_20" / "lora_adapter"
    export.mkdir(parents=True)
    # A record that cannot be read may resume from any checkpoint: nothing goes meanwhile.
    damaged = store.nodes_dir / "0002"
    damaged.mkdir()
    (damaged / "node.json").write_text("{")
    assert Retention(store, backend, said.append).apply(store.load_tree()) and not said
    assert backend.checkpoint_steps(store.node_dir(0)) == [10, 20, 30]
    (damaged / "node.json").unlink()
    damaged.rmdir()
    tree = Retention(store, backend, said.append).apply(store.load_tree())
    # Node 0: 20 is its best step and node 1's start, 30 its last; node 1 (steps 30, 40, 50):
    # 40 is the latest before its best step 44, 50 its last.
    assert [tree[0].results.checkpoints, tree[1].results.checkpoints] == [[20, 30], [40, 50]]
    assert [backend.checkpoint_steps(store.node_dir(i)) for i in (0, 1)] == [[20, 30], [40, 50]]
    assert sorted(p.name for p in store.node_dir(1).ckpt.iterdir()) == [
        "global_step_20", "global_step_30", "latest_checkpointed_iteration.txt"]
    assert export.is_dir() and tree[1].removed_checkpoints.steps == [30]
    assert said == ["node 0: removed the checkpoints of steps 10 (search.keep_checkpoints: "
                    "useful; kept 20, 30)", "node 1: removed the checkpoints of steps 30 "
                    "(search.keep_checkpoints: useful; kept 40, 50)"]
    # A second pass finds nothing more to remove.
    assert Retention(store, backend, said.append).apply(tree) is tree and len(said) == 2
