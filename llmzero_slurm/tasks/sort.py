"""Letter sorting ("sort(dbca)=" -> "abcd"): a symbolic task with no arithmetic at all.

Every output character depends on the whole input, and accuracy falls with word length, so
credit goes only to responses that are exactly right. Standard library only, so verl can
load it by path.
"""
from __future__ import annotations

import random
import string

DATA_SOURCE = "sort"
ABILITY = "string"
# Greedy accuracy the warm-started base is calibrated to. GRPO gains most from a base that
# already solves about half the prompts (measured on addition: +0.14 to +0.21 in 100 steps from
# 0.55, +0.04 to +0.09 from 0.35), and the band leaves room above it.
BASE_BAND = (0.55, 0.70)
DESCRIPTION = "sort the letters of a word of 4-8 lowercase letters alphabetically"


def sample(rng: random.Random) -> tuple[str, str]:
    """One problem as (question text, exact answer text)."""
    word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 8)))
    return f"sort({word})=", "".join(sorted(word))


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """1.0 when the completion's last whitespace-separated word is exactly the sorted word."""
    if not isinstance(solution_str, str):
        return 0.0
    words = solution_str[-512:].split()
    return 1.0 if words and words[-1] == str(ground_truth).strip() else 0.0
