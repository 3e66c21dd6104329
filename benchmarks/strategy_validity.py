#!/usr/bin/env python3
"""Is the task discriminative? A hand-written multi-phase schedule against every static
configuration of a grid, at equal training samples, several seeds, paired by seed.

A search for training strategies can only show its worth on a task where the strategy
matters: where no single configuration, however well chosen, matches a good sequence of them.
This benchmark measures that before any search is judged on the task. Every run trains the
same number of steps at the same batch shape (so the same number of sampled responses),
through jobs/cpu_grpo.py exactly as a phase script runs it; the schedule's phases resume each
other's adapters as a search's evolve phases do. Printed: each configuration's final test
accuracy (mean +- standard error over seeds), and the schedule minus the best static
configuration (the one with the highest mean, chosen after the fact, which favours the static
side; statics tied for it are each paired, and the weakest comparison is the verdict), paired
by seed, with its standard error. Target: >= 2 standard errors.

Per-seed results are added to the design's JSON file as each run ends
(benchmarks/results/strategy_validity_<design>.json, committed), and runs found there are not run
again, so the benchmark can be finished across several sittings; --dir keeps the phase folders
so a run cut off mid-schedule resumes at its last finished phase. Each row records its commit
(dirty or not) and numeric path; only rows of the path this process runs on count as on file
and are tabulated.

    python benchmarks/strategy_validity.py [--design expand-deep|expand-long-confirm|...]
                                           [--seeds N ...] [--jobs 2] [--dir DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common import (ROOT, Row, add_row, commits, mean_se, numeric_env, provenance, read_rows,
                    row_key, run_phase, this_path)
from llmzero_slurm.search.budget import samples_per_step

RESULTS = ROOT / "benchmarks" / "results"
TARGET_SE = 2.0


@dataclass(frozen=True)
class Design:
    """One task's test: every run trains `steps` steps at `common` settings and the same batch
    shape; the statics are every point of `grid` (one choice per axis); each schedule is a list
    of (steps, settings) phases, each resuming the previous one's adapter and reading on in its
    data order. Every schedule tried is reported, not only the best. A task may have several
    designs; the name (the task's, for its first) names the results file. `seeds` are the
    design's own, so a confirmation on fresh seeds is a design of its own, judged alone."""

    name: str
    task: str
    steps: int
    common: dict[str, Any]
    grid: list[list[dict[str, Any]]]
    schedules: dict[str, list[tuple[int, dict[str, Any]]]]
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)

    @property
    def results(self) -> Path:
        return RESULTS / f"strategy_validity_{self.name}.json"


# `reverse`, kept as measured: no schedule beat the best static (README). Shared settings: room
# for the longest answer (12 letters and EOS), 32 prompts x 4 rollouts per step (8 x 16 learn
# far less), lr 1e-3. The control restarts with unchanged settings, so the KL release is
# measured apart from what a restart (fresh optimiser state) gains by itself. The pilots behind
# these choices (results/strategy_validity_lr_pilot.json among them): the README.
ANCHOR = {"temperature": 0.5, "kl_loss_coef": 0.04}
REVERSE = Design(
    name="reverse", task="reverse", steps=120,
    common={"max_response_length": 13, "lr": 1e-3, "train_batch_size": 32, "rollout_n": 4},
    grid=[[{"lr": 1e-3}, {"lr": 3e-4}],
          [{"temperature": 0.3}, {"temperature": 0.5}, {"temperature": 0.7},
           {"temperature": 1.0}],
          [{"kl_loss_coef": 0.04}, {"kl_loss_coef": 0.0}]],
    schedules={
        "schedule KL anchor (kl_loss_coef 0.04) for 80, then released (0.0) for the last 40":
            [(80, ANCHOR), (40, {**ANCHOR, "kl_loss_coef": 0.0})],
        "schedule control: restarted at 80 with its settings unchanged":
            [(80, ANCHOR), (40, ANCHOR)],
        "schedule 0.5 then anneal (lr 3e-4, temperature 0.3) for the last 40":
            [(80, {"temperature": 0.5}), (40, {"temperature": 0.3, "lr": 3e-4})],
        "schedule 0.5 then lr 3e-4 for the last 40":
            [(80, {"temperature": 0.5}), (40, {"temperature": 0.5, "lr": 3e-4})],
        "schedule 0.7 then anneal (lr 3e-4, temperature 0.3) for the last 60":
            [(60, {"temperature": 0.7}), (60, {"temperature": 0.3, "lr": 3e-4})],
    })
# `expand`, where answers get harder with their length. Shared settings: room for the longest
# answer (15 letters and EOS), 32 x 4, lr 1e-3 (2e-3 reached 0.67 against 0.74 in a pilot).
# The first schedule tightens, then loosens (temperature 0.5, then 1.0); the control restarts
# with unchanged settings, so the temperature change is measured apart from the restart; the
# third loosens and releases the KL anchor together, the two moves that each helped a little
# on their own (here and on `reverse`), so the grid has a KL axis too. Measured figures and
# pilots: the README.
LOOSE = {"temperature": 1.0}
EXPAND = Design(
    name="expand", task="expand", steps=120,
    common={"max_response_length": 16, "lr": 1e-3, "train_batch_size": 32, "rollout_n": 4},
    grid=[[{"temperature": 0.3}, {"temperature": 0.5}, {"temperature": 0.7},
           {"temperature": 1.0}],
          [{"kl_loss_coef": 0.04}, {"kl_loss_coef": 0.0}]],
    schedules={
        "schedule temperature 0.5 for 60, then 1.0 for the last 60":
            [(60, ANCHOR), (60, {**ANCHOR, **LOOSE})],
        "schedule control: restarted at 60 with its settings unchanged":
            [(60, ANCHOR), (60, ANCHOR)],
        "schedule temperature 0.5 for 60, then 1.0 with the KL anchor released (0.0)":
            [(60, ANCHOR), (60, {**LOOSE, "kl_loss_coef": 0.0})],
    })
# `expand` over twice the horizon, declared after the pilots in
# results/strategy_validity_expand_pilots.json and before any of its own runs: at 240 steps
# lr 1e-3 peaks and then falls back while 5e-4 keeps climbing, so the learning-rate optimum
# moves. The schedule steps lr down 1e-3 -> 5e-4 -> 2.5e-4; the statics are those three rates;
# the control restarts the middle rate at the same points, so a gain is measured apart from
# what the restarts (fresh optimiser state) do.
MIDDLE = {"lr": 5e-4}
SCHEDULE = "schedule lr 1e-3, 5e-4, 2.5e-4 for 80 steps each"
EXPAND_LONG = Design(
    name="expand-long", task="expand", steps=240,
    common={"max_response_length": 16, "lr": 1e-3, "train_batch_size": 32, "rollout_n": 4,
            "temperature": 0.7, "kl_loss_coef": 0.04},
    grid=[[{"lr": 1e-3}, MIDDLE, {"lr": 2.5e-4}]],
    schedules={
        SCHEDULE: [(80, {"lr": 1e-3}), (80, MIDDLE), (80, {"lr": 2.5e-4})],
        "schedule control: lr 5e-4 restarted at 80 and 160":
            [(80, MIDDLE), (80, MIDDLE), (80, MIDDLE)],
    })
# Its confirmation, declared after those five seeds (schedule +0.015 +- 0.009 over static
# 5e-4, 1.6 SE) and before any run of its own: the same schedule and statics on ten fresh
# seeds, judged on those alone, so that adding seeds to a result near the line cannot decide
# it. The control's question is answered and not asked again.
EXPAND_LONG_CONFIRM = replace(
    EXPAND_LONG, name="expand-long-confirm", seeds=tuple(range(5, 15)),
    schedules={SCHEDULE: EXPAND_LONG.schedules[SCHEDULE]})
# 400 steps, declared after search_quality's run with 100-step phases (whose best `expand`
# chains trained 400 steps, seed 0's along lr 1e-3, 5e-4, 5e-4, 2.5e-4; test 0.848 +- 0.007)
# and before any run of its own: how much of that a static run of the same depth reaches. The
# statics are the two rates best at 240 steps; the schedule is that chain's learning-rate path,
# 100 steps a phase, every other setting expand-long's.
EXPAND_DEEP = replace(
    EXPAND_LONG, name="expand-deep", steps=400, grid=[[MIDDLE, {"lr": 2.5e-4}]],
    schedules={"schedule lr 1e-3, 5e-4, 5e-4, 2.5e-4 for 100 steps each":
               [(100, {"lr": 1e-3}), (100, MIDDLE), (100, MIDDLE), (100, {"lr": 2.5e-4})]})
DESIGNS = {d.name: d for d in (EXPAND_DEEP, EXPAND_LONG_CONFIRM, EXPAND_LONG, EXPAND, REVERSE)}


def configurations(d: Design) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    out = {}
    for combo in itertools.product(*d.grid):
        point = {k: v for part in combo for k, v in part.items()}
        out["static " + " ".join(f"{k}={v}" for k, v in point.items())] = [(d.steps, point)]
    return {**out, **d.schedules}


def run_chain(d: Design, phases: list[tuple[int, dict[str, Any]]], seed: int, folder: Path,
              cache: Path) -> dict[str, Any]:
    """Train the phases one after another; the last phase's final validation and test."""
    offset, adapter, rows = 0, None, []
    for i, (steps, settings) in enumerate(phases):
        out = folder / f"phase{i}"
        done = out / "done"
        if not done.exists():
            args = ["--step-offset", str(offset), f"total_training_steps={steps}",
                    f"test_freq={steps}", f"save_freq={steps}", f"seed={seed}",
                    *(f"{k}={v}" for k, v in {**d.common, **settings}.items())]
            run_phase(d.task, out, cache,
                      args + (["--init-adapter", str(adapter)] if adapter else []))
            done.touch()
        offset += steps
        adapter = out / "ckpt" / f"global_step_{offset}"
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    val, test = (f"{split}-core/{d.task}/acc/mean@1" for split in ("val", "test"))
    last = [r["data"] for r in rows if test in r["data"]][-1]
    samples = sum(steps * samples_per_step({**d.common, **s}) for steps, s in phases)
    return {"val": last[val], "test": last[test], "samples": samples, "steps": offset}


def header(d: Design) -> Row:
    """What a design's results file says of the design, above its rows."""
    return {"design": d.name, "task": d.task, "steps": d.steps, "common": d.common,
            "grid": d.grid, "seeds": list(d.seeds), "schedules": d.schedules,
            "machine": f"{os.cpu_count()} CPUs, one thread per run"}


def report(d: Design, runs: list[Row], seeds: list[int], where: str) -> None:
    by = {(r["config"], r["seed"]): r for r in runs}
    print(f"\n{d.name}: task {d.task}, {d.steps} steps x {samples_per_step(d.common)} sampled "
          f"responses per run ({d.common}); test accuracy at the end (1,024 prompts); {where}")
    means = {}
    for name in configurations(d):
        tests = [by[(name, s)]["test"] for s in seeds if (name, s) in by]
        if tests:
            means[name] = mean_se(tests)
            print(f"  {name:60s} {means[name][0]:.3f} +- {means[name][1]:.3f}  "
                  f"({len(tests)} seeds)")
    print(f"measured at: {commits([r for r in runs if r['seed'] in seeds])}")
    statics = {n: m for n, m in means.items() if n not in d.schedules}
    if not statics:
        return
    top = max(m[0] for m in statics.values())
    best = [n for n, m in statics.items() if m[0] == top]
    for schedule in d.schedules:
        # Against each static tied for the best mean; the weakest comparison is the verdict.
        found = []
        for static in best:
            paired = [by[(schedule, s)]["test"] - by[(static, s)]["test"] for s in seeds
                      if (schedule, s) in by and (static, s) in by]
            if len(paired) > 1:
                diff, se = mean_se(paired)
                found.append((diff / se if se else math.copysign(math.inf, diff), diff, se,
                              static, len(paired)))
        if not found:
            continue
        ratio, diff, se, static, n = min(found)
        tie = f"; tied for the best mean with {', '.join(b for b in best if b != static)}" \
            if len(best) > 1 else ""
        verdict = "met" if diff >= TARGET_SE * se else "MISSED"
        print(f"{schedule} - best static ({static}{tie}), paired over {n} seeds: "
              f"{diff:+.3f} +- {se:.3f} ({ratio:.1f} SE; target >= "
              f"{TARGET_SE:.0f} SE: {verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--design", choices=DESIGNS, default=EXPAND_LONG_CONFIRM.name)
    parser.add_argument("--seeds", type=int, nargs="+", help="default: the design's own")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each)")
    parser.add_argument("--dir", type=Path, help="keep phase folders and the base cache here")
    parser.add_argument("--results", type=Path, help="default: the design's file under "
                        "benchmarks/results")
    parser.add_argument("--report-only", action="store_true",
                        help="tabulate what is on file; train nothing")
    args = parser.parse_args()
    d = DESIGNS[args.design]
    seeds = args.seeds or list(d.seeds)
    results = args.results or d.results
    mine, where = this_path(read_rows(results))
    have = {(r["config"], r["seed"]) for r in mine}
    todo = [] if args.report_only else [(n, s) for s in seeds for n in configurations(d)
                                        if (n, s) not in have]
    print(f"{len(have)} runs on file ({where}), {len(todo)} to run", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.dir or Path(tmp)
        cache = root / "cache"
        if todo:   # build the base once before the parallel runs race for it
            run_chain(d, [(1, {})], 0, root / f"warm-{d.task}", cache)

        def one(item: tuple[str, int]) -> None:
            name, seed = item
            started, made = time.time(), provenance()
            phases = configurations(d)[name]
            # The folder names what it trains, and on which numeric path, so an edited schedule
            # or another path never resumes a stale one.
            path = [env] if (env := numeric_env()) else []     # native folders as they were
            digest = hashlib.sha256(json.dumps([d.task, phases, d.common, *path]).encode())
            folder = root / (f"{name.replace(' ', '_').replace('=', '')}-"
                             f"{digest.hexdigest()[:8]}-seed{seed}")
            result = run_chain(d, phases, seed, folder, cache)
            add_row(results, {"config": name, "seed": seed, **result,
                              "wall_s": round(time.time() - started), **made},
                    lambda r: row_key(r, ("config", "seed")), header(d))
            print(f"  {name} seed {seed}: test {result['test']:.3f} val {result['val']:.3f}"
                  f" ({time.time() - started:.0f} s)", flush=True)

        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(one, todo))
    mine, where = this_path(read_rows(results))
    report(d, mine, seeds, where)


if __name__ == "__main__":
    main()
