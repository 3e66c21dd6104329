"""What the agents cost, summed from their records: LLM calls, tokens and dollars per agent,
and how often the heuristic answered in the LLM's place (a key refused on every call runs the
whole search on the heuristics, at no cost, and must not read as an LLM search)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..agents.records import HEURISTIC_ANSWERED

TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens")


@dataclass
class AgentCost:
    decisions: int = 0   # records: a stopper's rule decides without an LLM
    calls: int = 0       # LLM answers taken: a repair round is a second call
    asked: int = 0       # decisions an LLM was asked for (not a rule's, not offline agents')
    heuristic: int = 0   # of which the heuristic made in the LLM's place (it was down, ...)
    why: tuple[float, str] = (0.0, "")   # the latest of those: when, and the LLM's failure
    answered: float = 0.0  # when the LLM last made a decision itself: after `why`, it is back
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_FIELDS, 0))
    dollars: float = 0.0
    unknown: int = 0     # answers whose service gave no usage: left out of the sums, said beside

    @classmethod
    def total(cls, costs: Iterable["AgentCost"]) -> "AgentCost":
        """Every agent's sums together: the report's total row, llmzero-status's line."""
        total = cls()
        for other in costs:
            total.decisions += other.decisions
            total.calls += other.calls
            total.asked += other.asked
            total.heuristic += other.heuristic
            total.why = max(total.why, other.why)
            total.answered = max(total.answered, other.answered)
            total.dollars += other.dollars
            total.unknown += other.unknown
            for name in TOKEN_FIELDS:
                total.tokens[name] += other.tokens[name]
        return total

    @property
    def unknown_said(self) -> str:
        """The answers left out of the dollars, said beside them ('' when none)."""
        return f" + the unknown cost of {self.unknown} answer{'s' * (self.unknown > 1)}" if self.unknown else ""

    def add(self, record: dict[str, Any]) -> None:
        self.decisions += 1
        answers = record.get("answers")
        self.calls += len(answers) if isinstance(answers, list) else 0
        asked = record.get("backend") not in ("rule", "heuristic")
        self.asked += asked
        fallbacks = record.get("fallbacks")
        at = _number(record.get("created_at"))
        if isinstance(fallbacks, list) and HEURISTIC_ANSWERED in fallbacks:
            self.heuristic += 1
            self.why = max(self.why, (at, str(fallbacks[-2]) if len(fallbacks) > 1 else ""))
        elif asked and answers:
            self.answered = max(self.answered, at)
        usage = record["usage"] if isinstance(record.get("usage"), dict) else {}
        self.unknown += bool(usage.get("unknown"))
        for name in TOKEN_FIELDS:
            self.tokens[name] += int(_number(usage.get(name)))
        self.dollars += _number(usage.get("cost_usd", usage.get("cost", record.get("cost"))))


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0.0
    return float(value)


def agents_line(costs: dict[str, AgentCost]) -> str | None:
    """What the LLM agents spent, and how often the heuristic answered in their place (a key
    refused on every call runs the whole search on the heuristics); None without an LLM."""
    total = AgentCost.total(costs.values())
    if not (total.asked or total.calls):
        return None
    tokens = sum(total.tokens.values())
    # A server that reports no usage (vLLM can leave it out): not "0 tokens, $0.0000".
    spent = ("tokens and dollars unknown: the service reported no usage" if total.unknown
             and not tokens and not total.dollars else
             f"{tokens:,} tokens, ${total.dollars:.4f}{total.unknown_said}")
    line = f"agents: {total.calls} LLM call{'s' * (total.calls != 1)}, {spent}"
    if total.heuristic:
        # A failure long past reads as an LLM still down, unless its later answers are said.
        since = "; the LLM has answered since" if total.answered > total.why[0] else ""
        line += (f"; the heuristic answered {total.heuristic} of {total.asked} decisions in the "
                 f"LLM's place" + (f" (last: {total.why[1][:200]}{since})" if total.why[1] else ""))
    return line
