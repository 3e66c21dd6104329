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

from .. import __version__
from ..errors import StateError
from .atomic import read_json

SCHEMA_VERSION = 1


def versioned(path: Path) -> dict[str, Any]:
    """The JSON object at `path`, refused (StateError, naming the file) unless it carries the
    schema version this release reads."""
    data = read_json(path)
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
