"""llmzero-repair: rebuild node records that can no longer be read.

A node whose node.json is damaged (a disk error, an editor, a partial copy of the run) is left
out of the search, its folder untouched (llmzero-status names it, shown as failed and pruned:
"warning: node N is left out of the search"). Every record is written
together with a copy beside it (node.json.bak), and this command puts the record back from
that copy, keeping the damaged file as node.json.damaged-<time>; a damaged meta.json (which
every command reads first) is rebuilt from the node folders the same way, and a damaged frozen
experiment.yaml from the copy written with it, and a damaged local-jobs/jobs.json (the local
scheduler's job table) from the node records, the jobs' status.json and the supervisors still
running. A running controller
picks the node up again at its next poll; a finished phase keeps its results, and one still
queued or running is watched again through its job id."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import LLMZeroError, StateError, UsageError
from ..schedulers import LOCAL_JOBS
from ..schedulers.local_table import TABLE, KnownJob, rebuild_table
from ..store.meta_repair import CONFIG, CONFIG_COPY, open_run_store, rebuild_config, rebuild_meta
from ..store.run_store import RunStore
from .common import (add_run_dir, follow_moved_run, lost_meta, open_run, refuse_live_copy,
                     run_main)


def _listed(ids: list[int]) -> str:
    """The run's node ids as ranges ("its nodes: 0-4, 7"), for a user who named another."""
    if not ids:
        return "it has no nodes yet"
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return "its nodes: " + ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def _known_jobs(store: RunStore) -> dict[str, KnownJob]:
    """Each local job the node folders name: the id in the node's record, and the ids its own
    status.json and job.claim hold (a job whose id was never recorded: a controller killed
    after the submit), each with the node's token and script."""
    known = {}
    for node in store.load_tree():
        files = store.node_dir(node.id)
        status = files.status()
        ids = {node.submission.job_id, files.claimed_by(),
               status.job_id if status and not status.by_hand else None}
        for job_id in ids:
            if node.submission.token and job_id and job_id.isdigit():
                known[job_id] = KnownJob(node.submission.token, files.script, node.submitted_at)
    return known


def _rebuild_nodes(store: RunStore, nodes: list[int]) -> int | None:
    """Rebuild the records `nodes` names (default: every unreadable one); how many could not
    be, or None when none needed it."""
    store.load_tree()
    targets = nodes or sorted(store.corrupt)
    failed = 0
    for node_id in targets:
        try:
            node = store.rebuild_node(node_id)
        except StateError as exc:
            failed += 1
            print(f"node {node_id}: cannot be rebuilt, left out of the search: {exc}")
            continue
        if node is None:
            print(f"node {node_id}: its record reads fine, left as it is")
        else:
            print(f"node {node_id}: rebuilt from {store.node_dir(node_id).record_copy.name} "
                  f"({node.kind.value}, {node.status.value})")
    return failed if targets else None


def _refuse_live_copy(path: Path) -> None:
    """A copy whose original's phases are in flight, refused before anything is rebuilt. A run
    too damaged to open here is checked after its repair, before its scripts are repointed."""
    try:
        store = open_run_store(path, reading=True)
    except (LLMZeroError, OSError):
        return
    refuse_live_copy(store)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="llmzero-repair", description=__doc__)
    add_run_dir(p)
    p.add_argument("nodes", type=int, nargs="*",
                   help="node ids to rebuild (default: every node whose record cannot be read)")
    args = p.parse_args(argv)
    _refuse_live_copy(args.run_dir)
    if args.run_dir.is_dir() and (args.run_dir / CONFIG_COPY).exists():
        damage = rebuild_config(args.run_dir)
        if damage is not None:
            print(f"{CONFIG}: {damage}; put back from {CONFIG_COPY}, the damaged file kept "
                  "beside it")
    there = (args.run_dir / "meta.json").exists()
    if args.run_dir.is_dir() and (there or lost_meta(args.run_dir)):
        rebuilt = rebuild_meta(args.run_dir)
        if rebuilt is not None:
            meta, damage = rebuilt
            print(f"meta.json: {damage if there else 'missing'}; rebuilt from the node folders "
                  f"(next node id {meta['next_id']})" + (", the damaged file kept beside it" if there else ""))
    store = open_run(args.run_dir)
    known = store.folder_ids()
    unknown = [str(i) for i in dict.fromkeys(args.nodes) if i not in known]
    if unknown:
        raise UsageError(f"no node {' or '.join(unknown)} in {store.root} ({_listed(known)})")
    failed = _rebuild_nodes(store, args.nodes)
    follow_moved_run(store)
    jobs = store.root / LOCAL_JOBS
    table = rebuild_table(jobs, _known_jobs(store)) if (jobs / TABLE).exists() else None
    if table is not None:
        print(f"{LOCAL_JOBS}/{TABLE}: {table.damage}; rebuilt from the node folders "
              f"({table.jobs} job(s), {table.running} still running; next job id "
              f"{table.next_id}), the damaged file kept as {table.kept.name}")
        for line in table.skipped:
            print(f"  left out: {line}")
    if failed is None:
        print("every node record reads fine" + ("" if table else ": nothing to rebuild"))
    return StateError.exit_code if failed else 0


if __name__ == "__main__":
    run_main(main)
