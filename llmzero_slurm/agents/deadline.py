"""One LLM call bounded as a whole by `agents.timeout_s`, retries included.

The SDKs hand their timeout to the HTTP client as the limit on each read, so a proxy that
passes a reply on a few bytes at a time held a call as long as it liked, and the SDK's retries
and their back-off came on top. The call now runs in a worker thread that the caller waits on
for timeout_s at most; one still running then is abandoned. The HTTP client's hooks (`HOOKS`,
given to each SDK client) end an abandoned call at its next request or the next piece of its
reply, so it sends nothing more: no answer is paid for that nobody reads. The caller's wait is
a plain join, so a stop signal (controller/signals.py) still interrupts it at once.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, TypeVar

import httpx2

T = TypeVar("T")
_running = threading.local()     # the call a worker thread runs


class OutOfTime(Exception):
    """The call did not end within its bound; it was abandoned."""


class _Abandoned(BaseException):
    """Raised inside an abandoned call's HTTP client; a BaseException, so that the SDK's retry
    loop, which retries any Exception of its client, lets it through at once."""


class _Call:
    def __init__(self) -> None:
        self.abandoned = False

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


HOOKS = {"request": [_before_request], "response": [_on_reply]}


def within(seconds: float, work: Callable[[], T]) -> T:
    """`work()`'s result or exception, or OutOfTime when it has not ended after `seconds`."""
    call = _Call()
    value: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        _running.call = call
        try:
            value.append(work())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            error.append(exc)

    worker = threading.Thread(target=run, name="llm-call", daemon=True)
    worker.start()
    try:
        worker.join(seconds)
    finally:
        call.abandoned = worker.is_alive()   # also when a stop signal ended the wait
    if call.abandoned:
        raise OutOfTime(f"no complete answer within agents.timeout_s = {seconds:g} s (the "
                        "service's retries included); the call was abandoned")
    if error:
        raise error[0]
    return value[0]
