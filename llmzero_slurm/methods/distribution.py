"""One knob's distribution in a search space (methods/space.py parses them): how it draws a
value for a random trial, whether it admits one, and the admitted value nearest to one that
is not (what an agent's proposal outside llmzero's bounds is clamped to)."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Mapping

from ..hparams import PARAMS


def _round(value: float) -> float:
    """Three significant digits: as precise as a sampled knob needs, and readable."""
    return float(f"{value:.3g}")


@dataclass(frozen=True)
class Distribution:
    kind: str                      # fixed | choice | uniform | loguniform
    values: tuple[Any, ...]

    def draw(self, rng: random.Random, param_type: type) -> Any:
        if self.kind == "fixed":
            return self.values[0]
        if self.kind == "choice":
            return rng.choice(self.values)
        low, high = self.values
        if param_type is int:
            return self._draw_int(rng, math.ceil(low), math.floor(high))
        if self.kind == "uniform":
            value = rng.uniform(low, high)
        else:
            value = math.exp(rng.uniform(math.log(low), math.log(high)))
        return min(max(_round(value), low), high)   # rounding must not leave [low, high]

    def _draw_int(self, rng: random.Random, low: int, high: int) -> int:
        """Each integer of [low, high] the span of [n, n + 1) it owns: a rounded continuous
        draw gave the two ends half the chance of the others."""
        if self.kind == "uniform":
            return rng.randint(low, high)
        return min(math.floor(math.exp(rng.uniform(math.log(low), math.log(high + 1)))), high)

    def admits(self, value: Any) -> bool:
        if self.kind in ("fixed", "choice"):
            return value in self.values
        return self.values[0] <= value <= self.values[1]

    def nearest(self, value: Any) -> Any:
        """The admitted value closest to `value` (by ratio for positive numbers)."""
        if self.admits(value):
            return value
        if self.kind in ("uniform", "loguniform"):
            return min(max(value, self.values[0]), self.values[1])
        numbers = isinstance(value, (int, float)) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values)
        if not numbers:
            return self.values[0]
        ratio = value > 0 and all(v > 0 for v in self.values)
        return min(self.values, key=lambda v: abs(math.log(v / value)) if ratio else abs(v - value))

    def text(self) -> str:
        if self.kind == "fixed":
            return f"fixed at {self.values[0]}"
        if self.kind == "choice":
            return f"one of {list(self.values)}"
        return f"from {self.values[0]} to {self.values[1]}"


def sample(space: Mapping[str, Distribution], seed: int, trial: int) -> dict[str, Any]:
    """One trial's values, a pure function of (seed, trial, key): adding a key to the space
    leaves the others' draws unchanged, and a restarted controller draws the same trials."""
    return {key: dist.draw(random.Random(f"{seed}:{trial}:{key}"), PARAMS[key].type)
            for key, dist in space.items()}
