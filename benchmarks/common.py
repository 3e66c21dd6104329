"""What the benchmarks share: running one phase of the CPU trainer as a phase script does, and
the mean with its standard error over seeds."""
from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Mapping

ROOT = Path(__file__).resolve().parent.parent
CLI = ROOT / "jobs" / "cpu_grpo.py"


def run_phase(task: str, out: Path, cache: Path, args: list[str],
              env: Mapping[str, str] | None = None) -> None:
    """One jobs/cpu_grpo.py phase on one thread, offline; `env` adds a numeric path's variables."""
    subprocess.run([sys.executable, str(CLI), "--task", task, "--output-dir", str(out),
                    "--cache-dir", str(cache), *args], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore",
                        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(env or {})})


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (NaN where too few values to say)."""
    if not values:
        return math.nan, math.nan
    sd = statistics.stdev(values) if len(values) > 1 else math.nan
    return statistics.fmean(values), sd / math.sqrt(len(values))
