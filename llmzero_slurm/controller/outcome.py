"""How a search ended: its exit code and what the controller says with it.

A search that ran phases but completed none exits NOTHING_COMPLETED, and the user's first
question is why: the last failure is said, from its record or, when the budget ran out before
any analyzer read it, from the job's own output.
"""
from __future__ import annotations

from ..failure_reason import job_error, recorded_failure
from ..search.tree import Status, Tree
from ..store.run_store import RunStore

NOTHING_COMPLETED = 7   # exit code: the search ended without one completed phase


def outcome(tree: Tree, store: RunStore) -> tuple[int, list[str]]:
    """The exit code of a search that has ended, and the lines to show with it."""
    said = []
    if store.corrupt:   # their jobs, if any, were never watched: say how to take them in
        ids = ", ".join(str(i) for i in sorted(store.corrupt))
        said.append(f"the search ended with node {ids} left out: a job of its own that still "
                     f"runs was not watched; llmzero-repair {store.root}, then llmzero-start "
                     f"{store.root} takes it in")
    if any(n.status in (Status.COMPLETED, Status.EARLY_STOPPED) for n in tree if not n.pruned):
        return 0, said
    failed = [n for n in tree if n.status is Status.FAILED and not n.pruned]
    why = None
    if failed:
        last = failed[-1]
        job = job_error(last, store.node_dir(last.id))
        why = last.gave_up_because or recorded_failure(last) or (job and f"node {last.id}: {job}")
    said.append("no phase completed, so the search found nothing"
                + (f"; the last failure: {why}" if why else ""))
    return NOTHING_COMPLETED, said
