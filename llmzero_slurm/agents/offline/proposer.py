"""The offline proposer: the first matching rule's change, or the next alternative when a
sibling already has it, or none left (see the rules in this package's docstring)."""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, Mapping, Sequence

from ...backends.base import TrainerBackend
from ...methods.space import NO_BOUNDS, Bounds
from ...metrics import MetricsLog
from ..answers import AnswerError, NothingUntried, Proposal, Tried, check_proposal
from .knobs import add, clamp, kl, scale
from .signals import Signals, diagnose


Change = Callable[[Mapping[str, Any]], dict[str, Any]]


def _cautious(hp: Mapping[str, Any]) -> dict[str, Any]:
    return {**scale(hp, "lr", 0.5), **kl(hp, 1.5)}


_RULES: dict[str, Change] = {
    "collapse": lambda hp: {**scale(hp, "lr", 0.3), **kl(hp, 3.0, 0.01),
                            **scale(hp, "grad_clip", 0.5)},
    "kl_spike": lambda hp: {**scale(hp, "lr", 0.5), **kl(hp, 2.0, 0.005)},
    "truncation": lambda hp: scale(hp, "max_response_length", 1.5),
    "entropy_collapse": lambda hp: {**add(hp, "temperature", 0.2, 1.0),
                                    "clip_ratio_high": max(hp.get("clip_ratio_high", 0.2), 0.28),
                                    **kl(hp, 0.5)},
    "vanishing": lambda hp: {**scale(hp, "lr", 2.0), **kl(hp, 1.5),
                             **scale(hp, "rollout_n", 2.0)},
    "noisy": lambda hp: {**scale(hp, "lr", 0.7), **scale(hp, "grad_clip", 0.5),
                         **scale(hp, "rollout_n", 2.0)},
    # Going on unchanged would be the parent's phase run longer; every measured search
    # (benchmarks/search_quality.py) went on with smaller, more anchored steps instead.
    "healthy": _cautious,
    "plateau": lambda hp: _sharpen(hp),
}


SHARPEST = 0.3   # below this, groups of samples are too often identical to teach anything


def _sharpen(hp: Mapping[str, Any]) -> dict[str, Any]:
    """The late-phase move: sharper sampling and a looser anchor to the reference. With the
    anchor, a low temperature is erratic from the base (groups of identical samples) and safe
    from a trained policy; the anchor helps early and holds back late
    (benchmarks/results/strategy_validity_reverse.json)."""
    cooler = max(SHARPEST, min(hp.get("temperature", 1.0), 1.0) - 0.3)
    return {"temperature": clamp("temperature", cooler), **kl(hp, 0.5)}


# Alternatives when the first choice duplicates a sibling, each a different direction in
# several knobs: more cautious (smaller steps, tighter anchor), bolder (larger steps, more
# exploration, an anchor that keeps them stable), then sharper.
_ALTERNATIVES: tuple[tuple[str, Change], ...] = (
    ("more cautious", _cautious),
    ("bolder", lambda hp: {**scale(hp, "lr", 1.5), **kl(hp, 2.0, 0.005),
                           **add(hp, "temperature", 0.1, 1.0)}),
    ("sharper", _sharpen))


RESEED_REACH = 1000   # how far from the parent's seed a free one is looked for


def _reseeded(hp: Mapping[str, Any], taken: Sequence[Tried], bounds: Bounds) -> dict[str, Any]:
    """The variant always left: the parent's knobs with the nearest seed within search.space
    that neither it nor a sibling ran with (another data order and other samples), rather
    than a configuration already run; none when no seed is free."""
    used = {h.get("seed") for h in (hp, *(h for _, h in taken))}
    allowed = bounds.keys.get("seed")
    start = int(hp.get("seed") or 0)
    for seed in (s for d in range(1, RESEED_REACH) for s in (start + d, start - d)):
        if seed >= 0 and seed not in used and (allowed is None or allowed.admits(seed)):
            return {"seed": seed}
    return {}


def _resume_step(checkpoints: list[int], sig: Signals, rule: str) -> int | None:
    if not checkpoints:
        return None
    if rule == "collapse" and sig.val_best:
        before = [c for c in checkpoints if c <= sig.val_best[0]]
        return max(before) if before else None
    return max(checkpoints)


def propose(parent_hp: Mapping[str, Any], log: MetricsLog, checkpoints: list[int],
            phase_steps: int, backend: TrainerBackend, scratch_only: bool = False,
            taken: Sequence[Tried] = (), bounds: Bounds = NO_BOUNDS) -> Proposal:
    """A validated proposal; `taken`: each sibling's start and configuration, not repeated;
    each knob moves only as far as the user's `bounds` (search.space) allow. NothingUntried
    when every variant is taken or refused: a repeat would spend a phase learning nothing."""
    sig = Signals.of(log.without_test())
    rule, why = diagnose(sig)
    step = None if scratch_only else _resume_step(checkpoints, sig, rule)

    def length(steps: int) -> int:
        return bounds.clamp({"total_training_steps": max(1, steps)})["total_training_steps"]
    fresh = length(log.last_step or phase_steps)     # a new strategy: as long as the parent
    steps = length(phase_steps) if step is not None else fresh
    tried = []
    variants: tuple[tuple[str, Change], ...] = (
        ("", _RULES[rule]), *_ALTERNATIVES,
        ("reseeded", partial(_reseeded, taken=taken, bounds=bounds)))
    for label, make in variants:
        changes = {k: v for k, v in bounds.clamp(make(parent_hp)).items() if parent_hp.get(k) != v}
        # An alternative says so: the diagnosis alone would claim the rule's own change.
        variant = (f" The rule's own change was run by a sibling or is refused, so a {label} "
                   "variant instead." if label else "")
        data = {"diagnosis": f"{rule}: {why}.{variant}", "changes": changes,
                "checkpoint_step": step, "additional_steps": steps}
        try:
            return check_proposal(data, parent_hp, checkpoints, scratch_only, backend,
                                  "heuristic", bounds, taken)
        except AnswerError as exc:
            tried.append(str(exc))
    # search.space fixes the knobs these move and the seed, or siblings took the rest.
    raise NothingUntried(f"no untried proposal is left within search.space ({rule}: the rule's "
                         f"change, the alternatives and a new seed were each taken or refused: "
                         f"{'; '.join(dict.fromkeys(tried))})")
