"""The run report: figures, tables and the replayable best strategy (llmzero-report).

`write_report` is imported on first use: llmzero-status reads the run through report.collect,
and drawing (matplotlib) and the agents' LLM clients cost seconds to import that a status
call, run every few seconds by many users on a login node, never uses."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .build import write_report

__all__ = ["write_report"]


def __getattr__(name: str) -> Any:
    if name == "write_report":
        from .build import write_report
        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
