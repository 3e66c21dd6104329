"""inputs.json: what the run's inputs from outside it (a task's reward file and parquet data,
read where they lie) were when the run was created, compared on every resume.

A reward edited or a data file replaced between two starts would put scores measured with the
old input and the new one into one search tree (verl), or fail the phases that evolve older
nodes (the cpu backend's warm-started base depends on both). A resume is refused instead.
The reward file is fingerprinted by the sha256 of its content; a parquet file by its size and
its footer's sha256 (never its rows: a large dataset takes a moment on a login node); a folder
of parquet files by each of its files. A built-in task reads nothing from outside: no record.
Its own file, not a field of meta.json: older releases refuse records with unknown fields. A run
without it (made before this release) is resumed unchecked; RunStore.create writes it before
meta.json, so a create cut short leaves no run without it.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable, Sequence

from ..config import TaskConfig
from ..errors import DataError, InputsChangedError, StateError
from .atomic import read_json, write_json

INPUTS = "inputs.json"
VERSION = 1
Found = Sequence[dict[str, Any]]    # what `fingerprints` finds, the record's "files"


def fingerprints(task: TaskConfig) -> list[dict[str, Any]]:
    """The task's files as they are now, in the record's form: {"key", "path"} and either the
    reward's "sha256" or each parquet file's [size, footer sha256] under "parquet" (by name
    within a folder, '' for a file). DataError when one cannot be read."""
    if task.builtin:
        return []
    found = [{"key": key, "path": path, "parquet": _parquet(path)} for key, path in task.data_files()]
    if task.reward_path:
        found.append({"key": "task.reward_path", "path": task.reward_path,
                      "sha256": _sha256(Path(task.reward_path))})
    return found


def record(root: Path, found: Found) -> None:
    """Write the record of a new run; none for a task with no outside files, nor one left by a
    create cut short in the same folder."""
    (root / INPUTS).unlink(missing_ok=True)
    if found:
        write_json(root / INPUTS, {"version": VERSION, "files": list(found)})


def refuse_changed(root: Path, say: Callable[[str], object] = print,
                   done: str = "nothing was written or submitted") -> None:
    """Raise InputsChangedError, naming each file and what changed, when a recorded input
    differs now; `done`: what the refusal left undone. A file that is gone is said through
    `say`, not refused: its phases name it, and a moved file must not lock the user out of the
    run that used it."""
    path = root / INPUTS
    if not path.exists():
        return
    data = read_json(path)
    changed = []
    try:
        if data["version"] != VERSION:
            raise StateError(path, f"version {data['version']!r:.20} is not {VERSION}, the one "
                                   "this release reads; resume with the release that made the run")
        for was in data["files"]:
            where = f"{was['key']} {was['path']}"
            if not Path(was["path"]).exists():
                say(f"note: {was['path']} is not there ({was['key']}; it was when the run was "
                    "created): the phases that read it fail until it is back")
            elif (what := _difference(was)) is not None:
                changed.append(f"  {where}: {what}")
    except (KeyError, TypeError, AttributeError, ValueError):
        raise StateError(path, f'expected {{"version": {VERSION}, "files": [{{"key", "path", '
                               '"sha256" or "parquet"}, ...]}; removed, the run resumes with '
                               'its inputs unchecked') from None
    if changed:
        raise InputsChangedError(
            f"the run's inputs changed since it was created (recorded in {path}):\n"
            + "\n".join(changed) + f"\n{done}. Scores measured with "
            "the old inputs cannot be compared with new ones: put each file back as it was and "
            "resume, or start a new run (llmzero-start your experiment.yaml --run-dir "
            "<a new folder>)")


def refuse_while_running(root: Path) -> None:
    """refuse_changed for a running controller, before it creates a phase: a file edited since
    the run started would fail that phase (cpu: another warm-started base refuses its parent's
    adapter) or score it with other inputs (verl), each spending the budget. A file gone is
    not said again: the start said it, and the phases name it."""
    refuse_changed(root, lambda note: None,
                   "no phase was created since; phases already running keep running")


def check_unchanged(root: Path) -> str:
    """--check of a run directory: refuse_changed's finding as a line (notes included)."""
    notes: list[str] = []
    refuse_changed(root, notes.append)
    return "; ".join(["the reward and data files are as when the run was created", *notes])


def _difference(was: dict[str, Any]) -> str | None:
    """What changed in one recorded file, or None."""
    path = Path(was["path"])
    try:
        if "sha256" in was:
            now = _sha256(path)
            return None if now == was["sha256"] else f"sha256 {was['sha256'][:12]} -> {now[:12]}"
        parts = _parquet(was["path"])
    except DataError as exc:
        return exc.problem
    old = {name: tuple(v) for name, v in was["parquet"].items()}
    changes = [f"{name} added" for name in sorted(parts.keys() - old.keys())]
    changes += [f"{name} removed" for name in sorted(old.keys() - parts.keys())]
    for name in sorted(parts.keys() & old.keys()):
        (size, footer), (old_size, old_footer) = parts[name], old[name]
        if (size, footer) != (old_size, old_footer):
            what = f"size {old_size} -> {size} bytes" if size != old_size else f"size {size} bytes"
            changes.append(f"{name + ': ' if name else ''}{what}, footer "
                           f"{'differs' if footer != old_footer else 'the same'}")
    return "; ".join(changes) or None


def _parquet(path: str) -> dict[str, list[Any]]:
    from ..tasks.dataset import footers     # pyarrow: only for a task from files
    return {name: list(v) for name, v in footers(path).items()}


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise DataError(path, f"cannot be read ({exc.strerror or exc})") from None
