"""A phase's metrics as text for the agents' prompts: the proposer's summary table and the
stopper's brief. Built from `without_test` logs only: no test score reaches a prompt.
"""
from __future__ import annotations

import math
from typing import Iterable

from .metrics import KEY_METRICS, MetricsLog, best_point, val_score_series


def _fmt(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    if value == 0 or 1e-3 <= abs(value) < 1e4:
        return f"{value:.4g}"
    return f"{value:.2e}"


def _sample(steps: list[int], rows: int) -> list[int]:
    return [steps[i] for i in _sample_indexes(len(steps), rows)]


def summarize(log: MetricsLog, rows: int = 10, metrics: Iterable[str] = KEY_METRICS) -> str:
    """A compact text table for prompts: per-metric first/min/max/last, then values at evenly
    spaced steps. Validated steps come first (up to `rows`, the best one always): training
    steps only fill the rows left, as a checkpoint is chosen by its score. Test metrics never
    appear."""
    log = log.without_test()
    val = val_score_series(log)
    present = [m for m in metrics if log.get(m)]
    if not present and not val:
        return "(no metrics were logged)"
    lines = ["metric | first | min | max | last"]
    for m, vs in ([("validation score", [v for _, v in val])] if val else []) + \
            [(m, log.values(m)) for m in present]:
        # The range of the finite values: min() and max() of a list holding a NaN (a blow-up)
        # answer by where it stands; first and last show it as it was logged.
        finite = [v for v in vs if math.isfinite(v)] or [math.nan]
        lines.append(f"{m} | {_fmt(vs[0])} | {_fmt(min(finite))} | {_fmt(max(finite))} | "
                     f"{_fmt(vs[-1])}")
    columns = ["step"] + (["validation score"] if val else []) + present
    # Validated steps make the best rows (every column is filled there); the last step and
    # the best validation too, which even spacing over many validations would skip.
    steps = set(_sample([s for s, _ in val], rows - 2)) | {log.last_step or 0}
    steps |= {top[0]} if (top := best_point(val)) else set()
    if len(val) < rows // 2 and rows - len(steps) > 1:
        others = sorted({s for m in present for s, _ in log.get(m)} - steps)
        steps |= set(_sample(others, rows - len(steps)))
    table = [" | ".join(columns)]
    lookup = {m: dict(log.get(m)) for m in present}
    val_at = dict(val)
    for step in sorted(steps):
        cells = [str(step)] + ([_fmt(val_at[step]) if step in val_at else "-"] if val else [])
        cells += [_fmt(lookup[m][step]) if step in lookup[m] else "-" for m in present]
        table.append(" | ".join(cells))
    return "\n".join(lines) + "\n\n" + "\n".join(table)


def brief(log: MetricsLog, metrics: Iterable[str], points: int = 12) -> str:
    """A few lines for frequent prompts: the validation trajectory and the latest context."""
    log = log.without_test()
    val = val_score_series(log)
    shown = [val[i] for i in _sample_indexes(len(val), points)]
    lines = ["validation (step: score): " + (", ".join(f"{s}: {v:.3f}" for s, v in shown)
                                            if shown else "none yet")]
    latest = [f"{m} {_fmt(log.get(m)[-1][1])}" for m in metrics if log.get(m)]
    if latest:
        lines.append(f"latest at step {log.last_step}: " + ", ".join(latest))
    return "\n".join(lines)


def _sample_indexes(n: int, k: int) -> list[int]:
    """Up to k evenly spread indexes of n items, always the first and the last."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})
