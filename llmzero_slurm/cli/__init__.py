"""Command-line entry points: llmzero-start, llmzero-status, llmzero-stop, llmzero-report."""
