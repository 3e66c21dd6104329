#!/usr/bin/env python3
"""The embedded CPU GRPO trainer on every floating-point code path: base, gain, speed, memory.

Another CPU runs other kernels, and the same code once gave a base of 0.18 on one machine and
0.08 on another. The environment variables below make this machine run as others do, so the
table shows what a user elsewhere will see. For each numeric path, a fresh warm start (its own
cache, as on a new machine) and one 100-step phase at the default ("good") settings, through
jobs/cpu_grpo.py exactly as a phase script runs it. Printed per path: the supervised steps the
warm start took, its held-out training accuracy (the calibration probe), validation accuracy at
step 0 and after the phase, the gain, and whether the base is in the task's band and the gain
reaches the target (+0.15). On the native path two more settings show the curve's shape
(lr 1e-2 collapses; temperature 1.0 learns more slowly than the default 0.7), with steps/s,
wall time and peak RSS.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from common import run_phase
from llmzero_slurm.tasks import get_task

PATHS = {
    "native": {},
    "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
    "ATEN_CPU_CAPABILITY=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "ATEN_CPU_CAPABILITY=default": {"ATEN_CPU_CAPABILITY": "default"},
}
NATIVE_SETTINGS = {"lr 1e-2 (collapse)": ["lr=1e-2"], "temperature 1.0": ["temperature=1.0"]}
TARGET_GAIN = 0.15


def run(out: Path, cache: Path, task: str, steps: int, extra: list[str],
        numerics: dict[str, str]) -> float:
    started = time.perf_counter()
    run_phase(task, out, cache, [f"total_training_steps={steps}", "test_freq=10", "save_freq=50",
                                 *extra], numerics)
    return time.perf_counter() - started


def metrics(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def val_curve(lines: list[dict], task: str) -> dict[int, float]:
    key = f"val-core/{task}/acc/mean@1"
    return {x["step"]: x["data"][key] for x in lines if key in x["data"]}


def base_record(cache: Path) -> dict:
    return json.loads(next((cache / "base").glob("*/warm_start.json")).read_text())


def speed(name: str, out: Path, wall: float, task: str) -> None:
    lines = metrics(out)
    step_times = [x["data"]["timing_s/step"] for x in lines if "timing_s/step" in x["data"]]
    kl = max(x["data"].get("actor/kl_loss", 0.0) for x in lines)
    rss = max(x["data"].get("perf/max_rss_gb", 0.0) for x in lines)
    curve = " ".join(f"{s}:{v:.2f}" for s, v in val_curve(lines, task).items())
    print(f"{name}\n  steps/s {1 / statistics.mean(step_times):.2f}   s per 100 steps "
          f"{100 * statistics.mean(step_times):.1f}   phase wall (process start included) "
          f"{wall:.1f} s   peak RSS {rss:.2f} GB   max actor/kl_loss {kl:.3f}\n  val acc {curve}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="addition")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--paths", nargs="*", choices=list(PATHS), default=list(PATHS),
                        help="numeric paths to run (default: all)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="hyperparameters over the defaults in every run, e.g. "
                             "max_response_length=16 for a task with longer answers")
    args = parser.parse_args()
    settings = ", ".join(args.set) or "the default settings"
    print(f"task {args.task}, {args.steps} steps at {settings}; one thread; "
          f"{os.cpu_count()} CPUs visible; load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.paths:
            cache, out = Path(tmp) / name / "cache", Path(tmp) / name / "good"
            warm = run(Path(tmp) / name / "warm", cache, args.task, 1, args.set, PATHS[name])
            wall = run(out, cache, args.task, args.steps, args.set, PATHS[name])
            record, curve = base_record(cache), val_curve(metrics(out), args.task)
            base, last = curve[0], curve[max(curve)]
            low, high = record["band"]
            rows.append((name, record["steps"], record["probe_accuracy"], base, last,
                         low <= record["probe_accuracy"] <= high, last - base >= TARGET_GAIN))
            print(f"{name}: warm start {warm:.0f} s ({record['steps']} supervised steps), "
                  f"phase {wall:.0f} s; val acc " +
                  " ".join(f"{s}:{v:.2f}" for s, v in curve.items()), flush=True)
            if name == "native":
                speed("default settings (native)", out, wall, args.task)
                for label, extra in NATIVE_SETTINGS.items():
                    other = Path(tmp) / name / label.split()[0]
                    speed(f"{label} (native)", other,
                          run(other, cache, args.task, args.steps, [*args.set, *extra], {}),
                          args.task)
    low, high = get_task(args.task).BASE_BAND
    print(f"\nband [{low:.2f}, {high:.2f}] on the probe (held-out training rows); "
          f"target gain +{TARGET_GAIN:.2f} on validation in {args.steps} steps")
    print(f"{'numeric path':30s} {'SFT steps':>9s} {'probe':>6s} {'val@0':>6s} "
          f"{'val@' + str(args.steps):>7s} {'gain':>6s}  in band  gain >= target")
    for name, steps, probe, base, last, in_band, reached in rows:
        print(f"{name:30s} {steps:9d} {probe:6.3f} {base:6.3f} {last:7.3f} {last - base:+6.3f}"
              f"  {'yes' if in_band else 'NO':7s}  {'yes' if reached else 'NO'}")


if __name__ == "__main__":
    main()
