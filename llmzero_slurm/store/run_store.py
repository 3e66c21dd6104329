"""The run directory: a frozen config, one folder per node, and the lock guarding them.

An update touches one node.json (plus meta.json when a node is created), so its cost does
not grow with the tree. Loading the whole tree stats every node.json and reads those that
changed since this store last did (record_texts.py); the search works on that snapshot.

Long: the one owner of the run directory and its node records, created, read and written
under one lock; split, each part would reach into the others' lock and paths.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Collection

import yaml

from .. import __version__, faults
from ..config import ExperimentConfig, load_config
from ..errors import ConfigError, EditedConfigError, FrozenConfigError, StateError, YamlSyntaxError
from ..search.tree import Node, Tree, UnknownField, quarantined
from .atomic import keep_copy, parse_json, write_json, write_text
from .inputs import Found, record as record_inputs
from .locks import RunLock, make_lock
from .new_run import refuse_taken
from .record_texts import RecordTexts, stat_or_none
from .node_dir import NodeDir
from .schema import (CONFIG_COPY, SCHEMA_VERSION, checked, created_by, edited_by_hand, new_meta,
                     read_meta, syntax_edit, versioned)


CONTROLLER_JOBS = "controller-jobs.json"   # each controller job llmzero-start --submit submitted


class RunStore:
    """All state of one experiment, under `root` on the shared filesystem."""

    def __init__(self, root: str | Path, lock_kind: str = "flock", lock_timeout: float = 120.0,
                 stale_after: float = 30.0, config: ExperimentConfig | None = None):
        self.root = Path(root).resolve()   # node dirs go into #SBATCH lines: absolute
        self.nodes_dir = self.root / "nodes"
        self.proposals_dir = self.root / "proposals"   # agents' records before their node exists
        self.lock: RunLock = make_lock(lock_kind, self.root / "tree.lock", lock_timeout, stale_after)
        self._config = config
        self.corrupt: dict[int, str] = {}   # node id -> why, from the last load_tree
        self.refused: list[ConfigError] = []   # see `open`
        # Called under the lock before every node write; raises to refuse it (the
        # controller's lease check: a controller that lost its run writes nothing).
        self.fence: Callable[[], None] = lambda: None
        self.writes = 0     # node records written: see tree_since
        self._texts = RecordTexts()    # each record as load_tree last read it

    # -- creation and opening -------------------------------------------------------------

    @classmethod
    def of(cls, root: str | Path, config: ExperimentConfig) -> "RunStore":
        """The store of the run at `root`, locked as its `config` says."""
        return cls(root, config.state.lock, config.state.lock_timeout_s,
                   config.state.stale_after_s, config)

    @classmethod
    def create(cls, root: str | Path, config: ExperimentConfig, found: Found = ()) -> "RunStore":
        """Make a new run directory: a frozen copy of the config and the record of its inputs
        `found` (inputs.py), then meta.json, which makes it a run (one cut short before is made
        anew). A file, or a folder holding more than an interrupted create leaves, is the wrong
        argument (ConfigError); a folder the filesystem will not make is unwritable state
        (StateError). Of two creates racing to one folder, the second is refused as one over a run."""
        root = Path(root)
        refuse_taken(root)
        try:
            (root / "nodes").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(root, f"cannot be created as a run directory ({exc.strerror})") from None
        store = cls.of(root, config)
        with store.lock.hold():
            refuse_taken(root)   # another create may have won the race to the folder
            frozen = yaml.safe_dump(config.to_dict(), sort_keys=False)
            write_text(root / CONFIG_COPY, frozen)   # llmzero-repair's copy
            write_text(root / "experiment.yaml", frozen)
            record_inputs(root, found)
            write_json(root / "meta.json", new_meta(0, time.time()))
        return store

    @classmethod
    def open(cls, root: str | Path, reading: bool = False) -> "RunStore":
        """Open an existing run, with the lock kind its frozen config asks for. `reading` (to
        show, report or stop it): values of the frozen config that this release refuses and
        the one that started the run accepted are kept in `refused` instead of raised."""
        root = Path(root)
        read_meta(root)
        refused: list[ConfigError] | None = [] if reading else None
        store = cls.of(root, cls.config_of(root, refused))
        store.refused = refused or []
        return store

    @staticmethod
    def config_of(root: str | Path, refused: list[ConfigError] | None = None) -> ExperimentConfig:
        """The frozen experiment.yaml; one this release refuses is named as the run's, frozen
        by another release (not a typo of the user's), with what to do about it."""
        path = Path(root) / "experiment.yaml"
        copy = path.with_name(CONFIG_COPY)
        try:
            return load_config(path, refused)
        except ConfigError as exc:
            if isinstance(exc, YamlSyntaxError) and syntax_edit(root):
                raise EditedConfigError(path, exc, copy) from None
            if exc.key == "<file>":     # unreadable, empty, not a mapping: named as it is
                raise
            if edited_by_hand(root):
                raise EditedConfigError(path, exc, copy if copy.exists() else None) from None
            raise FrozenConfigError(path, exc, __version__, created_by(root)) from None

    @property
    def config(self) -> ExperimentConfig:
        """The frozen experiment.yaml, parsed once per store."""
        if self._config is None:
            self._config = self.config_of(self.root)
        return self._config

    @property
    def created_at(self) -> float:
        """When the run was created (wall-clock budgets count from here, across restarts); for
        a meta.json from before it was recorded, when its files say it began."""
        meta = read_meta(self.root)
        return float(meta["created_at"]) if "created_at" in meta else self.began_at()

    def began_at(self) -> float:
        """When the run began, read off the run itself (llmzero-repair rebuilds meta.json
        with it): the earliest of the frozen config's time and its nodes' records, since the
        config was frozen before any node was made, and may have been put back since."""
        times = [(self.root / "experiment.yaml").stat().st_mtime]
        for node_id in self.folder_ids():
            try:
                times.append(self.read_node(node_id).created_at)
            except StateError:
                continue        # a damaged record: llmzero-repair's next step
        return min(t for t in times if t > 0)

    # -- nodes ----------------------------------------------------------------------------

    def node_dir(self, node_id: int) -> NodeDir:
        """The node's directory and its files (the one owner of their layout)."""
        return NodeDir(self.nodes_dir / f"{node_id:04d}")

    @staticmethod
    def file_records(records: Path | None, into: Path) -> None:
        """Move the agents' records, written before their node was known (a folder in
        proposals_dir), into the node's folder `into`, replacing any filed there before."""
        if records is None or not records.is_dir():
            return
        into.mkdir(parents=True, exist_ok=True)
        for entry in records.iterdir():
            target = into / entry.name
            if target.is_dir():
                shutil.rmtree(target)
            os.replace(entry, target)
        records.rmdir()

    def node_path(self, node_id: int) -> Path:
        return self.node_dir(node_id).record

    def read_node(self, node_id: int, path: Path | None = None,
                  known: Collection[int] | None = None, found: os.stat_result | None = None) -> Node:
        """Node `node_id` from its record (or from `path`, a copy of it). With `known`, the
        ids that have a record, the nodes it names must be among them and older than it: ids
        are handed out in order and a record only names nodes that existed when it was
        written, so a parent that is missing, itself or later (a cycle) means damage.
        `found`: the record's stat just taken (load_tree): unchanged, it is not read again."""
        path = path or self.node_path(node_id)
        data = versioned(path) if found is None else checked(path, parse_json(
            path, self._texts.text(path, found)))
        data.pop("schema_version")
        try:
            node = Node.from_dict(data)
        except UnknownField as exc:   # not damage: llmzero-repair would not help
            raise StateError(path, f"not a valid node record: {exc}, which this llmzero-slurm "
                             f"({__version__}) does not know: a newer release wrote it (read the "
                             "run with that one) or an edit did") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(path, f"not a valid node record: {exc}") from None
        if node.id != node_id:
            raise StateError(path, f"holds node {node.id}, not node {node_id}")
        for name, ref in node.references().items():
            if known is None or (ref in known and ref < node_id):
                continue
            which = ("the node itself" if ref == node_id else
                     "a later node (a cycle)" if ref in known else "no such node in this run")
            raise StateError(path, f"not a valid node record: {name} {ref} is {which}")
        return node

    def write_node(self, node: Node, new: bool = False) -> None:
        """Replace one node record, its copy first (see `rebuild_node`); a `new` one before
        its copy, so that a write cut short leaves a record that reads, never a copy alone (a
        record gone, which stops the search). Callers changing structure hold the lock."""
        self._refuse_stand_in(node)
        self.writes += 1
        data = {"schema_version": SCHEMA_VERSION, **node.to_record()}
        files = self.node_dir(node.id)
        for path in (files.record, files.record_copy) if new else (files.record_copy, files.record):
            write_json(path, data)

    def _refuse_stand_in(self, node: Node) -> None:
        """A quarantined stand-in (see `load_tree`) written back would replace the damaged
        record and its copy, the one llmzero-repair rebuilds it from: refused."""
        if node.unreadable:
            raise StateError(self.node_path(node.id), "cannot be read, and its stand-in is not "
                             "written in its place; rebuild it with llmzero-repair first")

    def rebuild_node(self, node_id: int) -> Node | None:
        """Put back a node record that cannot be read, from the copy written beside it with
        every write; the damaged file is kept as node.json.damaged-<time>. None when the record
        reads fine; StateError when the copy cannot be read either."""
        files = self.node_dir(node_id)
        with self.lock.hold():
            known = set(self.node_ids())
            try:
                self.read_node(node_id, known=known)
                return None
            except StateError as exc:
                damage = exc
            try:
                node = self.read_node(node_id, files.record_copy, known)
            except StateError as exc:
                raise StateError(files.record, f"{damage.problem}; and its copy: {exc}") from None
            if files.record.exists():
                keep_copy(files.record)
            self.write_node(node)
        return node

    def add_node(self, build: Callable[[int], Node]) -> Node:
        """Allocate the next id and write the node `build(id)` returns, under the lock.

        The id is taken for good (meta.json written) before its folder or record exists, and
        never below a folder already on disk: a kill or a full disk between the two writes
        leaves a gap in the numbering, never two jobs in one node folder."""
        with self.lock.hold():
            meta_path = self.root / "meta.json"
            meta = read_meta(self.root)
            used = [int(p.name) for p in self._node_folders()]
            node_id = max([meta["next_id"], *(i + 1 for i in used)])
            node = build(node_id)
            if node.id != node_id:
                raise ValueError("build() must use the id it is given")
            self.fence()
            write_json(meta_path, {**meta, "next_id": node_id + 1})
            faults.point("creating_node")
            self.node_dir(node_id).path.mkdir(parents=True)
            self.write_node(node, new=True)
        return node

    def update_node(self, node_id: int, change: Callable[[Node], Any]) -> Node:
        """Locked read-modify-write of one node; `change` mutates the node in place."""
        with self.lock.hold():
            node = self.read_node(node_id)
            change(node)
            self.fence()
            self.write_node(node)
        return node

    def write_nodes(self, nodes: list[Node]) -> None:
        """Write several records under one lock hold (e.g. a debug-chain reparent)."""
        for node in nodes:    # before any write: a refused batch writes nothing
            self._refuse_stand_in(node)
        with self.lock.hold():
            self.fence()
            for node in nodes:
                self.write_node(node)

    def _node_folders(self) -> list[Path]:
        """The numbered folders under nodes/; StateError naming nodes/ when it is gone or
        not a folder (a damaged run must not look like an empty one)."""
        try:
            return [p for p in self.nodes_dir.iterdir() if p.name.isdigit()]
        except OSError as exc:
            raise StateError(self.nodes_dir, f"the run's folder of nodes cannot be listed "
                                             f"({exc.strerror})") from None

    def folder_ids(self) -> list[int]:
        """The ids with a node folder, its record readable or not (llmzero-repair's choice)."""
        return sorted(int(p.name) for p in self._node_folders())

    def node_ids(self) -> list[int]:
        return sorted(int(p.name) for p in self._node_folders() if (p / "node.json").exists())

    def tree_since(self, tree: Tree, writes: int) -> Tree:
        """`tree`, read when `writes` records had been written here, or the tree read again if
        this store wrote one since (another process's write is seen by the next load_tree)."""
        return tree if writes == self.writes else self.load_tree()

    def load_tree(self) -> Tree:
        """A snapshot of every node. A record that cannot be read stands in the tree as a
        quarantined placeholder (see `quarantined`) and is listed in `self.corrupt`: one bad
        file must not hide or stop the rest of the run. So is a record gone but for its copy:
        a node once written, whose use of the budget and whose branch are unknown."""
        nodes, self.corrupt = [], {}
        found = {i: stat_or_none(self.node_path(i)) for i in self.folder_ids()}   # one stat each
        ids = [i for i, stat in found.items() if stat is not None]
        gone = [i for i, stat in found.items()
                if stat is None and self.node_dir(i).record_copy.exists()]
        known = {*ids, *gone}     # a parent gone but for its copy is the parent still
        for node_id in ids:
            try:
                nodes.append(self.read_node(node_id, known=known, found=found[node_id]))
            except StateError as exc:
                self.corrupt[node_id] = str(exc)
                nodes.append(quarantined(node_id, str(exc)))
        for node_id in gone:
            files = self.node_dir(node_id)
            why = str(StateError(files.record,
                                 f"missing, but its copy {files.record_copy.name} is there"))
            self.corrupt[node_id] = why
            nodes.append(quarantined(node_id, why))
        return Tree(sorted(nodes, key=lambda n: n.id))
