"""One LLM call bounded as a whole by `agents.timeout_s`, retries included, and abandoned
as soon as its caller no longer wants the answer.

The SDKs hand their timeout to the HTTP client as the limit on each read, so a proxy that
passes a reply on a few bytes at a time held a call as long as it liked, and the SDK's retries
and their back-off came on top. The call now runs in a worker thread that the caller waits on
for timeout_s at most; one still running then is abandoned. The HTTP client's hooks (`HOOKS`,
given to each SDK client) end an abandoned call at its next request or the next piece of its
reply, so it sends nothing more: no answer is paid for that nobody reads. The caller's wait is
a plain join, so a stop signal (controller/signals.py) still interrupts it at once; and within
`abandoned_when(reason)` the wait looks at `reason()` every second, so the controller can drop
a call when llmzero-stop asks it to stop (the agents then answer as when the LLM is down).
A call still unanswered after SLOW_NOTICE_S, and each refusal the SDK retries, is a logged
warning (the controller shows them): a slow or rate-limited service must not look like a hang.
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator, TypeVar

import httpx2

T = TypeVar("T")
_log = logging.getLogger(__name__)
RETRIED = (408, 409, 429)        # besides 5xx, what the SDKs retry (their _should_retry)
LOOK_S = 1.0                     # how often a waiting caller asks whether to abandon the call
SLOW_NOTICE_S = 30.0             # a call unanswered this long (or a quarter of its limit) is said
_running = threading.local()     # the call a worker thread runs
_reason: ContextVar[Callable[[], str | None] | None] = ContextVar("abandon_reason", default=None)


class Abandoned(Exception):
    """The call was abandoned: out of time, or no longer wanted."""


@contextmanager
def abandoned_when(reason: Callable[[], str | None]) -> Iterator[None]:
    """Within the block, an LLM call is abandoned once `reason()` says why (None: go on)."""
    token = _reason.set(reason)
    try:
        yield
    finally:
        _reason.reset(token)


class _Abandoned(BaseException):
    """Raised inside an abandoned call's HTTP client; a BaseException, so that the SDK's retry
    loop, which retries any Exception of its client, lets it through at once."""


class _Call:
    def __init__(self, limit: str) -> None:
        self.abandoned = False
        self.started, self.limit = time.monotonic(), limit   # limit: what bounds it, in words
        # The service's last refusal (a 429 whose retry-after outlasts the call): an
        # abandoned call says it, or a rate limit would read as a slow service.
        self.refused: str | None = None

    def check(self) -> None:
        if self.abandoned:
            raise _Abandoned


class _Checked(httpx2.SyncByteStream):
    """A reply's body that ends with its call."""

    def __init__(self, stream: Any, call: _Call) -> None:
        self.stream, self.call = stream, call

    def __iter__(self) -> Iterator[bytes]:
        for piece in self.stream:
            self.call.check()
            yield piece

    def close(self) -> None:
        self.stream.close()


def _before_request(_request: httpx2.Request) -> None:
    if (call := getattr(_running, "call", None)) is not None:
        call.check()


def _on_reply(response: httpx2.Response) -> None:
    if (call := getattr(_running, "call", None)) is not None:
        response.stream = _Checked(response.stream, call)
        if response.status_code >= 400:
            wait = response.headers.get("retry-after")
            call.refused = f"HTTP {response.status_code}" + (
                f" (retry-after: {wait} s)" if wait and wait.isdigit() else
                f" (retry-after: {wait})" if wait else "")
            if response.status_code in RETRIED or response.status_code >= 500:
                # The SDK backs off and tries again, silently: a rate-limited call could hold
                # the controller for all of agents.timeout_s with no line said.
                _log.warning("LLM call refused: %s, %.0f s into it; tried again as "
                             "agents.max_retries allows, within %s", call.refused,
                             time.monotonic() - call.started, call.limit)


HOOKS = {"request": [_before_request], "response": [_on_reply]}


def within(seconds: float, work: Callable[[], T], limit: str | None = None) -> T:
    """`work()`'s result or exception; Abandoned when it has not ended after `seconds`, or
    when the reason to abandon it set by `abandoned_when` says so (then it may not start).
    `limit`: what set `seconds`, for the message, when it is not agents.timeout_s alone."""
    reason = _reason.get()
    if reason is not None and (why := reason()):
        raise Abandoned(f"the call was abandoned: {why}")
    limit = limit or f"agents.timeout_s = {seconds:g} s (the service's retries included)"
    call, deadline = _Call(limit), time.monotonic() + seconds
    value: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        _running.call = call
        try:
            value.append(work())
        except BaseException as exc:  # handed to the waiting caller
            error.append(exc)

    worker = threading.Thread(target=run, name="llm-call", daemon=True)
    worker.start()
    why = None
    notice: float | None = call.started + min(SLOW_NOTICE_S, seconds / 4)
    try:
        while why is None and worker.is_alive() and (left := deadline - time.monotonic()) > 0:
            wake = left if reason is None else min(left, LOOK_S)
            worker.join(wake if notice is None else max(0.0, min(wake, notice - time.monotonic())))
            if notice is not None and worker.is_alive() and time.monotonic() >= notice:
                _log.warning("LLM call unanswered after %.0f s; waiting for it within %s",
                             time.monotonic() - call.started, limit)
                notice = None
            if reason is not None and worker.is_alive():
                why = reason()
    finally:
        call.abandoned = worker.is_alive()   # also when a stop signal ended the wait
    if call.abandoned:
        last = f"; its last reply was {call.refused}" if call.refused else ""
        raise Abandoned(f"the call was abandoned: {why}" if why else
                        f"no complete answer within {limit}; the call was abandoned{last}")
    if error:
        raise error[0]
    return value[0]
