"""SIGINT and SIGTERM for the controller: noted, and acted on where the loop can stop cleanly.

One exception: a signal while the search method asks its agents interrupts them at once. An
LLM that does not answer holds a call for timeout_s x (max_retries + 1), ten minutes by
default, and the plan it was asked for is not wanted once the user has said stop. Nothing is
created before the plan returns, so the interrupted plan leaves only its agents' records in
proposals/, as a controller killed there would.
"""
from __future__ import annotations

import signal
from typing import Callable, TypeVar

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Interrupted(BaseException):
    """Raised into an agent's wait by a stop signal; a BaseException, so that no
    `except Exception` of an SDK's retry loop takes it for a failed attempt."""


class StopSignals:
    def __init__(self) -> None:
        self.received: int | None = None
        self._asking = False
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)   # type: ignore[arg-type]  # what signal() returned
        self._previous = {}

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.received = signum
        if self._asking:
            self._asking = False
            raise _Interrupted

    def unless_stopped(self, ask: Callable[[], T]) -> T | None:
        """`ask()`, or None when a stop signal came before or while it ran."""
        if self.received is not None:
            return None
        try:
            self._asking = True
            try:
                return ask()
            finally:
                self._asking = False
        except _Interrupted:
            return None
