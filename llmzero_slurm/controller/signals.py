"""Stop signals for the controller and the monitor: noted, and acted on where their loops can
stop cleanly.

One exception: a signal while an agent is asked interrupts it at once. An LLM that does not
answer holds a call for agents.timeout_s, two minutes by default, and its answer
is not wanted once the user (or the keeper replacing a silent monitor) has said stop. The
controller creates nothing before the search method's plan returns, so an interrupted plan
leaves only its agents' records in proposals/, as a controller killed there would; the
monitor records a STOP before it cancels, and a monitor started later sends the cancel.
A stop asked for otherwise (llmzero-stop's request) is looked for while an agent waits on its
LLM, and abandons the call (agents/deadline.py): the agents answer as when the LLM is down,
their record says why, and the caller then stops as the request asks.
"""
from __future__ import annotations

import signal
from contextlib import nullcontext
from typing import Callable, TypeVar

from ..agents.deadline import abandoned_when
from ..schedulers.base import wait_unless

T = TypeVar("T")
# SIGHUP: the terminal of a controller in the foreground closed (an SSH session ended).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Interrupted(BaseException):
    """Raised into an agent's wait by a stop signal; a BaseException, so that no
    `except Exception` of an SDK's retry loop takes it for a failed attempt."""


class StopSignals:
    def __init__(self, signals: tuple[int, ...] = STOP_SIGNALS) -> None:
        self.signals = signals
        self.received: int | None = None
        self._asking = False
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        """A SIGHUP ignored from the start (`nohup`) stays ignored: the process was asked to
        outlive its terminal."""
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in self.signals
                          if sig != signal.SIGHUP or signal.getsignal(sig) != signal.SIG_IGN}

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)   # type: ignore[arg-type]  # what signal() returned
        self._previous = {}

    def came(self) -> bool:
        """Whether a stop signal has come."""
        return self.received is not None

    def sleep(self, seconds: float) -> None:
        """Sleep for `seconds`, or until a stop signal comes."""
        wait_unless(seconds, self.came)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum == signal.SIGINT and self.received is not None:
            raise KeyboardInterrupt    # Ctrl-C again: out now, whatever is under way
        self.received = signum
        if self._asking:
            self._asking = False
            raise _Interrupted

    def unless_stopped(self, ask: Callable[[], T],
                       stop_asked: Callable[[], str | None] | None = None) -> T | None:
        """`ask()`, or None when a stop signal came before or while it ran. `stop_asked()`:
        why its LLM calls are no longer wanted, when a stop is asked for otherwise."""
        if self.received is not None:
            return None
        try:
            self._asking = True
            try:
                with abandoned_when(stop_asked) if stop_asked else nullcontext():
                    return ask()
            finally:
                self._asking = False
        except _Interrupted:
            return None
