"""How the offline agents move one hyperparameter: scaled, shifted or switched on, and always
clamped to the vocabulary's range."""
from __future__ import annotations

import math
from typing import Any, Mapping

from ...hparams import PARAMS


def clamp(key: str, value: float) -> Any:
    p = PARAMS[key]
    if p.low is None or p.high is None:
        raise ValueError(f"{key} has no range to clamp to")
    value = min(max(value, p.low), p.high)
    return int(math.ceil(value)) if p.type is int else float(f"{value:.3g}")


def scale(hp: Mapping[str, Any], key: str, factor: float, floor: float = 0.0) -> dict[str, Any]:
    """Multiply a numeric knob the parent sets; unknown current values are left alone."""
    if key not in hp or hp[key] is None:
        return {key: floor} if floor else {}
    return {key: clamp(key, max(hp[key] * factor, floor))}


def add(hp: Mapping[str, Any], key: str, delta: float, default: float) -> dict[str, Any]:
    return {key: clamp(key, hp.get(key, default) + delta)}


def kl(hp: Mapping[str, Any], factor: float, floor: float = 0.0) -> dict[str, Any]:
    out = scale(hp, "kl_loss_coef", factor, floor)
    if out.get("kl_loss_coef") and hp.get("use_kl_loss") is False:
        out["use_kl_loss"] = True
    return out
