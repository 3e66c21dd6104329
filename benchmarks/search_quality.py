"""Search quality on the addition task: llmzero (offline heuristic agents) against random search,
grid search and the practitioner's single run, several seeds each, on the embedded CPU trainer.

Prints one table: best-validation node's test score, compute used (training samples =
steps x prompts x rollouts, and device-hours), and for llmzero the share of compute early
stopping saved against running every phase to its planned end. Targets (issue 7): llmzero's
test score >= grid's with <= 60% of grid's compute; early stopping saves >= 40%.

    python benchmarks/search_quality.py [--seeds 0 1 2 3 4] [--methods llmzero grid ...]

Five seeds by default: one search's best test score varies by about +-0.015 between seeds
(1,024 test prompts), as much as the methods differ on this task, so fewer seeds rank noise.

With --dir the runs are kept, and running again resumes them: a finished search exits at once,
so methods run at different times can be tabulated together.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from llmzero_slurm.paths import ROOT
from llmzero_slurm.search.policy import best_node
from llmzero_slurm.search.tree import Node, Status
from llmzero_slurm.store.run_store import RunStore

EXAMPLE = ROOT / "examples" / "cpu-addition.yaml"
# Baselines run 8 full trials of 200 steps (the paper's Appendix B protocol, scaled).
BASELINE = {"budget_iterations": 8}
LLMZERO = {"budget_iterations": 16}


def samples(node: Node, steps: int) -> int:
    return steps * node.hparams.get("train_batch_size", 16) * node.hparams.get("rollout_n", 8)


def trained_steps(node: Node) -> int:
    last = node.results.last_step
    return max(0, (last if last is not None else node.start_step) - node.start_step)


def measure(run_dir: Path) -> dict[str, float]:
    tree = RunStore.open(run_dir).load_tree()
    best = best_node(tree)
    used = sum(samples(n, trained_steps(n)) for n in tree)
    planned = sum(samples(n, n.hparams.get("total_training_steps") or trained_steps(n))
                  if n.status is Status.EARLY_STOPPED else samples(n, trained_steps(n))
                  for n in tree)
    return {"test": best.results.test_at_best if best and best.results.test_at_best is not None
            else float("nan"),
            "val": best.score if best and best.score is not None else float("nan"),
            "samples": used, "planned": planned, "phases": len(tree),
            "early": sum(n.status is Status.EARLY_STOPPED for n in tree),
            "hours": sum(n.results.gpu_hours for n in tree)}


def run(method: str, seed: int, root: Path, cache: Path) -> dict[str, float]:
    config = yaml.safe_load(EXAMPLE.read_text())
    config["name"] = f"quality-{method}-{seed}"
    config["scheduler"] = "local"
    config["trainer"] = {"cache_dir": str(cache)}
    config["hparams"]["seed"] = seed
    config["search"].update({"method": method, "seed": seed,
                             **(LLMZERO if method == "llmzero" else BASELINE)})
    if method == "practitioner":
        config["hparams"]["total_training_steps"] = 200
    path = root / f"{method}-{seed}.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir = root / f"{method}-{seed}"
    t0 = time.time()
    with open(root / f"{method}-{seed}.log", "w") as log:
        subprocess.run([str(ROOT / "bin" / "llmzero-start"), str(path), "--run-dir", str(run_dir)],
                       stdout=log, stderr=subprocess.STDOUT, check=True,
                       env={"LLMZERO_PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
                            "HF_HUB_OFFLINE": "1"})
    result = measure(run_dir)
    result["wall_s"] = time.time() - t0
    print(f"  {method:<12} seed {seed}: test {result['test']:.3f}  val {result['val']:.3f}  "
          f"{result['phases']} phases ({result['early']} early-stopped)  "
          f"{result['samples'] / 1e3:.0f}k samples  {result['wall_s']:.0f} s", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--methods", nargs="+", default=["llmzero", "grid", "random", "practitioner"])
    parser.add_argument("--dir", help="keep the runs here (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir or tmp)
        root.mkdir(parents=True, exist_ok=True)
        results = {m: [run(m, s, root, root / "cache") for s in args.seeds] for m in args.methods}
    print(f"\n{'method':<13}{'test (mean)':>12}{'val (mean)':>12}{'samples (k)':>13}"
          f"{'device-h':>10}{'early-stopped':>15}")
    for method, rs in results.items():
        print(f"{method:<13}{statistics.mean(r['test'] for r in rs):>12.3f}"
              f"{statistics.mean(r['val'] for r in rs):>12.3f}"
              f"{statistics.mean(r['samples'] for r in rs) / 1e3:>13.0f}"
              f"{statistics.mean(r['hours'] for r in rs):>10.3f}"
              f"{sum(r['early'] for r in rs):>9} / {sum(r['phases'] for r in rs)}")
    if "llmzero" in results and "grid" in results:
        lz, grid = results["llmzero"], results["grid"]
        share = statistics.mean(r["samples"] for r in lz) / statistics.mean(r["samples"] for r in grid)
        print(f"llmzero vs grid: test {statistics.mean(r['test'] for r in lz):.3f} vs "
              f"{statistics.mean(r['test'] for r in grid):.3f}, compute {share:.0%} of grid's "
              "(target: >= grid's score with <= 60%)")
        saved = 1 - sum(r["samples"] for r in lz) / sum(r["planned"] for r in lz)
        print(f"early stopping saved {saved:.0%} of llmzero's compute against running every "
              "phase to its planned end (target >= 40%)")


if __name__ == "__main__":
    main()
