#!/usr/bin/env python3
"""Record the CPU-trainer runs the heuristic-agent tests read (rerun after trainer changes).

Three short real runs of jobs/cpu_grpo.py on the addition task: a healthy one (lr 1e-3), one
that collapses (lr 1e-2) and one whose responses are truncated (max_response_length 2). Each
run's metrics.jsonl is kept verbatim beside run.json (its hyperparameters and saved steps).

    HF_HUB_OFFLINE=1 python tests/data/cpu_grpo/record.py [--steps N] [healthy collapse ...]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAINER = HERE.parents[2] / "jobs" / "cpu_grpo.py"
# name: (steps, hyperparameters); shorter where the behaviour shows early.
RUNS = {
    "healthy": (120, {"lr": 1e-3}),
    "collapse": (80, {"lr": 1e-2}),
    "truncating": (40, {"lr": 1e-3, "max_response_length": 2}),
}


def record(name: str, changes: dict, steps: int) -> None:
    hparams = {"total_training_steps": steps, "test_freq": 10, "save_freq": 20, **changes}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(TRAINER), "--task", "addition", "--output-dir", tmp,
               *(f"{k}={v}" for k, v in hparams.items())]
        print("running", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True)
        out = HERE / name
        out.mkdir(exist_ok=True)
        shutil.copy(Path(tmp) / "metrics.jsonl", out / "metrics.jsonl")
        checkpoints = sorted(int(p.name.split("_")[-1])
                             for p in (Path(tmp) / "ckpt").glob("global_step_*"))
    (out / "run.json").write_text(json.dumps(
        {"hparams": hparams, "checkpoints": checkpoints, "start_step": 0}, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, help="override every run's length")
    parser.add_argument("runs", nargs="*", help=f"which of {', '.join(RUNS)} (default: all)")
    args = parser.parse_args()
    unknown = set(args.runs) - set(RUNS)
    if unknown:
        parser.error(f"unknown runs {sorted(unknown)}; choose from {', '.join(RUNS)}")
    for name in args.runs or RUNS:
        steps, changes = RUNS[name]
        record(name, changes, args.steps or steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
