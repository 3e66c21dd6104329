"""The run directory: atomic records, clear errors on bad files, locks under real concurrency."""
import dataclasses
import errno
import hashlib
import json
import re
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
import typing

import pytest

import llmzero_slurm
from llmzero_slurm.config import ExperimentConfig, parse_config
from llmzero_slurm.paths import ROOT
from llmzero_slurm.errors import ConfigError, LockTimeout, StateError, StorageError
from llmzero_slurm.search.policy import Action, best_node, make_child
from llmzero_slurm.search.tree import Kind, Node, Status, Tree
from llmzero_slurm.store.atomic import read_json, write_json
from llmzero_slurm.store.locks import SoftLock
from llmzero_slurm.store.run_store import RunStore

from conftest import flock_held


def new_store(tmp_path, lock="flock") -> RunStore:
    cfg = parse_config({"name": "t", "hparams": {"lr": 1e-3}, "state": {"lock": lock}})
    return RunStore.create(tmp_path / "run", cfg)


def add_root(store: RunStore):
    return store.add_node(lambda i: make_child(Tree([]), Action(Kind.SCRATCH, None), i, {"lr": 1e-3}))


def test_a_filesystem_without_flock_is_named_with_the_setting_that_works_there(tmp_path,
                                                                               monkeypatch):
    """Lustre mounted without -o flock: filelock 4 turned the default lock into its own soft
    lock, which never breaks a marker a killed holder left on another host (every later
    command timed out for good), and older filelock raised NotImplementedError, a traceback."""
    import fcntl

    def no_flock(fd, op):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    monkeypatch.setattr(fcntl, "flock", no_flock)
    with pytest.raises(StateError, match=r"tree.lock: cannot be locked: this filesystem has no "
                                         r"flock \(Function not implemented\); create the run "
                                         r"with state: \{lock: soft\}"):
        new_store(tmp_path)
    monkeypatch.undo()
    assert len(new_store(tmp_path, "soft").load_tree()) == 0    # where the first try began


def test_create_open_and_round_trip(tmp_path):
    store = new_store(tmp_path)
    root = add_root(store)
    root.status = Status.COMPLETED
    root.results.best_val = 0.4
    root.submission.token = "tok-1"
    store.write_node(root)
    again = RunStore.open(store.root)
    assert again.config.hparams == {"lr": 1e-3}
    assert again.read_node(0) == root
    data = json.loads(again.node_path(0).read_text())
    assert data["schema_version"] == 1 and data["status"] == "completed"
    assert [n.id for n in again.load_tree()] == [0]


def test_a_record_written_before_nodes_could_be_closed_reads_as_open(tmp_path):
    """`closed` (why a node takes no more children) came later: a record without it is open,
    and a closed one keeps its reason through a write and a read."""
    store = new_store(tmp_path)
    root = add_root(store)
    assert "closed" not in read_json(store.node_path(0))
    assert store.read_node(0) == root and root.closed is None
    root.closed = "no untried proposal is left within search.space"
    store.write_node(root)
    assert RunStore.open(store.root).read_node(0).closed == root.closed


def test_an_open_nodes_record_has_only_the_fields_releases_before_closed_read(tmp_path):
    """`closed` came within schema_version 1, and a release before it refuses a field it
    lacks: a controller of this release resuming an older one's run wrote `"closed": null` in
    every record, so that release (a colleague's, or a downgrade) left each new phase out of
    the search as unreadable. An open node's record, and its copy, hold only the old fields."""
    store = new_store(tmp_path)
    root = add_root(store)
    before_closed = {"schema_version", "id", "parent", "kind", "hparams", "resume", "status",
                     "results", "submission", "diagnosis", "debug_depth", "injected",
                     "fixed_from", "terminal", "pruned", "created_at", "submitted_at",
                     "started_at", "finished_at"}
    for path in (store.node_path(0), store.node_dir(0).record_copy):
        assert set(read_json(path)) == before_closed
    root.closed = "nothing untried"
    store.write_node(root)
    assert read_json(store.node_path(0))["closed"] == "nothing untried"


# The frozen config's keys and node.json's fields each release writes (sha256 of the sorted
# list that `_written_keys` makes): 0.2.0's as that release first shipped them.
RELEASE_KEYS = {"0.2.0": "d53d04fe56804b06", "0.3.0": "9ea80b2c1fb8abfa", "0.4.0": "2c7e81859522b447"}


def _written_keys(cls, where):
    """The dotted field names of the record class `cls`, nested records followed."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        inner = [a for a in typing.get_args(hints[f.name]) if a is not type(None)] \
            if isinstance(hints[f.name], types.UnionType) else [hints[f.name]]
        if len(inner) == 1 and dataclasses.is_dataclass(inner[0]):
            yield from _written_keys(inner[0], f"{where}{f.name}.")
        elif f.name != "source":
            yield where + f.name


def test_a_release_that_changes_the_keys_a_run_holds_has_a_version_of_its_own():
    """A release refuses a config key or record field it lacks, and says which release to
    use from meta.json's created_by: keys added while the version stayed 0.2.0 made a newer
    run's experiment.yaml refused by an older 0.2.0 as 'edited since the run started' (its
    own release created it), or with 'resume with llmzero-slurm 0.2.0', the release
    refusing it. A change to these keys needs a new __version__, recorded above."""
    keys = sorted(_written_keys(ExperimentConfig, "experiment.yaml:")) \
        + sorted(_written_keys(Node, "node.json:"))
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]
    assert RELEASE_KEYS.get(llmzero_slurm.__version__) == digest, \
        f"{digest}: {', '.join(keys)}"
    assert list(RELEASE_KEYS.values()).count(digest) == 1


def test_creating_over_an_existing_run_is_refused(tmp_path):
    store = new_store(tmp_path)
    with pytest.raises(StateError, match="already holds a run"):
        RunStore.create(store.root, store.config)


def test_a_run_dir_that_is_a_file_or_cannot_be_made_is_named(tmp_path):
    cfg = parse_config({"name": "t"})
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(ConfigError, match=r"'--run-dir': .*afile is a file, not a folder"):
        RunStore.create(tmp_path / "afile", cfg)
    with pytest.raises(StateError, match=r"afile/run: cannot be created as a run directory \(Not a directory\)"):
        RunStore.create(tmp_path / "afile" / "run", cfg)
    assert (tmp_path / "afile").read_text() == "mine"


def test_creating_in_a_folder_that_is_not_a_run_is_refused_and_touches_nothing(tmp_path):
    """The frozen config used to overwrite the user's own experiment.yaml in that folder."""
    cfg = parse_config({"name": "t"})
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "experiment.yaml").write_text("name: t  # my comments\n")
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"mine is not a run directory and not empty "
                                          r"\(it holds experiment.yaml, notes.txt\)"):
        RunStore.create(mine, cfg)
    assert sorted(p.name for p in mine.iterdir()) == ["experiment.yaml", "notes.txt"]
    assert (mine / "experiment.yaml").read_text() == "name: t  # my comments\n"


def test_a_run_inside_another_run_is_refused_naming_it(tmp_path):
    """Walkthrough, a second seed of one experiment: `--run-dir runs/cpu-addition/seed2` made
    a run inside the first one's folder, which `rm -rf runs/cpu-addition` (a fresh search) or
    a tar of that run would take with it."""
    outer = new_store(tmp_path)
    for inner in (outer.root / "seed2", outer.root / "nodes" / "0000" / "x"):
        with pytest.raises(ConfigError, match=rf"'--run-dir': {re.escape(str(inner))} is inside "
                                              rf"the run directory {re.escape(str(outer.root))}"
                                              rf" \(run 't'\).*outside it"):
            RunStore.create(inner, outer.config)
        assert not inner.exists()
    assert RunStore.create(tmp_path / "run-seed2", outer.config).root.is_dir()


def test_a_run_is_made_where_only_llmzero_has_written_before(tmp_path):
    """An empty folder, the cluster checks' folder, and a create stopped before meta.json."""
    from llmzero_slurm.store.new_run import CHECK_DIR
    cfg = parse_config({"name": "t", "hparams": {"lr": 1e-3}})
    (tmp_path / "empty").mkdir()
    (tmp_path / "checked" / CHECK_DIR).mkdir(parents=True)
    half = tmp_path / "half"
    (half / "nodes").mkdir(parents=True)
    (half / "tree.lock").touch()
    (half / "experiment.yaml").write_text("name: t\n")
    (half / ".meta.json.x1.tmp").write_text("{")
    for root in ("empty", "checked", "half"):
        RunStore.create(tmp_path / root, cfg)
        assert RunStore.open(tmp_path / root).config.hparams == {"lr": 1e-3}
    assert (tmp_path / "checked" / CHECK_DIR).is_dir()


def test_of_two_creates_of_one_new_run_the_second_is_refused_and_changes_nothing(
        tmp_path, monkeypatch):
    """Review: two `RunStore.create` on one new folder both succeeded, the second overwriting
    the first's experiment.yaml and meta.json under its feet: the folder was found free before
    the lock was taken. Now it is checked again under the lock, and the second create is
    refused as one over an existing run, the first's frozen config kept."""
    import llmzero_slurm.store.new_run as new_run
    mine, theirs = (parse_config({"name": "t", "hparams": {"lr": lr}}) for lr in (1e-3, 5e-6))
    real, raced = new_run.foreign_files, []

    def the_other_create_wins(root):   # after this create found the folder free
        found = real(root)
        if not raced:
            raced.append(None)
            raced[0] = RunStore.create(root, theirs)
        return found
    monkeypatch.setattr(new_run, "foreign_files", the_other_create_wins)
    with pytest.raises(StateError, match="already holds a run"):
        RunStore.create(tmp_path / "run", mine)
    assert raced[0].config.hparams == {"lr": 5e-6}
    assert RunStore.open(tmp_path / "run").config.hparams == {"lr": 5e-6}


def test_ids_are_allocated_in_order_and_dirs_are_zero_padded(tmp_path):
    store = new_store(tmp_path)
    ids = [add_root(store).id for _ in range(3)]
    assert ids == [0, 1, 2]
    assert store.node_path(2).parent.name == "0002"


def test_a_failed_write_between_record_and_counter_never_reuses_an_id(tmp_path, monkeypatch):
    """Issue 14.1: a kill or ENOSPC after one of the two writes of add_node."""
    from llmzero_slurm.store import run_store

    store = new_store(tmp_path)
    add_root(store)
    real = run_store.write_json

    def full_disk_on_meta(path, data):
        if path.name == "meta.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    monkeypatch.setattr(run_store, "write_json", full_disk_on_meta)
    with pytest.raises(OSError):
        add_root(store)
    left = store.node_ids()   # a record written before the failure may have been submitted
    monkeypatch.undo()
    assert add_root(store).id not in left


def test_a_stale_counter_never_hands_out_an_id_with_a_folder(tmp_path):
    """meta.json behind the node folders (a kill on an older release, a restored backup)."""
    store = new_store(tmp_path)
    add_root(store), add_root(store)
    write_json(store.root / "meta.json", {**read_json(store.root / "meta.json"), "next_id": 1})
    (store.nodes_dir / "0002").mkdir()   # a folder whose record was never written
    assert add_root(store).id == 3
    assert [n.id for n in store.load_tree()] == [0, 1, 3]


def test_corrupt_node_file_is_named(tmp_path):
    store = new_store(tmp_path)
    add_root(store)
    store.node_path(0).write_text('{"schema_version": 1, "id": 0,')
    with pytest.raises(StateError, match=r"0000/node.json: corrupt JSON"):
        store.read_node(0)
    # The tree still loads: the record stands in as a quarantined placeholder, named.
    [node] = store.load_tree()
    assert node.pruned and node.terminal and "corrupt JSON" in node.diagnosis
    assert "0000/node.json: corrupt JSON" in store.corrupt[0]


def repair(run, *nodes: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / "bin" / "llmzero-repair"), str(run), *nodes],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LLMZERO_PYTHON": sys.executable})


def test_llmzero_repair_rebuilds_a_damaged_record_from_its_copy(tmp_path):
    """Issue 14.5: a corrupt node.json is quarantined, and a command puts it back from what its
    folder holds: the copy written with every record write. The damaged file is kept."""
    store = new_store(tmp_path)
    add_root(store)
    store.update_node(0, lambda n: (setattr(n, "status", Status.COMPLETED),
                                    setattr(n.results, "best_val", 0.61)))
    add_root(store)
    good = store.node_path(0).read_text()
    store.node_path(0).write_text(good[:40])                 # torn by something outside
    store.node_path(1).write_text("{}")                      # valid JSON, not a record
    assert repair(store.root, "2").returncode != 0           # no such node: named, not rebuilt
    done = repair(store.root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "node 0: rebuilt from node.json.bak (scratch, completed)" in done.stdout
    assert "node 1: rebuilt" in done.stdout
    tree = store.load_tree()
    assert not store.corrupt and tree[0].results.best_val == 0.61 and not tree[0].pruned
    assert store.node_path(0).read_text() == good
    [damaged] = store.node_dir(0).path.glob("node.json.damaged-*")
    assert damaged.read_text() == good[:40]
    again = repair(store.root)
    assert again.returncode == 0 and "nothing to rebuild" in again.stdout


def test_a_full_disk_between_a_new_nodes_two_writes_leaves_a_record_that_reads(tmp_path,
                                                                               monkeypatch):
    """The copy was written first: a disk full after it left a copy without a record, a node
    the search must stop for until a person rebuilds it. A new node's record comes first, so
    what is left reads as it is, and its copy follows with the next write."""
    import llmzero_slurm.store.run_store as run_store
    store = new_store(tmp_path)
    writes = []

    def full_after_one(path, data):     # of the node's two files
        if path.name.startswith("node.json"):
            if writes:
                raise StorageError(path, "no space left on the device")
            writes.append(path)
        write_json(path, data)
    monkeypatch.setattr(run_store, "write_json", full_after_one)
    with pytest.raises(StorageError):
        add_root(store)
    monkeypatch.undo()
    assert [n.id for n in store.load_tree()] == [0] and not store.corrupt
    store.update_node(0, lambda n: None)
    assert store.node_dir(0).record_copy.read_text() == store.node_path(0).read_text()


def test_a_node_whose_record_is_gone_but_its_copy_is_there_is_found_by_status_and_repair(
        tmp_path):
    """A node folder holding node.json.bak but no node.json (a partial copy of the run, a
    slip of rm; before its record came first, a full disk after a new node's copy) was rebuilt only when its
    id was named, `llmzero-repair RUN N`: a plain repair said every record read fine, and
    status said nothing of the node. Both now find it; a folder with neither file (an id taken,
    nothing written) is no node and is left alone."""
    store = new_store(tmp_path)
    add_root(store), add_root(store)
    store.node_path(1).unlink()
    (store.nodes_dir / "0002").mkdir()
    shown = subprocess.run([str(ROOT / "bin" / "llmzero-status"), str(store.root)],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "LLMZERO_PYTHON": sys.executable})
    assert shown.returncode == 0, shown.stderr
    assert f"warning: node 1 is left out of the search: {store.node_path(1)}: missing, but its " \
           "copy node.json.bak is there" in shown.stdout
    assert f"llmzero-repair {store.root} rebuilds unreadable records from their copies" in shown.stdout
    assert "node 2" not in shown.stdout
    done = repair(store.root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "node 1: rebuilt from node.json.bak (scratch, proposed)" in done.stdout
    assert [n.id for n in store.load_tree()] == [0, 1] and not store.corrupt


def test_llmzero_repair_rebuilds_a_meta_json_emptied_by_a_crash(tmp_path):
    """Every command opens a run through meta.json: emptied by a crash outside us, status,
    report and resume all stopped on it and repair did too, though the node folders hold
    what it said. Repair rebuilds it (the next id past the last folder, the run's start) and
    the run goes on; a newer release's meta.json is left alone."""
    store = new_store(tmp_path)
    add_root(store), add_root(store)
    (store.nodes_dir / "0002").mkdir()                 # an id taken, its record never written
    before = read_json(store.root / "meta.json")
    (store.root / "meta.json").write_text("")
    status = subprocess.run([str(ROOT / "bin" / "llmzero-status"), str(store.root)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "LLMZERO_PYTHON": sys.executable})
    assert status.returncode == 3
    assert f"meta.json: corrupt JSON (line 1, column 1): Expecting value; llmzero-repair " \
           f"{store.root} rebuilds it" in status.stderr
    done = repair(store.root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "meta.json: corrupt JSON (line 1, column 1): Expecting value; rebuilt from the node " \
           "folders (next node id 3)" in done.stdout
    meta = read_json(store.root / "meta.json")
    assert meta["next_id"] == 3 and abs(meta["created_at"] - before["created_at"]) < 1
    [damaged] = store.root.glob("meta.json.damaged-*")
    assert damaged.read_text() == ""
    assert add_root(RunStore.open(store.root)).id == 3
    (store.root / "meta.json").write_text('{"schema_version": 99, "next_id": 0}')
    newer = repair(store.root)
    assert newer.returncode == 3 and "schema_version 99 is from a newer" in newer.stderr
    assert read_json(store.root / "meta.json")["schema_version"] == 99


def test_llmzero_repair_puts_back_a_frozen_config_emptied_by_a_crash(tmp_path):
    """The frozen experiment.yaml had no copy: emptied by a crash outside us, every command
    stopped on 'config key <file>: ... is empty' (exit 2, as if the user's config were wrong)
    and nothing could restore it. It is written with a copy, and repair puts it back."""
    store = new_store(tmp_path)
    add_root(store)
    frozen = store.root / "experiment.yaml"
    good = frozen.read_text()
    frozen.write_text("")
    status = subprocess.run([str(ROOT / "bin" / "llmzero-status"), str(store.root)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "LLMZERO_PYTHON": sys.executable})
    assert status.returncode == 3 and "the run's frozen config cannot be read" in status.stderr \
        and f"llmzero-repair {store.root} puts it back from its copy" in status.stderr
    done = repair(store.root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "experiment.yaml: config key '<file>': " in done.stdout
    assert "put back from experiment.yaml.bak" in done.stdout
    assert frozen.read_text() == good and RunStore.open(store.root).config.hparams == {"lr": 1e-3}
    [damaged] = store.root.glob("experiment.yaml.damaged-*")
    assert damaged.read_text() == ""


def test_a_repair_that_meets_a_full_disk_leaves_the_damaged_record_named(tmp_path, monkeypatch):
    """llmzero-repair moved a damaged node.json aside, then wrote the rebuilt one: a full disk
    (or a kill) between the two left the node no record at all, so it vanished from status,
    from the search (its job unwatched, its samples uncounted) and from the next repair's
    list, and its children were quarantined for naming no such node. The damaged record now
    stays in place, named, until the rebuilt one replaces it; a later repair rebuilds it."""
    store = new_store(tmp_path)
    add_root(store), add_root(store)
    store.update_node(1, lambda n: setattr(n, "parent", 0))     # a child of node 0
    store.node_path(0).write_text("{")
    monkeypatch.setenv("LLMZERO_FAULT", "enospc:node.json.bak")
    full = repair(store.root)
    assert full.returncode == 3 and "No space left on device" in full.stdout
    store.load_tree()
    assert sorted(store.corrupt) == [0]           # named and left out, its child not
    meta = store.root / "meta.json"
    meta.write_text("")
    monkeypatch.setenv("LLMZERO_FAULT", "enospc:meta.json")
    assert repair(store.root).returncode == 3
    assert meta.exists() and meta.read_text() == ""
    monkeypatch.delenv("LLMZERO_FAULT")
    done = repair(store.root)
    assert done.returncode == 0 and "node 0: rebuilt" in done.stdout, done.stdout + done.stderr
    assert [n.id for n in store.load_tree()] == [0, 1] and not store.corrupt


def test_a_record_whose_copy_is_damaged_too_stays_quarantined(tmp_path):
    store = new_store(tmp_path)
    add_root(store)
    store.node_path(0).write_text("{")
    store.node_dir(0).record_copy.write_text('{"schema_version": 1, "id": 7}')
    done = repair(store.root, "0")
    assert done.returncode == 3
    assert re.search(r"node 0: cannot be rebuilt, left out of the search: .*0000/node.json: "
                     r"corrupt JSON.*; and its copy: .*node.json.bak", done.stdout)
    assert store.node_path(0).read_text() == "{"              # nothing touched
    [node] = store.load_tree()
    assert node.pruned and 0 in store.corrupt


def test_a_record_that_is_not_utf8_is_quarantined_and_rebuilt(tmp_path):
    """A binary or Latin-1 node.json is as damaged as a torn one: set aside, named, rebuilt."""
    store = new_store(tmp_path)
    add_root(store), add_root(store)
    good = store.node_path(1).read_text()
    store.node_path(0).write_bytes(b"\xff\xfe")
    store.node_path(1).write_bytes(good.replace('"kind"', '"k\xe9nd"').encode("latin-1"))
    with pytest.raises(StateError, match=r"0000/node.json: corrupt JSON: not UTF-8 text"):
        store.read_node(0)
    assert [n.pruned for n in store.load_tree()] == [True, True]
    assert "not UTF-8" in store.corrupt[0] and "not UTF-8" in store.corrupt[1]
    done = repair(store.root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "node 0: rebuilt" in done.stdout and "node 1: rebuilt" in done.stdout
    assert not [n for n in store.load_tree() if n.pruned] and store.node_path(1).read_text() == good


def test_a_meta_json_that_is_not_utf8_is_named(tmp_path):
    store = new_store(tmp_path)
    (store.root / "meta.json").write_bytes(b"\xff\xfe")
    with pytest.raises(StateError, match=r"meta.json: corrupt JSON: not UTF-8 text"):
        RunStore.open(store.root)
    status = subprocess.run([str(ROOT / "bin" / "llmzero-status"), str(store.root)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "LLMZERO_PYTHON": sys.executable})
    assert status.returncode == 3 and "Traceback" not in status.stderr
    assert "meta.json: corrupt JSON: not UTF-8 text" in status.stderr


@pytest.mark.parametrize("node_id, change, why", [
    (1, {"parent": 42}, "parent 42 is no such node in this run"),
    (1, {"parent": 1}, "parent 1 is the node itself"),
    (0, {"parent": 1}, "parent 1 is a later node (a cycle)"),       # 0 <-> 1
    (1, {"resume": {"node": 7, "step": 10}}, "resume.node 7 is no such node"),
    (1, {"results": {"best_val": "high"}}, "results.best_val: expected a finite number, got 'high'"),
    (1, {"results": {"checkpoints": [10, None]}}, "results.checkpoints[1]: expected an integer"),
    (1, {"hparams": [1]}, "hparams: expected an object, got [1]"),
    (1, {"id": "1"}, "id: expected an integer, got '1'"),
    (1, {"status": None}, "status: None is not one of proposed"),
    (1, {"submission": "x"}, "submission: expected an object"),
])
def test_a_record_with_wrong_values_is_quarantined_and_rebuilt(tmp_path, node_id, change, why):
    """JSON that parses but names a node that is not there, or holds a value of the wrong
    type, used to crash status, report and the search; repair said every record read fine."""
    store = new_store(tmp_path)
    add_root(store)
    store.update_node(0, lambda n: (setattr(n, "status", Status.COMPLETED),
                                    setattr(n.results, "best_val", 0.5), n.results.checkpoints.append(10)))
    store.add_node(lambda i: make_child(store.load_tree(), Action(Kind.EVOLVE, 0), i, {"lr": 1e-3}, 10))
    store.update_node(1, lambda n: (setattr(n, "status", Status.COMPLETED),
                                    setattr(n.results, "best_val", 0.6)))
    path = store.node_path(node_id)
    good = path.read_text()
    path.write_text(json.dumps({**json.loads(good), **change}))
    tree = store.load_tree()
    assert list(store.corrupt) == [node_id] and why in store.corrupt[node_id]
    assert tree[node_id].pruned and best_node(tree).id == 1 - node_id   # the rest searches on
    done = repair(store.root)
    assert done.returncode == 0 and f"node {node_id}: rebuilt" in done.stdout, done.stdout
    assert path.read_text() == good and best_node(store.load_tree()).id == 1 and not store.corrupt


@pytest.mark.parametrize("change, why", [
    ({"next_id": None}, "next_id must be a non-negative integer (got None)"),
    ({"next_id": "two"}, "next_id must be a non-negative integer (got 'two')"),
    ({"next_id": -1}, "next_id must be a non-negative integer (got -1)"),
    ({"created_at": "yesterday"}, "created_at must be a time in seconds since 1970 (got 'yesterday')"),
])
def test_wrong_values_in_meta_json_are_named(tmp_path, change, why):
    """They used to surface as KeyError/TypeError when the next node was added, or ValueError
    when a resumed run read its start time."""
    store = new_store(tmp_path)
    meta = store.root / "meta.json"
    write_json(meta, {**read_json(meta), **change})
    for call in (lambda: RunStore.open(store.root), lambda: add_root(store), lambda: store.created_at):
        with pytest.raises(StateError, match=re.escape(f"meta.json: {why}")):
            call()
    done = repair(store.root)     # named, and rebuilt from the (no) node folders
    assert done.returncode == 0 and f"meta.json: {why}; rebuilt from the node folders (next " \
        "node id 0)" in done.stdout and "Traceback" not in done.stderr
    assert store.node_ids() == [] and RunStore.open(store.root).created_at > 0


def test_a_run_made_before_created_at_was_recorded_began_when_its_files_say(tmp_path):
    """Review: a meta.json without created_at (releases before it was recorded) gave the
    current time, so a wall-clock budget began again at every controller start. The run's
    start is now read off its files, as llmzero-repair reads it: the earliest of the frozen
    config's time and its nodes' creation times."""
    store = new_store(tmp_path)
    store.add_node(lambda i: make_child(Tree([]), Action(Kind.SCRATCH, None), i, {"lr": 1e-3},
                                        now=1_000.0))
    meta = store.root / "meta.json"
    write_json(meta, {k: v for k, v in read_json(meta).items()
                      if k not in ("created_at", "created_by")})
    os.utime(store.root / "experiment.yaml", (2_000.0, 2_000.0))
    assert RunStore.open(store.root).created_at == 1_000.0


def test_a_meta_json_without_next_id_is_named(tmp_path):
    store = new_store(tmp_path)
    meta = store.root / "meta.json"
    write_json(meta, {k: v for k, v in read_json(meta).items() if k != "next_id"})
    with pytest.raises(StateError, match=r"meta.json: next_id must be a non-negative integer \(got nothing\)"):
        add_root(store)


def test_unknown_schema_version_is_named(tmp_path):
    store = new_store(tmp_path)
    add_root(store)
    data = json.loads(store.node_path(0).read_text())
    data["schema_version"] = 99
    store.node_path(0).write_text(json.dumps(data))
    with pytest.raises(StateError, match=r"node.json: schema_version 99 is from a newer "
                       r"llmzero-slurm \(this llmzero-slurm \(.*\) reads schema_version 1\); the "
                       r"file is not damaged"):
        store.read_node(0)


def test_malformed_record_is_named(tmp_path):
    store = new_store(tmp_path)
    add_root(store)
    store.node_path(0).write_text(json.dumps({"schema_version": 1, "id": 0, "kind": "weird"}))
    with pytest.raises(StateError, match="not a valid node record"):
        store.read_node(0)


@pytest.mark.parametrize("damage", ["missing", "a file"])
def test_a_missing_or_replaced_nodes_folder_is_named(tmp_path, damage):
    store = new_store(tmp_path)
    add_root(store)
    shutil.rmtree(store.nodes_dir)
    if damage == "a file":
        store.nodes_dir.write_text("x")
    for call in (store.load_tree, lambda: add_root(store)):
        with pytest.raises(StateError, match=r"run/nodes: the run's folder of nodes cannot be listed"):
            call()
    done = repair(store.root)
    assert done.returncode == 3 and "run/nodes: the run's folder" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("lock", ["flock", "soft"])
def test_a_lock_file_replaced_by_a_folder_is_named_at_once(tmp_path, lock):
    store = new_store(tmp_path, lock)
    (store.root / "tree.lock").unlink(missing_ok=True)
    (store.root / "tree.lock").mkdir()
    started = time.monotonic()
    with pytest.raises(StateError, match=r"tree.lock: cannot be locked \(Is a directory\)"):
        add_root(store)
    assert time.monotonic() - started < 5     # not the 120 s lock timeout


def test_write_json_leaves_no_temp_file_and_refuses_nan(tmp_path):
    write_json(tmp_path / "a.json", {"x": 1})
    assert read_json(tmp_path / "a.json") == {"x": 1}
    with pytest.raises(ValueError):
        write_json(tmp_path / "a.json", {"x": float("nan")})
    assert read_json(tmp_path / "a.json") == {"x": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


@pytest.fixture
def group_umask():
    """The umask of a group sharing a run (umask 002), restored after the test."""
    old = os.umask(0o002)
    yield
    os.umask(old)


def test_every_record_takes_the_umask_so_a_group_reads_its_run(tmp_path, group_umask,
                                                               monkeypatch):
    """The atomic writer made each file with tempfile.mkstemp (mode 0600, whatever the umask)
    and renamed it into place: a colleague in the run's group could not read meta.json, so
    llmzero-status, -report, -stop and a resume all failed with Permission denied."""
    from llmzero_slurm.config import AgentConfig
    from llmzero_slurm.controller import llm_key
    store = new_store(tmp_path)
    root = add_root(store)
    store.write_node(root)
    written = [store.root / "meta.json", store.root / "experiment.yaml",
               store.node_path(0), store.node_path(0).with_name("node.json.bak")]
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in written} == \
        {p.name: "0o664" for p in written}
    monkeypatch.setenv("LLMZ_TEST_KEY", "sk-canary-umask")   # a secret stays its owner's alone
    llm_key.hand_over(tmp_path, AgentConfig(backend="anthropic", api_key_env="LLMZ_TEST_KEY"))
    assert (tmp_path / llm_key.KEY_FILE).stat().st_mode & 0o777 == 0o600


def test_a_rewrite_keeps_the_mode_a_user_gave_the_run_but_never_widens_a_secret(tmp_path):
    """Review: every rewrite installed a new file with the umask's mode, so a run a user had
    shared with `chmod -R g+rX` (under umask 077) lost it on each record the controller
    rewrote. A rewrite now keeps the old file's mode, within what the write asks for: a
    secret (0600) stays its owner's even where the folder was opened to the group."""
    old = os.umask(0o077)
    try:
        store = new_store(tmp_path)
        add_root(store)
        secret = store.root / "key.json"
        write_json(secret, {"value": "sk"}, mode=0o600)
        for path in store.root.rglob("*"):
            path.chmod(path.stat().st_mode | 0o050 if path.is_dir() else 0o640)
        store.update_node(0, lambda n: setattr(n, "status", Status.QUEUED))
        write_json(secret, {"value": "sk2"}, mode=0o600)
    finally:
        os.umask(old)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in
             (store.node_path(0), store.node_dir(0).record_copy, secret)}
    assert modes == {"node.json": "0o640", "node.json.bak": "0o640", "key.json": "0o600"}


@pytest.mark.parametrize("refusal", [PermissionError(1, "Operation not permitted"),
                                     OSError(22, "Invalid argument")])
def test_a_filesystem_that_refuses_chmod_or_chown_still_takes_every_write(tmp_path, monkeypatch,
                                                                           refusal):
    """Review: keeping a replaced file's mode and group called fchmod on every rewrite, and
    caught only PermissionError from fchown: on a filesystem that refuses them (ACL-only
    GPFS filesets, NFSv4 id mapping) every node record write became a StorageError and the
    controller stopped. What cannot be kept is left as the filesystem gives it."""
    store = new_store(tmp_path)
    add_root(store)
    refused = []
    for path in (store.node_path(0), store.node_dir(0).record_copy):
        path.chmod(0o604)                 # no umask gives it: a chmod is due
        if os.geteuid() == 0:
            os.chown(path, -1, os.getgid() + 1)   # a chown too, where one may be made

    def refuse(*args: object) -> None:
        refused.append(args)
        raise refusal
    monkeypatch.setattr(os, "fchmod", refuse)
    monkeypatch.setattr(os, "fchown", refuse)
    store.update_node(0, lambda n: setattr(n, "status", Status.QUEUED))
    assert store.load_tree()[0].status is Status.QUEUED and refused


def test_a_rewrite_keeps_the_group_a_user_gave_the_run(tmp_path):
    """Review: a run given to a project group with `chgrp -R` went back to the user's own
    group in every record the controller rewrote. A rewrite now keeps the old file's group
    where the user may set it."""
    store = new_store(tmp_path)
    add_root(store)
    path = store.node_path(0)
    mine = path.stat().st_gid
    other = next((g for g in ([1] if os.geteuid() == 0 else os.getgroups()) if g != mine), None)
    if other is None:
        pytest.skip("this user is in no second group to give the run to")
    os.chown(path, -1, other)
    store.update_node(0, lambda n: setattr(n, "status", Status.QUEUED))
    assert path.stat().st_gid == other


def test_a_full_disk_keeps_the_old_file_and_names_it(tmp_path, monkeypatch):
    """A write that fails for lack of space (here at the n-th write of the file, through the
    same fault point the end-to-end test uses) leaves the previous content and no temp file,
    and says which file and why."""
    path = tmp_path / "node.json"
    write_json(path, {"x": 1})
    monkeypatch.setenv("LLMZERO_FAULT", "enospc:node.json:2")
    write_json(path, {"x": 2})
    with pytest.raises(StorageError, match=r"node\.json: could not be written \(No space left on "
                       r"device.*\); it still holds what it held before") as failure:
        write_json(path, {"x": 3})
    assert failure.value.exit_code == 3 and isinstance(failure.value.__cause__, OSError)
    assert read_json(path) == {"x": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.json"]


def _bump(root: str, n: int) -> None:
    store = RunStore.open(root)
    for _ in range(n):
        store.update_node(0, lambda node: setattr(node.results, "gpu_hours", node.results.gpu_hours + 1))


def _read_forever(path: str, stop, bad, reads) -> None:
    while not stop.is_set():
        try:
            json.loads(open(path).read())
        except ValueError:
            bad.value += 1
        reads.value += 1


@pytest.mark.parametrize("lock", ["flock", "soft"])
def test_concurrent_updates_lose_nothing_and_readers_never_see_torn_json(tmp_path, lock):
    store = new_store(tmp_path, lock)
    add_root(store)
    ctx = mp.get_context("fork")
    stop, bad, reads = ctx.Event(), ctx.Value("i", 0), ctx.Value("i", 0)
    reader = ctx.Process(target=_read_forever, args=(str(store.node_path(0)), stop, bad, reads))
    reader.start()
    writers = [ctx.Process(target=_bump, args=(str(store.root), 150)) for _ in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
        assert w.exitcode == 0
    stop.set()
    reader.join(10)
    assert store.read_node(0).results.gpu_hours == 600
    # the reader read all along (a record missing for a moment ended it: no read counted bad)
    assert reader.exitcode == 0 and reads.value > 0
    assert bad.value == 0


WRITER = """
import sys
from llmzero_slurm.store.run_store import RunStore
store = RunStore.open(sys.argv[1])
i = 0
while True:
    i += 1
    store.update_node(i % 3, lambda n: setattr(n, "diagnosis", "x" * (i % 5000)))
    if i == 1:
        print("writing", flush=True)
"""


def test_writers_killed_mid_stream_leave_every_file_valid(tmp_path):
    """Killed while they write (each has written once: on a loaded machine a fixed sleep could
    end writers still importing, and the test saw no write at all)."""
    store = new_store(tmp_path)
    for _ in range(3):
        add_root(store)
    for round_ in range(5):
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(store.root)],
                                  stdout=subprocess.PIPE, text=True) for _ in range(3)]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "writing\n"
        time.sleep(0.1 + 0.05 * round_)
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.communicate()
    tree = store.load_tree()  # raises StateError on any torn record
    assert len(tree) == 3
    assert any(len(n.diagnosis) > 0 for n in tree)
    # the flock died with its holders: a new update goes through at once
    store.update_node(0, lambda n: setattr(n, "diagnosis", "after"))
    assert store.read_node(0).diagnosis == "after"


def test_soft_lock_breaks_a_lock_left_by_a_dead_process(tmp_path):
    path = tmp_path / "tree.lock"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_text(json.dumps({"host": os.uname().nodename, "pid": dead.pid, "token": "old"}))
    with SoftLock(path, timeout=2, stale_after=30).hold():
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not path.exists()


def test_soft_lock_waits_for_a_live_holder_then_times_out(tmp_path):
    path = tmp_path / "tree.lock"
    path.write_text(json.dumps({"host": os.uname().nodename, "pid": os.getppid(), "token": "x"}))
    with pytest.raises(LockTimeout, match="still held"):
        with SoftLock(path, timeout=0.3, stale_after=30).hold():
            pass
    assert path.exists()  # a live holder's lock is not broken


@pytest.fixture
def long_waits():
    """The lines a command is shown while it waits for a lock, as the CLI has them said."""
    from llmzero_slurm.store import lock_wait
    said: list[str] = []
    lock_wait.say_long_waits(said.append)
    yield said
    lock_wait.say_long_waits(None)


def test_a_long_wait_for_a_flock_names_the_file_and_its_holder_then_what_to_do(tmp_path,
                                                                               long_waits):
    """Issue: llmzero-stop, -repair and -start waited up to state.lock_timeout_s (120 s) on a
    held tree.lock without a word, and then said only "still held by another process". A wait
    past a couple of seconds is now said once, naming the file and the process holding it."""
    from llmzero_slurm.store.locks import FlockLock
    path = tmp_path / "tree.lock"
    with flock_held(path) as holder, pytest.raises(LockTimeout) as caught:
        with FlockLock(path, timeout=3).hold():
            pass
    who = f"pid {holder.pid} on this host ({sys.executable} -c import fcntl"
    assert len(long_waits) == 1, long_waits
    assert long_waits[0].startswith(f"waiting for the lock {path}, held by {who}")
    assert long_waits[0].endswith("(giving up after 3 s)")
    assert str(caught.value).startswith(f"{path}: still held after 3 s by {who}")
    assert "another llmzero command or a controller of this run is using it; try again once it " \
           "is done" in str(caught.value)
    with FlockLock(path, timeout=3).hold():      # a short wait, or none, says nothing
        pass
    assert len(long_waits) == 1


def test_a_long_wait_for_a_soft_lock_names_the_holder_its_file_records(tmp_path, long_waits):
    path = tmp_path / "tree.lock"
    path.write_text(json.dumps({"host": "node7", "pid": 4242, "token": "x"}))
    with pytest.raises(LockTimeout) as caught:
        with SoftLock(path, timeout=3, stale_after=30).hold():
            pass
    assert long_waits == [f"waiting for the lock {path}, held by pid 4242 on node7 (giving up "
                          "after 3 s)"]
    assert str(caught.value).startswith(f"{path}: still held after 3 s by pid 4242 on node7: ")
    assert str(caught.value).endswith("; if its holder is gone, remove the file by hand")


def test_soft_lock_breaks_a_lock_past_its_grace_period(tmp_path):
    path = tmp_path / "tree.lock"
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "x"}))
    old = time.time() - 60
    os.utime(path, (old, old))
    with SoftLock(path, timeout=2, stale_after=30).hold():
        pass
    assert not path.exists()


@pytest.mark.parametrize("text", ['{"host": "node7", "pi', "garbage\n", "[1, 2]"])
def test_soft_lock_breaks_an_unreadable_lock_past_its_grace_period(tmp_path, text):
    """A lock file torn by a holder that died mid-write (or overwritten by hand) was never
    judged stale: every command of the run waited out lock_timeout_s and gave up, though the
    file had long outlived the grace period. Its age alone now judges it, as for any holder."""
    path = tmp_path / "tree.lock"
    path.write_text(text)
    old = time.time() - 60
    os.utime(path, (old, old))
    with SoftLock(path, timeout=2, stale_after=30).hold():
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not path.exists()


def test_soft_lock_waits_for_an_unreadable_lock_within_its_grace_period(tmp_path):
    path = tmp_path / "tree.lock"
    path.write_text('{"host": "node7", "pi')
    with pytest.raises(LockTimeout):
        with SoftLock(path, timeout=1.2, stale_after=30).hold():
            pass
    assert path.read_text() == '{"host": "node7", "pi'


def test_a_soft_lock_that_meets_a_full_disk_is_named_and_not_left_held(tmp_path, monkeypatch):
    """The lock file is made first, its holder written after: on a full disk or quota (soft
    locks are for the shared filesystems where quotas bite) the write failed with an OSError
    naming no file, and the empty file held the run's lock for every process until it was
    judged stale. Now the file is named, and nobody waits once there is space."""
    path = tmp_path / "tree.lock"
    real = json.dump

    def full(obj, fh, *args, **kwargs):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    monkeypatch.setattr(json, "dump", full)
    with pytest.raises(StorageError, match=r"tree\.lock: could not be written \(Disk quota exceeded\)"):
        with SoftLock(path, timeout=0.3, stale_after=30).hold():
            pass
    monkeypatch.setattr(json, "dump", real)
    with SoftLock(path, timeout=0.3, stale_after=30).hold():
        assert json.loads(path.read_text())["pid"] == os.getpid()


def test_soft_lock_break_never_deletes_a_fresh_holders_lock(tmp_path):
    """Issue 14.8: judged stale, then replaced by a fresh holder before the break: the fresh
    lock was the one deleted."""
    path = tmp_path / "tree.lock"
    lock = SoftLock(path, timeout=2, stale_after=30)
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "fresh"}))
    lock._break("stale")          # the stale holder's token, judged a moment ago
    assert json.loads(path.read_text())["token"] == "fresh"
    assert [p.name for p in tmp_path.iterdir()] == ["tree.lock"]
    lock._break("fresh")
    assert not path.exists()


def test_a_lock_judged_stale_is_left_alone_once_another_breaker_replaced_it(tmp_path,
                                                                            monkeypatch):
    """Review: a process that judged a lock stale renamed away the live lock another breaker
    had put in its place a moment later, to link it back once it saw whose it was; a third
    process taking the freed place in between held the lock beside the second. Breakers now
    take turns through a marker and look again under it: a replaced lock is not touched."""
    path = tmp_path / "tree.lock"
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "killed"}))
    old = time.time() - 100
    os.utime(path, (old, old))
    late, first, third = (SoftLock(path, timeout=0.3, stale_after=30) for _ in range(3))
    stale = late._stale_token()
    real_link, taken = os.link, []

    def third_polls_now(src, dst):    # between the late breaker's rename and its link back
        taken.append(third._try_create())
        return real_link(src, dst)
    with first.hold():                # it broke the stale lock and holds the place now
        monkeypatch.setattr(os, "link", third_polls_now)
        late._break(stale)
        monkeypatch.undo()
        assert json.loads(path.read_text())["token"] == first._token
        assert taken in ([], [False])
    assert [p.name for p in tmp_path.iterdir()] == []


def test_a_break_marker_left_by_a_killed_breaker_is_broken_in_turn(tmp_path):
    """A breaker killed between taking its turn and giving it back must not stop every later
    break: its marker goes once older than any break takes."""
    from llmzero_slurm.store.locks import BREAK_GRACE_S
    path = tmp_path / "tree.lock"
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "killed"}))
    marker = tmp_path / ".tree.lock.break"
    marker.touch()
    old = time.time() - BREAK_GRACE_S - 10
    for stale in (path, marker):
        os.utime(stale, (old, old))
    with SoftLock(path, timeout=3, stale_after=30).hold():
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert [p.name for p in tmp_path.iterdir()] == []


def test_soft_lock_age_is_read_on_the_servers_clock(tmp_path, monkeypatch):
    """Issue 14.8: a client whose clock runs 2 minutes ahead broke a live holder's lock."""
    path = tmp_path / "tree.lock"
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "live"}))
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 120)
    with pytest.raises(LockTimeout):
        with SoftLock(path, timeout=1.5, stale_after=30).hold():
            pass
    assert json.loads(path.read_text())["token"] == "live"


def test_soft_lock_excludes_another_thread_of_the_same_process(tmp_path):
    """The controller's lease heartbeat takes the run lock from its own thread."""
    lock = SoftLock(tmp_path / "tree.lock", timeout=0.3, stale_after=30)
    errors: list[BaseException] = []

    def other() -> None:
        try:
            with lock.hold():
                pass
        except LockTimeout as exc:
            errors.append(exc)
    with lock.hold():
        with lock.hold():           # re-entry on the holding thread still works
            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
    assert len(errors) == 1


def test_a_reader_who_cannot_write_the_run_still_gets_an_age(tmp_path, monkeypatch):
    """llmzero-status run by someone with read access only must not crash on the probe."""
    from llmzero_slurm.store.locks import server_age
    path = tmp_path / "controller.json"
    path.write_text("{}")
    old = time.time() - 100
    os.utime(path, (old, old))
    assert 99 <= server_age(path) <= 110

    def refused(self, data):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(type(path), "write_bytes", refused)
    assert 99 <= server_age(path) <= 110
    assert server_age(tmp_path / "absent.json") is None



def _aged(store: RunStore, hours: float = 1.0) -> None:
    """Every node record written `hours` ago, as a long search's finished phases' are."""
    then = time.time() - hours * 3600
    for node_id in store.node_ids():
        os.utime(store.node_path(node_id), (then, then))


@pytest.fixture
def opened():
    """The node records opened while the test runs (the audit hook sees every open)."""
    paths: list[str] = []
    on = [True]
    sys.addaudithook(lambda event, args: paths.append(str(args[0])) if on[0] and event == "open"
                     and str(args[0]).endswith("node.json") else None)
    yield paths
    on[0] = False     # an audit hook cannot be removed: it stops recording


def test_a_tree_read_again_opens_only_the_records_that_changed(tmp_path, opened):
    """Review (a shared filesystem's metadata load): every poll of the controller and every
    pass of the monitor opened and read each node.json, hundreds of them, though a finished
    phase's record does not change. A record whose file is the one read last time (inode,
    size, mtime and ctime) is not opened again; one written since is, whoever wrote it."""
    store = new_store(tmp_path)
    for _ in range(3):
        add_root(store)
    _aged(store)
    store.load_tree()
    assert len(opened) == 3
    opened.clear()
    assert [n.id for n in store.load_tree()] == [0, 1, 2] and opened == []
    other = RunStore.open(store.root)          # another process: llmzero-repair, an edit
    other.update_node(1, lambda n: setattr(n, "status", Status.FAILED))
    opened.clear()
    tree = store.load_tree()
    assert tree[1].status is Status.FAILED and opened == [str(store.node_path(1))]


def test_a_record_edited_in_place_is_read_again_though_its_size_and_mtime_are_kept(tmp_path):
    """A hand edit that keeps the record's size and puts its mtime back (an editor writing in
    place, a tool keeping times) still changes its ctime: the edit is read."""
    store = new_store(tmp_path)
    add_root(store)
    _aged(store)
    path = store.node_path(0)
    assert store.load_tree()[0].status is Status.PROPOSED
    before, text = path.stat(), path.read_text()
    edited = text.replace('"status": "proposed"', '"status": "failed"  ')
    assert len(edited) == len(text) and edited != text
    with open(path, "r+") as fh:    # in place: the inode kept
        fh.write(edited)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert store.load_tree()[0].status is Status.FAILED


def test_a_record_written_moments_ago_is_read_again_each_time(tmp_path, opened):
    """An mtime is as coarse as a second on Lustre: a record read within moments of its write
    may change again, same size, under the same mtime. It is read again each time until it
    has aged."""
    store = new_store(tmp_path)
    add_root(store)
    store.load_tree()
    store.load_tree()
    assert len(opened) == 2
