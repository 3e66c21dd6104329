"""What one LLM reply cost: its tokens by kind, and their price in dollars at the configured
rates (`agents.price_*`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..config import AgentConfig


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, other: "Usage") -> None:
        for name in ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens",
                     "cost_usd"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def price(cfg: AgentConfig, usage: Usage) -> float:
    return (usage.input_tokens * cfg.price_input_per_mtok
            + usage.output_tokens * cfg.price_output_per_mtok
            + usage.cache_write_tokens * cfg.price_cache_write_per_mtok
            + usage.cache_read_tokens * cfg.price_cache_read_per_mtok) / 1e6
