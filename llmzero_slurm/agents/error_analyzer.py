"""The error analyzer: why a phase failed and how its debug child should differ.

Its input is what Slurm and the job leave behind (state, exit code, log tail); test-set
numbers printed in the log are removed before any LLM sees it.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping

from ..config import AgentConfig
from ..metrics import strip_test_text
from . import heuristic
from .answers import Fix, check_fix, extract_json
from .ask import ask
from .knowledge import effective_hparams, hparam_guide
from .llm import Backend, Prompt
from .prompting import as_yaml, render
from .records import AgentRecord, save_record, secrets_from_env

RECORD = "error_analysis.json"
TAIL_LINES = 80
TAIL_CHARS = 8000


def log_tail(text: str) -> str:
    """The last lines of a job log, test metrics removed, bounded in size."""
    tail = "\n".join(text.splitlines()[-TAIL_LINES:])[-TAIL_CHARS:]
    return strip_test_text(tail)


class ErrorAnalyzer:
    def __init__(self, cfg: AgentConfig, trainer: str, llm: Backend | None):
        self.cfg, self.trainer, self.llm = cfg, trainer, llm

    def analyze(self, state: str | None, exit_code: int | None, log_text: str,
                hparams: Mapping[str, Any], out_dir: str | Path,
                steps_done: int | None = None) -> Fix:
        """`steps_done`: how far the phase got, which sizes a fix for a time limit."""
        tail = log_tail(log_text)
        hparams = effective_hparams(self.trainer, hparams)

        def fallback() -> Fix:
            return heuristic.analyze(state, exit_code, tail, hparams, self.trainer, steps_done)

        if self.llm is None:
            record = AgentRecord("error_analyzer", "heuristic")
            fix = fallback()
        else:
            record = AgentRecord("error_analyzer", self.llm.name, self.cfg.model)
            system, task = render("error_analyzer", hparam_guide=hparam_guide(self.trainer),
                                  state=state or "unknown", exit_code=exit_code,
                                  steps_done=steps_done,
                                  hparams_yaml=as_yaml(hparams), log_tail=tail)
            fix = ask(self.llm, Prompt(system, task, max_tokens=1024),
                      lambda text: check_fix(extract_json(text), hparams, self.trainer,
                                             self.llm.name), fallback, record)
        record.result = asdict(fix)
        save_record(Path(out_dir) / RECORD, record, secrets_from_env([self.cfg.api_key_env]))
        return fix
