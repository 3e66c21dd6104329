"""The controller as a Slurm job (`llmzero-start --submit`) before it holds the run.

While it waits in the queue such a job holds no lease, so the lease can neither show nor stop
it. Every submission is therefore recorded in the run directory (only ever appended to), and
while no controller holds the run, llmzero-status shows and llmzero-stop cancels the recorded
jobs Slurm has not ended. Once one holds the lease, the lease is what both go by, as before.

The job needs the LLM key, but sbatch would keep the submitting environment with the job in
slurmctld's state (and in slurmdbd where a site stores job environments), so the key travels
as it does to the monitor: a file only the user can read (controller-key/, mode 0600), taken by
every start of the job, requeues included, and removed when the search ends or is stopped.
"""
from __future__ import annotations

import os
import time
import uuid
from typing import Any, Callable

from ..backends import get_backend
from ..errors import SchedulerError, StateError, UsageError
from ..job_names import controller_job_name
from ..render import write_controller_script
from ..schedulers import JobState, SlurmScheduler
from ..search.tree import Status
from ..spent import run_budget
from ..store.atomic import read_json, set_aside, write_json
from ..store.run_store import CONTROLLER_JOBS, RunStore
from . import llm_key
from .lease import LeaseHeld

KEY_DIR = "controller-key"   # the LLM key for the controller job, while one may start
SETTLE_LOOK_S = 1.0           # between looks for a job whose sbatch answer was lost


def submitted_jobs(store: RunStore) -> list[dict[str, Any]]:
    """The recorded submissions ({"job_id", "submitted_at"}), oldest first; StateError naming
    the file when it is damaged."""
    path = store.root / CONTROLLER_JOBS
    if not path.exists():
        return []
    data = read_json(path)
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list) or not all(
            isinstance(j, dict) and str(j.get("job_id")).isdigit() for j in jobs):
        raise StateError(path, 'expected {"jobs": [{"job_id": "<digits>", "submitted_at": ...}]}')
    return jobs


def _record(store: RunStore, job_id: str, event: Callable[[str], object]) -> None:
    """Append a submission, under the run lock. A damaged record is set aside, said through
    `event`, and a new one begun: the job just submitted must be on file."""
    path = store.root / CONTROLLER_JOBS
    with store.lock.hold():
        try:
            jobs = submitted_jobs(store)
        except StateError as exc:
            kept = set_aside(path)
            event(f"{path.name} cannot be read ({exc.problem}); moved to {kept}, a new one begun")
            jobs = []
        write_json(path, {"jobs": [*jobs, {"job_id": job_id, "submitted_at": time.time()}]})


def submit_controller(store: RunStore, command: list[str],
                      event: Callable[[str], object] = print) -> str:
    """sbatch the controller's own job script and record the job; its id. Submitted as a
    phase is, under a token: a job whose sbatch answer was lost (a socket timeout) is looked
    up by it, and recorded when found. The job keeps this environment less the credentials,
    but those its phases' trainer reads (a logger's key): the LLM key is left in a private
    file (see above)."""
    token = f"controller-{uuid.uuid4().hex[:12]}"
    agents = store.config.agents
    kept = get_backend(store.config.backend).kept_credentials(store.config.trainer)
    # submitted by hand, the script drops what this submission leaves out of its environment
    script = write_controller_script(store.config.name, store.root, store.config.controller,
                                     command, token, [agents.key_env], kept)
    folder = store.root / KEY_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    llm_key.hand_over(folder, agents)
    scheduler = SlurmScheduler(secret_names=[agents.key_env], kept_names=kept)
    try:
        job = scheduler.submit(script, token)
    except SchedulerError as exc:
        if not exc.unsure:
            raise
        job = _settled(scheduler, token, controller_job_name(store.config.name), exc, event)
    event(f"controller submitted as job {job} (script {script})")
    _record(store, job, event)
    return job


def _settled(scheduler: SlurmScheduler, token: str, name: str, lost: SchedulerError,
             event: Callable[[str], object]) -> str:
    """The job of a submission whose sbatch answer was lost, looked for by its token until
    slurmctld could have registered it (settle_s): a busy one does so after the client gave
    up. The error stands when none shows, and nothing is recorded."""
    event(f"{lost}; looking for the job for up to {scheduler.settle_s:.0f} s")
    deadline = time.monotonic() + scheduler.settle_s
    while time.monotonic() < deadline:
        time.sleep(min(SETTLE_LOOK_S, max(0.0, deadline - time.monotonic())))
        try:
            if (job := scheduler.find_by_token(token, name)) is not None:
                return job
        except SchedulerError:
            continue       # squeue busy too: look again
    raise SchedulerError(f"{lost}; no job with its token showed within "
                         f"{scheduler.settle_s:.0f} s: submit again", retryable=True)


def take_key(store: RunStore) -> None:
    """A controller without the LLM key in its environment (the controller job) takes the one
    `llmzero-start --submit` left."""
    agents = store.config.agents
    if not os.environ.get(agents.key_env):
        key = llm_key.take(store.root / KEY_DIR, agents)
        if key:
            os.environ[agents.key_env] = key


def withdraw_key(store: RunStore) -> None:
    """The search ended or was stopped: no controller job will need the key again."""
    llm_key.withdraw(store.root / KEY_DIR)


def waiting_jobs(store: RunStore) -> tuple[list[JobState], str | None]:
    """The recorded controller jobs Slurm has not ended (queued, or started but not yet
    holding the run) that still bear the controller's name, and a note when that cannot be
    told. For when no controller holds the
    lease; a run never submitted asks Slurm nothing."""
    try:
        jobs = [str(j["job_id"]) for j in submitted_jobs(store)]
    except StateError as exc:
        return [], f"the submitted controller jobs are not known: {exc}"
    if not jobs:
        return [], None
    if not (SlurmScheduler.available() and SlurmScheduler.reachable()):
        return [], (f"Slurm did not answer: controller job {jobs[-1]}, the last submitted, "
                    f"may still wait in its queue")
    try:
        states = SlurmScheduler().listed(jobs, controller_job_name(store.config.name))
    except SchedulerError as exc:
        return [], f"the controller jobs' states are not known: {exc}"
    return [states[j] for j in jobs if j in states and not states[j].final], None


def refuse_if_queued(store: RunStore) -> None:
    """LeaseHeld while a recorded controller job waits in the queue: it resumes the run when
    it starts, and a second one would only exit 6 then. A started one is let be: it may be
    the job of a controller just stopped, still ending."""
    jobs, _ = waiting_jobs(store)
    queued = [state for state in jobs if state.status is Status.QUEUED]
    if queued:
        raise LeaseHeld(f"{store.root}: " + "; ".join(map(waiting_line, queued))
                        + f"; it resumes the run when it starts (to submit anew, cancel it "
                          f"with llmzero-stop {store.root})")


def refuse_needless(store: RunStore) -> None:
    """A controller job is needless while another waits in the queue (refuse_if_queued), or
    when the search has spent its budget with no phase left to take in: on a busy cluster it
    would wait its turn only to say the search finished."""
    refuse_if_queued(store)
    tree = store.load_tree()
    ended = run_budget(store).limit_reached(tree)
    if ended is not None and not any(n.status.pending for n in tree):
        raise UsageError(f"nothing submitted: the search has ended ({ended}) with no phase left "
                         "to take in; to go on, raise search.budget_iterations (or another "
                         f"budget) in {store.root / 'experiment.yaml'}")


def waiting_line(state: JobState, cancelled: bool = False) -> str:
    """A waiting controller job as status shows it; a held one with how to release it,
    unless it was just `cancelled`."""
    release = "" if cancelled else f": it starts only once released (scontrol release {state.job_id})"
    how = ("started, not holding the run yet" if state.status is not Status.QUEUED
           else f"held{release}" if state.held else "not started yet")
    return f"controller job {state.job_id} {state.shown()}, {how}"


def cancel_waiting(store: RunStore, queued_only: bool = False
                   ) -> tuple[list[JobState], list[SchedulerError], str | None]:
    """scancel the recorded controller jobs Slurm has not ended (call when no controller holds
    the lease): what a stop means for a controller that has not started. Right after a
    controller stopped, `queued_only` spares the started one (the stopped controller's own job
    finishing), while a queued one would start later and resume the run. Those cancelled, the
    refusals, and a note when they cannot be known. Every job is tried: one Slurm refuses (a
    colleague's, in a run a group shares) keeps no other queued."""
    jobs, note = waiting_jobs(store)
    if queued_only:
        jobs = [state for state in jobs if state.status is Status.QUEUED]
    scheduler = SlurmScheduler()
    cancelled, refused = [], []
    for state in jobs:
        try:
            scheduler.cancel(state.job_id, controller_job_name(store.config.name))
            cancelled.append(state)
        except SchedulerError as exc:
            refused.append(exc)
    return cancelled, refused, note
