"""A phase's metrics as per-metric series (metrics_reader.py reads them), and its scores.

Test-set metrics are kept apart from everything an agent may see; `without_test` is the one
gate every prompt builder goes through.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    from .search.tree import Node

Series = list[tuple[int, float]]

TEST_PREFIX = "test"     # test-core/..., test-aux/..., test/...
# A split's score: `<split>-core/<data_source>/(acc|reward)/mean@N`; a data source may hold
# slashes (verl's own preprocessing names GSM8K rows `openai/gsm8k`).
_SCORES = {split: re.compile(rf"^{split}-core/.+/(acc|reward)/mean@\d+$") for split in ("val", "test")}
_SCORE_TEXT = re.compile(r"\b(?:val|test)-\w+/[\w@/.\-]*['\"]?\s*[:=]\s*[^\s,}]+")

# What a prompt summarises, in the order an expert reads it (verl's names).
KEY_METRICS = (
    "critic/rewards/mean", "critic/score/mean", "actor/entropy", "actor/kl_loss", "actor/ppo_kl",
    "actor/pg_loss", "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/grad_norm",
    "response_length/mean", "response_length/clip_ratio", "timing_s/step",
    "actor/perf/max_memory_reserved_gb", "perf/max_rss_gb",
)
VAL_SCORE = "validation score"    # the panel of val_score_series, not a logged name
# What the stopper compares (plots.overlay_figure); validation first because only it can
# justify STOP.
OVERLAY_METRICS = (VAL_SCORE, "critic/rewards/mean", "actor/entropy", "actor/kl_loss",
                   "response_length/mean", "actor/grad_norm")


@dataclass
class MetricsLog:
    """Per-metric series keyed by global step; `problems` lists skipped lines for humans."""

    series: dict[str, Series] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def last_step(self) -> int | None:
        steps = [s[-1][0] for s in self.series.values() if s]
        return max(steps) if steps else None

    def get(self, name: str) -> Series:
        return self.series.get(name, [])

    def values(self, name: str) -> list[float]:
        return [v for _, v in self.get(name)]

    def without_test(self) -> "MetricsLog":
        """Everything an agent may be shown: every test-set metric removed."""
        return MetricsLog({k: v for k, v in self.series.items() if not is_test_metric(k)},
                          list(self.problems))

    def after(self, step: int) -> "MetricsLog":
        """Only points logged after a global step (the part a phase itself trained)."""
        return MetricsLog({k: [(s, v) for s, v in pts if s > step]
                           for k, pts in self.series.items()})

    def until(self, step: int) -> "MetricsLog":
        return MetricsLog({k: [(s, v) for s, v in pts if s <= step]
                           for k, pts in self.series.items()})


def is_test_metric(name: str) -> bool:
    return name.startswith(TEST_PREFIX)


def strip_score_text(text: str) -> str:
    """A log without validation or test scores: `val-core/<source>/...:0.41`, `=0.41`, `': 0.41`."""
    return _SCORE_TEXT.sub("[score removed]", text)


def stitch(phases: Iterable[tuple[MetricsLog, int | None]]) -> MetricsLog:
    """One strategy's curves from its phases, root first: each (log, step the next phase resumed
    from) keeps its points up to that step, so the result reads on one global-step axis."""
    out: dict[str, dict[int, float]] = {}
    for log, until in phases:
        part = log if until is None else log.until(until)
        for name, pts in part.series.items():
            out.setdefault(name, {}).update(pts)
    return MetricsLog({k: sorted(v.items()) for k, v in out.items()})


def strategy_curves(path: Sequence[Node], metrics_of: Callable[[int], MetricsLog]) -> MetricsLog:
    """The curves of a strategy (a best path, root first) stitched on one global-step axis:
    each phase up to the step its successor resumed from."""
    return stitch((metrics_of(node.id), nxt.resume.step if nxt is not None and nxt.resume
                   else None) for node, nxt in zip(path, [*path[1:], None]))


def val_score_series(log: MetricsLog) -> Series:
    """The validation score per validated step: mean over data sources of the accuracy
    (or the reward when the reward function returns a dict)."""
    by_step: dict[int, list[float]] = {}
    for name in score_names(log.series):
        for step, value in log.get(name):
            by_step.setdefault(step, []).append(value)
    return [(s, sum(v) / len(v)) for s, v in sorted(by_step.items())]


def val_score(row: Mapping[str, float]) -> float | None:
    """The validation score of one logged step, by val_score_series's rule."""
    values = [row[n] for n in score_names(row)]
    return sum(values) / len(values) if values else None


def test_score_at(log: MetricsLog, step: int) -> float | None:
    """Mean held-out test accuracy over data sources at one global step (reports only); None
    unless every source has a finite score there, as a validation step with a NaN source has
    no score: the mean of the others would be reported as the whole test set's."""
    names = score_names(log.series, "test")
    values = [dict(log.get(n)).get(step, math.nan) for n in names]
    return sum(values) / len(values) if values and all(map(math.isfinite, values)) else None


def base_scores(tree: Iterable[Node], metrics_of: Callable[[int], MetricsLog]) -> tuple[float | None, float | None]:
    """The base model's validation and test scores: step 0 of the oldest phase that starts from
    it and validated before training (the cpu trainer always does; verl's val_before_train).
    A non-finite one (a NaN source) is no score, as best_point skips it."""
    for node in sorted((n for n in tree if n.resume is None), key=lambda n: n.id):
        log = metrics_of(node.id).until(0)
        if (val := dict(val_score_series(log)).get(0)) is not None and math.isfinite(val):
            return val, test_score_at(log, 0)
    return None, None


def score_names(names: Iterable[str], split: str = "val") -> list[str]:
    """The metrics a validation (or test) score averages: the accuracies, else the rewards."""
    scored = [n for n in names if _SCORES[split].match(n)]
    return [n for n in scored if n.rsplit("/", 2)[1] == "acc"] or scored


def best_val(log: MetricsLog) -> tuple[int, float] | None:
    return best_point(val_score_series(log))


def best_point(series: Series) -> tuple[int, float] | None:
    """The highest finite point, the earliest of equals: a NaN (a blow-up) would make max()
    answer NaN, or whatever came after it."""
    finite = [(s, v) for s, v in series if math.isfinite(v)]
    return max(finite, key=lambda p: (p[1], -p[0])) if finite else None
