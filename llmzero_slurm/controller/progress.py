"""What the controller shows while it runs: one timestamped line per event, and a status line
whenever the picture changes (node counts by status, the best score and its path). While
nothing changes (a phase queued or training for hours) the status line is said again with
how long each waiting phase has waited and how far it got, at growing intervals: the user
sees the controller is alive, and a log of a days-long search stays a few lines an hour."""
from __future__ import annotations

import logging
import re
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, TextIO

from ..backends import get_backend
from ..elapsed import duration
from ..schedulers.base import JobState
from ..search.budget import planned_steps
from ..search.policy import best_node, best_path
from ..search.tree import Status, Tree

if TYPE_CHECKING:
    from ..store.run_store import RunStore


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


REPEAT_FIRST_S = 30.0    # an unchanged status line is said again after this long,
REPEAT_MAX_S = 600.0     # then after twice as long each time, up to this


@dataclass(frozen=True)
class Waiting:
    """A phase the search waits on, as the repeated status line shows it."""

    node: int
    status: str               # queued, running...
    since: float | None       # epoch seconds it has been in that status since (None: unknown)
    reason: str | None = None  # the scheduler's reason a queued job waits (Priority, Resources...)
    step: int | None = None   # the last global step its metrics log holds
    start: int = 0            # the global step it starts at
    end: int | None = None    # the global step its plan ends at

    def shown(self, now: float, left_s: float | None = None) -> str:
        """`left_s`: about how long it has left at its pace, where that is known."""
        text = f"node {self.node} {self.status}"
        if self.since is not None:
            text += f" {duration(now - self.since)}"
        if self.reason:
            text += f" ({self.reason})"
        if self.status == "running" and self.end is not None:
            start = f" (from {self.start})" if self.start else ""
            text += (f", step {self.step} of {self.end}{start}" if self.step is not None
                     else f", no step logged yet (ends at step {self.end}{start})")
            if left_s is not None:
                text += f", about {duration(left_s)} left"
        return text


def waiting_phases(store: "RunStore", tree: Tree, states: Mapping[int, JobState]) -> list[Waiting]:
    """The phases the search waits on: since when, why a queued one waits (`states`: each
    node's last polled job state), and the step a running one logged of its plan's (the
    trainer's default length for a plan that leaves it unset)."""
    defaults = get_backend(store.config.backend).defaults()
    out = []
    for node in tree:
        if not node.status.pending or node.pruned:
            continue
        running = node.status is Status.RUNNING
        state = states.get(node.id)
        planned = planned_steps({**defaults, **node.hparams})
        step = store.node_dir(node.id).metrics_reader().last_step() if running else None
        out.append(Waiting(node.id, node.status.value,
                           node.started_at if running else node.submitted_at,
                           state.pending_reason if state else None, step, node.start_step,
                           node.start_step + planned if planned else None))
    return out


class Progress:
    def __init__(self, out: TextIO, repeat_first_s: float = REPEAT_FIRST_S,
                 repeat_max_s: float = REPEAT_MAX_S):
        self.out = out
        self._last = ""
        self.repeat_first_s, self.repeat_max_s = repeat_first_s, repeat_max_s
        self._said_at = time.monotonic()
        self._every = repeat_first_s
        self._seen: dict[int, tuple[int, float]] = {}   # node: (its step, when) on the last line

    def event(self, message: str) -> None:
        self.out.write(f"[{time.strftime('%H:%M:%S')}] {terminal_safe(message)}\n")
        self.out.flush()
        self._said_at = time.monotonic()

    def show(self, tree: Tree, waiting: Callable[[], list[Waiting]] | None = None) -> None:
        """The status line when it changed; else, once no line was said for a while (see
        the module's docstring), again with `waiting()`'s phases, each with its wait."""
        summary = tree_summary(tree)
        if summary != self._last:
            self._last = summary
            self._every = self.repeat_first_s
            self.event(summary)
        elif time.monotonic() - self._said_at >= self._every:
            now = time.time()
            phases = "; ".join(w.shown(now, self._left(w, now)) for w in (waiting() if waiting else []))
            self.event(f"still {summary}" + (f" | {phases}" if phases else ""))
            self._every = min(self._every * 2, self.repeat_max_s)

    def _left(self, phase: Waiting, now: float) -> float | None:
        """The time a running phase has left at its pace since the last line that showed it
        (not since its start: a warm start or a model load is no training pace)."""
        if phase.step is None or phase.end is None:
            return None
        seen, self._seen[phase.node] = self._seen.get(phase.node), (phase.step, now)
        if seen is None or phase.step <= seen[0] or now <= seen[1]:
            return None
        return (phase.end - phase.step) * (now - seen[1]) / (phase.step - seen[0])

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
