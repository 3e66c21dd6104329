"""Turn what a phase left in its directory into the node's Results.

Read from the phase's own files only (metrics.jsonl, ckpt/, status.json), so ingesting twice
gives the same answer -- a controller killed while ingesting simply ingests again.
"""
from __future__ import annotations

import time
from typing import Callable

from ..backends import TrainerBackend
from ..errors import ConfigError
from ..failure_reason import job_error
from ..metrics import MetricsLog, best_val, test_score_at
from ..schedulers.base import JobState
from ..search.budget import planned_steps
from ..search.tree import Node, Results, Status
from ..stop_reason import cancel_line, stop_line
from ..store.node_dir import NodeDir
from ..store.run_store import RunStore


def collect_results(node: Node, files: NodeDir, backend: TrainerBackend, nodes: int = 1) -> Results:
    """The node's results from its files: best validation (and test at that step), last step,
    checkpoints and device-hours."""
    log = files.metrics().after(node.start_step)
    results = Results(last_step=log.last_step, checkpoints=_checkpoints(backend, files),
                      gpu_hours=device_hours(files, nodes))
    _score(results, log)
    return results


def ended_line(node: Node, status: Status, state: JobState, results: Results,
               files: NodeDir) -> str:
    """The controller's line for a phase's end. A failure gives its job's own word as it
    happens: the search may go on to other phases, and no later line would say it; an early
    stop, the stopper's line, told from a person's cancel."""
    score = (f"best val {results.best_val:.3f} at step {results.best_val_step}"
             if results.best_val is not None else "no validation score")
    said = f": {state.reason}" if status is Status.COMPLETED and state.raw != "COMPLETED" else ""
    why = (job_error(node, files) if status is Status.FAILED else
           stop_line(files) if status is Status.EARLY_STOPPED else
           cancel_line(node) if status is Status.CANCELLED else None)
    return (f"node {node.id}: {status.value} ({state.raw}{said}"
            + (f", exit {state.exit_code}" if state.exit_code else "") + f"), {score}"
            + (f"; {why}" if why else ""))


def record_end(n: Node, status: Status, state: JobState, results: Results,
               files: NodeDir) -> None:
    """The node's record as its job ended; an early stop's reason is the stopper's line."""
    n.status, n.results = status, results
    n.submission.scheduler_state = state.raw
    n.submission.exit_code = state.exit_code
    n.submission.reason = stop_line(files) if status is Status.EARLY_STOPPED else state.reason
    n.finished_at = time.time()


def device_hours(files: NodeDir, nodes: int) -> float:
    """What the phase's job has held of its devices, to its end or, while it runs, so far."""
    status = files.status()
    return status.device_hours(nodes, files.last_write()) if status else 0.0


def _score(results: Results, log: MetricsLog) -> None:
    """The best validation score of the phase's own steps, and the test score there."""
    best = best_val(log.without_test())
    if best is not None:
        results.best_val_step, results.best_val = best
        results.test_at_best = test_score_at(log, best[0])


def rescore(store: RunStore, say: Callable[[str], None]) -> None:
    """Score the finished phases recorded without a score that their metrics hold: an earlier
    release did not read a data source with a slash (verl's openai/gsm8k) as a score, so the
    search passed over those phases. From the phase's own files, as at its end."""
    for node in store.load_tree():
        if not node.status.finished or node.results.best_val is not None:
            continue
        log = store.node_dir(node.id).metrics().after(node.start_step)
        if best_val(log.without_test()) is not None:
            node = store.update_node(node.id, lambda n: _score(n.results, log))  # noqa: B023 - called at once
            say(f"node {node.id}: scored from its metrics.jsonl (best val "
                f"{node.results.best_val:.3f} at step {node.results.best_val_step})")


def _checkpoints(backend: TrainerBackend, files: NodeDir) -> list[int]:
    try:
        return backend.checkpoint_steps(files)
    except ConfigError:   # a phase that died before recording its step offset saved nothing
        return []


def completed_at_limit(state: JobState, node: Node, files: NodeDir, results: Results,
                       backend: TrainerBackend) -> JobState:
    """A TIMEOUT of a phase that trained every step is a completed phase: Slurm's time limit
    struck while the job wound down. Either the job recorded its clean end in status.json, or
    it was killed before that, once it had saved the checkpoint of its last planned step."""
    if state.raw != "TIMEOUT":
        return state
    status = files.status()
    steps = planned_steps(backend.effective_hparams(node.hparams))
    last = node.start_step + steps if steps else None
    if status is not None and status.job_id == str(state.job_id) \
            and status.state == "completed" and status.exit_code == 0:
        why = "finished every step with exit 0 at the time limit"
    elif last is not None and last in results.checkpoints:
        why = f"saved its last planned step ({last}) before the time limit struck"
    else:
        return state
    return JobState(state.job_id, state.raw, Status.COMPLETED, 0, why, state.source)
