"""metrics.jsonl in verl's file-logger format, appended and flushed line by line.

A monitor reads the file while the job runs, so every line is complete when written. A
requeued job first drops the lines after the step it resumes from, keeping one curve.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

from ..backends.verl.metrics_copy import rows_through
from ..store.atomic import write_bytes


class MetricsLog:
    def __init__(self, path: Path):
        self.path = path
        self._file: TextIO | None = None

    def truncate_after(self, step: int) -> None:
        """Keep only the lines up to `step` (by the verl copy's rule, rows_through), atomically."""
        if not self.path.exists():
            return
        lines = self.path.read_bytes().splitlines(keepends=True)
        write_bytes(self.path, b"".join(rows_through(lines, step)))

    def write(self, step: int, data: dict[str, Any]) -> None:
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")
        # NaN and infinities stay (JSON's NaN/Infinity, as the verl copy writes them): a
        # diverged loss must reach the agents, and null would drop it from the curve.
        self._file.write(json.dumps({"step": step, "data": data}) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
