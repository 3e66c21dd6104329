"""The offline early stopper, and the rule every stopper obeys on when not to judge at all."""
from __future__ import annotations

from ..decisions import Decision

MIN_STOP_STEP = 10          # never stop a phase before this many of its own steps


TREND_POINTS = 5   # validation points the stopper fits its trend to


def _trend(points: list[tuple[int, float]]) -> tuple[float, float, int]:
    """Least-squares (level at the last step, slope per step, steps spanned) of the last
    validation points: one noisy checkpoint neither rescues nor condemns a phase."""
    pts = points[-TREND_POINTS:]
    xs, ys = [s for s, _ in pts], [v for _, v in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
    return my + slope * (xs[-1] - mx), slope, xs[-1] - xs[0]


def ruled(current_val: list[tuple[int, float]], best_val: float | None, phase_step: int,
          planned_end: int | None) -> Decision | None:
    """CONTINUE when a phase cannot be judged yet or no longer needs judging (any stopper,
    LLM or not); None when a judgement is due."""
    step = current_val[-1][0] if current_val else None
    if phase_step < MIN_STOP_STEP:
        return Decision("CONTINUE", f"only {phase_step} steps into the phase", step)
    if best_val is None:
        return Decision("CONTINUE", "no completed strategy to compare with", step)
    if step is None:
        return Decision("CONTINUE", "too few validation points to judge", step)
    interval = step - current_val[-2][0] if len(current_val) > 1 else 0
    if planned_end is not None and planned_end - step <= interval:
        # A STOP issued now lands after the phase's remaining steps have mostly run.
        return Decision("CONTINUE", f"the phase reaches its planned end (step {planned_end}) "
                        "by its next validation point; stopping now saves little", step)
    return None


def decide(current_val: list[tuple[int, float]], best_val: float | None, phase_step: int,
           planned_end: int | None, margin: float, best_node: int | None = None) -> Decision:
    """STOP only when the validation trend stays more than `margin` below the best score
    (of node `best_node`, named in the reason with the gap and the margin: a user asking why
    a phase was cancelled sees what it could not beat, and by how much).

    The trend is extended no further ahead than the steps it was fitted on (and never past
    the planned end): a slope read off a few noisy points says little about the far future,
    and RL curves flatten rather than keep climbing.
    """
    if (answer := ruled(current_val, best_val, phase_step, planned_end)) is not None:
        return answer
    assert best_val is not None   # ruled() answers when there is no best score
    last = current_val[-1][0]
    if len(current_val) < 3:
        return Decision("CONTINUE", "too few validation points to judge", last)
    level, slope, span = _trend(current_val)
    ahead = min(span, (planned_end or last) - last)
    reach = level + max(0.0, slope) * ahead
    if reach + margin < best_val:
        of = f" (node {best_node})" if best_node is not None else ""
        return Decision("STOP", f"the validation trend reaches about {reach:.3f} by step "
                        f"{last + ahead}, {best_val - reach:.3f} below the best {best_val:.3f}"
                        f"{of}, more than the margin {margin:g}", last)
    return Decision("CONTINUE", f"the validation trend may reach {reach:.3f} by step "
                    f"{last + ahead} against the best {best_val:.3f}", last)
