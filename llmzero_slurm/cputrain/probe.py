"""The warm start's probe: the training rows its accuracy band is measured on, and the most
those rows can score with answers written exactly as their ground truths, which is the text
the warm start teaches. Torch-free, so `--check` on a login node refuses, by the same rule as
the job, a reward that scores those answers below the band (one that expects '#### 72' where
the ground truth is '72'): the warm start could never reach it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import DataError
from ..tasks.dataset import Example
from ..tasks.reward_file import RewardFn, judge

PROBE_SIZE = 512           # held-out training rows the band is measured on (fewer on small data)


def split_probe(examples: Sequence[Example], where: str = "task.train_files",
                ) -> tuple[Sequence[Example], Sequence[Example]]:
    """(rows to train on, probe rows): the probe is the split's tail, never trained on.
    `where`: the training file, as a refusal names it."""
    size = min(PROBE_SIZE, len(examples) // 8)
    if size < 16:
        raise DataError(where, f"{len(examples)} rows are too few for a calibrated warm start "
                        "(needs >= 128); set task.warm_start.steps: a fixed number of steps, "
                        "or 0 for none")
    return examples[:-size], examples[-size:]


def accuracy(reward: RewardFn, reward_path: str | Path, rows: Sequence[Example],
             answers: Sequence[str]) -> float:
    """The mean accuracy the reward gives each row's answer: the probe's measure."""
    return sum(judge(reward, reward_path, ex.data_source, text, ex.ground_truth,
                     ex.extra_info).accuracy for ex, text in zip(rows, answers)) / len(rows)


def check_written(reward: RewardFn, reward_path: str | Path, rows: Sequence[Example],
                  low: float) -> None:
    """Refuse probe rows whose ground truths, written as answers, score below the band's
    `low` end on average."""
    ceiling = accuracy(reward, reward_path, rows, [ex.answer for ex in rows])
    if ceiling < low:
        raise DataError("warm start", f"the reward scores only {ceiling:.3f} of the ground "
                        "truths as written (the text the warm start teaches) on the held-out "
                        f"training rows, below the band's low end {low:.2f}: write each ground "
                        "truth as an answer the reward accepts, or set task.warm_start.steps "
                        "(0 for none: warm_start: {steps: 0})")
