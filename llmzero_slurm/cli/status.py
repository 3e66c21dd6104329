"""llmzero-status: the tree with statuses and scores (above 40 phases, the best path and the
live phases with their ancestors, the rest counted; --all lists every one), running jobs with
their Slurm state, and the best strategy so far; with no controller holding the run, a controller job still
queued (llmzero-start --submit); with --disk, what the run holds on disk. --json prints the
same as one JSON document."""
from __future__ import annotations

import argparse
import copy
import json
import math
from collections import Counter
from dataclasses import asdict
from typing import Any

from .. import __version__
from ..backends import get_backend
from ..controller.controller_job import waiting_jobs, waiting_line
from ..controller.lease import Lease
from ..controller.monitor import monitor_heartbeat
from ..controller.outcome import NOTHING_COMPLETED, outcome
from ..controller.progress import tree_summary
from ..controller.retention import removable_folders
from ..controller.watched import poll_phases, watched_phases
from ..errors import ConfigError, SchedulerError, StateError
from ..report.collect import agent_costs
from ..report.costs import agents_line
from ..schedulers import JobState, SlurmScheduler, make_scheduler, resolve_scheduler_kind
from ..search.policy import best_path, is_terminal
from ..search.tree import Node, Tree
from ..spent import spent
from ..stop_reason import ended_why
from ..store.disk_use import disk_line, disk_use, held
from ..store.run_store import RunStore
from ..store.schema import created_by, created_method, method_edit, release_note
from .common import add_run_dir, open_run, run_main


def _steps(node: Node, logged: int | None) -> str:
    """From..to; a running phase to the last step its log holds, and more to come; an ended
    one whose end is not recorded yet, to that step; one that recorded no step (failed in its
    setup, cancelled in the queue), nothing more."""
    last = node.results.last_step
    if last is None and node.status.finished:
        return f"{node.start_step}-{logged if logged is not None else ''}"
    if last is None:
        return f"{node.start_step}-{logged if logged is not None else ''}..."
    return f"{node.start_step}-{last}"


def _row(node: Node, depth: int, live: dict[str, str], terminal: bool,
         logged: int | None) -> str:
    val = f"{node.score:.3f}" if node.score is not None else "-"
    job = node.submission.job_id or "-"
    state = live.get(job, node.submission.scheduler_state or "")
    flags = "".join(f for f, on in (("*", node.injected), ("T", terminal and not node.pruned),
                                    ("P", node.pruned), ("C", node.closed is not None)) if on)
    return (f"{'  ' * depth}{node.id:04d} {node.kind.value:<7} {node.status.value:<13} "
            f"{val:>6}  {_steps(node, logged):<11} {job:<10} {state:<12} {flags}")


COMPACT_ABOVE = 40    # phases: a bigger tree's table lists only what a user watches


def listed(tree: Tree, path: list[int]) -> set[int]:
    """What a big tree's table lists: the best path, and each phase to be run, queued or
    running with its ancestors, so that it reads in place; hundreds of finished phases above
    them scrolled them, and the summary, out of sight."""
    keep = set(path)
    for node in tree:
        up: Node | None = node if node.status.pending else None
        while up is not None and up.id not in keep:
            keep.add(up.id)
            up = tree.nodes.get(up.parent) if up.parent is not None else None
    return keep


def render_tree(tree: Tree, live: dict[str, str], terminal: dict[int, bool],
                logged: dict[int, int], only: set[int] | None = None) -> list[str]:
    """The table; with `only`, the rows of those nodes and a count by status of the rest."""
    lines = ["node kind    status           val  steps       job        slurm        flags"]
    hidden: Counter[str] = Counter()
    stack = [(r, 0) for r in reversed(tree.children(None, include_pruned=True))]
    while stack:
        node, depth = stack.pop()
        if only is None or node.id in only:
            lines.append(_row(node, depth, live, terminal.get(node.id, True),
                              logged.get(node.id)))
        else:
            hidden["pruned" if node.pruned else node.status.value] += 1
        stack += [(c, depth + 1) for c in reversed(tree.children(node.id, include_pruned=True))]
    if hidden:
        counts = ", ".join(f"{v} {k}" for k, v in sorted(hidden.items()))
        lines.append(f"{(n := sum(hidden.values()))} more phase{'s' * (n != 1)} not listed: {counts} "
                     "(--all lists every phase)")
    lines.append("flags: * injected scratch, T terminal, P pruned, C closed (nothing untried "
                 "left to propose from it)")
    return lines


def live_states(store: RunStore, tree: Tree) -> tuple[dict[str, JobState], str | None]:
    """Scheduler states of the pending jobs, in one scheduler call, or none and why not.
    Status is for looking: when the batch system does not answer it shows the states on file
    at once, rather than retrying for a minute as the controller does; so too when the local
    scheduler's job table is damaged, which must not hide the node records."""
    jobs = watched_phases(tree)
    if not jobs:
        return {}, None
    try:
        kind = resolve_scheduler_kind(store.config.scheduler)
    except ConfigError as exc:
        return {}, f"job states are shown as last recorded: {exc}"
    if kind == "slurm" and not SlurmScheduler.reachable():
        return {}, "Slurm did not answer (squeue failed); job states are shown as last recorded"
    try:
        return poll_phases(make_scheduler(kind, store.root), store, jobs), None
    except (SchedulerError, StateError) as exc:
        return {}, f"job states are shown as last recorded: {exc}"


def as_live(tree: Tree, states: dict[str, JobState], store: RunStore) -> Tree:
    """A copy of `tree` with each watched phase whose job has ended (a cancel, a crash) in
    the status its scheduler says, as the next controller will record it, so the summary
    does not count it as running meanwhile: a cancel the stopper decided is an early stop."""
    shown = copy.deepcopy(tree)
    for job_id, node in watched_phases(shown).items():
        if (state := states.get(job_id)) is not None and state.final:
            node.status = store.node_dir(node.id).ended_as(state.status)
    return shown


def lost_checkpoints(store: RunStore, tree: Tree) -> list[str]:
    """Recorded checkpoints whose folders are gone (deleted by hand, a scratch purge): said,
    since a phase the search resumes from one fails, and nothing else would say why."""
    backend, lost = get_backend(store.config.backend), []
    for node in tree:
        if node.results.checkpoints:
            files = store.node_dir(node.id)
            try:
                gone = backend.lost_checkpoints(files, node.results.checkpoints)
            except ConfigError as exc:    # verl's record of the phase's first step is damaged
                lost.append(f"node {node.id}: its checkpoints cannot be listed: {exc}")
                continue
            if gone:
                what, it = ((f"checkpoints of steps {', '.join(map(str, gone))}, recorded in "
                             "node.json, are", "one") if len(gone) > 1 else
                            (f"checkpoint of step {gone[0]}, recorded in node.json, is", "it"))
                lost.append(f"node {node.id}: the {what} gone from "
                            f"{files.ckpt.relative_to(store.root)}: no phase can resume from {it}")
    return lost


def finite(value: Any) -> Any:
    """`value` with each non-finite float (a NaN a trainer logged) as null: NaN is not JSON,
    and a strict reader of --json refused the whole answer."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="llmzero-status", description=__doc__)
    add_run_dir(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table (every node)")
    p.add_argument("--all", action="store_true",
                   help=f"list every phase; above {COMPACT_ABOVE} phases the table lists the best "
                   "path and the phases proposed, queued or running with their ancestors, and "
                   "counts the rest by status")
    p.add_argument("--disk", action="store_true",
                   help="also say what the run holds on disk, by part (walks every file)")
    args = p.parse_args(argv)
    store = open_run(args.run_dir)
    tree = store.load_tree()
    states, note = live_states(store, tree)
    live = {j: s.shown() for j, s in states.items()}
    leases = Lease(store)
    try:
        lease, lease_note = leases.read(), None
    except StateError as exc:
        lease, lease_note = None, str(exc)
    running = bool(lease and leases.holder_alive(lease))
    waiting, job_note = ([], None) if running else waiting_jobs(store)
    path = [n.id for n in best_path(tree)]
    monitor = monitor_heartbeat(store)
    shown = as_live(tree, states, store)
    used = spent(store, tree, shown=shown)
    use = used.usage
    costs = agent_costs(store, tree)
    disk = disk_use(store.root) if args.disk else None
    freed = held(removable_folders(store, tree, get_backend(store.config.backend)) if disk else [])
    only = None if args.all or len(tree) <= COMPACT_ABOVE else listed(tree, path)
    stops = ended_why(shown, store.node_dir, use.budget.defaults, None if args.json else only)
    if args.json:
        print(json.dumps(finite({"experiment": store.config.name, "controller_running": running,
                          "created_by": created_by(store.root), "llmzero_slurm": __version__,
                          "controller": lease, "controller_note": lease_note, "best_path": path,
                          "waiting_controller_jobs": {s.job_id: s.raw for s in waiting},
                          "controller_jobs_note": job_note,
                          "agents": {name: asdict(cost) for name, cost in costs.items()},
                          "nodes": [n.to_dict() for n in tree],
                          "running_logged_steps": {str(i): s for i, s in used.logged.items()},
                          "slurm_states": {j: s.raw for j, s in states.items()},
                          "pending_reasons": {j: r for j, s in states.items()
                                              if (r := s.pending_reason)},
                          "live_states_note": note,
                          "ended_why": {str(i): line for i, line in stops.items()},
                          "live_jobs": {j: {"state": s.raw, "exit_code": s.exit_code,
                                            "reason": s.reason, "final": s.final}
                                        for j, s in states.items()},
                          "terminal": {str(i): t for i, t in
                                       is_terminal(tree, store.config.search).items()},
                          "unreadable_records": {str(i): why for i, why in store.corrupt.items()},
                          "budget_closed": use.budget.spent(tree),
                          "monitor": monitor,
                          **({"disk": {k: u._asdict() for k, u in disk.items()},
                              "disk_keep_useful_frees": freed._asdict()} if disk else {}),
                          "usage": {"samples_trained": use.trained, "samples_committed": use.committed,
                                    "samples_trained_by_running_phases": use.running,
                                    "samples_saved_by_early_stopping": use.saved,
                                    "samples_planned": use.planned, "early_stopped": use.early_stopped,
                                    "device_hours": use.gpu_hours, "wall_s": round(use.wall_s, 1),
                                    "phases_created": use.phases,
                                    "phases_budget": use.budget.iterations,
                                    "base_val": used.base_val}}),
                         indent=2, sort_keys=True, allow_nan=False))
        return 0
    job = f" in Slurm job {lease['slurm_job_id']}" if lease and lease.get("slurm_job_id") else ""
    holder = (f"controller running on {lease['host']} pid {lease['pid']}{job}" if lease and running
              else "controller state unknown" if lease_note
              else "; ".join(map(waiting_line, waiting)) or "controller not running")
    method = store.config.search.method
    edited = method_edit(store.root, method) if len(tree) else None
    # Headed by the method whose phases these are; the edit, which a resume refuses, is said.
    print(f"experiment {store.config.name} ({created_method(store.root) if edited else method}), "
          f"{holder}")
    for said in (release_note(store.root), edited and f"search.method {edited}"):
        if said:
            print(f"note: {said}")
    print("\n".join(render_tree(shown, live, is_terminal(tree, store.config.search), used.logged,
                                 only)))
    print("".join(f"node {node_id}: {line}\n" for node_id, line in stops.items()), end="")
    print(tree_summary(shown))
    print("\n".join(used.lines()))
    if (said := agents_line(costs)) is not None:
        print(said)
    if disk is not None:
        print(disk_line(disk, freed))
    watched = watched_phases(tree)
    # A search that ended with nothing completed: why, as its controller said at the end.
    ended = None if running or watched or not len(tree) else outcome(tree, store)
    for said in (lease_note, note, job_note,
                 ended[1][-1] if ended and ended[0] == NOTHING_COMPLETED else None):
        if said:
            print(f"note: {said}")
    for job_id, state in states.items():   # ended since a controller last recorded it
        if state.final and job_id in watched:
            code = f" (exit {state.exit_code})" if state.exit_code else ""
            print(f"note: node {watched[job_id].id}: job {job_id} ended {state.raw}{code}"
                  + (f": {state.reason}" if state.reason else "") + " (as its scheduler says)")
    for said in lost_checkpoints(store, tree):
        print(f"warning: {said}")
    for node_id, why in sorted(store.corrupt.items()):
        print(f"warning: node {node_id} is left out of the search: {why}")
    if store.corrupt:
        print(f"llmzero-repair {store.root} rebuilds unreadable records from their copies")
    unknown = use.budget.unknown(tree)
    if unknown:
        print(f"warning: {unknown} (llmzero-repair {store.root} "
              f"{' '.join(map(str, use.budget.uncounted(tree)))})")
    if monitor.get("llm_unreachable"):
        print(f"early stopper: the offline heuristics, in the monitor job on "
              f"{monitor.get('host')}: the LLM endpoint {monitor['llm_unreachable']}")
    if lease and running:
        print(f"last controller heartbeat {leases.silent_for() or 0.0:.0f} s ago")
    return 0


if __name__ == "__main__":
    run_main(main)
