"""What the report shows, gathered once from a run directory: every node with its metrics and
agent records, the best path phase by phase, and the costs.

Agent records are written by other processes and may be missing, half-migrated or from an
older version, so they are read defensively: an unreadable file becomes a note in the report,
never an exception. The tree itself must be sound (RunStore refuses a corrupt node record).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import ExperimentConfig
from ..errors import StateError
from ..failure_reason import job_error, recorded_failure
from ..hparams import knobs
from ..metrics import MetricsLog, strategy_curves
from ..schedulers.base import STATUS_FILE_STATES, job_state
from ..search.tree import Node, Status, Tree
from ..spent import Spent, spent
from ..store.atomic import read_json
from ..stop_reason import cancel_line, stop_line
from ..store.node_dir import NodeDir
from ..store.run_store import RunStore
from .costs import AgentCost
from .logs import MetricsLogs
from .strategy import phase_spans

@dataclass
class NodeView:
    """A node as the page shows it; its curves are read where drawn (report/logs.py)."""

    node: Node
    files: NodeDir
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)   # against its parent
    proposal: dict[str, Any] | None = None
    error_analysis: dict[str, Any] | None = None
    give_up_analysis: dict[str, Any] | None = None     # the answer that ended its debug chain
    closing_proposal: dict[str, Any] | None = None     # the one that found nothing untried
    stops: list[dict[str, Any]] = field(default_factory=list)
    ended: str = ""     # its job's own end, when the record still has it queued or running
    ended_as: Status | None = None      # the status that end gives it (status.py's as_live)
    parent_unreadable: bool = False     # what it changed is unknown: not "from the defaults"
    failure: str = ""   # why a failed phase failed, as its record or its job's output says
    notes: list[str] = field(default_factory=list)     # its agent records' problems

    @property
    def status(self) -> Status:
        """The status shown: its job's end, when the record does not have it yet."""
        return self.ended_as or self.node.status

    @property
    def why_stopped(self) -> str:
        """Why the stopper ended it, as status says; a person's cancel or a prune said as such."""
        if self.status is Status.CANCELLED:
            return cancel_line(self.node)
        return stop_line(self.files) or ""

    @property
    def decisions(self) -> list[dict[str, Any]]:
        """The stopper's decisions in order, each with its action, step and reason."""
        return [e["result"] for e in self.stops if isinstance(e.get("result"), dict)]

    @property
    def diagnosis(self) -> str:
        if self.node.diagnosis:
            return self.node.diagnosis
        for record in (self.proposal, self.error_analysis):
            result = record.get("result") if record else None
            if isinstance(result, dict):
                text = result.get("diagnosis") or result.get("message") or result.get("failure")
                if text:
                    return str(text)
        return ""


@dataclass
class Phase:
    """One phase of the best strategy: the steps it contributes and what changed going in."""

    view: NodeView
    log: MetricsLog                 # its node's drawn series (logs.MetricsLogs.curves)
    start: int
    end: int                        # the next phase resumed here, or the phase's last step
    changes: dict[str, tuple[Any, Any]]   # hyperparameter: (previous phase, this phase)
    after_unreadable: int | None = None   # the previous phase's node, when its record is not read


@dataclass
class RunView:
    root: Path
    config: ExperimentConfig
    tree: Tree
    nodes: dict[int, NodeView]
    phases: list[Phase]
    best_curves: MetricsLog | None      # the best strategy stitched on the global-step axis
    logs: MetricsLogs                   # where the nodes' curves are read
    agent_costs: dict[str, AgentCost]
    run_notes: list[str]                # the run's own, after every node's
    spent: Spent                        # samples, the stopper's saving, the gain over the base
    unreadable: list[int] = field(default_factory=list)  # nodes left out: the best may be one

    @property
    def notes(self) -> list[str]:
        """What the page notes, node by node (its log's bad lines, its records' problems),
        then the run's. The logs' problems are asked for here, once the curves were drawn:
        drawing a node's grid reads its log and keeps its problems, so a first write parses
        each log once, not once for the notes and again to draw it."""
        return [*(note for view in self.nodes.values()
                  for note in (*(f"node {view.node.id}: {p}" for p in self.logs.problems(view.files)),
                               *view.notes)),
                *self.run_notes]

    @property
    def best(self) -> Node | None:
        return self.phases[-1].view.node if self.phases else None

    @property
    def best_adapter(self) -> str | None:
        """The best node's kept adapter, relative to the run, when it is the adapter of the
        reported best step (the cpu trainer keeps one; verl saves only every save_freq)."""
        best = self.best
        if best is None:
            return None
        files = self.nodes[best.id].files
        kept = files.best_adapter_step()
        if kept is None or kept[0] != best.results.best_val_step:
            return None
        return str(files.best_adapter.relative_to(self.root))


def _read(path: Path, notes: list[str]) -> Any:
    if not path.exists():
        return None
    try:
        return read_json(path)
    except StateError as exc:
        notes.append(f"skipped {path.parent.name}/{path.name}: {exc}")
        return None


# The fields of an agent's record the page iterates, with the shape it needs and its name.
RECORD_SHAPES = {"result": (dict, "its result is not an object"),
                 "fallbacks": (list, "its fallbacks are not a list")}


def _agent_record(path: Path, notes: list[str]) -> dict[str, Any] | None:
    """An agent's answer as the page shows it: an object whose result is an object and
    whose fallbacks are a list (a hand-edited one may not be: that field is shown empty,
    with a note); a paid call all the same, so it is kept for the costs."""
    value = _read(path, notes)
    if not isinstance(value, dict):
        return None
    emptied = {key: shape() for key, (shape, _) in RECORD_SHAPES.items()
               if not isinstance(value.get(key) or shape(), shape)}
    notes.extend(f"{path.parent.name}/{path.name}: {RECORD_SHAPES[key][1]}; shown empty"
                 for key in emptied)
    return {**value, **emptied}


def _changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """What a phase changed going in; its length (steps, epochs) is not a change of strategy."""
    return {k: (before.get(k), v) for k, v in knobs(after).items() if before.get(k) != v}


def _ended(node: Node, files: NodeDir) -> tuple[str, Status | None]:
    """How the job of a phase its record has queued or running ended, and the status that
    gives it, from the job's own status.json: a controller stopped with --cancel does not wait
    to record the cancels, and until one resumes, llmzero-status says the job ended; the report
    must not say running. A preempted job is not one: Slurm requeues it under the same id."""
    job = files.status() if node.status in (Status.QUEUED, Status.RUNNING) else None
    if job is None or job.finished_at is None or job.job_id is None \
            or job.job_id != node.submission.job_id or job.state == "preempted":
        return "", None
    code = f", exit {job.exit_code}," if job.exit_code is not None else ""
    return (f"its job {job.job_id} ended {job.state}{code} since the controller last recorded it",
            files.ended_as(job_state(job.job_id, STATUS_FILE_STATES.get(job.state, job.state)).status))


def _node_view(node: Node, tree: Tree, files: NodeDir) -> NodeView:
    parent = tree.nodes.get(node.parent) if node.parent is not None else None
    unread = parent is not None and parent.unreadable
    view = NodeView(node, files, parent_unreadable=unread,
                    changes=_changes(parent.hparams, node.hparams) if parent and not unread else {})
    view.ended, view.ended_as = _ended(node, files)
    if view.status is Status.FAILED and not node.unreadable:
        view.failure = recorded_failure(node) or job_error(node, files) or ""
    return _with_records(view, files, view.notes)


def _with_records(view: NodeView, files: NodeDir, notes: list[str]) -> NodeView:
    """The agents' records of a node, read into its view."""
    view.proposal = _agent_record(files.proposal_file, notes)
    view.error_analysis = _agent_record(files.error_analysis_file, notes)
    view.give_up_analysis = _agent_record(NodeDir(files.give_up).error_analysis_file, notes)
    view.closing_proposal = _agent_record(NodeDir(files.closed).proposal_file, notes)
    stops = _read(files.early_stop_file, notes)
    view.stops = [s for s in stops if isinstance(s, dict)] if isinstance(stops, list) else []
    return view


def _phases(tree: Tree, views: dict[int, NodeView], logs: MetricsLogs) -> list[Phase]:
    phases: list[Phase] = []
    for node, start, end in phase_spans(tree):
        before = phases[-1].view.node if phases else None
        known = before is not None and not before.unreadable
        changes = _changes(before.hparams, node.hparams) if before is not None and known else {}
        view = views[node.id]
        phases.append(Phase(view, logs.curves(view.files), start, end, changes,
                            before.id if before is not None and not known else None))
    return phases


def _unused_records(folder: Path, notes: list[str]) -> list[tuple[str, dict]]:
    """Agents' answers that made no phase (the sample budget had no room for the plan, or the
    controller stopped between asking and creating it): no node shows them, yet they were paid."""
    found = []
    for records in sorted(p for p in folder.glob("*") if p.is_dir()):
        files = NodeDir(records)
        for fallback, path in (("proposer", files.proposal_file),
                               ("error_analyzer", files.error_analysis_file)):
            if isinstance(record := _read(path, notes), dict):
                found.append((fallback, record))
    if found:
        notes.append(f"{len(found)} agent answer{'s' if len(found) > 1 else ''} made no phase "
                     f"(kept in {folder.name}/); counted in the agents' costs")
    return found


def _agent_costs(views: dict[int, NodeView],
                 unused: list[tuple[str, dict]]) -> dict[str, AgentCost]:
    costs: dict[str, AgentCost] = {}
    records: list[tuple[str, dict | None]] = list(unused)
    for view in views.values():
        records += [("proposer", view.proposal), ("error_analyzer", view.error_analysis),
                    ("error_analyzer", view.give_up_analysis), ("proposer", view.closing_proposal)]
        records += [("stopper", stop) for stop in view.stops]
    for fallback, record in records:
        if record:
            costs.setdefault(str(record.get("agent") or fallback), AgentCost()).add(record)
    return costs


def agent_costs(store: RunStore, tree: Tree) -> dict[str, AgentCost]:
    """The agents' sums alone, no metrics read (llmzero-status)."""
    views = {n.id: _with_records(NodeView(n, store.node_dir(n.id)),
                                 store.node_dir(n.id), []) for n in tree}
    return _agent_costs(views, _unused_records(store.proposals_dir, []))


def collect(root: str | Path, logs: MetricsLogs | None = None,
            store: RunStore | None = None) -> RunView:
    """`logs`: the one the last report of this run read through (a refresh), or a new one;
    `store`: the run opened for reading by the last one (its records, once read, are opened
    again only where they changed), or None to open it now."""
    store = store or RunStore.open(root, reading=True)
    tree = store.load_tree()
    logs = MetricsLogs() if logs is None else logs
    notes: list[str] = []
    views = {n.id: _node_view(n, tree, store.node_dir(n.id)) for n in sorted(tree, key=lambda n: n.id)}
    phases = _phases(tree, views, logs)
    on_path = {p.view.node.id for p in phases}
    for i in sorted(store.corrupt):
        held = "the best strategy runs through it, so no strategy.yaml until " if i in on_path else ""
        notes.append(f"node {i} is left out, its record unreadable: {held}llmzero-repair "
                     f"{store.root} {i} rebuilds it")
    curves = {p.view.node.id: p.log for p in phases}
    best = strategy_curves([p.view.node for p in phases], curves.__getitem__) if phases else None
    costs = _agent_costs(views, _unused_records(store.proposals_dir, notes))
    shown = Tree(replace(v.node, status=v.status) for v in views.values())
    return RunView(store.root, store.config, tree, views, phases, best, logs, costs, notes,
                   spent(store, tree, shown=shown), sorted(store.corrupt))
