"""Three-operand arithmetic with a product ("7*6-50=" -> "-8"): harder, and answers can be negative.

Needs multiplication carries and a sign, so a strategy tuned on addition meets a task where
the base model starts much weaker. Standard library only, so verl can load it by path.
"""
from __future__ import annotations

import random
import re

DATA_SOURCE = "arithmetic"
ABILITY = "arithmetic"
# Greedy accuracy the warm-started base is calibrated to. GRPO gains most from a base that
# already solves about half the prompts (measured on addition: +0.14 to +0.21 in 100 steps from
# 0.55, +0.04 to +0.09 from 0.35), and the band leaves room above it.
BASE_BAND = (0.55, 0.70)
DESCRIPTION = "a*b+c or a*b-c with a in 2-9, b in 0-9, c in 0-99; the answer may be negative"

_SIGNED_INTEGER = re.compile(r"-?\d+")


def sample(rng: random.Random) -> tuple[str, str]:
    """One problem as (question text, exact answer text)."""
    a, b, c = rng.randrange(2, 10), rng.randrange(10), rng.randrange(100)
    if rng.random() < 0.5:
        return f"{a}*{b}+{c:02d}=", str(a * b + c)
    return f"{a}*{b}-{c:02d}=", str(a * b - c)


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """1.0 when the last signed integer in the completion equals the answer, else 0.0."""
    if not isinstance(solution_str, str):
        return 0.0
    found = _SIGNED_INTEGER.findall(solution_str[-512:])
    try:
        return 1.0 if found and int(found[-1]) == int(str(ground_truth).strip()) else 0.0
    except ValueError:
        return 0.0
