"""metrics.jsonl in verl's file-logger format, appended and flushed line by line.

A monitor reads the file while the job runs, so every line is complete when written. A
requeued job first drops the lines after the step it resumes from, keeping one curve.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

from ..store.atomic import write_bytes


class MetricsLog:
    def __init__(self, path: Path):
        self.path = path
        self._file: TextIO | None = None

    def truncate_after(self, step: int) -> None:
        """Keep only lines with step <= `step` (atomically); unreadable lines are kept as-is,
        byte for byte: bytes that are not UTF-8 (a client crash on a shared filesystem) must
        not stop every requeue of the phase."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_bytes().splitlines(keepends=True):
            try:
                if json.loads(line)["step"] > step:
                    continue
            except (ValueError, KeyError, TypeError, RecursionError):
                if not line.endswith(b"\n"):
                    continue   # a torn last line from a killed writer
            kept.append(line)
        write_bytes(self.path, b"".join(kept))

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
