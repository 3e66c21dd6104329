"""The run report: figures, tables and the replayable best strategy (llmzero-report)."""
from .build import write_report

__all__ = ["write_report"]
