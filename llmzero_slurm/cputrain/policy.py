"""Sampling and log-probabilities of responses, batched over left-padded prompts.

Sequences are short (tens of characters), so each decoding step reruns the whole prefix
instead of keeping a KV cache: fewer moving parts, and the speed is bound by per-call
overhead anyway. Log-probabilities use logits divided by the temperature, as verl does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

from .tokenizer import CharTokenizer


@dataclass
class Batch:
    """Prompts (left-padded) and responses (right-padded) of equal shape, on one device."""

    prompt: torch.Tensor          # [B, P]
    prompt_mask: torch.Tensor     # [B, P] 1 for real tokens
    response: torch.Tensor        # [B, R]
    response_mask: torch.Tensor   # [B, R] 1 up to and including EOS
    old_logp: torch.Tensor        # [B, R] sampling log-probs (temperature-scaled)

    def select(self, idx: torch.Tensor) -> "Batch":
        return Batch(*(t[idx] for t in (self.prompt, self.prompt_mask, self.response,
                                         self.response_mask, self.old_logp)))

    @property
    def lengths(self) -> torch.Tensor:
        return self.response_mask.sum(-1)


def left_pad(prompts: Sequence[list[int]], pad_id: int,
             device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    return ids.to(device), mask.to(device)


def _forward(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits


@torch.no_grad()
def sample(model: torch.nn.Module, tok: CharTokenizer, prompts: Sequence[list[int]],
           max_new: int, temperature: float, generator: torch.Generator | None,
           device: torch.device) -> Batch:
    """Sample one response per prompt (greedy when generator is None)."""
    prompt, prompt_mask = left_pad(prompts, tok.pad_id, device)
    n = prompt.shape[0]
    response = torch.full((n, max_new), tok.pad_id, dtype=torch.long, device=device)
    response_mask = torch.zeros((n, max_new), dtype=torch.long, device=device)
    old_logp = torch.zeros((n, max_new), device=device)
    alive = torch.ones(n, dtype=torch.bool, device=device)
    for t in range(max_new):
        logits = _forward(model, torch.cat([prompt, response[:, :t]], 1),
                          torch.cat([prompt_mask, response_mask[:, :t]], 1))[:, -1].float()
        logp = F.log_softmax(logits / max(temperature, 1e-6), -1)
        if generator is None:
            token = logits.argmax(-1)
        else:
            token = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
        response[:, t] = torch.where(alive, token, tok.pad_id)
        response_mask[:, t] = alive.long()
        old_logp[:, t] = torch.where(alive, logp.gather(-1, token[:, None]).squeeze(-1), 0.0)
        alive &= token != tok.eos_id
        if not alive.any():
            break
    return Batch(prompt, prompt_mask, response, response_mask, old_logp)


def response_logp(model: torch.nn.Module, batch: Batch, temperature: float,
                  with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities of the response tokens (and per-token entropy) under `model`."""
    width = batch.prompt.shape[1]
    logits = _forward(model, torch.cat([batch.prompt, batch.response], 1),
                      torch.cat([batch.prompt_mask, batch.response_mask], 1))
    logits = logits[:, width - 1:-1].float() / max(temperature, 1e-6)
    logp_all = F.log_softmax(logits, -1)
    logp = logp_all.gather(-1, batch.response[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, entropy
