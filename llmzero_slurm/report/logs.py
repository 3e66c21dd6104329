"""The report's reads of the phases' metrics logs. It holds only the series it draws, one
node's at a time but for the best path's, and remembers each log's problems by its stamp, so
that a refresh parses only the logs that changed: every node's whole log, parsed into series
on every refresh, took GBs and a minute on a search of hundreds of long phases."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..metrics import OVERLAY_METRICS, MetricsLog, score_names
from ..store.node_dir import NodeDir


@lru_cache(maxsize=1024)
def drawn(name: str) -> bool:
    """Whether the report draws a metric: a panel of the node curves or part of the
    validation score (the strategy curve's and the first panel's). Cached: it is asked of
    every value of every line (300 verl logs: 13M times, a third of their parse), of the
    few dozen names a run logs."""
    return name in OVERLAY_METRICS or bool(score_names([name]))


class MetricsLogs:
    """Keep one for the refreshes of one run (the controller does): a log whose stamp is the
    one last read is not parsed again for its problems."""

    def __init__(self) -> None:
        self._problems: dict[Path, tuple[str, list[str]]] = {}

    def curves(self, files: NodeDir) -> MetricsLog:
        """The drawn series of a node's log, read now (its problems remembered)."""
        stamp = files.metrics_stamp()    # before the read: a line added during it is read next time
        log = files.metrics(keep=drawn)
        self._problems[files.metrics_file] = (stamp, log.problems)
        return log

    def problems(self, files: NodeDir) -> list[str]:
        """The lines of a node's log that did not parse, read again only if it changed."""
        known = self._problems.get(files.metrics_file)
        if known is not None and known[0] == files.metrics_stamp():
            return known[1]
        return self.curves(files).problems
