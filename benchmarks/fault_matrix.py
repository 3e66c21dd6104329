#!/usr/bin/env python3
"""The fault matrix: every fault scenario of the test suite, and how the run came out of it.

Each scenario is a test marked `fault` (tests/test_controller.py and tests/test_lease.py with
the scheduler scripted at its interface; tests/test_slurm_faults.py against the real local
Slurm cluster through client shims put first on PATH; the kill and full-disk tests of
tests/test_search_e2e.py with real local jobs): it injects the fault into a real controller
loop and store, runs the search to its end and is judged by the `fault_outcome` fixture,
which asserts the targets and, with LLMZERO_FAULT_REPORT set, records the figures this script
prints. Targets: at most one job per node, no lost node, no node left non-final, no controller
crash.

    python benchmarks/fault_matrix.py [--include-slow]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ("jobs_per_node", "lost", "stuck", "crashes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--include-slow", action="store_true",
                        help="also the kill and full-disk tests (real CPU phases, a few minutes)")
    args = parser.parse_args()
    marks = "fault" if args.include_slow else "fault and not slow"
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "faults.jsonl"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", marks, "-p",
                               "no:cacheprovider"], cwd=ROOT,
                              env={**os.environ, "LLMZERO_FAULT_REPORT": str(report)})
        rows = [json.loads(line) for line in report.read_text().splitlines()] \
            if report.exists() else []
    print(f"\n{'scenario':72s} {'jobs/node':>9s} {'lost':>5s} {'stuck':>6s} {'crashes':>8s}")
    for row in rows:
        print(f"{row['scenario'][:72]:72s} {row['jobs_per_node']:>9d} {row['lost']:>5d} "
              f"{row['stuck']:>6d} {row['crashes']:>8d}")
    met = all(r["jobs_per_node"] <= 1 and not (r["lost"] or r["stuck"] or r["crashes"])
              for r in rows)
    print(f"{len(rows)} scenarios; target (<= 1 job per node, 0 lost, 0 stuck, 0 crashes): "
          f"{'met' if met and rows and done.returncode == 0 else 'MISSED'}")
    return 0 if met and rows and done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
