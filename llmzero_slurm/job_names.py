"""The names the run's batch jobs carry in squeue: `llmz-<experiment>-<role>`.

One place makes them, because a name is also how a cancel makes sure of its job: a recorded
job id may since have been given to another job (a cluster whose ids wrapped or were reset, a
run copied to another cluster), and `scancel --name` leaves a job of another name alone.
"""
from __future__ import annotations

from .search.tree import Node


def phase_job_name(experiment: str, node_id: int, kind: str) -> str:
    return f"llmz-{experiment}-{node_id:04d}-{kind}"


def node_job_name(experiment: str, node: Node) -> str:
    """The name a tree node's phase job was submitted under."""
    return phase_job_name(experiment, node.id, node.kind.value)


def controller_job_name(experiment: str) -> str:
    return f"llmz-{experiment}-controller"


def monitor_job_name(experiment: str) -> str:
    return f"llmz-{experiment}-monitor"


def check_job_name(experiment: str) -> str:
    return f"llmz-{experiment}-check"
