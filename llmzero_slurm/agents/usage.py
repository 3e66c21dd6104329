"""What one LLM reply cost: its tokens by kind, and their price in dollars at the configured
rates (`agents.price_*`).

A reply whose service left out its usage (some gateways do) still gives its answer; its tokens
and dollars are recorded as unknown (null, with the reason in `unknown`), never as 0, and a sum
with an unknown part is unknown.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import AgentConfig

TOKENS = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens")


@dataclass
class Usage:
    input_tokens: int | None = 0
    output_tokens: int | None = 0
    cache_write_tokens: int | None = 0
    cache_read_tokens: int | None = 0
    cost_usd: float | None = 0.0
    unknown: str | None = None     # why the counts are unknown (None: they are known)

    @classmethod
    def unreported(cls, vendor: str) -> "Usage":
        return cls(None, None, None, None, None,
                   f"the {vendor}'s reply gave no usage: its tokens and cost are unknown")

    def add(self, other: "Usage") -> None:
        for name in (*TOKENS, "cost_usd"):
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, None if mine is None or theirs is None else mine + theirs)
        self.unknown = self.unknown or other.unknown


def price(cfg: AgentConfig, usage: Usage) -> float | None:
    counts = [getattr(usage, name) for name in TOKENS]
    if None in counts:
        return None
    rates = (cfg.price_input_per_mtok, cfg.price_output_per_mtok,
             cfg.price_cache_write_per_mtok, cfg.price_cache_read_per_mtok)
    return sum(n * rate for n, rate in zip(counts, rates)) / 1e6


def anthropic_usage(cfg: AgentConfig, u: Any, vendor: str) -> Usage:
    """A Messages API reply's `usage`, priced."""
    if u is None:
        return Usage.unreported(vendor)
    usage = Usage(u.input_tokens, u.output_tokens, u.cache_creation_input_tokens or 0,
                  u.cache_read_input_tokens or 0)
    usage.cost_usd = price(cfg, usage)
    return usage


def openai_usage(cfg: AgentConfig, u: Any, vendor: str) -> Usage:
    """A chat completion's `usage`, priced; cached prompt tokens count as cache reads."""
    if u is None:
        return Usage.unreported(vendor)
    cached = 0
    if u.prompt_tokens_details is not None:
        cached = u.prompt_tokens_details.cached_tokens or 0
    usage = Usage(u.prompt_tokens - cached, u.completion_tokens, 0, cached)
    usage.cost_usd = price(cfg, usage)
    return usage
