"""Word reversal with widely varying lengths ("reverse(abcde)=" -> "edcba"): the task where the
training strategy matters.

Answers run from 2 to 12 letters, so response capacity is a real dimension: at the CPU
trainer's default `max_response_length` (8 tokens, EOS included) every word of 8 letters or
more is cut off and can never score, while longer responses cost generation time on every
rollout. Short words are learnt first and long ones later, so what a phase should spend its
samples on changes as the policy improves. Standard library only, so verl can load it by path.
"""
from __future__ import annotations

import random
import string

DATA_SOURCE = "reverse"
ABILITY = "string"
# Greedy accuracy the warm-started base is calibrated to, measured with room for every answer
# (the probe is not limited by max_response_length).
BASE_BAND = (0.55, 0.70)
DESCRIPTION = "reverse a word of 2-12 lowercase letters; answers vary in length from 2 to 12"
LENGTHS = (2, 12)


def sample(rng: random.Random) -> tuple[str, str]:
    """One problem as (question text, exact answer text)."""
    word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(*LENGTHS)))
    return f"reverse({word})=", word[::-1]


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """1.0 when the completion's last whitespace-separated word is exactly the reversed word."""
    if not isinstance(solution_str, str):
        return 0.0
    words = solution_str[-512:].split()
    return 1.0 if words and words[-1] == str(ground_truth).strip() else 0.0
