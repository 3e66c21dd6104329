"""What an agent saw and answered, saved beside the node so every decision can be audited.

Records hold a hash of the full prompt, its per-call text, image file names, every raw answer,
the parsed result, tokens, dollars, the backend and each fallback with its reason. Secrets
(the API key's value) are scrubbed from every string before anything is written.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..store.atomic import read_json, write_json
from ..config import AgentConfig
from .usage import Usage

if TYPE_CHECKING:     # not at run time: the LLM clients take seconds to import
    from .llm import Backend, Prompt

# The last fallback of a record the heuristic answered in the LLM's place (the report counts them).
HEURISTIC_ANSWERED = "used the heuristic agent instead"


@dataclass
class AgentRecord:
    agent: str                       # proposer | stopper | error_analyzer
    backend: str                     # anthropic | openai | heuristic | rule
    model: str | None = None
    prompt_sha256: str | None = None
    prompt_text: str | None = None   # the per-call part; the static part is in the templates
    images: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    fallbacks: list[str] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)

    def saw(self, prompt: Prompt) -> None:
        digest = hashlib.sha256(prompt.system.encode() + b"\0" + prompt.text.encode())
        for path in prompt.images:
            digest.update(Path(path).read_bytes())
        self.prompt_sha256 = digest.hexdigest()
        self.prompt_text = prompt.text
        self.images = [Path(p).name for p in prompt.images]


def agent_secrets(cfg: AgentConfig, llm: Backend | None) -> list[str]:
    """What an agent's records must not hold: the key in `agents.api_key_env` and the one its
    LLM client sends (the monitor's is handed over, not in its environment), where long
    enough to be a real secret."""
    keys = (os.environ.get(cfg.key_env, ""), llm.key if llm is not None else "")
    return [k for k in dict.fromkeys(keys) if len(k) >= 8]


def scrub(data: Any, secrets: list[str]) -> Any:
    if isinstance(data, str):
        for secret in secrets:
            data = data.replace(secret, "[redacted]")
        return data
    if isinstance(data, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [scrub(v, secrets) for v in data]
    return data


def _write(path: Path, data: Any, secrets: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, scrub(data, secrets))


def save_record(path: str | Path, record: AgentRecord, secrets: list[str]) -> None:
    """Write one record (proposal.json, error_analysis.json) atomically."""
    _write(Path(path), dataclasses.asdict(record), secrets)


def append_record(path: str | Path, record: AgentRecord, secrets: list[str]) -> None:
    """Add a record to a list file (early_stop.json: one entry per decision, one writer).
    A corrupt existing file raises StateError rather than being overwritten."""
    path = Path(path)
    entries = read_json(path) if path.exists() else []
    _write(path, [*entries, dataclasses.asdict(record)], secrets)
