"""How the jobs that ask the LLM get its key without any job environment holding it.

sbatch records the submitting environment with the job and a process's initial environment
stays readable in /proc/<pid>/environ, so the key must not travel that way, not even to the
two jobs that need it: the monitor and the controller's own job (`--submit`). It is left
instead in a file only its user can read (mode 0600, in a folder of the run: monitor/, and
controller-key/), passed straight to the LLM client, and removed once no job needs it.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..config import AgentConfig
from ..errors import StateError
from ..store.atomic import read_json, write_json

KEY_FILE = "llm-key.json"


def hand_over(folder: Path, agents: AgentConfig) -> None:
    """Leave this process's key (if it has one) for the monitor job, unless its agents are
    the offline heuristics: a key on disk that nothing reads is only a risk."""
    key = os.environ.get(agents.key_env, "")
    path = folder / KEY_FILE
    if not key or agents.backend == "heuristic":
        path.unlink(missing_ok=True)
        return
    write_json(path, {"name": agents.key_env, "value": key}, mode=0o600)


def take(folder: Path, agents: AgentConfig) -> str | None:
    """The key the controller left, or None (the monitor then looks in its environment)."""
    try:
        data = read_json(folder / KEY_FILE)
    except StateError:
        return None
    if not isinstance(data, dict) or data.get("name") != agents.key_env:
        return None
    return str(data.get("value") or "") or None


def withdraw(folder: Path) -> None:
    try:
        (folder / KEY_FILE).unlink(missing_ok=True)
    except PermissionError:
        # Another member's private folder (controller-key/, 0700, left by their --submit):
        # a key there is theirs, readable by them alone, and theirs to remove. A colleague's
        # stop or finished resume must not fail on it before it cancels anything.
        pass
