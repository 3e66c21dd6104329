"""Run-length decoding ("a3b1c4=" -> "aaabcccc"): answers from 1 to 15 letters whose
difficulty grows with their length.

Each of 1-3 runs is a letter and a count of 1-5. Unlike word reversal, where the warm-started
base is about as good on long words as on short ones, here every extra letter is one more
count to keep: the calibrated base solves most short answers and few long ones (measured
greedy accuracy about 0.7 at 3-5 letters, 0.4 at 10 and 0.15 at 12 or more). So response
capacity matters twice over: at the CPU trainer's default `max_response_length` (8 tokens, EOS
included) every answer of 8 letters or more is cut off, and the answers a phase can still gain
on move towards the long end as training goes. Standard library only, so verl can load it by
path.
"""
from __future__ import annotations

import random
import string

DATA_SOURCE = "expand"
ABILITY = "string"
# Greedy accuracy the warm-started base is calibrated to, measured with room for every answer.
BASE_BAND = (0.45, 0.60)
DESCRIPTION = ("expand 1-3 runs of a letter and a count of 1-5 ('a3b1=' -> 'aaab'); answers "
               "are 1-15 letters, and longer ones are harder")
RUNS, COUNTS = (1, 3), (1, 5)


def sample(rng: random.Random) -> tuple[str, str]:
    """One problem as (question text, exact answer text)."""
    runs = [(rng.choice(string.ascii_lowercase), rng.randint(*COUNTS))
            for _ in range(rng.randint(*RUNS))]
    return "".join(f"{c}{k}" for c, k in runs) + "=", "".join(c * k for c, k in runs)


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """1.0 when the completion's last whitespace-separated word is exactly the expansion."""
    if not isinstance(solution_str, str):
        return 0.0
    words = solution_str[-512:].split()
    return 1.0 if words and words[-1] == str(ground_truth).strip() else 0.0
