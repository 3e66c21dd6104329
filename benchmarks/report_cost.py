#!/usr/bin/env python3
"""How long write_report takes on runs of growing size: the controller calls it after every
finished phase, so it must stay a small fraction of a phase's length.

Builds synthetic run directories (a chain-heavy tree like a search's: each node an evolve
child of a random earlier one, 200 logged steps per phase with validation every 10) in a
temporary folder and times write_report on each: the first write, which draws every node's
curve grid, and a refresh after one more phase ended off the best path (what a poll pays),
best of --repeat runs.

--scale NODESxSTEPS: one big search instead (status_cost.py's run: verl-sized logs of ~40
metrics a step), reported in a fresh process as the controller does: the first write, a refresh
after one more phase ended off the best path, one after a phase that is the new best (every
grid's overlay changes: the controller draws for at most its draw budget, --unbudgeted as
llmzero-report does), and the process's peak RSS; with --tensorboard,
the controller's first TensorBoard export of it instead. --keep DIR builds that run there once
(or reuses it); each measurement works on a copy.

    python benchmarks/report_cost.py [--nodes 4 16 64] [--repeat 3]
    python benchmarks/report_cost.py --scale 300x1000 [--tensorboard | --unbudgeted] [--repeat 1]
                                     [--keep DIR]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Callable

from llmzero_slurm.config import parse_config
from llmzero_slurm.report import write_report
from llmzero_slurm.report.collect import collect
from llmzero_slurm.report.logs import MetricsLogs
from llmzero_slurm.report.node_curves import REFRESH_DRAW_S
from llmzero_slurm.report.tensorboard import export_tensorboard
from llmzero_slurm.search.policy import Action, make_child
from llmzero_slurm.search.tree import Kind, Node, Results, Resume, Status, Tree
from llmzero_slurm.store.run_store import RunStore
from status_cost import _built, log_text
from status_cost import build as build_scale

STEPS = 200
RECIPE = {"lr": 1e-3, "kl_loss_coef": 0.04, "rollout_n": 8, "lora_rank": 8, "lora_alpha": 16.0}


def _node(j: int, tree: Tree, kind: Kind, parent: int | None, hp: dict, resume: int | None,
          start: int, best: float, best_step: int) -> Node:
    n = make_child(tree, Action(kind, parent), j, hp, resume, "synthetic phase")
    n.status = Status.COMPLETED
    n.results = Results(best, best_step, best * 0.9, start + STEPS,
                        [start + STEPS // 2, start + STEPS], 0.5)
    n.finished_at = float(j)
    return n


def build(root: Path, nodes: int, rng: random.Random) -> None:
    store = RunStore.create(root, parse_config({"name": "bench", "hparams": RECIPE}))
    for i in range(nodes):
        tree = store.load_tree()
        parent = rng.randrange(i) if i else None
        resume = tree[parent].results.checkpoints[-1] if parent is not None else None
        kind = Kind.EVOLVE if parent is not None else Kind.SCRATCH
        hp = {**RECIPE, "lr": RECIPE["lr"] * rng.choice([0.5, 1, 2])}
        start = resume or 0
        val = [(s, rng.random()) for s in range(start + 10, start + STEPS + 1, 10)]
        best_step, best = max(val, key=lambda p: p[1])
        store.add_node(partial(_node, tree=tree, kind=kind, parent=parent, hp=hp, resume=resume,
                               start=start, best=best, best_step=best_step))
        scores = dict(val)
        lines = [json.dumps({"step": s, "data": {
            "critic/rewards/mean": rng.random(), "actor/entropy": rng.random(),
            **({"val-core/t/acc/mean@1": scores[s], "test-core/t/acc/mean@1": scores[s] * 0.9}
               if s in scores else {})}}) for s in range(start + 1, start + STEPS + 1)]
        store.node_dir(i).metrics_file.write_text("\n".join(lines) + "\n")


def one_more_phase(root: Path, steps: int, score: float = -1.0) -> None:
    """A phase of `steps` logged steps ended, as a poll finds one: an evolve child of node 0,
    off the best path (scoring below every other) or, scoring 2, the new best."""
    store = RunStore.open(root)
    i = len(store.load_tree())
    node = Node(i, 0, Kind.EVOLVE, dict(RECIPE), resume=Resume(0, steps), status=Status.COMPLETED,
                results=Results(score, 2 * steps, None, 2 * steps, [2 * steps], 0.5))
    store.add_node(functools.partial(_built, node))
    store.node_dir(i).metrics_file.write_text(log_text(random.Random(i), steps, steps, True))


def child(root: Path, steps: int, tensorboard: bool, budget: float | None) -> None:
    """In the process the parent measures: the first write, drawing every grid as
    llmzero-report does (as a long search's refreshes will have, in time), then as the
    controller calls it: one more phase's refresh, then a new best's (or the first TensorBoard
    export, then one more phase's)."""
    store = RunStore.open(root)

    def export() -> object:
        return export_tensorboard(root, store.load_tree(), lambda i: store.node_dir(i).metrics(),
                                  lambda i: store.node_dir(i).metrics_stamp())
    logs = MetricsLogs()
    run: Callable[[], object] = export if tensorboard else partial(
        write_report, root, logs=logs, draw_budget_s=budget)
    t0 = time.perf_counter()
    export() if tensorboard else write_report(root, logs=logs)
    first = time.perf_counter() - t0
    one_more_phase(root, steps)
    t0 = time.perf_counter()
    run()
    refresh = time.perf_counter() - t0
    one_more_phase(root, steps, score=2.0)
    t0 = time.perf_counter()
    run()
    new_best = time.perf_counter() - t0
    page = (root / "report" / "index.html").read_text() if not tensorboard else ""
    print(json.dumps({"first": first, "refresh": refresh, "new_best": new_best,
                      "earlier": page.count("drawn at an earlier refresh")}))


def scale(spec: str, repeat: int, keep: str | None, tensorboard: bool, unbudgeted: bool) -> None:
    """The --scale measurement: best of `repeat` fresh processes, each on a copy of the run."""
    nodes, steps = map(int, spec.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        built = Path(keep or Path(tmp) / "built")
        if not (built / "meta.json").exists():
            build_scale(built, nodes, steps, running=8, val0=True)
        runs = []
        for r in range(repeat):
            root = Path(tmp) / f"copy{r}"
            shutil.copytree(built, root)
            proc = subprocess.Popen([sys.executable, __file__, "--child", str(root), str(steps),
                                     *(["--tensorboard"] if tensorboard else []),
                                     *(["--unbudgeted"] if unbudgeted else [])],
                                    stdout=subprocess.PIPE, text=True)
            out = proc.stdout.read() if proc.stdout else ""
            _, status, usage = os.wait4(proc.pid, 0)
            if os.waitstatus_to_exitcode(status):
                raise SystemExit("the measured process failed")
            runs.append({**json.loads(out), "peak_mb": usage.ru_maxrss / 1024})
            shutil.rmtree(root)
        what = "tensorboard" if tensorboard else "report"
        print(f"{'run':>10} {'':>12} {'first write s':>14} {'refresh s':>10} {'new best s':>11} "
              f"{'grids left':>11} {'peak RSS MB':>12}")
        print(f"{spec:>10} {what:>12} {min(r['first'] for r in runs):>14.2f} "
              f"{min(r['refresh'] for r in runs):>10.2f} {min(r['new_best'] for r in runs):>11.2f} "
              f"{min(r['earlier'] for r in runs):>11} {min(r['peak_mb'] for r in runs):>12.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scale", metavar="NODESxSTEPS", help="one big search, e.g. 300x1000")
    parser.add_argument("--keep", help="with --scale: build the run here (or reuse one built there)")
    parser.add_argument("--tensorboard", action="store_true",
                        help="with --scale: time the TensorBoard export instead")
    parser.add_argument("--unbudgeted", action="store_true",
                        help="with --scale: draw every curve grid at each refresh, as "
                             f"llmzero-report does (the controller draws for {REFRESH_DRAW_S:.0f} s)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(Path(args.child[0]), int(args.child[1]), args.tensorboard,
                     None if args.unbudgeted else REFRESH_DRAW_S)
    if args.scale:
        return scale(args.scale, args.repeat, args.keep, args.tensorboard, args.unbudgeted)
    print(f"{'nodes':>6} {'first write s':>14} {'refresh s':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.nodes:
            first, refresh = [], []
            for r in range(args.repeat):
                root = Path(tmp) / f"run{n}-{r}"
                build(root, n, random.Random(n))
                t0 = time.perf_counter()
                write_report(root)
                first.append(time.perf_counter() - t0)
                best_path = {p.view.node.id for p in collect(root).phases}
                off_path = min(set(range(n)) - best_path, default=0)
                with open(RunStore.open(root).node_dir(off_path).metrics_file, "a") as fh:
                    fh.write(json.dumps({"step": 10**6, "data": {"actor/entropy": 0.5}}) + "\n")
                t0 = time.perf_counter()
                write_report(root)
                refresh.append(time.perf_counter() - t0)
            print(f"{n:>6} {min(first):>14.2f} {min(refresh):>10.2f}")


if __name__ == "__main__":
    main()
