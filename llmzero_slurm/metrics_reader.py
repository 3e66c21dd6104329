"""Read a phase's metrics.jsonl (verl's file-logger format) into a MetricsLog, incrementally.

The job appends while the controller and monitor read, so the last line can be half written:
it is skipped and flagged, never fatal.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import BinaryIO, Callable, Mapping

from .metrics import MetricsLog


class MetricsReader:
    """Reads one growing metrics file incrementally: each `read()` parses only the lines
    appended since the previous call, in bounded chunks, so polling a long phase every few
    minutes costs what it wrote since, not its whole history.

    Only newline-terminated lines are consumed; an unterminated last line is parsed on each
    call (and flagged when it does not parse: the writer may be mid-line) but read again next
    time. A file rewritten under the reader (a requeued trainer that truncates) is noticed by
    its last consumed line no longer being where it was, and read again from the start.
    """

    CHUNK, TAIL = 1 << 20, 1 << 16      # read's chunk; last_step's block, dozens of verl lines

    def __init__(self, path: str | Path, keep: Callable[[str], bool] | None = None):
        """`keep(name)`: whether a metric's series is kept (None: every one). Every line is
        parsed and checked all the same; a report drawing a few series of a verl log of ~40
        metrics a step holds a tenth of it."""
        self.path = Path(path)
        self.keep = keep
        self._reset()

    def _reset(self) -> None:
        self._pos = 0                 # bytes consumed (complete lines only)
        self._lines = 0               # lines consumed, for line numbers in problems
        self._last = b""              # the last consumed line, to notice a rewritten file
        self._points: dict[str, dict[int, float]] = {}
        self._problems: list[str] = []

    def _unchanged(self, fh: BinaryIO) -> bool:
        if not self._pos:
            return True
        mark = self._last + b"\n"
        fh.seek(self._pos - len(mark))
        return fh.read(len(mark)) == mark

    def _parse(self, line: bytes, number: int, last: bool,
               points: dict[str, dict[int, float]], problems: list[str]) -> int | None:
        """Add one line's points; its step, or None for a blank or bad line."""
        if not line.strip():
            return None
        # A step of 1e400 or a 400-digit value overflows, arrays nested deep enough exhaust
        # the parser's recursion: the line is bad like any other, never the reader's end.
        try:
            record = json.loads(line)
            step, data = int(record["step"]), record["data"]
            if not isinstance(data, Mapping):
                raise TypeError("data is not a mapping")
            values = {str(name): float(value) for name, value in data.items()
                      if not isinstance(value, bool) and isinstance(value, (int, float))}
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
            what = "torn last line (still being written?)" if last else f"unreadable line: {exc}"
            problems.append(f"{self.path.name}:{number}: {what}")
            return None
        for name, value in values.items():
            if self.keep is None or self.keep(name):
                points.setdefault(name, {})[step] = value  # a requeue re-logs: last wins
        return step

    def _open(self) -> tuple[BinaryIO | None, MetricsLog]:
        """The file open for reading, or None and the empty log to give in its place: a missing
        file is an empty log, one that cannot be opened (a folder there, no permission) too,
        flagged in `problems`."""
        try:
            return self.path.open("rb"), MetricsLog()
        except FileNotFoundError:
            return None, MetricsLog()
        except OSError as exc:
            return None, MetricsLog(problems=[f"{self.path.name}: cannot be read ({exc.strerror})"])

    def read_until(self, step: int) -> MetricsLog:
        """The points up to `step` that the file holds before its first line past it, read no
        further (nor kept for a later `read`): the base model's validation at step 0 sits at
        a log's head, and llmzero-status, parsing every scratch phase's whole log to find it
        where none validated before training, took seconds at a thousand phases."""
        points: dict[str, dict[int, float]] = {}
        problems: list[str] = []
        fh, empty = self._open()
        if fh is None:
            return empty
        with fh:
            for number, line in enumerate(fh, 1):
                logged = self._parse(line, number, not line.endswith(b"\n"), points, problems)
                if logged is not None and logged > step:
                    break
        return MetricsLog({k: sorted((s, v) for s, v in pts.items() if s <= step)
                           for k, pts in points.items()}, problems)

    def last_step(self) -> int | None:
        """The step of the last line that logged a number, read back from the end: all status
        wants of a running phase's log, which it parsed whole. Torn, bad or number-less lines are
        passed over as `read` skips them; after a requeue re-logs from a checkpoint, the step the
        trainer is at, not the highest."""
        fh, _ = self._open()
        if fh is None:
            return None
        with fh:
            end, pending = os.fstat(fh.fileno()).st_size, b""
            while end > 0:
                start = max(0, end - self.TAIL)
                fh.seek(start)
                lines = (fh.read(end - start) + pending).split(b"\n")
                pending = lines.pop(0) if start else b""    # its head is in the block before
                for line in reversed(lines):
                    points: dict[str, dict[int, float]] = {}
                    if (step := self._parse(line, 0, True, points, [])) is not None and points:
                        return step
                end = start
        return None

    def read(self) -> MetricsLog:
        """Everything the file holds now; a missing file is an empty log, and so is one that
        cannot be opened (a folder in its place, no permission), flagged in `problems`."""
        fh, empty = self._open()
        if fh is None:
            self._reset()
            return empty
        with fh:
            if os.fstat(fh.fileno()).st_size < self._pos or not self._unchanged(fh):
                self._reset()
            fh.seek(self._pos)
            pending = b""
            while chunk := fh.read(self.CHUNK):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    self._lines += 1
                    self._parse(line, self._lines, False, self._points, self._problems)
                    self._pos += len(line) + 1
                    self._last = line
        points, problems = self._points, list(self._problems)
        if pending.strip():   # no newline after it: the writer may still be writing it
            points = {k: dict(v) for k, v in self._points.items()}
            self._parse(pending, self._lines + 1, True, points, problems)
        return MetricsLog({k: sorted(v.items()) for k, v in points.items()}, problems)


def read_metrics(path: str | Path) -> MetricsLog:
    """Parse a metrics file; a missing file is an empty log, bad lines are skipped and flagged."""
    return MetricsReader(path).read()
