"""The run report: figures, tables and the replayable best strategy (llmzero-report)."""
