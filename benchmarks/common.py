"""What the benchmarks share: running one phase of the CPU trainer as a phase script does, the
mean with its standard error over seeds, and results files that several sittings (and several
processes at once) add rows to, each row saying what it was measured with."""
from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from filelock import FileLock

from llmzero_slurm.store.atomic import write_text

ROOT = Path(__file__).resolve().parent.parent
CLI = ROOT / "jobs" / "cpu_grpo.py"

Row = dict[str, Any]


def run_phase(task: str, out: Path, cache: Path, args: list[str],
              env: Mapping[str, str] | None = None) -> None:
    """One jobs/cpu_grpo.py phase on one thread, offline; `env` adds a numeric path's variables."""
    subprocess.run([sys.executable, str(CLI), "--task", task, "--output-dir", str(out),
                    "--cache-dir", str(cache), *args], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore",
                        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(env or {})})


# The variables that pick another numeric path (as another CPU would run): a kept run made
# under others is another measurement, never to be resumed, counted or averaged as this one.
NUMERIC_ENV = ("MKL_CBWR", "ATEN_CPU_CAPABILITY")


def numeric_env() -> dict[str, str]:
    """The numeric-path variables this benchmark runs under (none: the native path)."""
    return {name: os.environ[name] for name in NUMERIC_ENV if os.environ.get(name)}


def search_name(task: str, method: str, seed: int) -> str:
    """A kept search's folder: another numeric path is another search, never resumed (nor
    replayed) as a native one."""
    return "-".join([task, method, str(seed), *(f"{k}={v}" for k, v in numeric_env().items())])


def path_of(row: Row) -> dict[str, str]:
    """The numeric path a row was measured on: its variables sit in the row beside its
    figures (provenance), and a row without any (every row written before they were
    recorded was native) is native."""
    return {name: row[name] for name in NUMERIC_ENV if row.get(name)}


def path_name(env: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in env.items()) or "native"


def this_path(rows: list[Row]) -> tuple[list[Row], str]:
    """The rows measured on this process's numeric path, and which path that is, naming the
    rows of others: those are never counted as on file, nor mixed into a mean."""
    here = numeric_env()
    others = [path_name(path_of(r)) for r in rows if path_of(r) != here]
    left = ", ".join(f"{others.count(n)} on {n}" for n in dict.fromkeys(others))
    return ([r for r in rows if path_of(r) == here],
            f"numeric path {path_name(here)}" + (f" (rows left out: {left})" if left else ""))


def provenance() -> Row:
    """What a results row is measured with, taken when its measurement starts: the checkout's
    commit, whether tracked files (other than the results being written) differed from it,
    and the numeric path."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return {"commit": "unknown", **numeric_env()}
    status = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no", "--", ".",
                             ":!benchmarks/results"], capture_output=True, text=True)
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip()),
            **numeric_env()}


def commits(rows: list[Row]) -> str:
    """The distinct commits rows were measured at ('+dirty': with local changes)."""
    names = dict.fromkeys(f"{r['commit']}{'+dirty' if r.get('dirty') else ''}"
                          if r.get("commit") else "not recorded" for r in rows)
    return ", ".join(names) or "none"


def row_key(row: Row, fields: tuple[str, ...]) -> tuple[Any, ...]:
    """A row's identity in its results file: what it measured, and on which numeric path."""
    return (*(row.get(f) for f in fields), tuple(sorted(path_of(row).items())))


def read_rows(path: Path) -> list[Row]:
    """A results file's rows: a bare list, or the `runs` of a file with a header."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    return data["runs"] if isinstance(data, dict) else data


def add_row(path: Path, row: Row, key: Callable[[Row], Any],
            header: Row | None = None) -> list[Row]:
    """Put `row` into the results file and return every row now there. Under a file lock it
    reads the file again, so rows another process added since are kept (a row of the same
    key is replaced), and replaces it atomically; `header`: the file is {**header, "runs":
    rows} instead of a bare list."""
    with FileLock(f"{path}.lock"):
        rows = [r for r in read_rows(path) if key(r) != key(row)] + [row]
        write_text(path, json.dumps(rows if header is None else {**header, "runs": rows},
                                    indent=1) + "\n")
    return rows


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (NaN where too few values to say)."""
    if not values:
        return math.nan, math.nan
    sd = statistics.stdev(values) if len(values) > 1 else math.nan
    return statistics.fmean(values), sd / math.sqrt(len(values))
