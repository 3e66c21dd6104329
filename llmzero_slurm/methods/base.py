"""What a search method decides: the next phase to run, given the tree so far.

Every method (the agent-driven llmzero search and the baselines) runs on the same controller,
store, scheduler and templates; only this decision differs. A method never writes anything:
it returns a plan and the controller records, renders and submits it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from ..backends import TrainerBackend, get_backend
from ..config import ExperimentConfig
from ..errors import ConfigError
from ..search.policy import Action
from ..search.tree import Node, Tree
from ..store.node_dir import NodeDir


@dataclass
class PhasePlan:
    """A phase to create: where it hangs, its full configuration and where it resumes."""

    action: Action
    hparams: dict[str, Any]
    resume_step: int | None = None      # the parent's checkpoint (global step) to resume from
    diagnosis: str = ""                 # why (shown in status views and the report)
    # Agent records to move into the new node's directory once it exists.
    records_dir: Path | None = None


@dataclass
class Verdict(ABC):
    """No phase, a decision about an existing node: recorded on it, the agent's records that
    led to it filed in one of its folders."""

    node: int
    message: str
    records_dir: Path | None = None     # the agent's records, written before the verdict
    said: ClassVar[str]                 # the controller's line, before the message

    @abstractmethod
    def folder(self, files: NodeDir) -> Path:
        """Where the agent's records go."""

    @abstractmethod
    def apply(self, node: Node) -> None:
        """Record the verdict on the node."""


@dataclass
class GiveUp(Verdict):
    """Stop a failed node's debug chain: its failure needs a person, not another retry."""

    said = "debug chain stopped"

    def folder(self, files: NodeDir) -> Path:
        return files.give_up

    def apply(self, node: Node) -> None:
        node.give_up(self.message)


@dataclass
class Close(Verdict):
    """Nothing untried is left to propose from the node: it takes no more children, and the
    search goes on elsewhere (or ends) rather than train a configuration again."""

    said = "takes no more children"

    def folder(self, files: NodeDir) -> Path:
        return files.closed

    def apply(self, node: Node) -> None:
        node.closed = self.message


@dataclass
class MethodContext:
    """What a method may read besides the tree: the config, the trainer backend, the run's base
    configuration and each node's directory."""

    config: ExperimentConfig
    node_dir: Callable[[int], NodeDir]
    scratch_dir: Path                   # where agents write records before a node id exists
    extras: dict[str, Any] = field(default_factory=dict)
    # The configuration every phase starts from (build_controller: the experiment's hparams
    # over the trainer's defaults); None: the experiment's hparams as given.
    base_hparams: dict[str, Any] | None = None
    backend: TrainerBackend = field(init=False)
    hparams: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.backend = get_backend(self.config.backend)
        self.hparams = dict(self.config.hparams if self.base_hparams is None else self.base_hparams)


class SearchMethod(ABC):
    """A search method, listed by name in methods/registry.py. It is built anew from the
    frozen config at every start, so what it knows of the run comes from the trees it is
    given."""

    name: str                           # its search.method name
    early_stopping: bool = False        # whether the monitor job runs for this method
    agents: str | None = None           # who answers for its agents, said at each start

    def __init__(self, ctx: MethodContext):
        self.ctx = ctx

    @abstractmethod
    def next_phase(self, tree: Tree) -> PhasePlan | Verdict | None:
        """The next phase to start now (a PhasePlan), a decision about an existing node (a
        Verdict), or None when nothing can start until a job ends: with no job pending, None
        ends the search. Asked again, with the tree reloaded, until `search.concurrency`
        phases are pending."""

    @abstractmethod
    def exhausted(self, tree: Tree) -> bool:
        """True when no further phase will ever be proposed (pending jobs aside)."""

    def ended(self, tree: Tree) -> str:
        """Why the search ended with budget left: the controller's last word on it."""
        return f"{self.name} has nothing left to run"

    def first_hparams(self) -> dict[str, Any] | None:
        """The configuration of the first phase this method creates (None: none planned)."""
        return self.ctx.hparams

    def notes(self) -> list[str]:
        """What --check and a new run's start say of settings this method sets aside."""
        return []

    def check_budget(self) -> None:
        """Refuse a sample budget that cannot hold one step of the first phase: the start
        would make a run directory that creates no phase and ends with nothing found."""
        samples, first = self.ctx.config.search.budget_samples, self.first_hparams()
        if samples is None or first is None:
            return
        shape = {**self.ctx.backend.defaults(), **first}
        batch, rollouts = shape.get("train_batch_size"), shape.get("rollout_n") or 1
        if batch and samples < batch * rollouts:
            raise ConfigError("search.budget_samples", f"is {samples:,}, less than one training "
                              f"step of the first phase ({batch} x {rollouts} = "
                              f"{batch * rollouts:,} samples: train_batch_size x rollout_n), so "
                              "no phase could run: raise it or leave it unset")
