"""The one writer of metrics files for tests: verl's file-logger format, as every trainer writes
it (`{"step": N, "data": {...}}` per line)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

VAL = "val-core/addition/acc/mean@1"
TEST = "test-core/addition/acc/mean@1"

Rows = Iterable[tuple[int, Mapping[str, Any]]]


def metrics_line(step: int, data: Mapping[str, Any]) -> str:
    return json.dumps({"step": step, "data": dict(data)}) + "\n"


def write_metrics(path: str | Path, rows: Rows, tail: str = "", append: bool = False) -> Path:
    """Write (or append) the rows; `tail` is raw text after them, e.g. a torn last line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w") as fh:
        fh.write("".join(metrics_line(step, data) for step, data in rows) + tail)
    return path


def val_rows(points: Mapping[int, float], name: str = VAL) -> list[tuple[int, dict[str, float]]]:
    """Validation scores only: {step: score}."""
    return [(step, {name: score}) for step, score in points.items()]
