"""The search tree's data model: one Node per training phase, a Tree as an immutable snapshot.

Nodes carry facts (status, scores, where they resume from); everything the search derives
(visit counts, terminality, Q) is computed from a snapshot in `scoring` and `policy`, so no
counter can drift from the records it summarises.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Iterator, Mapping, get_args, get_origin, get_type_hints


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

    @property
    def in_flight(self) -> bool:
        """A job may be queued or running for it: one to cancel, or to leave to its run."""
        return self in IN_FLIGHT


PENDING = frozenset({Status.PROPOSED, Status.SUBMITTING, Status.QUEUED, Status.RUNNING})
IN_FLIGHT = frozenset({Status.SUBMITTING, Status.QUEUED, Status.RUNNING})
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
class Removed:
    """Checkpoints a finished phase no longer holds: recorded before their folders go, so a
    controller killed mid-removal leaves a true record, and the next one finishes it."""

    steps: list[int]   # global steps, gone from results.checkpoints
    why: str


@dataclass
class Submission:
    """Exactly-once bookkeeping: the token is written before sbatch, the job id after."""

    token: str | None = None
    job_id: str | None = None
    scheduler_state: str | None = None  # last raw state (e.g. TIMEOUT) for humans and the analyzer
    exit_code: int | None = None
    reason: str | None = None
    attempts: int = 0


GAVE_UP = "debugging stopped: "   # how a node's diagnosis says its debug chain ended
UNREADABLE = "record unreadable, left out of the search: "   # see `quarantined`


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
    closed: str | None = None      # why it takes no more children (nothing untried to propose)
    removed_checkpoints: Removed | None = None   # search.keep_checkpoints took them
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

    @property
    def ranked_score(self) -> float | None:
        """The score UCT normalises by: none for a pruned node, nor for one a person cancelled,
        which is no verdict on its configuration. A failed phase's score stays: it measured a
        real checkpoint, which its debug fix may resume from."""
        return None if self.pruned or self.status is Status.CANCELLED else self.score

    @property
    def strategy_score(self) -> float | None:
        """The score a node competes to be the best strategy with (injection's n*, the
        stopper's bar, the proposer's and the headline's best): a ranked score of a phase that
        ran its course. A failed one can only be debugged, never evolved or replayed as is."""
        return self.ranked_score if self.status in (Status.COMPLETED, Status.EARLY_STOPPED) \
            else None

    def give_up(self, message: str) -> None:
        """End the node's debug chain, saying why under the plan's own diagnosis."""
        self.terminal = True
        self.diagnosis = (self.diagnosis + "\n" if self.diagnosis else "") + GAVE_UP + message

    @property
    def gave_up_because(self) -> str | None:
        """Why debugging the node's failure stopped; the rest of its diagnosis is the plan's."""
        return next((ln for ln in reversed(self.diagnosis.splitlines()) if ln.startswith(GAVE_UP)),
                    None)

    @property
    def unreadable(self) -> bool:
        """The stand-in for a record that cannot be read: what it trained is unknown."""
        return self.pruned and self.diagnosis.startswith(UNREADABLE)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["kind"] = self.kind.value
        data["status"] = self.status.value
        return data

    def to_record(self) -> dict[str, Any]:
        """to_dict as node.json holds it: `closed` and `removed_checkpoints` only once set.
        They came within schema version 1, and the releases before them refuse a field they
        lack: a record without them stays one they read."""
        data = self.to_dict()
        for late in ("closed", "removed_checkpoints"):
            if data[late] is None:
                del data[late]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Node":
        """Build from a node.json mapping, every field checked against its type: a record that
        parses but holds a wrong value (an editor, a bad copy) must be refused here, by field,
        not crash the search or the report later. Raises ValueError naming the field."""
        return _record(cls, data, "")

    def references(self) -> dict[str, int]:
        """The other nodes this record names: its parent, the node it resumes from, the one
        it fixes."""
        refs = {"parent": self.parent, "resume.node": self.resume.node if self.resume else None,
                "fixed_from": self.fixed_from}
        return {name: ref for name, ref in refs.items() if ref is not None}


class UnknownField(ValueError):
    """A record field this release does not have: a newer release's, or an edit's."""


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    """A record class's field types, resolved once: get_type_hints evaluates every
    annotation on each call, most of the time load_tree took (0.5 s at 1,000 nodes)."""
    return get_type_hints(cls)


def _record(cls: Any, data: Any, where: str) -> Any:
    """The dataclass `cls` (a node record or one of its parts) from parsed JSON."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where or 'the record'}: expected an object, got {data!r:.60}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    prefix = f"{where}." if where else ""
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UnknownField(f"unknown field {prefix}{unknown[0]}")
    hints = _hints(cls)
    values = {}
    for name, spec in fields.items():
        if name in data:
            values[name] = _value(hints[name], data[name], prefix + name)
        elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            raise ValueError(f"missing field {prefix}{name}")
    return cls(**values)


def _value(hint: Any, value: Any, where: str) -> Any:
    """`value` as a field typed `hint` holds it (an enum member, a nested record), or
    ValueError naming the field. The record's unions are all `X | None`."""
    options = [a for a in get_args(hint) if a is not type(None)]
    if len(options) < len(get_args(hint)):
        if value is None:
            return None
        hint = options[0]
    if dataclasses.is_dataclass(hint):
        return _record(hint, value, where)
    if isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            raise ValueError(f"{where}: {value!r:.60} is not one of "
                             f"{', '.join(m.value for m in hint)}") from None
    kind = get_origin(hint) or hint          # list[int] -> list, dict[str, Any] -> dict
    if kind is list and isinstance(value, list):
        return [_value(get_args(hint)[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if _fits(kind, value):
        return value
    raise ValueError(f"{where}: expected {_NAMES.get(kind, kind)}, got {value!r:.60}")


_NAMES = {int: "an integer", float: "a finite number", str: "a string", bool: "true or false",
          dict: "an object", list: "a list"}


def _fits(kind: Any, value: Any) -> bool:
    if kind is Any:
        return True
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def quarantined(node_id: int, why: str) -> Node:
    """The stand-in for a node whose record cannot be read: failed, final and out of the
    search, so the rest of the tree stays visible and running; its files are left as they are."""
    return Node(node_id, None, Kind.SCRATCH, {}, status=Status.FAILED, terminal=True,
                pruned=True, diagnosis=UNREADABLE + why)


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
