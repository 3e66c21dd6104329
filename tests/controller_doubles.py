"""Scripted doubles of the controller's two interfaces, for fast tests of its loop.

`ScriptedScheduler` plays each submitted job from a script: one entry per poll, either a raw
Slurm state or a callable standing for what the job does at that point (write its metrics,
decide a stop); a cancel cuts the script short. `ScriptedMethod` offers a fixed list of plans,
the i-th as the i-th node of the tree (so a restarted controller finds its place).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, Union

from llmzero_slurm.methods.base import GiveUp, MethodContext, PhasePlan, SearchMethod
from llmzero_slurm.schedulers.base import CallJob, JobState, Scheduler, job_state, read_submission
from llmzero_slurm.search.tree import Tree
from llmzero_slurm.store.node_dir import NodeDir

Step = Union[str, Callable[[NodeDir], Any]]


@dataclass
class Job:
    token: str
    node: NodeDir
    script: list[Step]
    name: str
    state: JobState | None = None
    submits: int = 0


@dataclass
class ScriptedScheduler(Scheduler):
    """`scripts` are taken in submission order; a job without one runs for ever."""

    scripts: list[list[Step]] = field(default_factory=list)
    jobs: dict[str, Job] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    cancelled_why: dict[str, str | None] = field(default_factory=dict)   # what each cancel said
    name = "scripted"
    time_limited = False

    def submit(self, script: Path, token: str) -> str:
        directives = read_submission(script, token)   # the real check: the script carries the token
        job_id = str(100 + len(self.jobs))
        steps = self.scripts.pop(0) if self.scripts else ["RUNNING"]
        self.jobs[job_id] = Job(token, NodeDir(script.parent), list(steps),
                                directives.get("job-name", script.name))
        return job_id

    def states(self, job_ids: Iterable[str], node_dirs: Mapping[str, Path] | None = None,
               names: Mapping[str, str] | None = None) -> dict[str, JobState]:
        out = {}
        for job_id in job_ids:
            job = self.jobs.get(job_id)
            if job is None or job.name != (names or {}).get(job_id, job.name):
                continue   # as squeue --name would: the name the job was submitted under
            while job.script and callable(job.script[0]):
                job.script.pop(0)(job.node)     # what the job does before this poll
            if job.script and (job.state is None or not job.state.final):
                raw = job.script.pop(0) if len(job.script) > 1 else job.script[0]
                job.state = job_state(job_id, str(raw), 0 if raw == "COMPLETED" else 1)
            if job.state is not None:
                out[job_id] = job.state
        return out

    def job_dirs(self) -> list[Path]:
        """The node directory of every job submitted, once per job."""
        return [job.node.path for job in self.jobs.values()]

    def cancel(self, job_id: str, name: str, why: str | None = None) -> None:
        if name != self.jobs[job_id].name:      # as scancel --name: another job is left alone
            return
        self.cancelled.append(job_id)
        self.cancelled_why[job_id] = why
        self.jobs[job_id].script = ["CANCELLED"]

    def find_by_token(self, token: str, name: str) -> str | None:
        found = [j for j, job in self.jobs.items() if job.token == token and job.name == name]
        return found[-1] if found else None

    def submit_call(self, fn: Callable[..., Any], args: Sequence[Any], folder: Path,
                    job: CallJob) -> str:
        raise NotImplementedError("the scripted scheduler runs no monitor")


class ScriptedMethod(SearchMethod):
    """Plan i is offered once the tree has i nodes and `plans[i](tree)` returns it (None:
    wait for a job to end first)."""

    name = "scripted"

    def __init__(self, ctx: MethodContext,
                 plans: Sequence[Callable[[Tree], PhasePlan | GiveUp | None]]):
        super().__init__(ctx)
        self.plans = list(plans)

    def next_phase(self, tree: Tree) -> PhasePlan | GiveUp | None:
        return None if self.exhausted(tree) else self.plans[len(tree)](tree)

    def exhausted(self, tree: Tree) -> bool:
        return len(tree) >= len(self.plans)
