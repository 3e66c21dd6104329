"""The early stopper: CONTINUE or STOP for a running phase (paper §3.5).

CONTINUE is the answer unless the validation trajectory clearly cannot win. Before 10 steps
into the phase, without a best strategy to compare to, without a validation point, within
one validation interval of the planned end (stopping then saves little), or when the LLM
already judged the latest validation point, no LLM is consulted; an unparsable answer counts
as CONTINUE.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from ..config import AgentConfig
from ..metrics import MetricsLog, brief, val_score_series
from ..plots import overlay_plot
from ..store.atomic import read_json
from . import heuristic
from .answers import Decision, parse_decision
from .knowledge import metric_guide
from .llm import Backend, LLMUnavailable, Prompt
from .prompting import render, score_text
from .records import AgentRecord, append_record, secrets_from_env

RECORD = "early_stop.json"
# Latest values given as context beside the validation trajectory (the plot shows the rest).
CONTEXT = ("critic/rewards/mean", "actor/entropy", "actor/kl_loss", "response_length/mean")


class Stopper:
    def __init__(self, cfg: AgentConfig, llm: Backend | None):
        self.cfg, self.llm = cfg, llm

    def decide(self, current: MetricsLog, start_step: int, planned_end: int | None,
               best: MetricsLog | None, best_val: float | None, out_dir: str | Path) -> Decision:
        """Decide for the phase whose metrics are `current`; append the record to out_dir."""
        out_dir = Path(out_dir)
        current = current.after(start_step).without_test()
        step = current.last_step or start_step
        phase_steps = step - start_step
        val = val_score_series(current)
        record = AgentRecord("stopper", "rule")
        if answer := heuristic.ruled(val, best_val, phase_steps, planned_end):
            decision = answer
        elif self.llm is None:
            record.backend = "heuristic"
            decision = heuristic.decide(val, best_val, phase_steps, planned_end, self.cfg.stop_margin)
            decision.source = "heuristic"
        elif earlier := _judged(out_dir / RECORD, val[-1][0], self.llm.name):
            decision = Decision(earlier["action"], f"no validation point since step "
                                f"{val[-1][0]}, judged then: {earlier['reason']}", step)
        else:
            record.backend, record.model = self.llm.name, self.cfg.model
            decision = self._ask(current, start_step, planned_end, best, best_val, out_dir,
                                 record, phase_steps, val)
        decision.step, decision.val_step = step, val[-1][0] if val else None
        record.result = asdict(decision)
        append_record(out_dir / RECORD, record, secrets_from_env([self.cfg.api_key_env]))
        return decision

    def prompt(self, current: MetricsLog, start_step: int, planned_end: int | None,
               best: MetricsLog | None, best_val: float, out_dir: Path) -> Prompt:
        """The overlay image and the two short summaries (kept small: this runs every 15 min)."""
        step = current.last_step or start_step
        image = overlay_plot(current, best, out_dir / "plots" / f"overlay_{step:06d}.png")
        system, task = render(
            "stopper", metric_guide=metric_guide(), best_val_text=score_text(best_val),
            best_summary=brief(best, CONTEXT) if best else "(no curves)",
            start_step=start_step, step=step, phase_steps=step - start_step,
            planned_end=planned_end, current_summary=brief(current, CONTEXT))
        return Prompt(system, task, [image], max_tokens=300)

    def _ask(self, current: MetricsLog, start_step: int, planned_end: int | None,
             best: MetricsLog | None, best_val: float, out_dir: Path, record: AgentRecord,
             phase_steps: int, val: list[tuple[int, float]]) -> Decision:
        step = current.last_step
        prompt = self.prompt(current, start_step, planned_end, best, best_val, out_dir)
        record.saw(prompt)
        try:
            reply = self.llm.complete(prompt)
        except LLMUnavailable as exc:
            record.fallbacks.append(f"LLM unavailable: {exc}; used the heuristic rule")
            return heuristic.decide(val, best_val, phase_steps, planned_end, self.cfg.stop_margin)
        record.usage.add(reply.usage)
        record.answers.append(reply.text)
        decision = parse_decision(reply.text, step, self.llm.name)
        if decision is None:
            record.fallbacks.append("answer has no DECISION line; CONTINUE by default")
            return Decision("CONTINUE", "the answer could not be read", step, "rule")
        return decision


def _judged(path: Path, val_step: int, source: str) -> dict | None:
    """The LLM's earlier decision at this validation point, if any: only the validation
    trajectory can justify STOP, so asking again before it moves would buy the same answer."""
    if not path.exists():
        return None
    for entry in reversed(read_json(path)):
        result = entry.get("result") if isinstance(entry, dict) else None
        if result and result.get("val_step") == val_step and result.get("source") == source:
            return result
    return None
