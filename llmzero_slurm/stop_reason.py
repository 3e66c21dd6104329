"""Why a phase was stopped early or cancelled, on one line: its job ends CANCELLED either way,
and only the stopper's STOP gives a verdict (a debug fix the controller pruned has none). One
reading of early_stop.json for the controller's line, node.json, the monitor's log and the
job's comment, status and the report."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from .search.budget import node_samples
from .search.tree import Node, Status, Tree
from .store.node_dir import NodeDir

HAND_CANCELLED = ("cancelled, not by the stopper (no STOP on record): by a person (scancel, "
                  "llmzero-stop --cancel) or the batch system")
PRUNED = "cancelled: pruned by the controller, as another debug fix of its failed phase succeeded"


def cancel_line(node: Node) -> str:
    """Why a CANCELLED phase was: the controller cancels a debug fix that another fix made
    redundant (no STOP on record either), and anything else is a person's or Slurm's."""
    return PRUNED if node.pruned else HAND_CANCELLED


def stop_line(files: NodeDir) -> str | None:
    """The phase's last STOP: when, which stopper, why; None without one (or an unreadable
    record, which `stop_decided` also reads as none)."""
    record = files.last_stop()
    if record is None:
        return None
    result, backend, model = record["result"], record.get("backend"), record.get("model")
    llm = f"the LLM stopper ({' '.join(filter(None, (backend, model)))})"
    # The LLM down or its answers refused: the heuristic answered in its place.
    who = ("the heuristic stopper" if backend in (None, "heuristic", "rule") else
           llm if result.get("source") in (None, backend) else
           f"the heuristic stopper, in the place of {llm}")
    at = f" at step {result['step']}" if result.get("step") is not None else ""
    reason = " ".join(str(result.get("reason") or "no reason given").split())
    return f"stopped early{at} by {who}: {reason}"


def ended_why(tree: Tree, node_dir: Callable[[int], NodeDir], defaults: Mapping[str, Any],
              only: set[int] | None = None) -> dict[int, str]:
    """Why each phase of `tree` (those in `only`) stopped early, with the samples the stop
    saved, or was cancelled; `node_dir`: the run's node id -> NodeDir."""
    said = {}
    for node in tree:
        if only is not None and node.id not in only:
            continue
        if node.status is Status.EARLY_STOPPED:
            line = stop_line(node_dir(node.id)) or "stopped early"
            if node.results.last_step is not None:
                planned = node_samples(node, defaults, planned=True)
                line += (f"; saved {planned - node_samples(node, defaults):,} of {planned:,} "
                         "planned samples")
            said[node.id] = line
        elif node.status is Status.CANCELLED:
            said[node.id] = cancel_line(node)
    return said
