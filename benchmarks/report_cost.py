#!/usr/bin/env python3
"""How long write_report takes on runs of growing size: the controller calls it after every
finished phase, so it must stay a small fraction of a phase's length.

Builds synthetic run directories (a chain-heavy tree like a search's: each node an evolve
child of a random earlier one, 200 logged steps per phase with validation every 10) in a
temporary folder and times write_report on each: the first write, which draws every node's
curve grid, and a refresh after one more phase ended off the best path (what a poll pays),
best of --repeat runs.

    python benchmarks/report_cost.py [--nodes 4 16 64] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from functools import partial
from pathlib import Path

from llmzero_slurm.config import parse_config
from llmzero_slurm.report import write_report
from llmzero_slurm.report.collect import collect
from llmzero_slurm.search.policy import Action, make_child
from llmzero_slurm.search.tree import Kind, Node, Results, Status, Tree
from llmzero_slurm.store.run_store import RunStore

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
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
