"""What the controller shows while it runs: one timestamped line per event, and a status line
whenever the picture changes (node counts by status, the best score and its path)."""
from __future__ import annotations

import logging
import re
import time
from collections import Counter
from contextlib import contextmanager
from typing import Iterator, TextIO

from ..search.policy import best_node, best_path
from ..search.tree import Tree


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """Control characters shown as escapes: agent text (a diagnosis, a reason) must not move
    the cursor, recolour or retitle the user's terminal, nor forge a line of its own."""
    return _CONTROL.sub(lambda m: {"\n": "\\n", "\t": "\\t"}.get(m.group(),
                                                                   f"\\x{ord(m.group()):02x}"), text)


def tree_summary(tree: Tree) -> str:
    """e.g. '7 phases: 2 running, 4 completed, 1 failed | best 0.512 (node 5: 0 -> 3 -> 5)'.
    Pruned nodes (left out of the search) are counted apart, so that the counts add up."""
    counts = Counter(n.status.value for n in tree if not n.pruned)
    parts = ", ".join([*(f"{v} {k}" for k, v in sorted(counts.items())),
                       *([f"{pruned} pruned"] if (pruned := sum(n.pruned for n in tree)) else [])])
    text = f"{len(tree)} phase{'s' * (len(tree) != 1)}: {parts}" if len(tree) else "no phases yet"
    best = best_node(tree)
    if best is not None:
        path = [n.id for n in best_path(tree)]
        via = f": {' -> '.join(map(str, path))}" if path != [best.id] else ""
        text += f" | best val {best.score:.3f} (node {best.id}{via})"
    return text


class Progress:
    def __init__(self, out: TextIO):
        self.out = out
        self._last = ""

    def event(self, message: str) -> None:
        self.out.write(f"[{time.strftime('%H:%M:%S')}] {terminal_safe(message)}\n")
        self.out.flush()

    def show(self, tree: Tree) -> None:
        summary = tree_summary(tree)
        if summary != self._last:
            self._last = summary
            self.event(summary)

    def finished(self, tree: Tree, reason: str, said: list[str], ended: str = "finished") -> None:
        self.event(f"search {ended}: {reason}")
        for line in (tree_summary(tree), *said):
            self.event(line)


class _AsProgress(logging.Handler):
    def __init__(self, progress: Progress):
        super().__init__(logging.WARNING)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        self.progress.event(record.getMessage())


@contextmanager
def warnings_shown(progress: Progress) -> Iterator[None]:
    """The package's logged warnings (a Slurm client being retried, a key verl ignores) as
    progress lines while the block runs: timestamped, in order with the events, where the user
    already looks."""
    package = logging.getLogger(__name__.partition(".")[0])
    handler = _AsProgress(progress)
    package.addHandler(handler)
    try:
        yield
    finally:
        package.removeHandler(handler)
