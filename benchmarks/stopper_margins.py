#!/usr/bin/env python3
"""What the early stopper's margin buys and costs, replayed on searches already run.

`search_quality.py` keeps each llmzero search's run directory (with --dir). Every decision the
monitor recorded there (early_stop.json: when, at which validation point) is judged again by
the offline stopper's own rule at smaller margins, against the best score finished at that
moment. For each margin, per task over the seeds on file:

  saved        the share of planned training samples early stopping would have saved, with
               every phase stopped at the first decision that margin says STOP (phases the
               search actually stopped keep their stop: they never trained further);
  best cut     the searches whose final best strategy runs through a phase the margin stops
               before the checkpoint the strategy used (the best score it found is lost).

The tree is held as it grew, so this is a first-order estimate: samples saved would have paid
for further phases, stopped about as often. Replaying at the search's own margin must reproduce
every recorded decision, each STOP and each CONTINUE; the script checks that and exits 1 when
it does not. Only the searches of the numeric path this process runs on are replayed.

    python benchmarks/stopper_margins.py --dir DIR [--margins 0.02 0.01 0]
                                         [--results FILE]
    python benchmarks/stopper_margins.py [--results FILE]      # tabulate what is on file

Per-phase rows go to benchmarks/results/stopper_margins.json (committed).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from common import numeric_env, path_name, search_name
from llmzero_slurm.agents.offline.stopper import decide
from llmzero_slurm.agents.stopper import StopperInput
from llmzero_slurm.backends import get_backend
from llmzero_slurm.metrics import Series, val_score_series
from llmzero_slurm.paths import ROOT
from llmzero_slurm.search.budget import node_samples, samples_per_step
from llmzero_slurm.search.policy import best_path
from llmzero_slurm.search.tree import Node, Status, Tree
from llmzero_slurm.store.run_store import RunStore

RESULTS = ROOT / "benchmarks" / "results" / "stopper_margins.json"
MARGINS = [0.02, 0.015, 0.01, 0.005, 0.0]


def best_then(tree: Tree, when: float) -> float | None:
    """The monitor's bar at `when`: the best strategy score (a completed or early-stopped
    phase's, as the monitor's best_path takes it) among phases finished by then."""
    scores = [s for n in tree if (s := n.strategy_score) is not None
              and n.finished_at is not None and n.finished_at < when]
    return max(scores) if scores else None


# A recorded decision as the stopper saw it: the step, the phase's validation points up to the
# one judged, the best score finished by then, and the action the monitor recorded.
Judged = tuple[int, Series, float | None, str]


def judgments(store: RunStore, tree: Tree, node: Node, inp: StopperInput) -> list[Judged]:
    """Each decision the monitor recorded for `node` (one made before any validation point
    of the phase judged none)."""
    val = val_score_series(inp.current.after(inp.start_step).without_test())
    seen = []
    for record in store.node_dir(node.id).stop_records():
        result = record.get("result") or {}
        if result.get("step") is not None:
            upto = result.get("val_step")
            seen.append((int(result["step"]), [p for p in val if upto is not None and p[0] <= upto],
                         best_then(tree, record["created_at"]), str(result.get("action"))))
    return seen


def replayed(judged: list[Judged], inp: StopperInput, margin: float) -> list[str]:
    """The action the stopper at `margin` takes at each recorded decision."""
    return [decide(val, best, step - inp.start_step, inp.planned_end, margin).action
            for step, val, best, _ in judged]


def stop_step(judged: list[Judged], inp: StopperInput, margin: float) -> int | None:
    """The global step at which the stopper at `margin` would have stopped the phase, or None."""
    actions = replayed(judged, inp, margin)
    # the cancel lands after the step in flight
    return judged[actions.index("STOP")][0] + 1 if "STOP" in actions else None


def phases(store: RunStore, task: str, seed: int,
           margins: list[float]) -> tuple[list[dict[str, Any]], list[tuple[int, int]]]:
    """One row per phase (samples planned and used, and where each margin would stop it), and
    each (phase, step) where the replay at the search's own margin decides otherwise than the
    monitor recorded."""
    tree = store.load_tree()
    defaults = get_backend("cpu").defaults()
    own = store.config.agents.stop_margin
    # Which checkpoint of each phase the best strategy needs: a later phase's resume step, or
    # the best phase's best-validation step.
    needed: dict[int, int] = {}
    path = best_path(tree)
    for node, nxt in zip(path, path[1:] + [None]):
        needed[node.id] = nxt.start_step if nxt else int(node.results.best_val_step or 0)
    rows: list[dict[str, Any]] = []
    disagree: list[tuple[int, int]] = []
    for node in tree:
        if not node.status.finished:
            continue
        # The phase as the monitor handed it to the stopper (the best strategy comes per
        # decision, from judgments()).
        inp = StopperInput.of(node, store.node_dir(node.id).metrics_reader().read(), None, None)
        judged = judgments(store, tree, node, inp)
        per_step = samples_per_step({**defaults, **node.hparams})
        stopped = node.status is Status.EARLY_STOPPED
        disagree += [(node.id, j[0]) for j, action in zip(judged, replayed(judged, inp, own))
                     if action != j[3]]
        stops = {}
        for m in margins:
            step = stop_step(judged, inp, m)
            stops[str(m)] = None if stopped or step is None else {
                "used": (step - node.start_step) * per_step,
                "cuts_best": node.id in needed and step < needed[node.id]}
        rows.append({"task": task, "seed": seed, "node": node.id, "early_stopped": stopped,
                     "planned": node_samples(node, defaults, planned=True),
                     "used": node_samples(node, defaults), "stops": stops})
    return rows, disagree


def report(rows: list[dict[str, Any]]) -> None:
    margins = list(rows[0]["stops"]) if rows else []
    print(f"{'task':<10}{'margin':>8}{'saved':>8}{'stopped':>10}{'best cut':>10}")
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task]
        seeds = {r["seed"] for r in mine}
        planned = sum(r["planned"] for r in mine)
        for m in margins:
            used = stopped = 0
            cut = set()
            for r in mine:
                stop = r["stops"][m]
                used += stop["used"] if stop else r["used"]
                stopped += bool(stop) or r["early_stopped"]
                if stop and stop["cuts_best"]:
                    cut.add(r["seed"])
            print(f"{task:<10}{float(m):>8.3f}{1 - used / planned:>8.0%}{stopped:>5}/{len(mine):<4}"
                  f"{len(cut):>5}/{len(seeds)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="search_quality.py's --dir with kept searches")
    parser.add_argument("--margins", type=float, nargs="+", default=MARGINS)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.dir:
        rows, problems = [], []
        searches, where = [], f"the {path_name(numeric_env())} numeric path"
        for run_dir in sorted(args.dir.glob("*-llmzero-*/")):
            # TASK-llmzero-SEED, then the numeric path's variables when not the native one
            task, rest = run_dir.name.split("-llmzero-", 1)
            seed = rest.split("-", 1)[0]
            if seed.isdigit() and run_dir.name == search_name(task, "llmzero", int(seed)):
                searches.append((run_dir, task, int(seed)))
            else:
                print(f"{run_dir.name}: not a search on {where}, not replayed")
        if not searches:
            sys.exit(f"{args.dir}: no llmzero searches on {where} (TASK-llmzero-SEED folders) "
                     "to replay")
        for run_dir, task, seed in searches:
            store = RunStore.open(run_dir)
            own = store.config.agents.stop_margin
            if max(args.margins) > own:
                sys.exit(f"{run_dir.name} was searched at margin {own}: a larger margin would "
                         "have let phases it stopped run on, which cannot be replayed")
            found, disagree = phases(store, task, seed, args.margins)
            problems += [f"{run_dir.name}: the replay at the search's own margin disagrees "
                         f"with the decision recorded for phase {n} at step {step}"
                         for n, step in disagree]
            rows += found
        if problems:
            sys.exit("\n".join(problems))
        args.results.write_text(json.dumps(rows, indent=1) + "\n")
    if not args.results.exists():
        sys.exit(f"{args.results}: nothing on file; give --dir with search_quality.py's kept "
                 "searches")
    report(json.loads(args.results.read_text()))


if __name__ == "__main__":
    main()
