"""Remove the checkpoints that search.keep_checkpoints no longer keeps (search/retention.py).

The record goes first: node.json drops the steps from results.checkpoints and lists them under
removed_checkpoints, so no agent or method is offered one from then on; then the folders go.
A controller killed between the two leaves folders its record calls removed, and the next
controller removes them as it starts. best_adapter/ and verl's exported adapters (only ever of
a resume point) are never touched.
"""
from __future__ import annotations

import contextlib
import shutil
from functools import partial
from pathlib import Path
from typing import Callable

from .. import faults
from ..backends import TrainerBackend
from ..errors import ConfigError
from ..search.retention import KEEP_USEFUL, WHY, removable
from ..search.tree import Node, Removed, Tree
from ..store.run_store import RunStore


class Retention:
    """search.keep_checkpoints, applied to the finished phases each poll sees."""

    def __init__(self, store: RunStore, backend: TrainerBackend, say: Callable[[str], None]):
        self.store, self.backend, self.say = store, backend, say
        self.started = False

    def apply(self, tree: Tree) -> Tree:
        """Remove what the setting no longer keeps; the tree as it then stands. The first call
        first removes what a controller killed mid-removal recorded as removed."""
        if not self.started:
            self.started = True
            for node in tree:
                if node.removed_checkpoints is not None and (
                        done := self._remove(node, node.removed_checkpoints.steps)):
                    self.say(f"node {node.id}: removed the checkpoints of steps "
                             f"{_steps(done)}, recorded as removed by a controller stopped "
                             "before it removed them")
        # A record that cannot be read may resume from any checkpoint: none goes until repaired.
        if self.store.config.search.keep_checkpoints != KEEP_USEFUL or self.store.corrupt:
            return tree
        found = removable(tree)
        for node_id, steps in found.items():
            node = self.store.update_node(node_id, partial(_record, steps=steps))
            faults.point("while_pruning")
            self._remove(node, steps)
            self.say(f"node {node_id}: removed the checkpoints of steps {_steps(steps)} "
                     f"(search.keep_checkpoints: {KEEP_USEFUL}; kept "
                     f"{_steps(node.results.checkpoints)})")
        return self.store.load_tree() if found else tree

    def _remove(self, node: Node, steps: list[int]) -> list[int]:
        """Remove the folders of `steps` that are there, and return their steps; one that
        cannot be is said, and tried again by the next controller (its record already says
        removed: nothing offers it)."""
        files, done = self.store.node_dir(node.id), []
        for step in steps:
            try:
                folder = self.backend.checkpoint_dir(files, step)
                if folder.exists():
                    shutil.rmtree(folder)
                    done.append(step)
            except (ConfigError, OSError) as exc:
                self.say(f"node {node.id}: the checkpoint of step {step} was not removed: {exc}")
        return done


def removable_folders(store: RunStore, tree: Tree, backend: TrainerBackend) -> list[Path]:
    """The checkpoint folders search.keep_checkpoints: useful would remove from a run that
    keeps them all (llmzero-status --disk says what they hold)."""
    if store.config.search.keep_checkpoints == KEEP_USEFUL or store.corrupt:
        return []
    folders = []
    for node_id, steps in removable(tree).items():
        files = store.node_dir(node_id)
        with contextlib.suppress(ConfigError):    # verl's start record unreadable: none known
            folders += [backend.checkpoint_dir(files, step) for step in steps]
    return folders


def _record(node: Node, steps: list[int]) -> None:
    node.results.checkpoints = [s for s in node.results.checkpoints if s not in steps]
    before = node.removed_checkpoints.steps if node.removed_checkpoints else []
    node.removed_checkpoints = Removed(sorted({*before, *steps}), WHY)


def _steps(steps: list[int]) -> str:
    return ", ".join(map(str, steps))
