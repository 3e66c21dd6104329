"""Turn what a phase left in its directory into the node's Results.

Read from the phase's own files only (metrics.jsonl, ckpt/, status.json), so ingesting twice
gives the same answer -- a controller killed while ingesting simply ingests again.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from ..backends import TrainerBackend
from ..errors import ConfigError, StateError
from ..metrics import MetricsLog, best_val, read_metrics
from ..search.tree import Node, Results
from ..store.atomic import read_json

_TEST_SCORE = re.compile(r"^test-core/[^/]+/(acc|reward)/mean@\d+$")


def test_score_at(log: MetricsLog, step: int) -> float | None:
    """Mean held-out test accuracy over data sources at one global step (reports only)."""
    names = [n for n in log.series if _TEST_SCORE.match(n)]
    names = [n for n in names if "/acc/" in n] or names
    values = [v for n in names for s, v in log.get(n) if s == step and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def device_hours(node_dir: Path, nodes: int) -> float:
    """Wall time of the job times the devices it held (GPUs, or one CPU slot without GPUs)."""
    try:
        status = read_json(node_dir / "status.json")
        elapsed = float(status["finished_at"]) - float(status["started_at"])
    except (StateError, KeyError, TypeError, ValueError):
        return 0.0
    gpus = [g for g in str(status.get("gpus") or "").split(",") if g.strip()]
    return max(elapsed, 0.0) / 3600.0 * max(1, len(gpus)) * max(1, nodes)


def collect_results(node: Node, node_dir: Path, backend: TrainerBackend, nodes: int = 1) -> Results:
    """The node's results from its files: best validation (and test at that step), last step,
    checkpoints and device-hours."""
    log = read_metrics(node_dir / "metrics.jsonl").after(node.start_step)
    best = best_val(log.without_test())
    results = Results(last_step=log.last_step, checkpoints=_checkpoints(backend, node_dir),
                      gpu_hours=device_hours(node_dir, nodes))
    if best is not None:
        results.best_val_step, results.best_val = best
        results.test_at_best = test_score_at(log, best[0])
    return results


def _checkpoints(backend: TrainerBackend, node_dir: Path) -> list[int]:
    try:
        return backend.checkpoint_steps(node_dir)
    except ConfigError:   # a phase that died before recording its step offset saved nothing
        return []
