"""Where the project's templates and job programs live (beside the package in a checkout)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"
JOBS = ROOT / "jobs"
