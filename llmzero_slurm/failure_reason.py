"""Why a failed phase failed, as its record and its job's own files say it: one reading for
the controller (ingesting a phase, how a search ended) and the report's node views."""
from __future__ import annotations

from .agents.offline.error_analyzer import last_error_line
from .search.tree import Node
from .store.node_dir import NodeDir

# squeue's Reason for an ended job that failed, whatever failed: it tells the user nothing
# the job's own error line or status.json does not tell better.
SLURM_GENERIC_REASONS = frozenset({"NonZeroExitCode", "None"})


def recorded_failure(node: Node) -> str | None:
    """The reason on a failed phase's record, unless it is Slurm's word for any failure."""
    recorded = node.submission.reason
    return None if recorded in SLURM_GENERIC_REASONS else recorded


def job_error(node: Node, files: NodeDir) -> str | None:
    """A failed phase's job's own last word on why: its output's error line, else the reason
    its status.json gives (when this job wrote it)."""
    if line := last_error_line(files.log_tail()):
        return line
    own = files.status()
    return own.reason if own and own.job_id == node.submission.job_id and own.reason else None
