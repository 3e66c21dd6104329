"""Cost of one locked node update and of one selection at 100, 1,000 and 10,000 nodes.

Targets (issue 2): update cost at 10,000 nodes within 2x of that at 100; one selection at
10,000 nodes under 1 s on a 2-core machine. Loading the snapshot from disk is printed too.

    python benchmarks/store_and_select.py [--sizes 100 1000 10000] [--updates 200]
"""
from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from llmzero_slurm.config import parse_config
from llmzero_slurm.search.policy import select
from llmzero_slurm.search.settings import SearchSettings
from llmzero_slurm.search.tree import Kind, Node, Results, Resume, Status, Tree
from llmzero_slurm.store.run_store import RunStore


def random_tree(size: int, seed: int = 0) -> list[Node]:
    """A bushy tree of finished phases with a few failures and pending jobs."""
    rnd = random.Random(seed)
    nodes = [Node(0, None, Kind.SCRATCH, {"lr": 1e-3}, status=Status.COMPLETED,
                  results=Results(best_val=0.3, checkpoints=[10]))]
    for i in range(1, size):
        parent = rnd.randrange(i)
        status = rnd.choices([Status.COMPLETED, Status.EARLY_STOPPED, Status.FAILED, Status.RUNNING],
                             [0.6, 0.25, 0.1, 0.05])[0]
        score = rnd.random() if status in (Status.COMPLETED, Status.EARLY_STOPPED) else None
        nodes.append(Node(i, parent, Kind.EVOLVE, {"lr": 1e-3}, resume=Resume(parent, 10),
                          status=status, results=Results(best_val=score, checkpoints=[10])))
    return nodes


def bench(size: int, updates: int, root: Path) -> dict[str, float]:
    store = RunStore.create(root / f"run{size}", parse_config({"name": f"bench{size}"}))
    nodes = random_tree(size)
    it = iter(nodes)
    for _ in nodes:
        store.add_node(lambda i: next(it))
    ids = [random.Random(1).randrange(size) for _ in range(updates)]
    times = []
    for node_id in ids:
        t0 = time.perf_counter()
        store.update_node(node_id, lambda n: setattr(n, "diagnosis", f"{time.time()}"))
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    tree = store.load_tree()
    load = time.perf_counter() - t0
    settings = SearchSettings(min_scratch_ratio=0.0)
    sel = []
    for _ in range(5):
        t0 = time.perf_counter()
        select(Tree(tree), settings)
        sel.append(time.perf_counter() - t0)
    return {"update_ms": statistics.median(times) * 1e3, "load_s": load,
            "select_s": statistics.median(sel)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--dir", help="where to create the runs (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        results = {size: bench(size, args.updates, Path(tmp)) for size in args.sizes}
    print(f"{'nodes':>7} {'update (ms, median)':>20} {'load tree (s)':>14} {'select (s, median)':>19}")
    for size, r in results.items():
        print(f"{size:>7} {r['update_ms']:>20.3f} {r['load_s']:>14.3f} {r['select_s']:>19.4f}")
    small, large = results[min(results)], results[max(results)]
    ratio = large["update_ms"] / small["update_ms"]
    print(f"update cost ratio {max(results)}/{min(results)} nodes: {ratio:.2f}x (target <= 2x)")
    print(f"selection at {max(results)} nodes: {large['select_s']:.4f} s (target < 1 s)")


if __name__ == "__main__":
    main()
