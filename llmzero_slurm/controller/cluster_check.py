"""`llmzero-start --check --on-cluster`: the checks only a compute node can answer, run as short
batch jobs and read back as preflight lines.

A login node often differs from the compute nodes: another Python, no verl, filesystems the
nodes do not mount, a route to the internet they lack. Finding that out in a phase costs a GPU
queue wait; here it costs a short CPU job. Both jobs are submitted like phases, with the
controller's environment less every credential (the site's proxy variables pass):

- the environment check, in the `controller:` section's placement (a small CPU job), runs the
  phases' `slurm.setup` lines and the phases' Python: the trainer's imports, verl's own
  validation of a scratch, an evolve and a debug phase, the model, data and reward files;
- the endpoint check, where the monitor job runs (`monitor:`, else `slurm:`), asks the LLM
  endpoint for any HTTP answer within seconds.

What the jobs do is cluster_probe.py. Their scripts, plans and outputs stay in <run>/preflight/.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from ..agents.llm import choose_backend, endpoint
from ..backends import get_backend
from ..backends.verl import VerlBackend
from ..cluster_probe import END, PREFIX
from ..config import ExperimentConfig
from ..elapsed import duration
from ..errors import SchedulerError
from ..job_names import check_job_name
from ..job_settings import CheckJob
from ..methods import method_class
from ..render import CHECK_SETUP_DONE, write_check_job
from ..schedulers.base import JobState
from ..schedulers.slurm import SlurmScheduler
from ..store.atomic import write_json
from .preflight import Check, sample_specs

ENVIRONMENT_TIME = "00:10:00"    # the jobs' time limits: imports on a slow filesystem included
ENDPOINT_TIME = "00:05:00"
ENDPOINT_TIMEOUT_S = 5.0         # as long as the monitor itself gives the endpoint
POLL_S = 2.0
PROGRESS_EVERY_S = 30.0          # a waiting job's state is repeated this often
OUTPUT_GRACE_S = 15.0            # a shared filesystem may show a job's output this late
TAIL_LINES = 4

Say = Callable[[str], None]
Planned = tuple[CheckJob, dict[str, Any]]


def environment_job(cfg: ExperimentConfig) -> Planned:
    """The environment check: the controller's CPU placement, the phases' setup and Python."""
    c, task = cfg.controller, cfg.task
    python = get_backend(cfg.backend).python(cfg.trainer)
    job = CheckJob("environment", "controller", str(python), c.partition, c.account, c.qos,
                   c.cpus, c.mem, ENVIRONMENT_TIME, list(c.extra_directives), list(cfg.slurm.setup),
                   cfg.slurm.setup_dir)
    plan: dict[str, Any] = {"mode": "environment", "backend": cfg.backend,
                            "model_path": cfg.model_path, "builtin": task.builtin,
                            "data_files": [*task.train_files, *task.val_files, *task.test_files],
                            "reward_path": task.reward_path}
    if cfg.backend == "verl":
        plan |= {"phases": verl_phases(cfg),
                 "rollout_engine": VerlBackend.settings(cfg.trainer).rollout_engine}
    else:
        plan["cache_dir"] = cfg.trainer.get("cache_dir")
    return job, plan


def verl_phases(cfg: ExperimentConfig) -> list[tuple[str, list[str]]]:
    """Each kind of phase and its override list, exactly as its script would run main_ppo."""
    backend = VerlBackend()
    with tempfile.TemporaryDirectory(prefix="llmz-check-") as tmp:
        return [(spec.kind, [*backend.overrides(spec), f"trainer.nnodes={cfg.slurm.nodes}"])
                for spec in sample_specs(cfg, Path(tmp))]


def endpoint_job(cfg: ExperimentConfig) -> Planned | str:
    """The endpoint check from where the monitor runs, or why there is nothing to check."""
    if not method_class(cfg.search.method).early_stopping:
        return f"search.method {cfg.search.method} runs no monitor job, so no LLM call from one"
    if not cfg.search.early_stopping:
        return "search.early_stopping is false: no monitor job, so no LLM call from one"
    if choose_backend(cfg.agents) is None:
        return "offline heuristic agents: no LLM endpoint to reach"
    s, m = cfg.slurm, cfg.monitor
    job = CheckJob("endpoint", "monitor", sys.executable, m.partition or s.partition,
                   m.account or s.account, m.qos or s.qos, time=ENDPOINT_TIME, setup=list(s.setup),
                   setup_dir=s.setup_dir)
    return job, {"mode": "endpoint", "url": endpoint(cfg.agents),
                 "timeout_s": ENDPOINT_TIMEOUT_S}


def placement(job: CheckJob) -> str:
    parts = [f"partition {job.partition or '(default)'}"]
    parts += [f"{key} {value}" for key, value in (("account", job.account), ("qos", job.qos)) if value]
    return ", ".join(parts)


def cluster_checks(cfg: ExperimentConfig, folder: Path, timeout_s: float,
                   say: Say = print) -> list[Check]:
    """Submit the checks, wait for them (at most `timeout_s`, queue wait included; what is
    left then is cancelled), and return their findings. SchedulerError when sbatch or squeue
    fails: that is the batch system's failure, not the config's."""
    folder.mkdir(parents=True, exist_ok=True)
    planned, checks = [environment_job(cfg)], []
    endpoint = endpoint_job(cfg)
    if not isinstance(endpoint, str):
        planned.append(endpoint)
    sched = SlurmScheduler(min_poll_s=1.0, max_poll_s=10.0, secret_names=[cfg.agents.key_env])
    jobs: dict[str, CheckJob] = {}
    states: dict[str, JobState] = {}
    try:
        for job, plan in planned:
            plan_file = folder / f"{job.mode}.json"
            write_json(plan_file, plan)
            token = f"check-{job.mode}-{uuid.uuid4().hex[:12]}"
            script = write_check_job(cfg.name, folder, job, token, plan_file, [cfg.agents.key_env])
            job_id = sched.submit(script, token)
            jobs[job_id] = job
            say(f"cluster check: the {job.mode} check is job {job_id} ({placement(job)}); "
                f"output {folder}/{job.mode}-{job_id}.out")
        states = wait(sched, jobs, timeout_s, say)
    finally:
        for job_id in jobs:
            if job_id not in states or not states[job_id].final:
                try:
                    sched.cancel(job_id, check_job_name(cfg.name))
                except SchedulerError as exc:
                    say(f"cluster check: could not cancel job {job_id}: {exc}")
    for job_id, job in jobs.items():
        checks += results(job_id, job, states.get(job_id), folder / f"{job.mode}-{job_id}.out",
                          timeout_s)
    if isinstance(endpoint, str):
        checks.append(Check("monitor LLM endpoint", True, endpoint))
    return checks


def wait(sched: SlurmScheduler, jobs: dict[str, CheckJob], timeout_s: float,
         say: Say) -> dict[str, JobState]:
    """Each job's last state, final unless the time ran out; a line whenever one changes, with
    how long the checks have waited of `timeout_s` (a queued probe may wait all of it)."""
    start = time.monotonic()
    deadline = start + timeout_s
    last: dict[str, JobState] = {}
    shown: dict[str, tuple[str, float]] = {}
    while True:
        live = [j for j in jobs if j not in last or not last[j].final]
        if not live or time.monotonic() > deadline:
            return last
        now = time.monotonic()
        for job_id, state in sched.states(live).items():
            last[job_id] = state
            before = shown.get(job_id)
            if before is None or before[0] != state.shown() or now - before[1] >= PROGRESS_EVERY_S:
                say(f"cluster check: job {job_id} ({jobs[job_id].mode}) {state.shown()}, "
                    f"waited {duration(now - start)} of {duration(timeout_s)}")
                shown[job_id] = (state.shown(), now)
        if any(j not in last or not last[j].final for j in live):
            time.sleep(POLL_S)


def read_output(path: Path, final: bool) -> str | None:
    """The job's output; for an ended job, wait briefly for its last line to show up."""
    deadline = time.monotonic() + (OUTPUT_GRACE_S if final else 0.0)
    while True:
        try:
            text: str | None = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = None
        if (text is not None and END in text.splitlines()) or time.monotonic() > deadline:
            return text
        time.sleep(0.5)


def results(job_id: str, job: CheckJob, state: JobState | None, output: Path,
            timeout_s: float) -> list[Check]:
    """The job's findings, and a failed line of its own when it did not finish them."""
    final = state is not None and state.final
    text = read_output(output, final)
    lines = (text or "").splitlines()
    name = "cluster" if job.mode == "environment" else "monitor"
    checks = [finding(name, line, output) for line in lines if line.startswith(PREFIX)]
    if END in lines:
        return checks
    tail = " | ".join([ln.strip() for ln in lines if ln.strip() and not ln.startswith(PREFIX)]
                      [-TAIL_LINES:]) or "(nothing)"
    if state is None or not final:
        shown = state.shown() if state else "unknown to Slurm"
        why = (f"was still {shown} after {timeout_s:.0f} s and was cancelled; allow more time "
               f"with --cluster-timeout, or give {job.where}: a partition with free CPUs")
    else:
        ended = f"ended {state.raw}" + (f" (exit {state.exit_code})" if state.exit_code else "")
        if text is None:
            why = (f"{ended}, but its output {output} is not on this machine: the run directory "
                   "must be on a filesystem the compute nodes share")
        elif CHECK_SETUP_DONE not in lines:
            why = f"{ended} in the slurm.setup lines; its output ends: {tail}"
        else:
            why = f"{ended} before its checks finished; its output ends: {tail}"
    return [*checks, Check(f"{name} job", False, f"job {job_id} {why}")]


def finding(name: str, line: str, output: Path) -> Check:
    """One check's line of the job's output; a failed finding naming it when it is cut short
    (a full disk) or otherwise not what the probe writes."""
    try:
        r = json.loads(line[len(PREFIX):])
        return Check(f"{name} {r['check']}", bool(r["ok"]), str(r["detail"]))
    except (ValueError, KeyError, TypeError):
        return Check(f"{name} output", False, f"unreadable line in {output}: {line[:300]}")
