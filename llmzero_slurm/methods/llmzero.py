"""The LLMZero search: UCT selection over the tree, agents for every new phase (Algorithm 1).

Selection picks where to branch; the proposer fills in an evolve or injected-scratch child
(or, with nothing untried left, closes the parent), the error analyzer a debug child. The root
runs the experiment's own configuration (the practitioner's recipe), as in the paper.
"""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Mapping

from ..agents.answers import NothingUntried
from ..agents.error_analyzer import ErrorAnalyzer
from ..agents.llm import choose_backend, endpoint
from ..agents.proposer import Proposer, ProposerInput
from ..backends.spec import PhaseSpec
from ..errors import ConfigError
from ..search.budget import Budget, planned_length, planned_steps
from ..search.policy import Action, best_node, select
from ..search.tree import Kind, Node, Status, Tree
from ..store.node_dir import NodeDir
from .base import Close, GiveUp, MethodContext, PhasePlan, SearchMethod, Verdict
from .space import parse_bounds


class LLMZeroMethod(SearchMethod):
    name = "llmzero"
    early_stopping = True

    def __init__(self, ctx: MethodContext):
        super().__init__(ctx)
        cfg = ctx.config
        self.early_stopping = cfg.search.early_stopping
        llm = choose_backend(cfg.agents)
        # A resume from a shell without the key goes on with the heuristics: said, not silent.
        self.agents = (f"{llm.name}, model {cfg.agents.model}, at {endpoint(cfg.agents)}" if llm
                       else "the offline heuristics" + (f" (${cfg.agents.key_env} is not set)"
                                                        if cfg.agents.backend == "auto" else ""))
        space = parse_bounds(cfg.search.space, ctx.backend.name)
        # The root runs the experiment's configuration: it must lie within the bounds it sets.
        outside = space.problem(ctx.backend.effective_hparams(ctx.hparams))
        if outside:
            raise ConfigError("search.space", f"does not hold the experiment's own hparams: "
                              f"{outside}; widen the space or change hparams")
        bounds = space.keeping(self._job_problem)
        self.proposer = Proposer(cfg.agents, ctx.backend, llm, bounds)
        self.analyzer = ErrorAnalyzer(cfg.agents, ctx.backend, llm, bounds)
        self.budget = Budget.of(cfg.search, ctx.backend.defaults())   # told to the proposer
        self._configured_steps = planned_steps(ctx.hparams)   # a phase's length before any cut

    def _job_problem(self, hparams: Mapping[str, Any]) -> str | None:
        """What the trainer says of a planned configuration on this experiment's job."""
        node = Node(0, None, Kind.SCRATCH, dict(hparams))
        return self.ctx.backend.plan_problem(
            PhaseSpec.for_node(self.ctx.config, node, self.ctx.scratch_dir, "plan"))

    def exhausted(self, tree: Tree) -> bool:
        return len(tree) > 0 and select(tree, self.ctx.config.search) is None \
            and not any(n.status.pending for n in tree)

    def ended(self, tree: Tree) -> str:
        closed = sorted(n.id for n in tree if n.closed is not None and not n.pruned)
        return "the search has no branch left to grow" + (
            f" (nothing untried was left to propose from node{'s' * (len(closed) > 1)} "
            f"{', '.join(map(str, closed))})" if closed else "")

    def next_phase(self, tree: Tree) -> PhasePlan | Verdict | None:
        action = select(tree, self.ctx.config.search)
        if action is None:
            return None
        if action.parent is None:
            return PhasePlan(action, dict(self.ctx.hparams), diagnosis="initial configuration")
        records = self.ctx.scratch_dir / uuid.uuid4().hex[:12]
        records.mkdir(parents=True, exist_ok=True)
        if action.kind is Kind.DEBUG:
            return self._debug(tree, action, records)
        return self._propose(tree, action, records)

    def _propose(self, tree: Tree, action: Action, records: Path) -> PhasePlan | Close:
        assert action.parent is not None   # select() gives roots no proposal
        parent = tree[action.parent]
        best = best_node(tree)
        # A child a person cancelled never ran its course: its configuration is still open.
        siblings = [c for c in tree.children(parent.id) if c.status is not Status.CANCELLED]
        files = self.ctx.node_dir(parent.id)
        inp = ProposerInput(parent, files.metrics(), best.score if best else None,
                            scratch_only=action.injected, siblings=siblings,
                            budget_left=self.budget.left(tree),
                            configured_steps=self._configured_steps,
                            lost=frozenset(self._lost(files, parent.results.checkpoints)))
        try:
            proposal = self.proposer.propose(inp, records)
        except NothingUntried as exc:
            return Close(parent.id, str(exc), records)
        if proposal.checkpoint is None:
            action = Action(Kind.SCRATCH, action.parent, action.injected)
        return PhasePlan(action, proposal.hparams, proposal.checkpoint, proposal.diagnosis, records)

    def _lost(self, files: NodeDir, recorded: list[int]) -> list[int]:
        """Recorded checkpoints not to offer: gone from disk, or all of them when they cannot
        be listed (the submitter fails a child of such a parent, saying why)."""
        try:
            return self.ctx.backend.lost_checkpoints(files, recorded)
        except ConfigError:
            return recorded

    def _debug(self, tree: Tree, action: Action, records: Path) -> PhasePlan | GiveUp:
        assert action.parent is not None   # a debug child fixes a parent
        failed = tree[action.parent]
        files = self.ctx.node_dir(failed.id)
        job = failed.submission
        text = files.log_tail()
        last = files.metrics().last_step
        done = last - failed.start_step if last is not None else None
        saved = [s for s in failed.results.checkpoints if s > failed.start_step]
        # The child loads the failed phase's starting adapter, or (a time limit, a retry of the
        # same settings) its own last checkpoint.
        fix = self.analyzer.analyze(job.scheduler_state, job.exit_code, text, failed.hparams,
                                    records, done, failed.resume is not None or bool(saved))
        if fix.action == "give_up":
            return GiveUp(failed.id, fix.message or f"{fix.failure}: no automatic fix", records)
        hparams = fix.hparams or dict(failed.hparams)
        planned = planned_length(failed, self._configured_steps)
        if planned and hparams.get("total_training_steps") == failed.hparams.get("total_training_steps"):
            hparams["total_training_steps"] = planned   # the budget's cut is no part of a fix
        changes = dict(fix.changes)
        resume_step = None
        if saved and (fix.failure == "timeout" or not fix.changes):
            # Go on from the phase's own last checkpoint with what it had left to do, within
            # the steps the analyzer judged to fit the time limit: unchanged settings would
            # only train its saved steps again (a node that died, a job killed).
            resume_step = saved[-1]
            left = int(failed.hparams.get("total_training_steps") or 0) \
                - (resume_step - failed.start_step)
            if left > 0:
                planned = int(hparams.get("total_training_steps") or left)
                hparams["total_training_steps"] = min(left, planned)
                if "total_training_steps" in changes:   # the length the child runs, not the fix's
                    changes["total_training_steps"] = hparams["total_training_steps"]
        diagnosis = f"{fix.failure}: " + (", ".join(f"{k}={v}" for k, v in changes.items())
                                          or "retry unchanged")
        if resume_step is not None:
            diagnosis += f"; resumed from its own checkpoint at step {resume_step}"
        return PhasePlan(action, hparams, resume_step, diagnosis, records)
