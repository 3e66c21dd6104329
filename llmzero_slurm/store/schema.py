"""The version of the run's own records (meta.json, node.json), what a reader says of one it
does not read, and meta.json's reader.

A run outlives installs: a colleague on an older release, or a user who upgraded mid-search,
meets records of another version. That is no damage (llmzero-repair cannot mend it, and must
not be suggested); the message says which release can read the file instead.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from .. import __version__
from ..config import load_config
from ..errors import ConfigError, StateError
from .atomic import read_json

# The frozen config, and the copy frozen beside it that no command rewrites (llmzero-repair's).
CONFIG, CONFIG_COPY = "experiment.yaml", "experiment.yaml.bak"

SCHEMA_VERSION = 1
# meta.json's name for the release that created the run. Added without a new schema version:
# older releases read past it; a run made before FIRST_RECORDED has none (nor has a meta.json
# llmzero-repair rebuilt: the damaged one's record of it is lost).
CREATED_BY, FIRST_RECORDED = "created_by", "0.2.0"


def versioned(path: Path) -> dict[str, Any]:
    """The JSON object at `path`, refused (StateError, naming the file) unless it carries the
    schema version this release reads."""
    return checked(path, read_json(path))


def checked(path: Path, data: Any) -> dict[str, Any]:
    """`data` read from `path`, refused as `versioned` refuses it."""
    if not isinstance(data, dict):
        raise StateError(path, "expected a JSON object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise StateError(path, version_problem(version))
    return data


def version_problem(version: Any) -> str:
    """Why a record of schema `version` is not read here, and what to do."""
    here = f"this llmzero-slurm ({__version__}) reads schema_version {SCHEMA_VERSION}"
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        return f"schema_version {version!r:.40} is not one llmzero-slurm writes ({here})"
    newer = version > SCHEMA_VERSION
    return (f"schema_version {version} is from {'a newer' if newer else 'an older'} llmzero-slurm "
            f"({here}); the file is not damaged and llmzero-repair cannot change it: read this "
            f"run with {'that release or a later one' if newer else 'the release that wrote it'}")


def other_schema(path: Path) -> bool:
    """A readable record of another release: never rebuilt by llmzero-repair (that release
    reads it)."""
    try:
        data = read_json(path)
    except StateError:
        return False
    return isinstance(data, dict) and "schema_version" in data \
        and data["schema_version"] != SCHEMA_VERSION


def read_meta(root: Path) -> dict[str, Any]:
    """meta.json, its fields checked: a wrong next_id would crash (or misnumber) the next
    node, a wrong created_at every wall-clock budget, so either stops here naming the field."""
    path = root / "meta.json"
    meta = versioned(path)
    next_id = meta.get("next_id")
    if isinstance(next_id, bool) or not isinstance(next_id, int) or next_id < 0:
        got = f"{next_id!r:.60}" if "next_id" in meta else "nothing"
        raise StateError(path, f"next_id must be a non-negative integer (got {got})")
    created = meta.get("created_at", 0.0)     # older runs may lack it
    if isinstance(created, bool) or not isinstance(created, (int, float)) or not math.isfinite(created):
        raise StateError(path, f"created_at must be a time in seconds since 1970 (got {created!r:.60})")
    return meta


def new_meta(next_id: int, created_at: float) -> dict[str, Any]:
    """A run's first meta.json, naming this release as the one that created it."""
    return {"schema_version": SCHEMA_VERSION, "next_id": next_id, "created_at": created_at,
            CREATED_BY: __version__}


def same_run(root: str | Path, other: str | Path) -> bool:
    """Whether the folder `other` holds the run at `root` (a copy's original, say): their
    meta.json record one creation time, which a copy keeps and no other run shares. Unreadable,
    or a run made before it was recorded: not known to be the same."""
    made = []
    for folder in (root, other):
        try:
            meta = read_json(Path(folder) / "meta.json")
        except (OSError, StateError):
            return False
        made.append(meta.get("created_at") if isinstance(meta, dict) else None)
    return isinstance(made[0], (int, float)) and made[0] == made[1]


def created_by(root: str | Path) -> str | None:
    """The release that created the run at `root`, as its meta.json records it; None for a
    run made before releases were recorded (or a meta.json that says nothing readable)."""
    try:
        meta = read_json(Path(root) / "meta.json")
    except StateError:
        return None
    made = meta.get(CREATED_BY) if isinstance(meta, dict) else None
    return made if isinstance(made, str) and made else None


def creator(root: str | Path) -> str:
    """The release that created the run, in words, for status and the report."""
    made = created_by(root)
    return f"llmzero-slurm {made}" if made else \
        f"a release its meta.json does not name (as before llmzero-slurm {FIRST_RECORDED})"


def release_note(root: str | Path) -> str | None:
    """What llmzero-status says when another release created the run (its records, frozen
    config and plan may read otherwise here); None for a run of this release."""
    if created_by(root) == __version__:
        return None
    return f"this run was created by {creator(root)}; this is llmzero-slurm {__version__}"


def edited_by_hand(root: str | Path) -> bool:
    """Whether the frozen experiment.yaml at `root` is a hand edit rather than another
    release's: this release created the run, or the file differs from the copy frozen with it
    (experiment.yaml.bak, which no command rewrites)."""
    return created_by(root) == __version__ or differs_from_copy(root)


def differs_from_copy(root: str | Path) -> bool:
    """Whether the frozen experiment.yaml at `root` was changed since the run started: it
    differs from its copy. False without a copy (or one that cannot be read)."""
    try:
        return (Path(root) / CONFIG).read_bytes() != (Path(root) / CONFIG_COPY).read_bytes()
    except OSError:
        return False


def syntax_edit(root: str | Path) -> bool:
    """Whether a frozen experiment.yaml that is not YAML is a hand edit (stopped and put back
    as a typo'd key is): it differs from its copy, which reads. The run's files are written
    whole, so no crash leaves one half-written."""
    if not differs_from_copy(root):
        return False
    try:
        return bool(load_config(Path(root) / CONFIG_COPY, []))
    except ConfigError:
        return False


def created_method(root: str | Path) -> str | None:
    """The search method the run was created with, from the copy of its config frozen then
    (experiment.yaml.bak); None without a readable copy."""
    try:
        data = yaml.safe_load((Path(root) / CONFIG_COPY).read_text())
    except (OSError, UnicodeError, yaml.YAMLError):
        return None
    search = data.get("search") if isinstance(data, dict) else None
    method = search.get("method", "llmzero") if isinstance(search, dict) else "llmzero"
    return method if isinstance(method, str) else None


def method_edit(root: str | Path, method: str) -> str | None:
    """What is wrong with a run whose config names `method` where its phases were made by
    another (search.method edited in its experiment.yaml): a run is one method's search, and
    a resume refuses it. None when it names the method the run was created with."""
    made = created_method(root)
    if made in (None, method):
        return None
    return (f"is {method} in {Path(root) / CONFIG}, and the run's phases were made by {made}: "
            f"a run is one method's search; put {made} back, or run {method} with another "
            "--run-dir")
