"""What one LLM reply cost: its tokens by kind, and their price in dollars at the configured
rates (`agents.price_*`).

A reply whose service left out its usage or a count of it (some gateways do, or send
`"usage": {}`) still gives its answer; its tokens and dollars are recorded as unknown (null,
with the reason in `unknown`), never as 0, and a sum with an unknown part is unknown.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import AgentConfig

TOKENS = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_write_1h_tokens",
          "cache_read_tokens")


@dataclass
class Usage:
    input_tokens: int | None = 0
    output_tokens: int | None = 0
    cache_write_tokens: int | None = 0       # all cache writes, 5-minute and 1-hour
    cache_write_1h_tokens: int | None = 0    # of which 1-hour (priced higher)
    cache_read_tokens: int | None = 0
    cost_usd: float | None = 0.0
    unknown: str | None = None     # why the counts are unknown (None: they are known)

    @classmethod
    def unreported(cls, vendor: str) -> "Usage":
        return cls(None, None, None, None, None, None,
                   f"the {vendor}'s reply gave no usage: its tokens and cost are unknown")

    def add(self, other: "Usage") -> None:
        for name in (*TOKENS, "cost_usd"):
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, None if mine is None or theirs is None else mine + theirs)
        self.unknown = self.unknown or other.unknown


def write_price(cfg: AgentConfig, ttl: str) -> float:
    """Dollars per million tokens written to the prompt cache for `ttl` ('5m' or '1h')."""
    return cfg.price_cache_write_per_mtok if ttl == "1h" else cfg.price_cache_write_5m_per_mtok


def price(cfg: AgentConfig, usage: Usage) -> float | None:
    counts = [getattr(usage, name) for name in TOKENS]
    if None in counts:
        return None
    inp, out, written, written_1h, read = counts
    return (inp * cfg.price_input_per_mtok + out * cfg.price_output_per_mtok
            + (written - written_1h) * write_price(cfg, "5m")
            + written_1h * write_price(cfg, "1h") + read * cfg.price_cache_read_per_mtok) / 1e6


def anthropic_usage(cfg: AgentConfig, u: Any, vendor: str) -> Usage:
    """A Messages API reply's `usage`, priced; its `cache_creation` says which writes were for
    1 hour (without it, as from an older gateway, all were for the TTL asked for)."""
    if u is None or u.input_tokens is None or u.output_tokens is None:
        return Usage.unreported(vendor)
    split = getattr(u, "cache_creation", None)
    written_1h = getattr(split, "ephemeral_1h_input_tokens", None) or 0
    written = u.cache_creation_input_tokens or (
        written_1h + (getattr(split, "ephemeral_5m_input_tokens", None) or 0))
    if split is None and cfg.cache_ttl == "1h":
        written_1h = written
    usage = Usage(u.input_tokens, u.output_tokens, written, written_1h,
                  u.cache_read_input_tokens or 0)
    usage.cost_usd = price(cfg, usage)
    return usage


def openai_usage(cfg: AgentConfig, u: Any, vendor: str) -> Usage:
    """A chat completion's `usage`, priced; cached prompt tokens count as cache reads."""
    if u is None or u.prompt_tokens is None or u.completion_tokens is None:
        return Usage.unreported(vendor)
    cached = 0
    if u.prompt_tokens_details is not None:
        cached = u.prompt_tokens_details.cached_tokens or 0
    usage = Usage(u.prompt_tokens - cached, u.completion_tokens, cache_read_tokens=cached)
    usage.cost_usd = price(cfg, usage)
    return usage
