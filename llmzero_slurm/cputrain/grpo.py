"""GRPO's arithmetic: group-relative advantages, the clipped policy loss and KL estimators.

Pure tensor functions with verl's semantics (token-mean loss aggregation, dual-clip for
negative advantages, the same KL estimator names), so the metrics mean what they mean there.
"""
from __future__ import annotations

import torch

DUAL_CLIP_C = 3.0   # verl's clip_ratio_c: bound on the loss of negative-advantage tokens


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def group_advantages(rewards: torch.Tensor, group_size: int, norm_by_std: bool,
                     eps: float = 1e-6) -> torch.Tensor:
    """Each reward minus its prompt group's mean, optionally over the group's std."""
    groups = rewards.view(-1, group_size)
    centred = groups - groups.mean(-1, keepdim=True)
    if norm_by_std and group_size > 1:
        centred = centred / (groups.std(-1, keepdim=True) + eps)
    return centred.reshape(-1)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL(policy || reference) estimate, named as in verl's `kl_penalty`."""
    diff = logp - ref_logp
    if kind in ("kl", "k1"):
        return diff
    if kind == "abs":
        return diff.abs()
    if kind in ("mse", "k2"):
        return 0.5 * diff.square()
    if kind in ("low_var_kl", "k3"):
        # verl clamps the log-ratio before the exponential: past ~89 nats exp overflows, and
        # the output clamp alone leaves NaN gradients. Within +-20 the values are unchanged.
        diff = diff.clamp(-20, 20)
        return (torch.exp(-diff) + diff - 1).clamp(-10, 10)
    raise ValueError(f"unknown KL estimator {kind!r}")


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                mask: torch.Tensor, clip_low: float,
                clip_high: float) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate with dual clip; returns the loss and its diagnostics."""
    log_ratio = (logp - old_logp).clamp(-20, 20)
    ratio = log_ratio.exp()
    adv = adv[:, None]
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    worst = torch.maximum(unclipped, clipped)
    dual = torch.minimum(worst, -adv * DUAL_CLIP_C)
    losses = torch.where(adv < 0, dual, worst)
    stats = {
        "actor/pg_clipfrac": masked_mean((clipped > unclipped).float(), mask).item(),
        "actor/pg_clipfrac_lower": masked_mean(((worst > -adv * DUAL_CLIP_C) & (adv < 0))
                                               .float(), mask).item(),
        "actor/ppo_kl": masked_mean(-log_ratio, mask).item(),
    }
    return masked_mean(losses, mask), stats
