"""One validated exchange with an LLM: ask, check, one repair round, else the fallback.

Shared by the proposer, the error analyzer and the early stopper. The record lists every raw
answer and why each fallback happened, so a search that quietly ran on heuristics is visible
afterwards.
"""
from __future__ import annotations

from typing import Callable, TypeVar

from .answers import AnswerError
from .llm import Backend, LLMUnavailable, Prompt
from .records import AgentRecord

T = TypeVar("T")


def ask(llm: Backend, prompt: Prompt, parse: Callable[[str], T], fallback: Callable[[], T],
        record: AgentRecord, repairs: int = 1, unusable: Callable[[], T] | None = None) -> T:
    """`parse` raises AnswerError with a message meant for the LLM; `fallback` cannot fail.

    A rejected answer is sent back with the problem `repairs` times. `unusable`, when given,
    answers instead of `fallback` once every answer was rejected (the LLM did answer, so the
    heuristic may not be the right stand-in); `fallback` still answers when the LLM is down.
    """
    record.saw(prompt)
    for attempt in range(repairs + 1):
        try:
            reply = llm.complete(prompt)
        except LLMUnavailable as exc:
            record.fallbacks.append(f"LLM unavailable: {exc}")
            break
        record.usage.add(reply.usage)
        record.answers.append(reply.text)
        try:
            return parse(reply.text)
        except AnswerError as exc:
            record.fallbacks.append(f"answer {attempt + 1} rejected: {exc}")
            prompt = prompt.repair(reply.text, str(exc))
    else:
        if unusable is not None:
            return unusable()
    record.fallbacks.append("used the heuristic agent instead")
    return fallback()
