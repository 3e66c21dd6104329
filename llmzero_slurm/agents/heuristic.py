"""The offline agent: deterministic rules over metric trends, no LLM needed.

It is the default on clusters without API access and the fallback when an LLM keeps failing.
Rules, checked in this order on the parent phase's own steps ("early"/"late" = the first and
last fifth of the logged points):

1. collapse      a loss, KL or gradient norm turned NaN/inf, or rewards or validation
                 fall well below their peak after KL rose:
                 lr x0.3, KL coef x3 (at least 0.01), grad_clip x0.5; resume from the last
                 checkpoint at or before the validation peak.
2. truncation    >10% of responses hit max_response_length: length x1.5 (capacity grows).
3. kl_spike      KL rises >5x with rewards holding: lr x0.5, KL coef x2.
4. entropy_collapse  entropy falls below a third while rewards stall: temperature +0.2,
                 clip_ratio_high up to 0.28, KL coef x0.5.
5. vanishing     validation flat and grad_norm halved: lr x2 with KL coef x1.5 (escape the
                 plateau without diverging), rollouts x2.
6. noisy         grad_norm varies more than its mean: lr x0.7, grad_clip x0.5, rollouts x2.
7. healthy       validation still rising: continue unchanged from the last checkpoint.
8. plateau       otherwise: lr x0.5, the learning-rate decay of ReduceLROnPlateau: a policy
                 circling an optimum settles with smaller steps (escaping a flat region with
                 a larger one is rule 5, when the gradients say the signal is vanishing).

Capacity (rollouts, lengths) only ever grows; regularisation moves both ways. When a proposal
would duplicate an existing sibling, or a forced fresh start would replay the parent's
configuration, the next alternative is used (more cautious, then bolder).
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..hparams import PARAMS
from ..metrics import MetricsLog, val_score_series
from .answers import (AnswerError, Decision, Fix, Proposal, check_fix, check_proposal)

MIN_STOP_STEP = 10          # never stop a phase before this many of its own steps


def _window(values: list[float], late: bool) -> float:
    if not values:
        return math.nan
    k = max(1, len(values) // 5)
    part = values[-k:] if late else values[:k]
    return sum(part) / len(part)


def _smoothed_peak(values: list[float]) -> float:
    """The best mean over a window of a fifth of the run (per-step rewards are noisy)."""
    if not values:
        return math.nan
    k = max(1, len(values) // 5)
    return max(statistics.fmean(values[i:i + k]) for i in range(len(values) - k + 1))


@dataclass
class Signals:
    """Trend numbers the rules read; NaN where a metric was not logged."""

    val: list[tuple[int, float]]
    reward_early: float
    reward_late: float
    reward_peak: float
    kl_early: float
    kl_late: float
    entropy_early: float
    entropy_late: float
    grad_early: float
    grad_late: float
    grad_cv: float
    truncation: float
    blown_up: bool            # a loss, KL or gradient norm became NaN or infinite

    @classmethod
    def of(cls, log: MetricsLog) -> "Signals":
        def finite(name: str) -> list[float]:
            return [v for v in log.values(name) if math.isfinite(v)]

        reward = finite("critic/rewards/mean")
        kl = finite("actor/kl_loss") or finite("actor/ppo_kl")
        ent, grad = finite("actor/entropy"), finite("actor/grad_norm")
        cv = (statistics.pstdev(grad) / statistics.fmean(grad)
              if len(grad) > 2 and statistics.fmean(grad) > 0 else math.nan)
        blown_up = any(not math.isfinite(v) for name in ("actor/kl_loss", "actor/ppo_kl",
                                                          "actor/pg_loss", "actor/grad_norm")
                       for v in log.values(name))
        val = [(s, v) for s, v in val_score_series(log.without_test()) if math.isfinite(v)]
        return cls(val, _window(reward, False), _window(reward, True), _smoothed_peak(reward),
                   abs(_window(kl, False)), abs(_window(kl, True)), _window(ent, False),
                   _window(ent, True), _window(grad, False), _window(grad, True), cv,
                   _window(finite("response_length/clip_ratio"), True), blown_up)

    @property
    def val_best(self) -> tuple[int, float] | None:
        return max(self.val, key=lambda p: (p[1], -p[0])) if self.val else None

    def val_rising(self) -> bool:
        """Still improving: a line fitted to the second half of the validation points gains
        more than a point over that half (single points are too noisy to compare)."""
        half = self.val[len(self.val) // 2:]
        if len(half) < 3:
            return True
        steps, values = zip(*half)
        slope = statistics.linear_regression(steps, values).slope
        return slope * (steps[-1] - steps[0]) > 0.01


def diagnose(sig: Signals) -> tuple[str, str]:
    """The first matching rule and a one-line explanation with the numbers behind it."""
    vs = [v for _, v in sig.val]
    best = sig.val_best
    if sig.blown_up:
        return "collapse", "the loss, KL or gradient norm became NaN or infinite"
    val_fell = best is not None and vs[-1] < 0.6 * best[1] and best[1] > 0.05
    reward_fell = sig.reward_peak > 0.05 and sig.reward_late < 0.6 * sig.reward_peak
    kl_rose = sig.kl_late > 3 * sig.kl_early + 1e-6
    if (val_fell or reward_fell) and kl_rose:
        return "collapse", (f"KL rose from {sig.kl_early:.3g} to {sig.kl_late:.3g} while reward "
                            f"fell from a peak of {sig.reward_peak:.3g} to {sig.reward_late:.3g}"
                            + (f" and validation from {best[1]:.3g} to {vs[-1]:.3g}"
                               if best else ""))
    if sig.truncation > 0.1:
        return "truncation", (f"{sig.truncation:.0%} of late responses were cut off at "
                              "max_response_length")
    if sig.kl_late > 5 * sig.kl_early + 1e-4:
        return "kl_spike", f"KL rose from {sig.kl_early:.3g} to {sig.kl_late:.3g}; rewards held"
    if sig.entropy_late < sig.entropy_early / 3 and not sig.reward_late > sig.reward_early * 1.05:
        return "entropy_collapse", (f"entropy fell from {sig.entropy_early:.3g} to "
                                    f"{sig.entropy_late:.3g} without reward gains")
    rising = sig.val_rising()
    if not rising and sig.grad_late < 0.5 * sig.grad_early:
        return "vanishing", (f"validation is flat and grad_norm fell from {sig.grad_early:.3g} "
                             f"to {sig.grad_late:.3g}")
    if sig.grad_cv > 1.0:
        return "noisy", f"grad_norm's spread is {sig.grad_cv:.2f}x its mean"
    if rising:
        return "healthy", "validation is still improving at the end of the phase"
    return "plateau", "validation has stopped improving"


def _clamp(key: str, value: float) -> Any:
    p = PARAMS[key]
    value = min(max(value, p.low), p.high)
    return int(math.ceil(value)) if p.type is int else float(f"{value:.3g}")


def _scale(hp: Mapping[str, Any], key: str, factor: float, floor: float = 0.0) -> dict[str, Any]:
    """Multiply a numeric knob the parent sets; unknown current values are left alone."""
    if key not in hp or hp[key] is None:
        return {key: floor} if floor else {}
    return {key: _clamp(key, max(hp[key] * factor, floor))}


def _add(hp: Mapping[str, Any], key: str, delta: float, default: float) -> dict[str, Any]:
    return {key: _clamp(key, hp.get(key, default) + delta)}


def _kl(hp: Mapping[str, Any], factor: float, floor: float = 0.0) -> dict[str, Any]:
    out = _scale(hp, "kl_loss_coef", factor, floor)
    if out.get("kl_loss_coef") and hp.get("use_kl_loss") is False:
        out["use_kl_loss"] = True
    return out


_RULES: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "collapse": lambda hp: {**_scale(hp, "lr", 0.3), **_kl(hp, 3.0, 0.01),
                            **_scale(hp, "grad_clip", 0.5)},
    "kl_spike": lambda hp: {**_scale(hp, "lr", 0.5), **_kl(hp, 2.0, 0.005)},
    "truncation": lambda hp: _scale(hp, "max_response_length", 1.5),
    "entropy_collapse": lambda hp: {**_add(hp, "temperature", 0.2, 1.0),
                                    "clip_ratio_high": max(hp.get("clip_ratio_high", 0.2), 0.28),
                                    **_kl(hp, 0.5)},
    "vanishing": lambda hp: {**_scale(hp, "lr", 2.0), **_kl(hp, 1.5),
                             **_scale(hp, "rollout_n", 2.0)},
    "noisy": lambda hp: {**_scale(hp, "lr", 0.7), **_scale(hp, "grad_clip", 0.5),
                         **_scale(hp, "rollout_n", 2.0)},
    "healthy": lambda hp: {},
    "plateau": lambda hp: _scale(hp, "lr", 0.5),
}
# Alternatives when the first choice duplicates a sibling: more cautious, then bolder.
_ALTERNATIVES = (lambda hp: {**_scale(hp, "lr", 0.5), **_kl(hp, 1.5)},
                 lambda hp: {**_scale(hp, "lr", 1.5), **_kl(hp, 2.0, 0.005)})


def _resume_step(checkpoints: list[int], sig: Signals, rule: str) -> int | None:
    if not checkpoints:
        return None
    if rule == "collapse" and sig.val_best:
        before = [c for c in checkpoints if c <= sig.val_best[0]]
        return max(before) if before else None
    return max(checkpoints)


def propose(parent_hp: Mapping[str, Any], log: MetricsLog, checkpoints: list[int],
            phase_steps: int, backend: str, scratch_only: bool = False,
            taken: list[dict[str, Any]] = ()) -> Proposal:
    """A validated proposal; `taken` holds the siblings' configurations to avoid repeating."""
    sig = Signals.of(log.without_test())
    rule, why = diagnose(sig)
    step = None if scratch_only else _resume_step(checkpoints, sig, rule)
    steps = max(1, phase_steps) if step is not None else max(1, log.last_step or phase_steps)
    tried = []
    for make in (_RULES[rule], *_ALTERNATIVES):
        changes = {k: v for k, v in make(parent_hp).items() if parent_hp.get(k) != v}
        if scratch_only and not changes:
            continue   # a fresh strategy should not replay the parent's configuration
        data = {"diagnosis": f"{rule}: {why}.", "changes": changes, "checkpoint_step": step,
                "additional_steps": steps}
        try:
            proposal = check_proposal(data, parent_hp, checkpoints, scratch_only, backend,
                                      "heuristic")
        except AnswerError as exc:
            tried.append(str(exc))
            continue
        if proposal.hparams not in taken:
            return proposal
    # Every variant was taken or invalid: restart the parent's configuration from scratch.
    return check_proposal({"diagnosis": f"{rule}: {why}; no new variant left ({tried})",
                           "changes": {}, "checkpoint_step": None,
                           "additional_steps": max(1, log.last_step or phase_steps)},
                          parent_hp, checkpoints, True, backend, "heuristic")


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
    if not current_val:
        return Decision("CONTINUE", "too few validation points to judge", step)
    interval = step - current_val[-2][0] if len(current_val) > 1 else 0
    if planned_end is not None and planned_end - step <= interval:
        # A STOP issued now lands after the phase's remaining steps have mostly run.
        return Decision("CONTINUE", f"the phase reaches its planned end (step {planned_end}) "
                        "by its next validation point; stopping now saves little", step)
    return None


def decide(current_val: list[tuple[int, float]], best_val: float | None, phase_step: int,
           planned_end: int | None, margin: float) -> Decision:
    """STOP only when the validation trend stays more than `margin` below the best score.

    The trend is extended no further ahead than the steps it was fitted on (and never past
    the planned end): a slope read off a few noisy points says little about the far future,
    and RL curves flatten rather than keep climbing.
    """
    if (answer := ruled(current_val, best_val, phase_step, planned_end)) is not None:
        return answer
    last = current_val[-1][0]
    if len(current_val) < 3:
        return Decision("CONTINUE", "too few validation points to judge", last)
    level, slope, span = _trend(current_val)
    ahead = min(span, (planned_end or last) - last)
    reach = level + max(0.0, slope) * ahead
    if reach + margin < best_val:
        return Decision("STOP", f"the validation trend reaches about {reach:.3f} by step "
                        f"{last + ahead}, below the best {best_val:.3f}", last)
    return Decision("CONTINUE", f"the validation trend may reach {reach:.3f} by step "
                    f"{last + ahead} against the best {best_val:.3f}", last)


# Failure signatures, most specific first: (class, Slurm states, log patterns).
_SIGNATURES = (
    ("oom", {"OUT_OF_MEMORY"}, r"out of memory|OutOfMemoryError|CUDA error: out of memory|"
                               r"oom[-_ ]kill|Cannot allocate memory|MemoryError"),
    ("timeout", {"TIMEOUT", "DEADLINE"}, r"DUE TO TIME LIMIT"),
    ("node_fault", {"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"},
     r"NCCL (error|WARN)|ncclSystemError|Connection (reset|refused)|RayActorError|"
     r"GCS|node .* (down|failure)|Socket Timeout|unhandled system error"),
    ("user_code", set(), r"Traceback \(most recent call last\)"),
)


def classify(state: str | None, log_tail: str) -> str:
    state = (state or "").upper().split()[0] if state else ""
    for failure, states, pattern in _SIGNATURES:
        if state in states or re.search(pattern, log_tail, re.I):
            return failure
    return "unknown"


def _last_error_line(log_tail: str) -> str:
    lines = [ln.strip() for ln in log_tail.splitlines() if re.match(r"^\w*(Error|Exception)\b",
                                                                      ln.strip())]
    return lines[-1][:300] if lines else "see the job log"


TIME_LIMIT_SHARE = 0.7   # of the steps a timed-out phase managed, what its fix plans


def analyze(state: str | None, exit_code: int | None, log_tail: str,
            hparams: Mapping[str, Any], backend: str, steps_done: int | None = None) -> Fix:
    """Classify a failure and pick the smallest fix that addresses it. A phase that hit its
    time limit after `steps_done` steps is re-planned to fit: a share of what it managed."""
    failure = classify(state, log_tail)
    data: dict[str, Any]
    if failure == "oom":
        changes = {**_scale(hparams, "ppo_micro_batch_size_per_gpu", 0.5),
                   **_scale(hparams, "log_prob_micro_batch_size_per_gpu", 0.5),
                   **_scale(hparams, "max_num_seqs", 0.5)}
        if backend == "verl":
            changes.update(_scale(hparams, "gpu_memory_utilization", 0.85, 0.3))
        changes = {k: v for k, v in changes.items() if hparams.get(k) != v}
        data = ({"action": "change", "changes": changes} if changes else
                {"action": "give_up", "message": "out of memory with the smallest batches: use "
                 "more GPUs per node or a shorter max_response_length"})
    elif failure == "timeout":
        changes = ({"total_training_steps": max(1, int(steps_done * TIME_LIMIT_SHARE))}
                   if steps_done else _scale(hparams, "total_training_steps", 0.6))
        data = ({"action": "change", "changes": changes} if changes else
                {"action": "give_up", "message": "the phase hit its time limit: raise slurm.time "
                 "in experiment.yaml"})
    elif failure == "node_fault":
        data = {"action": "retry"}
    elif failure == "user_code":
        data = {"action": "give_up", "message": "the job failed in task code (data or reward): "
                f"{_last_error_line(log_tail)}; fix it and resume the search"}
    else:
        data = {"action": "retry", "message": f"unrecognised failure (exit code {exit_code})"}
    return check_fix({"class": failure, **data}, hparams, backend, "heuristic")
