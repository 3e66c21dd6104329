"""One validated exchange with an LLM: ask, check, one repair round, else the fallback.

Shared by the proposer, the error analyzer and the early stopper. The record lists every raw
answer and why each fallback happened, and a fallback is logged as a warning (the controller
shows it), so a search never runs on heuristics unseen.
"""
from __future__ import annotations

import hashlib
import logging
import re
from typing import Callable, TypeVar

from .answers import AnswerError
from .llm import Backend, LLMUnavailable, Prompt
from .records import HEURISTIC_ANSWERED, AgentRecord

T = TypeVar("T")
_log = logging.getLogger(__name__)   # a fallback is said where the user looks, as it happens
# An answer longer than this is not parsed, stored or echoed whole: a bounded excerpt and the
# whole answer's hash stand for it (a model that rambles must not fill the run directory or
# double the cost of the repair request).
MAX_ANSWER_CHARS = 32_000
EXCERPT_CHARS = 2_000


def bounded(text: str) -> str:
    """The answer, or an excerpt of it with its length and hash when it is too long."""
    if len(text) <= MAX_ANSWER_CHARS:
        return text
    digest = hashlib.sha256(text.encode(errors="replace")).hexdigest()[:16]
    return (f"{text[:EXCERPT_CHARS]}\n[... answer cut: {len(text):,} characters, sha256 "
            f"{digest}; the end was: ...]\n{text[-EXCERPT_CHARS // 4:]}")


# A reasoning model's thinking, as a server without a reasoning parser passes it on: drafts in
# there are not the answer. Some chat templates open <think> in the prompt, so only the close
# tag comes back; an opened block never closed is thinking to the end.
_THINKING = re.compile(r"\A.*</think>|<think>.*\Z", re.S)


def final_answer(text: str) -> str:
    """The reply without the model's thinking: what is parsed and shown in a repair round."""
    return _THINKING.sub("", text).strip() if "think>" in text else text


def ask(llm: Backend, prompt: Prompt, parse: Callable[[str], T], fallback: Callable[[], T],
        record: AgentRecord, repairs: int = 1, unusable: Callable[[], T] | None = None) -> T:
    """`parse` raises AnswerError with a message meant for the LLM (anything else it raises
    is a fallback, never an escape that would lose the record); `fallback` cannot fail (what
    it raises by design, the proposer's NothingUntried, is its caller's to record).

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
        record.answers.append(bounded(reply.text))     # the whole reply, thinking included
        text = bounded(final_answer(reply.text))
        try:
            if len(reply.text) > MAX_ANSWER_CHARS:
                raise AnswerError(f"the answer is {len(reply.text):,} characters long; keep it "
                                  f"under {MAX_ANSWER_CHARS:,} and end with the requested block")
            if reply.cut:
                raise AnswerError(reply.cut)
            return parse(final_answer(reply.text))
        except AnswerError as exc:
            if reply.refused:   # kept in the conversation, the refused turn is refused again
                record.fallbacks.append(f"answer {attempt + 1} rejected: {exc}; asked again "
                                        "without it")
                continue
            thinking = reply.cut and "think>" in reply.text and not text
            record.fallbacks.append(f"answer {attempt + 1} rejected: {exc}" + (
                "; cut while the model was still thinking: raise agents.thinking_tokens"
                if thinking else ""))
            prompt = prompt.repair(text, str(exc))
        except Exception as exc:  # a checker's bug must not lose the record
            # Not the LLM's mistake, so no repair round: the fallback answers, and the caller
            # saves the answer and its cost as for any other fallback.
            record.fallbacks.append(f"answer {attempt + 1} could not be checked "
                                    f"({type(exc).__name__}: {exc})")
            break
    else:
        if unusable is not None:
            return unusable()
    record.fallbacks.append(HEURISTIC_ANSWERED)
    _log.warning("%s: %s; the heuristic agent answers instead", record.agent,
                 record.fallbacks[-2][:300] if len(record.fallbacks) > 1 else "no usable answer")
    return fallback()
