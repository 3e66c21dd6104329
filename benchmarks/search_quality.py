#!/usr/bin/env python3
"""Search quality at equal compute: llmzero (offline agents) against grid and random search,
on the expand task (where answers get harder with their length) and on addition, several seeds
each, on the embedded CPU trainer.

Every method gets the same budget of training samples (sampled responses: steps x prompts x
rollouts), the grid's: 8 static trials of 100 steps at the example's batch shape
(`search.budget_samples`; a phase that would overrun it is cut to what is left). Printed per
task and method, mean +- standard error over seeds: the test score of the best-validation
node, its relative gain over the base model (test accuracy at step 0) and the share of the
base's headroom it closed ((test - base) / (1 - base)), samples used and, for llmzero, the
share of its samples early stopping saved against running every phase to its planned end (and
pooled over seeds); then llmzero minus grid paired by seed (--baseline: another file's grid).
Targets (issue 12): on expand llmzero beats grid by >= 2 standard errors with no more samples;
on both tasks its relative gain is >= 50%; early stopping saves >= 40% (mean over seeds). One
figure per task: the test score at the best validation so far against samples used, each
method's mean over seeds.

    python benchmarks/search_quality.py [--tasks expand addition] [--seeds 0 1 2 3 4]
                                        [--methods llmzero grid random] [--dir DIR]
                                        [--phase-steps 50] [--test-freq 10]
                                        [--results FILE] [--baseline FILE]
                                        [--report-only]

Raw per-seed results go to benchmarks/results/search_quality.json (committed) as each search
ends; searches found there are not run again, and with --dir a search cut off midway resumes
from its run directory. A whole table takes hours on two cores; it can be finished across
several sittings. `--phase-steps` sets the length of llmzero's phases (50 by default; grid and
random trials stay at 100 steps) and `--test-freq` how often every method validates (10 by
default); a results file holds one phase length and one validation interval, and its figures
are named after it. Rows record their commit (dirty or not) and numeric path; only the rows of
the path this process runs on count as on file and are tabulated.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from common import (Row, add_row, commits, mean_se, provenance, read_rows, row_key, search_name,
                    this_path)
from llmzero_slurm.config import ExperimentConfig, parse_config
from llmzero_slurm.backends import get_backend
from llmzero_slurm.metrics_reader import read_metrics
from llmzero_slurm.paths import ROOT
from llmzero_slurm.methods.space import GRID_SPACES, grid_points
from llmzero_slurm.search.budget import Budget, node_samples, samples_per_step
from llmzero_slurm.search.policy import best_node
from llmzero_slurm.search.tree import Tree
from llmzero_slurm.search.usage import usage
from llmzero_slurm.store.run_store import RunStore
from llmzero_slurm.tasks import get_task
from llmzero_slurm.tasks.dataset import generate_rows

EXAMPLE = ROOT / "examples" / "cpu-addition.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "search_quality.json"
TRIAL_STEPS = 100                   # the grid: the CPU space (lr x LoRA rank), 100 steps a point
GRID = {**GRID_SPACES["cpu"], "total_training_steps": TRIAL_STEPS}
PHASE_STEPS = 50                    # llmzero's phases by default (evolve phases resume one)
TEST_FREQ = 10                      # validation every N steps, every method (protocols A and B)


def room(task: str) -> int:
    """Response tokens for the task's longest answer and EOS, counted as the trainer does."""
    answer = get_backend("cpu").token_counter(None).answer
    return max(answer(r["reward_model"]["ground_truth"])
               for split in generate_rows(get_task(task)).values() for r in split)


def search_config(task: str, method: str, seed: int, cache: Path,
                  phase_steps: int, test_freq: int = TEST_FREQ) -> dict[str, Any]:
    """The example's experiment for one search, with room for every answer in every method's
    starting point: a response budget that cuts answers off would decide the comparison (and
    lower the base's measured score) instead of the strategy."""
    config = yaml.safe_load(EXAMPLE.read_text())
    hp = config["hparams"]
    per_step = samples_per_step(hp)
    config.update(name=f"quality-{task}-{method}-{seed}", scheduler="local",
                  trainer={"cache_dir": str(cache)}, task={"builtin": task})
    given = hp.get("max_response_length") or get_backend("cpu").defaults()["max_response_length"]
    hp.update(seed=seed, test_freq=test_freq, max_response_length=max(given, room(task)),
              total_training_steps=phase_steps if method == "llmzero" else TRIAL_STEPS)
    config["search"].update(method=method, seed=seed, budget_iterations=64,
                            budget_samples=len(grid_points(GRID, "cpu")) * TRIAL_STEPS * per_step)
    if method == "grid":
        config["search"]["space"] = GRID
    return config


def measure(run_dir: Path, task: str) -> dict[str, Any]:
    """What the search achieved, from its tree: the best-validation node's test score, the
    base's, samples used and planned, and the anytime curve (in order of finishing)."""
    store = RunStore.open(run_dir)
    tree = store.load_tree()
    defaults = get_backend("cpu").defaults()
    best = best_node(tree)
    root_test = read_metrics(store.node_dir(tree.roots()[0].id).metrics_file).get(
        f"test-core/{task}/acc/mean@1")
    # Wall time from the run's creation to its last phase's end, whichever sittings ran it.
    spent = usage(tree, Budget(len(tree), defaults=defaults, started_at=store.created_at))
    curve, used, done = [], 0, []
    for node in sorted((n for n in tree if n.status.finished), key=lambda n: n.finished_at or 0):
        used += node_samples(node, defaults)
        done.append(node)
        # The headline's rule (best_node) over the phases finished so far.
        so_far = best_node(Tree(done))
        at_best = so_far.results.test_at_best if so_far else None
        curve.append((used, math.nan if at_best is None else at_best))
    return {"test": best.results.test_at_best if best else math.nan,
            "val": best.score if best else math.nan,
            "base_test": root_test[0][1] if root_test and root_test[0][0] == 0 else math.nan,
            "samples": spent.trained, "planned": spent.planned,
            "phases": len(tree), "early": spent.early_stopped, "wall_s": round(spent.wall_s),
            "curve": curve}


def compared(config: ExperimentConfig) -> dict[str, Any]:
    """The settings a kept search must share with this benchmark's to be resumed as its own
    (what it trains, on which trainer, how it searches and stops; not where its cache lies)."""
    return {k: v for k, v in config.by_key().items()
            if k.startswith(("task.", "hparams.", "search.", "agents.")) or k == "backend"}


def run(task: str, method: str, seed: int, root: Path, phase_steps: int,
        test_freq: int) -> Row:
    name = search_name(task, method, seed)
    config = search_config(task, method, seed, root / "cache", phase_steps, test_freq)
    kept = root / name
    if (kept / "meta.json").exists() and \
            compared(RunStore.config_of(kept)) != compared(parse_config(config)):
        sys.exit(f"{kept} was searched with other settings than these (another --phase-steps "
                 "or --test-freq, or another release's example or agents): give another --dir")
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    made = provenance()          # the checkout the search starts from, not the one it ends at
    with open(root / f"{name}.log", "a") as log:
        subprocess.run([str(ROOT / "bin" / "llmzero-start"), str(path), "--run-dir",
                        str(root / name)], stdout=log, stderr=subprocess.STDOUT, check=True,
                       env={"LLMZERO_PYTHON": sys.executable, "PATH": os.environ["PATH"],
                            "HOME": os.environ.get("HOME", "/tmp"), "HF_HUB_OFFLINE": "1"})
    phases = {"phase_steps": phase_steps} if method == "llmzero" else {}
    validated = {"test_freq": test_freq} if test_freq != TEST_FREQ else {}
    result = {"task": task, "method": method, "seed": seed, **phases, **validated,
              **measure(root / name, task), **made}
    print(f"  {name}: test {result['test']:.3f} (base {result['base_test']:.3f}), "
          f"{result['phases']} phases ({result['early']} early-stopped), "
          f"{result['samples']:,} samples, {result['wall_s']} s", flush=True)
    return result


KEY = ("task", "method", "seed")      # with the numeric path: a row's identity in its file


def report(runs: list[Row], tasks: list[str], methods: list[str], results: Path, where: str,
           baseline: tuple[Path, list[Row]] | None = None) -> None:
    """The tables of one numeric path (`where` says which), and a figure per task named after
    the results file. The saving is judged as a mean over seeds; pooled (saved over planned
    of every seed together) weighs the larger searches more and is never below that mean."""
    for task in tasks:
        mine = [r for r in runs if r["task"] == task and r["method"] in methods]
        if not mine:
            continue
        print(f"\n{task}: test score at the best validation node, mean +- SE over seeds; {where}")
        print(f"{'method':<10}{'seeds':>6}{'test':>16}{'relative gain':>20}{'headroom':>10}"
              f"{'samples':>12}{'early-stopped':>15}{'saved, mean +- SE':>19}{'pooled':>8}")
        for method in methods:
            rs = [r for r in mine if r["method"] == method]
            if not rs:
                continue
            test = mean_se([r["test"] for r in rs])
            gain = mean_se([(r["test"] - r["base_test"]) / r["base_test"] for r in rs])
            closed = statistics.fmean((r["test"] - r["base_test"]) / (1 - r["base_test"])
                                      for r in rs)
            saved = mean_se([1 - r["samples"] / max(1, r["planned"]) for r in rs])
            pooled = 1 - sum(r["samples"] for r in rs) / max(1, sum(r["planned"] for r in rs))
            print(f"{method:<10}{len(rs):>6}{test[0]:>9.3f} +- {test[1]:.3f}"
                  f"{gain[0]:>+12.0%} +- {gain[1]:.0%}{closed:>10.0%}"
                  f"{statistics.fmean(r['samples'] for r in rs):>12,.0f}"
                  f"{sum(r['early'] for r in rs):>9} / {sum(r['phases'] for r in rs):<4}"
                  f"{saved[0]:>12.1%} +- {saved[1]:.1%}{pooled:>8.1%}")
        print(f"measured at: {commits(mine)}")
        ours = [r for r in mine if r["method"] == "llmzero"]
        name, theirs = baseline or (results, mine)
        grid = [r for r in theirs if r["task"] == task and r["method"] == "grid"]
        paired(ours, grid, f" of {name}" if baseline else "")
        if baseline:
            print(f"  llmzero rows measured at: {commits(ours)}; {name}'s grid rows at: "
                  f"{commits(grid)}")
        figure(mine, methods, results.with_name(f"{results.stem}_{task}.png"), task)


def paired(llmzero: list[Row], grid: list[Row], of: str) -> None:
    """llmzero minus grid on the seeds both have."""
    by = {r["seed"]: r["test"] for r in grid}
    diffs = [r["test"] - by[r["seed"]] for r in llmzero if r["seed"] in by]
    if len(diffs) > 1:
        diff, se = mean_se(diffs)
        print(f"llmzero - grid{of}, paired over {len(diffs)} seeds: {diff:+.3f} +- {se:.3f} "
              f"({diff / se if se else math.inf:.1f} SE)")


def figure(runs: list[dict[str, Any]], methods: list[str], out: Path, task: str) -> None:
    """Anytime curves: each method's mean over seeds of the test score at the best validation
    so far, against training samples used (step-wise, read at 50 points)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    top = max(r["samples"] for r in runs)
    grid = [top * i / 50 for i in range(1, 51)]
    for method in methods:
        curves = [r["curve"] for r in runs if r["method"] == method and r["curve"]]
        if not curves:
            continue
        means = []
        for x in grid:
            at = [next((t for s, t in reversed(c) if s <= x), math.nan) for c in curves]
            known = [t for t in at if not math.isnan(t)]
            means.append(statistics.fmean(known) if len(known) == len(curves) else math.nan)
        ax.plot(grid, means, label=f"{method} ({len(curves)} seeds)")
    ax.set_xlabel("training samples used")
    ax.set_ylabel("test accuracy at best validation so far")
    ax.set_title(f"{task}: anytime search quality")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    print(f"figure: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


def settings(rows: list[Row], phase_steps: int, test_freq: int) -> list[str]:
    """How a file's rows differ from one length of llmzero's phases and one validation interval
    (none: alike). Rows written before either setting existed used the defaults."""
    phases = sorted({r.get("phase_steps", PHASE_STEPS) for r in rows if r["method"] == "llmzero"}
                    - {phase_steps})
    freqs = sorted({int(r.get("test_freq", TEST_FREQ)) for r in rows} - {test_freq})
    return ([f"llmzero searches with {phases}-step phases, not {phase_steps}"] * bool(phases) +
            [f"searches that validated every {freqs} steps, not {test_freq}"] * bool(freqs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["expand", "addition"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--methods", nargs="+", default=["llmzero", "grid", "random"])
    parser.add_argument("--dir", type=Path, help="keep the searches here (resumable)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--baseline", type=Path, help="pair llmzero by seed against the grid "
                        "rows of this results file (same settings and numeric path)")
    parser.add_argument("--phase-steps", type=int, default=PHASE_STEPS,
                        help="training steps of each llmzero phase (default %(default)s)")
    parser.add_argument("--test-freq", type=int, default=TEST_FREQ,
                        help="validate every N steps, every method (default %(default)s)")
    parser.add_argument("--report-only", action="store_true", help="tabulate what is on file")
    args = parser.parse_args()
    runs = read_rows(args.results)
    if differ := settings(runs, args.phase_steps, args.test_freq):
        sys.exit(f"{args.results} holds {'; '.join(differ)}: give --phase-steps and "
                 "--test-freq to match it, or another --results")
    baseline = None
    if args.baseline:
        rows = read_rows(args.baseline)
        ours, there = this_path(rows)
        if differ := settings(rows, args.phase_steps, args.test_freq) + \
                [f"rows of another numeric path: {there}"] * (len(ours) < len(rows)):
            sys.exit(f"--baseline {args.baseline} holds {'; '.join(differ)} (as {args.results} "
                     "and this process have it): its grid is not paired with these rows")
        baseline = (args.baseline, [r for r in rows if r["seed"] in args.seeds])
    mine, where = this_path(runs)
    have = {(r["task"], r["method"], r["seed"]) for r in mine}
    todo = [(t, m, s) for t in args.tasks for s in args.seeds for m in args.methods
            if (t, m, s) not in have]
    print(f"{len(have)} searches on file ({where}), {0 if args.report_only else len(todo)} to "
          "run", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.dir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for task, method, seed in [] if args.report_only else todo:
            add_row(args.results, run(task, method, seed, root, args.phase_steps, args.test_freq),
                    lambda r: row_key(r, KEY))
    mine, where = this_path(read_rows(args.results))
    report([r for r in mine if r["seed"] in args.seeds], args.tasks, args.methods,
           args.results, where, baseline)


if __name__ == "__main__":
    main()
