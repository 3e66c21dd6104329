"""Two-digit addition ("37+58=" -> "95"): the task the CPU trainer's targets are measured on.

Self-contained (standard library only) so verl can load this file by path as its custom reward
function (`reward.custom_reward_function.path`) and the dataset generator can import it too.
"""
from __future__ import annotations

import random
import re

DATA_SOURCE = "addition"
ABILITY = "arithmetic"
# Greedy accuracy the warm-started base is calibrated to. GRPO gains most from a base that
# already solves about half the prompts (measured on addition: +0.14 to +0.21 in 100 steps from
# 0.55, +0.04 to +0.09 from 0.35), and the band leaves room above it.
BASE_BAND = (0.55, 0.70)
DESCRIPTION = "sum of two integers in 0-99; answer is a non-negative integer"

_LAST_INTEGER = re.compile(r"\d+")


def sample(rng: random.Random) -> tuple[str, str]:
    """One problem as (question text, exact answer text)."""
    a, b = rng.randrange(100), rng.randrange(100)
    return f"{a:02d}+{b:02d}=", str(a + b)


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """1.0 when the last integer in the completion equals the answer, else 0.0.

    Taking the last number tolerates chatty completions from a large model, while a tiny
    model gains nothing from printing several guesses. Anything that is not text scores 0.
    """
    if not isinstance(solution_str, str):
        return 0.0
    found = _LAST_INTEGER.findall(solution_str[-512:])
    return 1.0 if found and found[-1].lstrip("0") == str(ground_truth).strip().lstrip("0") else 0.0
