"""llmzero-report: write <run>/report/ (index.html, figures, strategy.yaml) from a run directory,
or with --output into a folder of your own (a colleague who may only read the run).
strategy.yaml is the best strategy as a schedule: search.method replay with
search.strategy_file set to it runs it again (on another task, say)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import FULL, StorageError
from ..report import write_report
from .common import add_run_dir, open_run, run_main


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="llmzero-report", description=__doc__)
    add_run_dir(p)
    p.add_argument("--output", type=Path, metavar="DIR",
                   help="write the report here instead of <run>/report: a new or empty folder, or "
                        "one an earlier report wrote (any other is refused)")
    args = p.parse_args(argv)
    store = open_run(args.run_dir)
    try:
        index = write_report(store.root, args.output, say=_say)
    except StorageError as exc:
        if args.output is not None:
            raise
        if any(os.strerror(code) in exc.problem for code in FULL):
            hint = "free space, or give a folder on another filesystem with --output DIR"
        else:
            hint = "without write access to the run, give a folder of your own with --output DIR"
        raise StorageError(exc.path, f"{exc.problem}; {hint}") from None
    print(f"report: {index}")
    return 0


if __name__ == "__main__":
    run_main(main)
