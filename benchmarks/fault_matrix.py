#!/usr/bin/env python3
"""The fault matrix: every fault scenario of the test suite, and how the run came out of it.

Each scenario is a test marked `fault` (tests/test_controller.py and tests/test_lease.py with
the scheduler scripted at its interface; tests/test_slurm_faults.py against the real local
Slurm cluster through client shims put first on PATH; the kill and full-disk tests of
tests/test_search_e2e.py with real local jobs): it injects the fault into a real controller
loop and store, runs the search to its end and is judged by the `fault_outcome` fixture,
which asserts the targets and, with LLMZERO_FAULT_REPORT set, records the figures this script
prints. Targets: at most one job per node, no lost node, no node left non-final, no controller
crash, for every scenario pytest lists: one it skipped (the Slurm scenarios without a local
Slurm cluster) is not met, so the matrix fails.

    python benchmarks/fault_matrix.py [--include-slow]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def missed(rows: list[dict[str, Any]], listed: list[str], skipped: list[str],
           returncode: int) -> list[str]:
    """Why the matrix misses its targets (none: met), from the figures the scenarios reported
    and the fault tests pytest listed (its JUnit report) and skipped."""
    why = [f"{len(skipped)} of {len(listed)} fault scenarios skipped, so not judged (the Slurm "
           "ones need the local cluster: bin/llmzero-local-slurm start): " + ", ".join(skipped)
           ] if skipped else []
    if len(rows) != len(listed):
        why.append(f"{len(rows)} scenarios reported their figures, {len(listed)} listed")
    if returncode != 0:
        why.append(f"pytest exited {returncode}")
    if any(r["jobs_per_node"] > 1 or r["lost"] or r["stuck"] or r["crashes"] for r in rows):
        why.append("a scenario broke a target")
    return why if why or rows else ["no scenario ran"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--include-slow", action="store_true",
                        help="also the kill and full-disk tests (real CPU phases, a few minutes)")
    args = parser.parse_args()
    marks = "fault" if args.include_slow else "fault and not slow"
    with tempfile.TemporaryDirectory() as tmp:
        report, junit = Path(tmp) / "faults.jsonl", Path(tmp) / "junit.xml"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-m", marks, "-p",
                               "no:cacheprovider", f"--junitxml={junit}"], cwd=ROOT,
                              env={**os.environ, "LLMZERO_FAULT_REPORT": str(report)})
        rows = [json.loads(line) for line in report.read_text().splitlines()] \
            if report.exists() else []
        cases = list(ET.parse(junit).getroot().iter("testcase")) if junit.exists() else []
    listed = [f"{c.get('classname')}::{c.get('name')}" for c in cases]
    skipped = [name for name, c in zip(listed, cases) if c.find("skipped") is not None]
    print(f"\n{'scenario':72s} {'jobs/node':>9s} {'lost':>5s} {'stuck':>6s} {'crashes':>8s}")
    for row in rows:
        print(f"{row['scenario'][:72]:72s} {row['jobs_per_node']:>9d} {row['lost']:>5d} "
              f"{row['stuck']:>6d} {row['crashes']:>8d}")
    why = missed(rows, listed, skipped, done.returncode)
    print(f"{len(rows)} scenarios; target (<= 1 job per node, 0 lost, 0 stuck, 0 crashes): "
          f"{'MISSED: ' + '; '.join(why) if why else 'met'}")
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main())
