"""The search tree's data model: one Node per training phase, a Tree as an immutable snapshot.

Nodes carry facts (status, scores, where they resume from); everything the search derives
(visit counts, terminality, Q) is computed from a snapshot in `scoring` and `policy`, so no
counter can drift from the records it summarises.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Iterator, Mapping


class Kind(str, Enum):
    SCRATCH = "scratch"   # starts from the base model
    EVOLVE = "evolve"     # resumes from the parent's adapter at a chosen step
    DEBUG = "debug"       # a fix of a failed parent, same starting point as the parent


class Status(str, Enum):
    PROPOSED = "proposed"        # record exists, nothing submitted
    SUBMITTING = "submitting"    # intent recorded (token), sbatch may or may not have happened
    QUEUED = "queued"            # the scheduler knows the job, not started
    RUNNING = "running"
    COMPLETED = "completed"
    EARLY_STOPPED = "early_stopped"  # stopped by the monitor; keeps its checkpoints
    FAILED = "failed"            # FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, BOOT_FAIL, ...
    CANCELLED = "cancelled"      # cancelled by a person; no verdict on the configuration

    @property
    def pending(self) -> bool:
        return self in PENDING

    @property
    def finished(self) -> bool:
        return self in FINISHED


PENDING = frozenset({Status.PROPOSED, Status.SUBMITTING, Status.QUEUED, Status.RUNNING})
FINISHED = frozenset({Status.COMPLETED, Status.EARLY_STOPPED, Status.FAILED, Status.CANCELLED})


@dataclass
class Resume:
    """Where a phase starts: the parent's checkpoint at a global step."""

    node: int
    step: int


@dataclass
class Results:
    best_val: float | None = None       # best validation score seen in this phase
    best_val_step: int | None = None    # global step of that score
    test_at_best: float | None = None   # recorded for reports only; never shown to an agent
    last_step: int | None = None        # last global step trained
    checkpoints: list[int] = field(default_factory=list)  # global steps with a saved adapter
    gpu_hours: float = 0.0


@dataclass
class Submission:
    """Exactly-once bookkeeping: the token is written before sbatch, the job id after."""

    token: str | None = None
    job_id: str | None = None
    scheduler_state: str | None = None  # last raw state (e.g. TIMEOUT) for humans and the analyzer
    exit_code: int | None = None
    reason: str | None = None
    attempts: int = 0


@dataclass
class Node:
    id: int
    parent: int | None
    kind: Kind
    hparams: dict[str, Any]
    resume: Resume | None = None
    status: Status = Status.PROPOSED
    results: Results = field(default_factory=Results)
    submission: Submission = field(default_factory=Submission)
    diagnosis: str = ""
    debug_depth: int = 0
    injected: bool = False         # forced scratch child: not charged to the parent's k_max
    fixed_from: int | None = None  # a debug fix reparented beside the node it fixes
    terminal: bool = False         # set explicitly (chain resolved, analyzer gave up)
    pruned: bool = False           # removed from the search (debug subtree of a fixed chain)
    created_at: float = 0.0
    submitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def start_step(self) -> int:
        """Global steps continue across phases: a child resuming at step k starts at k."""
        return self.resume.step if self.resume else 0

    @property
    def score(self) -> float | None:
        return self.results.best_val

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["kind"] = self.kind.value
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Node":
        """Build from a node.json mapping; raises KeyError/TypeError/ValueError when malformed."""
        data = dict(data)
        data["kind"] = Kind(data["kind"])
        data["status"] = Status(data["status"])
        resume = data.get("resume")
        data["resume"] = Resume(**resume) if resume else None
        data["results"] = Results(**data.get("results", {}))
        data["submission"] = Submission(**data.get("submission", {}))
        return cls(**data)


def quarantined(node_id: int, why: str) -> Node:
    """The stand-in for a node whose record cannot be read: failed, final and out of the
    search, so the rest of the tree stays visible and running; its files are left as they are."""
    return Node(node_id, None, Kind.SCRATCH, {}, status=Status.FAILED, terminal=True,
                pruned=True, diagnosis=f"record unreadable, left out of the search: {why}")


class Tree:
    """A read-only snapshot of all nodes, with child lists built once."""

    def __init__(self, nodes: Iterable[Node]):
        self.nodes: dict[int, Node] = {n.id: n for n in nodes}
        self._children: dict[int | None, list[int]] = {}
        for node in sorted(self.nodes.values(), key=lambda n: n.id):
            self._children.setdefault(node.parent, []).append(node.id)

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __getitem__(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def children(self, node_id: int | None, include_pruned: bool = False) -> list[Node]:
        kids = (self.nodes[i] for i in self._children.get(node_id, ()))
        return [k for k in kids if include_pruned or not k.pruned]

    def roots(self) -> list[Node]:
        return self.children(None)

    def subtree(self, node_id: int) -> Iterator[Node]:
        """The node and all its non-pruned descendants (iterative: trees can be deep)."""
        stack = [self.nodes[node_id]]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(self.children(node.id))
