"""What the offline agents read off a phase's metrics: trend numbers and the rule they match
(the rules are listed in this package's docstring)."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ...metrics import MetricsLog, best_point, val_score_series


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
        return best_point(self.val)

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
    if sig.truncation > 0.05:
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
