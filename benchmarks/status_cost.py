#!/usr/bin/env python3
"""What one `llmzero-status` costs on a big, long search: hundreds of phases, each with a
verl-sized metrics log (every step logged, ~40 metrics a line), as many users run it under
`watch -n 10` on a login node. Builds the run through RunStore, then times, best of
--repeat, the parts of a status call that read the run: load_tree, spent (base scores and
the running phases' last steps), the running phases' last steps alone, agent_costs, and the
whole command in a fresh process, with its peak RSS and the lines it printed (--all as well,
where the package has it). --running 100: many long phases still training. --no-val0: no
phase validated before training (verl's val_before_train=False), where the base score was
looked for in every scratch phase's log.
Run it with PYTHONPATH naming another checkout to time that one's package (before/after).

    python benchmarks/status_cost.py [--nodes 300] [--steps 1000] [--running 8] [--no-val0]
                                     [--repeat 3] [--keep DIR]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import llmzero_slurm
from llmzero_slurm.cli import status
from llmzero_slurm.config import parse_config
from llmzero_slurm.metrics import KEY_METRICS
from llmzero_slurm.metrics_reader import MetricsReader
from llmzero_slurm.report.collect import agent_costs
from llmzero_slurm.search.tree import Kind, Node, Results, Resume, Status, Tree
from llmzero_slurm.spent import spent
from llmzero_slurm.store.run_store import RunStore

PACKAGE = Path(llmzero_slurm.__file__).resolve().parent.parent   # (PYTHONPATH picks it)
RECIPE = {"lr": 1e-3, "kl_loss_coef": 0.04, "rollout_n": 8, "lora_rank": 8, "lora_alpha": 16.0}
# verl's names for what prompts and the report draw, then fillers to ~40 a step.
NAMES = [*KEY_METRICS, *(f"{group}/metric_{k}" for group in ("actor", "critic", "perf", "timing_s")
                         for k in range(7))]


def log_text(rng: random.Random, start: int, steps: int, val0: bool) -> str:
    """verl's file-logger lines: every step ~40 metrics, validation every 10 (and at the
    start step when `val0`: val_before_train)."""
    lines = []
    for s in range(start + (0 if val0 else 1), start + steps + 1):
        data = {n: rng.random() for n in NAMES} if s > start else {}
        if s % 10 == 0 or s == start:
            data["val-core/t/acc/mean@1"] = data["test-core/t/acc/mean@1"] = rng.random()
        lines.append(json.dumps({"step": s, "data": data}))
    return "\n".join(lines) + "\n"


def _built(node: Node, node_id: int) -> Node:
    """The node made ahead, for add_node, which hands it the id it was made with."""
    return node


def build(root: Path, nodes: int, steps: int, running: int, val0: bool, seed: int = 0,
          config: dict | None = None) -> None:
    """A search-shaped tree: a fifth of the phases from scratch, the rest evolve children of
    a random earlier phase; the last `running` phases still training. `config`: more keys of
    experiment.yaml."""
    rng = random.Random(seed)
    store = RunStore.create(root, parse_config({"name": "scale", "hparams": RECIPE, **(config or {})}))
    starts: dict[int, int] = {}
    for i in range(nodes):
        scratch = i == 0 or rng.random() < 0.2
        parent = None if scratch else rng.randrange(i)
        start = 0 if parent is None else starts[parent] + steps
        starts[i] = start
        live = i >= nodes - running
        node = Node(i, parent, Kind.SCRATCH if scratch else Kind.EVOLVE, dict(RECIPE),
                    resume=None if parent is None else Resume(parent, start),
                    status=Status.RUNNING if live else Status.COMPLETED,
                    results=Results() if live else Results(
                        rng.random(), start + steps, None, start + steps, [start + steps], 0.5))
        store.add_node(functools.partial(_built, node))
        files = store.node_dir(i)
        files.metrics_file.write_text(log_text(rng, start, steps, val0))
        for step in node.results.checkpoints:    # on disk, as status looks for them
            (files.ckpt / f"global_step_{step}").mkdir(parents=True)


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def command(root: Path, *args: str) -> tuple[float, float, int]:
    """Seconds, peak RSS (MB) and lines printed of one llmzero command in a fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "llmzero_slurm.cli", *args, str(root)],
                            stdout=subprocess.PIPE, cwd=root,   # the package timed here:
                            env={**os.environ, "PYTHONPATH": str(PACKAGE)})
    assert proc.stdout is not None
    lines = proc.stdout.read().count(b"\n")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"llmzero-{' '.join(args)} failed ({proc.returncode})")
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, lines


def last_steps(store: RunStore, tree: Tree) -> dict[int, int | None]:
    """What status reads of each running phase's log: its last step, as the package timed
    reads it (read from the log's end since MetricsReader.last_step, parsed whole before)."""
    tail = hasattr(MetricsReader, "last_step")
    return {n.id: store.node_dir(n.id).metrics_reader().last_step() if tail
            else store.node_dir(n.id).metrics().last_step
            for n in tree if n.status is Status.RUNNING}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--running", type=int, default=8)
    parser.add_argument("--no-val0", action="store_true",
                        help="no validation before training (verl's val_before_train=False)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", help="build the run here (or reuse one built there)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or Path(tmp) / "run")
        if not (root / "meta.json").exists():
            t0 = time.perf_counter()
            build(root, args.nodes, args.steps, args.running, not args.no_val0)
            print(f"built {args.nodes} nodes x {args.steps} steps in "
                  f"{time.perf_counter() - t0:.0f} s")
        store = RunStore.open(root, reading=True)
        tree = store.load_tree()
        print(f"load_tree      {best_of(args.repeat, store.load_tree):8.3f} s")
        print(f"spent          {best_of(args.repeat, lambda: spent(store, tree)):8.3f} s")
        print(f"last steps     {best_of(args.repeat, lambda: last_steps(store, tree)):8.3f} s")
        print(f"agent_costs    {best_of(args.repeat, lambda: agent_costs(store, tree)):8.3f} s")
        every = (("status", "--all"),) if hasattr(status, "COMPACT_ABOVE") else ()
        for cmd in (("status",), *every, ("status", "--json")):
            seconds, peak, lines = min(command(root, *cmd) for _ in range(args.repeat))
            print(f"{' '.join(cmd):<14} {seconds:8.3f} s  peak RSS {peak:6.0f} MB  "
                  f"{lines:5d} lines")


if __name__ == "__main__":
    main()
