"""Command-line entry points: llmzero-start, llmzero-status, llmzero-stop, llmzero-report.

Imports nothing (not even typing): __main__ runs each command's imports under a Ctrl-C guard
that only what is loaded before it can escape."""
import sys


def interrupted() -> int:
    """Say that a command was stopped by Ctrl-C, wherever it was, in one line (no traceback);
    its exit code, 130 (128 + SIGINT)."""
    print("interrupted", file=sys.stderr, flush=True)
    return 130
