#!/usr/bin/env python3
"""Speed, memory and learning curves of the embedded CPU GRPO trainer, printed as figures.

Runs three 100-step phases through jobs/cpu_grpo.py exactly as a phase script would (process
start included) and prints, per setting: GRPO steps/s (from timing_s/step), seconds per 100
steps, wall time of the whole phase, peak RSS, and validation accuracy over steps.
Targets on a 2-core machine: >= 5 steps/s at 16 prompts x 8 rollouts, < 1 GB RSS, and a
100-step phase under 30 s. The machine's load average is printed with the figures.

The base model is trained once into the cache before timing starts, as a search does on its
first phase; pass --cache-dir to reuse an existing cache.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = Path(__file__).resolve().parent.parent / "jobs" / "cpu_grpo.py"
SETTINGS = {
    "good (lr 1e-3, kl 0.04, T 1.0)": [],
    "lr 1e-2 (collapse)": ["lr=1e-2"],
    "temperature 0.7": ["temperature=0.7"],
}


def run(out: Path, cache: Path, task: str, steps: int, extra: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, str(CLI), "--task", task, "--output-dir", str(out),
                    "--cache-dir", str(cache), f"total_training_steps={steps}", "test_freq=10",
                    "save_freq=50", *extra],
                   check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"})
    return time.perf_counter() - started


def report(name: str, out: Path, wall: float, task: str) -> None:
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    step_times = [x["data"]["timing_s/step"] for x in lines if "timing_s/step" in x["data"]]
    key = f"val-core/{task}/acc/mean@1"
    curve = " ".join(f"{x['step']}:{x['data'][key]:.2f}" for x in lines if key in x["data"])
    kl = max(x["data"].get("actor/kl_loss", 0.0) for x in lines)
    rss = max(x["data"].get("perf/max_rss_gb", 0.0) for x in lines)
    print(f"{name}\n  steps/s {1 / statistics.mean(step_times):.2f}   s per 100 steps "
          f"{100 * statistics.mean(step_times):.1f}   phase wall (process start included) "
          f"{wall:.1f} s   peak RSS {rss:.2f} GB   max actor/kl_loss {kl:.3f}\n  val acc {curve}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="addition")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--cache-dir", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache_dir or Path(tmp) / "cache"
        warm = run(Path(tmp) / "warm", cache, args.task, 1, [])
        print(f"task {args.task}; first phase incl. base-model warm start: {warm:.1f} s; "
              f"load average before timing: {os.getloadavg()[0]:.2f}")
        for i, (name, extra) in enumerate(SETTINGS.items()):
            out = Path(tmp) / f"phase{i}"
            report(name, out, run(out, cache, args.task, args.steps, extra), args.task)
        print(f"load average after: {os.getloadavg()[0]:.2f} "
              f"(1-min; {os.cpu_count()} CPUs visible)")


if __name__ == "__main__":
    main()
