"""llmzero-repair: rebuild node records that can no longer be read.

A node whose node.json is damaged (a disk error, an editor, a partial copy of the run) is left
out of the search, its folder untouched (llmzero-status names it, shown as failed and pruned:
"warning: node N is left out of the search"). Every record is written
together with a copy beside it (node.json.bak), and this command puts the record back from
that copy, keeping the damaged file as node.json.damaged-<time>; a damaged meta.json (which
every command reads first) is rebuilt from the node folders the same way, and a damaged frozen
experiment.yaml from the copy written with it. A running controller
picks the node up again at its next poll; a finished phase keeps its results, and one still
queued or running is watched again through its job id."""
from __future__ import annotations

import argparse

from ..errors import StateError, UsageError
from ..store.meta_repair import CONFIG, CONFIG_COPY, rebuild_config, rebuild_meta
from .common import add_run_dir, open_run, run_main


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="llmzero-repair", description=__doc__)
    add_run_dir(p)
    p.add_argument("nodes", type=int, nargs="*",
                   help="node ids to rebuild (default: every node whose record cannot be read)")
    args = p.parse_args(argv)
    if args.run_dir.is_dir() and (args.run_dir / CONFIG_COPY).exists():
        damage = rebuild_config(args.run_dir)
        if damage is not None:
            print(f"{CONFIG}: {damage}; put back from {CONFIG_COPY}, the damaged file kept "
                  "beside it")
    if args.run_dir.is_dir() and (args.run_dir / "meta.json").exists():
        rebuilt = rebuild_meta(args.run_dir)
        if rebuilt is not None:
            meta, damage = rebuilt
            print(f"meta.json: {damage}; rebuilt from the node folders (next node id "
                  f"{meta['next_id']}), the damaged file kept beside it")
    store = open_run(args.run_dir)
    known = store.folder_ids()
    unknown = [str(i) for i in dict.fromkeys(args.nodes) if i not in known]
    if unknown:
        raise UsageError(f"no node {' or '.join(unknown)} in {store.root} ({_listed(known)})")
    store.load_tree()
    targets = args.nodes or sorted(store.corrupt)
    if not targets:
        print("every node record reads fine: nothing to rebuild")
        return 0
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
    return StateError.exit_code if failed else 0


if __name__ == "__main__":
    run_main(main)
