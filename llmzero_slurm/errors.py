"""Errors a user can act on. Each names the thing that is wrong (a key, a file, a job)."""
from __future__ import annotations

from typing import Any


class LLMZeroError(Exception):
    """Base of every error this package raises on purpose; the CLI prints it without a traceback."""

    exit_code = 1


class ConfigError(LLMZeroError):
    """A bad experiment configuration; the message names the key and the fix."""

    exit_code = 2

    def __init__(self, key: str, problem: str):
        super().__init__(f"config key '{key}': {problem}")
        self.key, self.problem = key, problem


class HyperparameterError(ConfigError):
    """A hyperparameter value that must never reach a script."""

    def __init__(self, key: str, value: Any, problem: str):
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(key, f"{problem} (got {shown})")
        self.value = value


class UsageError(LLMZeroError):
    """A command-line argument that names nothing there is (a run directory, a node): the
    user's typing, not damaged state."""

    exit_code = 2


class EnvironmentVariableError(LLMZeroError):
    """An environment variable this package reads names something unusable."""

    exit_code = 2

    def __init__(self, name: str, problem: str):
        super().__init__(f"environment variable {name}: {problem}")


class StateError(LLMZeroError):
    """A state file on shared storage is corrupt, torn, or of an unknown schema version."""

    exit_code = 3

    def __init__(self, path: Any, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


class StorageError(StateError):
    """A state file could not be written (disk full, quota exceeded, read-only filesystem).
    The write was atomic, so the file still holds what it held before."""


class LockTimeout(LLMZeroError):
    """Another process holds the run's lock for longer than we are willing to wait."""

    exit_code = 4


class SchedulerError(LLMZeroError):
    """The batch system refused or failed a request (after retries for transient errors).

    `retryable`: the same request may succeed later (the controller is down, or a submit
    limit is reached), as opposed to a refusal that no waiting cures (an unknown partition)."""

    exit_code = 5

    def __init__(self, message: str, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


class DataError(LLMZeroError):
    """A dataset or reward file that cannot be used; the message names the file and the row."""

    exit_code = 2

    def __init__(self, path: Any, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem
