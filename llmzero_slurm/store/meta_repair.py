"""Rebuilding the two files every command opens a run through: meta.json (the schema
version, the next node id, the creation time) and the frozen experiment.yaml.

A torn or emptied one (a crash of the file server, an editor) would lock the user out of
status, report, resume and repair alike. What meta.json holds can be read off the run
itself: ids are handed out in order and never below a node folder, and the run began when
its config was frozen, before any node was made. The frozen config has a copy, written
beside it when the run was made (experiment.yaml.bak).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import load_config
from ..errors import ConfigError, EditedConfigError, FrozenConfigError, StateError
from .atomic import keep_copy, write_json, write_text
from .run_store import RunStore
from .schema import CONFIG, CONFIG_COPY, SCHEMA_VERSION, differs_from_copy, other_schema, read_meta




def open_run_store(root: Path, reading: bool = False) -> RunStore:
    """RunStore.open, its error for a damaged meta.json or frozen config saying how to
    rebuild it."""
    try:
        return RunStore.open(root, reading)
    except StateError as exc:
        meta = root / "meta.json"
        if exc.path != meta or not meta.exists() or other_schema(meta):
            raise
        raise StateError(meta, f"{exc.problem}; llmzero-repair {root} rebuilds it from the "
                               "node folders") from None
    except (FrozenConfigError, EditedConfigError):
        raise       # whole, another release's (repair cannot help) or an edit: each says why
    except ConfigError as exc:
        if not (root / CONFIG_COPY).exists():
            raise
        raise StateError(root / CONFIG, f"the run's frozen config cannot be read ({exc}); "
                                        f"llmzero-repair {root} puts it back from its copy") from None


def rebuild_config(root: Path) -> str | None:
    """Put back a frozen experiment.yaml that cannot be read, or that was edited by hand to
    values this release refuses, from the copy written with it, keeping the replaced file as
    experiment.yaml.damaged-<time>; what was wrong, or None when it is whole (another
    release's included). StateError when the copy cannot help either."""
    path, copy = root / CONFIG, root / CONFIG_COPY
    refused: list[ConfigError] = []
    try:
        RunStore.config_of(root, refused)   # values another release wrote are read, not damage
    except FrozenConfigError:
        return None     # whole, another release's: read as it is, never replaced
    except ConfigError as exc:
        damage = str(exc)
    else:
        if not refused or not differs_from_copy(root):
            return None     # whole, or values another release wrote: read as they are
        damage = "edited since the run started, to values this release refuses: " + \
            "; ".join(map(str, refused))
    try:
        load_config(copy)
    except ConfigError as exc:
        raise StateError(path, f"{damage}; and its copy: {exc}") from None
    if path.exists():
        keep_copy(path)
    write_text(path, copy.read_text(encoding="utf-8"))
    return damage


def rebuild_meta(root: Path) -> tuple[dict[str, Any], str] | None:
    """Put back a meta.json that cannot be read, keeping the damaged file as
    meta.json.damaged-<time>; the new content and what was wrong, or None when it reads
    fine. next_id follows the highest node folder; created_at, which wall-clock budgets count
    from, is when the run's files say it began (RunStore.began_at)."""
    path = root / "meta.json"
    config = RunStore.config_of(root, [])   # as leniently as the commands read it
    store = RunStore.of(root, config)
    with store.lock.hold():
        try:
            read_meta(root)
            return None
        except StateError as exc:
            if other_schema(path):
                raise
            damage = exc.problem
        meta = {"schema_version": SCHEMA_VERSION, "created_at": store.began_at(),
                "next_id": max(store.folder_ids(), default=-1) + 1}
        if path.exists():
            keep_copy(path)
        write_json(path, meta)
    return meta, damage
