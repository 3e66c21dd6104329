"""The local scheduler's job table, <run>/local-jobs/jobs.json: its reader, its entries, and
its rebuild by llmzero-repair.

The table gives each local job its id, token, script, name, output, limits and supervisor;
the supervisor's <id>.result.json beside it says how the job ended. A damaged table (an
editor, a disk error) stopped every resume of the run. What it held is kept elsewhere too:
each node record's job id and token, the job's own status.json and job.claim (the id of a job
whose record was never updated), the script's #SBATCH lines, and the supervisors still
running (their command lines name the folder and the job id).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import SchedulerError, StateError
from ..processes import command_lines
from ..store.atomic import keep_copy, read_json, write_json
from ..store.locks import FlockLock
from .base import parse_time, read_submission
from .directives import expand_output

TABLE = "jobs.json"
SUPERVISOR = "llmzero_slurm.schedulers.local_supervisor"   # the module each job's supervisor runs
CALL_MODULE = "llmzero_slurm.schedulers.local_call"   # what a call job runs, its folder next
# The modules call jobs have run as, this release's first: a monitor an upgrade left running
# under submitit's own module is still this run's monitor, not one to start again beside it.
CALL_MODULES = (CALL_MODULE, "submitit.local._local")
# The modules supervisors have run as, this release's first: one an upgrade left running
# (its phases go on through `llmzero-stop` without --cancel) still supervises its job.
SUPERVISORS = (SUPERVISOR, "llmzero_slurm.schedulers.local")
MARK = "LLMZ_LOCAL_JOB"   # in each local job's environment, its job_mark


def job_mark(state_dir: Path, job_id: str) -> str:
    """The value of MARK every process of the job inherits: its table folder and id, by which
    its process group is told from another that has since taken the same id."""
    return str(state_dir.resolve() / job_id)


def cancel_request(state_dir: Path, job_id: str) -> Path:
    """Where a cancel of the job is recorded before its supervisor is signalled: a supervisor
    that finds it starts no job, and one that died without an end record had its job
    cancelled (a TERM that came before its handler was set kills it)."""
    return state_dir / f"{job_id}.cancel"


def lock(state_dir: Path) -> FlockLock:
    """The lock every change of the table takes."""
    return FlockLock(state_dir / "jobs.lock", timeout=60)


def _load(path: Path) -> dict[str, Any]:
    table = read_json(path)
    next_id = table.get("next_id") if isinstance(table, dict) else None
    if not isinstance(table, dict) or not isinstance(table.get("jobs"), dict) \
            or isinstance(next_id, bool) or not isinstance(next_id, int):
        raise StateError(path, "not a local job table")
    return table


def read_table(state_dir: Path) -> dict[str, Any]:
    """The table (an empty one before the first job); StateError naming it, and the repair,
    when it cannot be read."""
    path = state_dir / TABLE
    if not path.exists():
        return {"next_id": 1, "jobs": {}}
    try:
        return _load(path)
    except StateError as exc:
        raise StateError(path, f"{exc.problem}; llmzero-repair {state_dir.parent} rebuilds it "
                               "from the node folders") from None


def job_entry(script: Path, token: str, job_id: str, submit_dir: str,
              submitted_at: float) -> dict[str, Any]:
    """A job's row, from the #SBATCH lines of the script it runs (checked to carry `token`)."""
    directives = read_submission(script, token)
    try:
        limit = parse_time(directives["time"]) if "time" in directives else None
    except ValueError as exc:
        raise SchedulerError(f"submitting {script}: --time: {exc}") from None
    name = directives.get("job-name", script.name)
    output = Path(submit_dir, expand_output(directives.get("output", "slurm-%j.out"), job_id, name))
    return {"token": token, "script": str(script), "name": name, "output": str(output),
            "submit_dir": submit_dir, "time_limit_s": limit,
            "cpus_per_task": directives.get("cpus-per-task", "1"),
            "submitted_at": submitted_at, "supervisor_pid": None}


@dataclass(frozen=True)
class KnownJob:
    """A job the run's node folders name: its token and the script it was submitted with."""

    token: str
    script: Path
    submitted_at: float | None = None


@dataclass(frozen=True)
class Rebuilt:
    damage: str          # what was wrong with the table
    kept: Path           # the damaged file, kept as jobs.json.damaged-<time>
    jobs: int            # rows rebuilt
    running: int         # of which a supervisor still runs
    next_id: int
    skipped: list[str]   # jobs that could not be rebuilt, and why


def supervised_job(argv: list[str], state_dir: Path) -> str | None:
    """The id of the job of `state_dir` whose supervisor has the command line `argv`; None for
    any other process (another run's supervisor included)."""
    module = next((m for m in SUPERVISORS if m in argv), None)
    if module is None:
        return None
    folder, job_id = (argv[argv.index(module) + 1:] + ["", ""])[:2]
    if job_id.isdigit() and folder and Path(folder).resolve() == state_dir.resolve():
        return job_id
    return None


def _supervisors(state_dir: Path) -> dict[str, int]:
    """Job id -> pid of each supervisor of `state_dir` running on this host."""
    return {job_id: pid for pid, argv in command_lines(SUPERVISORS).items()
            if (job_id := supervised_job(argv, state_dir)) is not None}


def _ids_on_file(state_dir: Path) -> list[int]:
    """The ids of the jobs whose supervisor files are in `state_dir` (<id>.result.json,
    <id>.supervisor.log): each was given out, so the next id goes past them all."""
    return [int(head) for p in state_dir.iterdir()
            if (head := p.name.split(".", 1)[0]).isdigit() and p.name != head]


def rebuild_table(state_dir: Path, known: Mapping[str, KnownJob]) -> Rebuilt | None:
    """Put back a table that cannot be read from what the run keeps elsewhere (`known`: job id
    -> its job, from the node folders), keeping the damaged file beside it; None when it reads
    fine. Ids are never given out twice: the next one passes every id known or on file."""
    path = state_dir / TABLE
    with lock(state_dir).hold():
        try:
            _load(path)
            return None
        except StateError as exc:
            damage = exc.problem
        running = _supervisors(state_dir)
        jobs: dict[str, Any] = {}
        skipped = []
        for job_id, job in sorted(known.items(), key=lambda item: int(item[0])):
            try:
                entry = job_entry(job.script, job.token, job_id, str(job.script.parent),
                                  job.submitted_at or time.time())
            except SchedulerError as exc:
                skipped.append(f"job {job_id}: {exc}")
                continue
            jobs[job_id] = {**entry, "supervisor_pid": running.get(job_id)}
        ids = [*map(int, known), *map(int, running), *_ids_on_file(state_dir)]
        next_id = max(ids, default=0) + 1
        kept = keep_copy(path)
        write_json(path, {"next_id": next_id, "jobs": jobs})
    return Rebuilt(damage, kept, len(jobs), sum(1 for j in jobs if j in running), next_id,
                   skipped)
