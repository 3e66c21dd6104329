#!/usr/bin/env python3
"""Screenshots of the report page in headless Chromium, to look for overlapping or clipped text
the way a reader's browser shows it.

Writes the report of RUN_DIR (or of a synthetic 12-phase run when none is given, built as
benchmarks/report_cost.py builds its runs), then one full-page screenshot of index.html
(cropped below the page's end). Needs Chromium (Debian: apt-get install chromium); no network.

    python benchmarks/report_screenshots.py [RUN_DIR] [--out DIR] [--chromium PATH]
"""
from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image
from report_cost import build

from llmzero_slurm.report import write_report

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--virtual-time-budget=10000",   # let the figures load before the picture is taken
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def shoot(chromium: str, url: str, out: Path, profile: Path, height: int = 30000) -> None:
    """A window taller than the page, then the blank rows below the page's end cut off."""
    subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size=1280,{height}",
                    f"--screenshot={out}", url], check=True, capture_output=True, timeout=300)
    image = Image.open(out)
    ink = image.convert("L").point(lambda v: 255 if v < 250 else 0).getbbox()
    if ink:
        image.crop((0, 0, image.width, min(image.height, ink[3] + 40))).save(out)
    print(f"  {out} ({image.width} x {ink[3] + 40 if ink else image.height} px)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, nargs="?", help="a run directory (default: synthetic)")
    parser.add_argument("--out", type=Path, default=Path("report-screenshots"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args()
    if not shutil.which(args.chromium):
        print(f"no Chromium at {args.chromium!r} (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run_dir
        if run is None:
            run = Path(tmp) / "demo"
            build(run, 12, random.Random(12))
        index = write_report(run).resolve()
        print(f"report {index}; screenshots:")
        shoot(args.chromium, index.as_uri(), args.out / "report.png", Path(tmp) / "profile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
