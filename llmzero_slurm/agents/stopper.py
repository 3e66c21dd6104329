"""The early stopper: CONTINUE or STOP for a running phase (paper §3.5).

CONTINUE is the answer unless the validation trajectory clearly cannot win. Before 10 steps
into the phase, without a best strategy to compare to, without a validation point, within
one validation interval of the planned end (stopping then saves little), or when the LLM
already judged the latest validation point (its STOP overruled by the leader rule included,
while the phase still leads), no LLM is consulted; an unparsable answer counts as CONTINUE,
and the same validation point is asked about at most `TRIES_PER_POINT` times.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..config import AgentConfig
from ..metrics import MetricsLog, best_point, val_score_series
from ..metrics_text import brief
from ..plots import overlay_plot
from ..search.tree import Node
from ..store.node_dir import NodeDir
from .answers import AnswerError
from .decisions import Decision, parse_decision
from .ask import ask
from .knowledge import metric_guide
from .llm import Backend, Prompt
from .offline import stopper as offline
from .prompting import render, score_text
from .records import AgentRecord, agent_secrets, append_record

# Latest values given as context beside the validation trajectory (the plot shows the rest).
CONTEXT = ("critic/rewards/mean", "actor/entropy", "actor/kl_loss", "response_length/mean")
# Asks at one validation point whose answers could not be read: a second try often reads, and
# more would pay for the same prompt every monitor pass of a model's bad spell.
TRIES_PER_POINT = 2


@dataclass
class StopperInput:
    """What the stopper judges: a running phase's metrics against the best finished strategy."""

    current: MetricsLog                  # the running phase's own metrics.jsonl
    start_step: int                      # the global step the phase started at
    planned_end: int | None              # the global step it will end at, when known
    best: MetricsLog | None = None       # the best strategy's curves on the global-step axis
    best_val: float | None = None        # and its best validation score
    best_node: int | None = None         # the node that scored it

    @classmethod
    def of(cls, node: Node, current: MetricsLog, best: MetricsLog | None,
           best_val: float | None, best_node: int | None = None) -> "StopperInput":
        steps = node.hparams.get("total_training_steps")
        return cls(current, node.start_step, node.start_step + steps if steps else None,
                   best, best_val, best_node)


class Stopper:
    def __init__(self, cfg: AgentConfig, llm: Backend | None):
        self.cfg, self.llm = cfg, llm

    def decide(self, inp: StopperInput, out_dir: str | Path) -> Decision:
        """Decide for the phase; append the record to out_dir/early_stop.json."""
        out_dir = Path(out_dir)
        files = NodeDir(out_dir)
        current = inp.current.after(inp.start_step).without_test()
        step = current.last_step or inp.start_step
        phase_steps = step - inp.start_step
        val = val_score_series(current)
        record = AgentRecord("stopper", "rule")

        def heuristic() -> Decision:
            return offline.decide(val, inp.best_val, phase_steps, inp.planned_end,
                                  self.cfg.stop_margin, inp.best_node)

        if answer := offline.ruled(val, inp.best_val, phase_steps, inp.planned_end):
            decision = answer
        elif self.llm is None:
            record.backend = "heuristic"
            decision = heuristic()
            decision.source = "heuristic"
        elif earlier := _judged(files.stop_records(), val[-1][0], self.llm.name,
                                _leading(val, inp.best_val) is not None):
            decision = Decision(earlier["action"], f"no validation point since step "
                                f"{val[-1][0]}, judged then: {earlier['reason']}", step)
        else:
            llm = self.llm
            record.backend, record.model = llm.name, self.cfg.model

            def parse(text: str) -> Decision:
                found = parse_decision(text, step, llm.name)
                if found is None:
                    raise AnswerError("answer has no DECISION line of CONTINUE or STOP alone")
                return found

            def unreadable() -> Decision:
                record.fallbacks.append("CONTINUE by default")
                return Decision("CONTINUE", "the answer could not be read", step, "rule",
                                unread=True)

            inp = StopperInput(current, inp.start_step, inp.planned_end, inp.best, inp.best_val,
                               inp.best_node)
            decision = ask(llm, self.prompt(inp, out_dir), parse, heuristic, record,
                           repairs=0, unusable=unreadable)
            decision = _not_the_leader(decision, val, inp.best_val, record)
        decision.step, decision.val_step = step, val[-1][0] if val else None
        record.result = asdict(decision)
        append_record(files.early_stop_file, record, agent_secrets(self.cfg, self.llm))
        return decision

    def prompt(self, inp: StopperInput, out_dir: Path) -> Prompt:
        """The overlay image and the two short summaries (kept small: this runs every 15 min)."""
        current, best = inp.current, inp.best
        step = current.last_step or inp.start_step
        image = overlay_plot(current, best, NodeDir(out_dir).plots / f"overlay_{step:06d}.png")
        system, task = render(
            "stopper", metric_guide=metric_guide(), best_val_text=score_text(inp.best_val),
            best_summary=brief(best, CONTEXT) if best else "(no curves)",
            start_step=inp.start_step, step=step, phase_steps=step - inp.start_step,
            planned_end=inp.planned_end, current_summary=brief(current, CONTEXT))
        return Prompt(system, task, [image], max_tokens=300)


def _judged(records: list[dict[str, Any]], val_step: int, source: str,
            leads: bool) -> dict[str, Any] | None:
    """The LLM's earlier decision at this validation point, if any: only the validation
    trajectory can justify STOP, so asking again before it moves would buy the same answer.
    A STOP the leader rule overruled stands while the phase `leads`: asked again, the LLM
    would be overruled again. Answers that could not be read count once `TRIES_PER_POINT`
    of them were."""
    here = [r for r in (e.get("result") for e in records) if r and r.get("val_step") == val_step]
    for result in reversed(here):
        if result.get("source") == source or (result.get("overruled") and leads):
            return result
    unread = [r for r in here if r.get("unread")]
    return unread[-1] if len(unread) >= TRIES_PER_POINT else None


def _leading(val: list[tuple[int, float]], best_val: float | None) -> float | None:
    """The phase's best finite validation when it is at or above the best finished
    strategy's, else None."""
    top = best_point(val)
    return top[1] if top and best_val is not None and top[1] >= best_val else None


def _not_the_leader(decision: Decision, val: list[tuple[int, float]], best_val: float | None,
                    record: AgentRecord) -> Decision:
    """STOP is for phases that cannot win: one already at or above the best finished strategy
    is kept running whatever the answer said, and the record says it was overruled."""
    top = _leading(val, best_val)
    if decision.action != "STOP" or top is None:
        return decision
    why = (f"STOP overruled: the phase's best validation {top:.3f} is at or "
           f"above the best finished strategy's {best_val:.3f}")
    record.fallbacks.append(why)
    return Decision("CONTINUE", f"{why} (the answer said: {decision.reason[:300]})",
                    decision.step, "rule", overruled=True)
