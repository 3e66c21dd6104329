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


# The variables that pick another numeric path (as another CPU would run): a kept run made
# under others is another measurement, never to be resumed as this one.
NUMERIC_ENV = ("MKL_CBWR", "ATEN_CPU_CAPABILITY")


def numeric_env() -> dict[str, str]:
    """The numeric-path variables this benchmark runs under (none: the native path)."""
    return {name: os.environ[name] for name in NUMERIC_ENV if os.environ.get(name)}


def provenance() -> dict[str, str]:
    """What a results row was measured with: the checkout's commit and its numeric path."""
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    return {"commit": done.stdout.strip() if done.returncode == 0 else "unknown",
            **numeric_env()}


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (NaN where too few values to say)."""
    if not values:
        return math.nan, math.nan
    sd = statistics.stdev(values) if len(values) > 1 else math.nan
    return statistics.fmean(values), sd / math.sqrt(len(values))
