"""The proposer: reads a finished phase and proposes the next one (paper §3.4).

It is shown the parent's configuration, a metric summary, one plot per metric and the best
validation score so far, and returns a validated `Proposal`. A forced from-scratch proposal
is shown no checkpoints, so it cannot anchor on the parent's weights.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..backends.base import TrainerBackend
from ..config import AgentConfig
from ..hparams import LENGTH_KEYS
from ..methods.space import NO_BOUNDS, Bounds
from ..metrics import MetricsLog
from ..metrics_text import summarize
from ..plots import metric_plots
from ..search.budget import planned_length, samples_per_step
from ..search.tree import Node, Status
from ..store.node_dir import NodeDir
from .answers import NothingUntried, Proposal, check_proposal, extract_json
from .ask import ask
from .knowledge import hparam_guide, metric_guide
from .llm import Backend, Prompt
from .offline import proposer as offline
from .prompting import as_yaml, render, score_text
from .records import AgentRecord, agent_secrets, save_record

SUMMARY_ROWS = 16   # enough for every validation of a typical phase


@dataclass
class ProposerInput:
    parent: Node
    metrics: MetricsLog                  # the parent phase's own metrics.jsonl
    best_val: float | None               # best validation score anywhere in the tree
    scratch_only: bool = False           # forced from-scratch injection
    siblings: list[Node] = field(default_factory=list)   # children already tried from here
    budget_left: list[str] = field(default_factory=list)  # Budget.left: the LLM plans within it
    configured_steps: int | None = None  # the experiment's phase length
    lost: frozenset[int] = frozenset()   # recorded checkpoints gone from disk: not offered

    @property
    def phase_steps(self) -> int:
        planned = planned_length(self.parent, self.configured_steps)
        trained = (self.metrics.last_step or 0) - self.parent.start_step
        return int(planned or trained or 1)


class Proposer:
    def __init__(self, cfg: AgentConfig, trainer: TrainerBackend, llm: Backend | None,
                 bounds: Bounds = NO_BOUNDS):
        self.cfg, self.trainer, self.llm, self.bounds = cfg, trainer, llm, bounds

    def propose(self, inp: ProposerInput, out_dir: str | Path) -> Proposal:
        """Propose the child, writing the plots it was shown and proposal.json to out_dir;
        NothingUntried (recorded there too) when neither the LLM nor its fallback has one."""
        out_dir = Path(out_dir)
        metrics = inp.metrics.without_test()
        checkpoints = [] if inp.scratch_only else sorted(set(inp.parent.results.checkpoints)
                                                         - inp.lost)
        parent_hp = self.trainer.effective_hparams(inp.parent.hparams)
        taken = [(s.resume.step if s.resume else None, self.trainer.effective_hparams(s.hparams))
                 for s in inp.siblings]

        def fallback() -> Proposal:
            return offline.propose(parent_hp, metrics, checkpoints, inp.phase_steps,
                                   self.trainer, inp.scratch_only, taken, self.bounds)

        llm = self.llm
        record = AgentRecord("proposer", "heuristic") if llm is None \
            else AgentRecord("proposer", llm.name, self.cfg.model)
        try:
            if llm is None:
                proposal = fallback()
            else:
                prompt = self.prompt(inp, metrics, checkpoints, NodeDir(out_dir).plots)
                proposal = ask(llm, prompt, lambda text: check_proposal(
                    extract_json(text), parent_hp, checkpoints, inp.scratch_only,
                    self.trainer, llm.name, self.bounds, taken), fallback, record)
            record.result = asdict(proposal)
        except NothingUntried as exc:   # the LLM's answers that found none are kept too
            record.result = {"nothing_untried": str(exc)}
            raise
        finally:
            save_record(NodeDir(out_dir).proposal_file, record, agent_secrets(self.cfg, self.llm))
        return proposal

    def prompt(self, inp: ProposerInput, metrics: MetricsLog, checkpoints: list[int],
               plot_dir: Path) -> Prompt:
        system, task = render(
            "proposer", metric_guide=metric_guide(),
            hparam_guide=hparam_guide(self.trainer, exclude=LENGTH_KEYS),
            bounds=self.bounds.lines(),
            parent_yaml=as_yaml(self.trainer.effective_hparams(inp.parent.hparams)),
            early_stopped=inp.parent.status == Status.EARLY_STOPPED,
            start_step=inp.parent.start_step, last_step=metrics.last_step or 0,
            summary=summarize(metrics, rows=SUMMARY_ROWS), best_val_text=score_text(inp.best_val),
            scratch_only=inp.scratch_only, checkpoints=checkpoints,
            taken=[f"{as_yaml(s.hparams)} | {tried(s)}".replace("\n", ", ") for s in inp.siblings],
            budget_left=inp.budget_left,
            step_samples=samples_per_step(self.trainer.effective_hparams(inp.parent.hparams)))
        return Prompt(system, task, metric_plots(metrics, plot_dir), max_tokens=2048)


def tried(node: Node) -> str:
    """How a phase already tried from the parent did: by validation only (its test score is
    for reports, never for an agent)."""
    last = node.results.last_step
    ended = f" at step {last}" if node.status.finished and last is not None else ""
    start = f"from step {node.resume.step}" if node.resume else "from the base model"
    return (f"{start}, {node.status.value}{ended}, best validation score "
            f"{score_text(node.score)}")
