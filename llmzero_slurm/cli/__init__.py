"""Command-line entry points: llmzero-start, llmzero-status, llmzero-stop, llmzero-report.

Imports nothing heavy (not even typing): __main__ runs each command's imports under a Ctrl-C
guard that only what is loaded before it can escape."""
import os
import sys


def interrupted() -> None:
    """End a command stopped by Ctrl-C, wherever it was: one line, exit 130 (128 + SIGINT), no
    traceback; never returns. os._exit, once the output is flushed: a KeyboardInterrupt that
    passed through an exec() of source text (dataclasses make their methods so, as modules
    load) makes Python end by SIGINT after all, however it was handled; and an interrupted
    command has nothing left to finish (its with-blocks were left as the interrupt passed)."""
    print("interrupted", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a reader gone (| head), a stream closed
            pass
    os._exit(130)
