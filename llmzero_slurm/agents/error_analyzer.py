"""The error analyzer: why a phase failed and how its debug child should differ.

Its input is what Slurm and the job leave behind (state, exit code, log tail); validation and
test scores printed in the log are removed before any LLM sees it (a diagnosis needs none, and
verl prints a test source's score as a validation one).
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping

from ..backends.base import TrainerBackend
from ..config import AgentConfig
from ..methods.space import NO_BOUNDS, Bounds
from ..metrics import strip_score_text
from ..store.node_dir import NodeDir
from .answers import Fix, check_fix, extract_json
from .ask import ask
from .knowledge import hparam_guide
from .llm import Backend, Prompt
from .offline import error_analyzer as offline
from .prompting import as_yaml, render
from .records import AgentRecord, agent_secrets, save_record

TAIL_LINES = 80
TAIL_CHARS = 8000


def log_tail(text: str) -> str:
    """The last lines of a job log, scores removed, bounded in size. Scores go before the cut:
    a cut inside a metric's name would leave a fragment no pattern knows, with its value."""
    tail = strip_score_text("\n".join(text.splitlines()[-TAIL_LINES:]))
    if len(tail) <= TAIL_CHARS:
        return tail
    return tail[-TAIL_CHARS:].split("\n", 1)[-1]    # drop the partial first line


class ErrorAnalyzer:
    def __init__(self, cfg: AgentConfig, trainer: TrainerBackend, llm: Backend | None,
                 bounds: Bounds = NO_BOUNDS):
        self.cfg, self.trainer, self.llm, self.bounds = cfg, trainer, llm, bounds

    def analyze(self, state: str | None, exit_code: int | None, log_text: str,
                hparams: Mapping[str, Any], out_dir: str | Path,
                steps_done: int | None = None, resuming: bool = False) -> Fix:
        """`steps_done`: how far the phase got, which sizes a fix for a time limit;
        `resuming`: the fix loads a checkpoint, whose LoRA settings it must keep."""
        tail = log_tail(log_text)
        hparams = self.trainer.effective_hparams(hparams)

        def fallback() -> Fix:
            return offline.analyze(state, exit_code, tail, hparams, self.trainer, steps_done,
                                   self.bounds)

        llm = self.llm
        if llm is None or offline.cannot_succeed_by_retrying(exit_code):
            record = AgentRecord("error_analyzer", "heuristic" if llm is None else "rule")
            fix = fallback()
        else:
            record = AgentRecord("error_analyzer", llm.name, self.cfg.model)
            system, task = render("error_analyzer",
                                  hparam_guide=hparam_guide(self.trainer, exclude=("total_epochs",)),
                                  bounds=self.bounds.lines(),
                                  state=state or "unknown", exit_code=exit_code,
                                  steps_done=steps_done, resuming=resuming,
                                  hparams_yaml=as_yaml(hparams), log_tail=tail)
            fix = ask(llm, Prompt(system, task, max_tokens=1024),
                      lambda text: check_fix(extract_json(text), hparams, self.trainer,
                                             llm.name, resuming, self.bounds), fallback, record)
        record.result = asdict(fix)
        save_record(NodeDir(out_dir).error_analysis_file, record, agent_secrets(self.cfg, self.llm))
        return fix
