"""llmzero-report: write <run>/report/ (index.html, figures, strategy.yaml) from a run directory."""
from __future__ import annotations

import argparse

from ..report import write_report
from .common import add_run_dir, open_run, run_main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="llmzero-report", description=__doc__)
    add_run_dir(p)
    args = p.parse_args(argv)
    store = open_run(args.run_dir)
    print(f"report: {write_report(store.root)}")
    return 0


if __name__ == "__main__":
    run_main(main)
