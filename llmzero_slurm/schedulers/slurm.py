"""Slurm through its command-line clients: sbatch, squeue, sacct, scancel.

One `squeue` call answers a poll for all of an experiment's jobs (live ones and those that
ended within MinJobAge, with their exit codes); polls back off while nothing changes. A job
squeue has forgotten is looked up once in `sacct` (slurmdbd), then in `sacct -c` (jobcomp
file), then in its own status.json, and a final answer is cached for good. No answer is read
as a failure: a job no source knows stays unknown across polls and is declared lost only after
`lost_after_s`. Transient client errors (controller restarting, socket timeouts, a client the
login node could not start for a moment) are retried with back-off, never read as a job
failure.

Long: these are the project's only calls to Slurm's clients, and the etiquette sites ask for
(one squeue per poll, back-off, sacct only for jobs that left the queue) needs them together.
"""
from __future__ import annotations

import errno
import logging
import math
import os
import shutil
import subprocess
import time
from pathlib import Path
from signal import SIGKILL
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from ..errors import SchedulerError
from ..job_settings import setup_script
from ..search.tree import Status
from .base import (LOST, SCHEDULED_ENV, CallJob, JobState, Scheduler, job_state, read_submission,
                   state_from_status_file, wait_unless)
from .job_env import credentials_withheld, new_job_environment, sbatch_inputs_note

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess]
_log = logging.getLogger(__name__)   # retries, as they happen; the controller shows them

TRANSIENT = ("socket timed out", "slurm_load_jobs error", "unable to contact slurm controller",
             "not responding", "connection refused", "try again", "temporarily unavailable",
             "slurm is down", "zero bytes were transmitted")
# Failures after which a submission may still have reached slurmctld: sbatch is not run again
# until the job could have registered (settle_s) and its token was looked for. "Zero Bytes
# were transmitted or received": a busy slurmctld dropped the connection, answer unknown.
UNSURE = ("socket timed out", "not responding", "zero bytes were transmitted")
# A limit on queued jobs: waiting for some to end cures it, retrying at once does not. Only
# sbatch's reason line tells it (QOSMaxSubmitJobPerUserLimit, AssocGrpSubmitJobsLimit...):
# the message after it says "job submit limit" for every association or QOS limit, a time
# or size over the limit included, which no wait cures.
SUBMIT_LIMITS = ("submitjob",)
# A client the system could not start this once (a busy login node's process or file limit,
# memory, a signal): it never ran, so nothing reached slurmctld, and a later try may start.
UNSTARTED = (errno.EAGAIN, errno.ENOMEM, errno.EINTR, errno.EMFILE, errno.ENFILE, errno.ETXTBSY)
NO_SUCH_JOB = "invalid job id"
SLOW_QUERY_S = 5.0      # a squeue this slow backs the polls off to ten times its duration
LOST_AFTER_MISSES = 3   # polls without an answer, besides lost_after_s, before a job is lost
COMMENT_MAX = 1000      # characters of the comment an early stop leaves on its job: one line of sacct
_SQUEUE_FORMAT = "JobID:|,State:|,Reason:|,exit_code:|,Comment:"


CLIENT_TIMEOUT_S = 120.0
# Clients that only read: one under way when a stop comes is ended, its answer not awaited.
# sbatch and scancel are let finish: a request half sent leaves it unknown what slurmctld did.
QUERIES = ("squeue", "sacct")
STOP_CHECK_S = 0.2      # how often a query under way looks for the stop


class QueryStopped(Exception):
    """A query a stop ended before it answered: no answer, rather than a failure."""


def run_command(argv: Sequence[str], secret_names: Iterable[str] = (),
                kept_names: Iterable[str] = (),
                stopping: Callable[[], bool] = lambda: False) -> subprocess.CompletedProcess:
    """A Slurm client call; sbatch exports this environment to the job, so no credential but
    the trainer's own (`kept_names`). A query (QUERIES) under way when `stopping()` turns
    true is killed with its process group (a site's wrapper script too) and QueryStopped
    raised; one started after the stop (a stopping controller's cancels look jobs up) is
    answered. TimeoutExpired after CLIENT_TIMEOUT_S, as subprocess.run's timeout."""
    query = argv[0] in QUERIES
    stoppable = query and not stopping()
    end = time.monotonic() + CLIENT_TIMEOUT_S
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=query,
                            env=new_job_environment(names=secret_names, keep=kept_names))
    try:
        while True:
            left = end - time.monotonic()
            try:
                out, err = proc.communicate(timeout=max(min(left, STOP_CHECK_S) if stoppable
                                                        else left, 0.0))
                return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
            except subprocess.TimeoutExpired:
                if time.monotonic() >= end:
                    raise subprocess.TimeoutExpired(proc.args, CLIENT_TIMEOUT_S) from None
                if stoppable and stopping():
                    raise QueryStopped(f"{argv[0]} was ended unanswered: stopping") from None
    except BaseException:
        _end(proc, query)
        raise


def _end(proc: subprocess.Popen, group: bool) -> None:
    """Kill a client (its process group, when it leads one) and reap it."""
    try:
        if group:
            os.killpg(proc.pid, SIGKILL)
        else:
            proc.kill()
    except ProcessLookupError:
        pass
    proc.communicate()


def _exit_status(shown: str) -> tuple[int | None, str | None]:
    """squeue's exit_code: a raw wait status (exit code in the high byte, signal below) before
    Slurm 23.02, 'code:signal' as in sacct since."""
    if ":" in shown:
        return _exit_pair(shown)
    try:
        value = int(shown)
    except ValueError:
        return None, None
    signal = value & 0x7F
    return value >> 8, (f"signal {signal}" if signal else None)


def _exit_pair(text: str) -> tuple[int | None, str | None]:
    """sacct's ExitCode is 'code:signal'."""
    code, _, signal = text.partition(":")
    try:
        return int(code), (f"signal {signal}" if signal not in ("", "0") else None)
    except ValueError:
        return None, None


def conf_problem() -> str | None:
    """What is wrong with $SLURM_CONF when it names no readable file. Slurm's clients would
    retry reading it for a minute before failing; asked first, the problem is named at once."""
    conf = os.environ.get("SLURM_CONF")
    if not conf:
        return None
    if not os.path.isfile(conf):
        return f"SLURM_CONF={conf} names no file"
    if not os.access(conf, os.R_OK):
        return f"SLURM_CONF={conf} cannot be read"
    return None


class _Answer(NamedTuple):
    text: str
    took_s: float      # the attempt that answered, retries and their waits aside


class SlurmScheduler(Scheduler):
    name = "slurm"
    settle_s = 60.0   # several of slurmctld's MessageTimeout (10 s by default)
    default_poll_s = 30.0
    least_poll_s = 5.0   # the shortest poll period (slurm_poll in __init__ says why)

    def __init__(self, runner: Runner | None = None, retries: int = 5, retry_wait_s: float = 2.0,
                 min_poll_s: float = least_poll_s, max_poll_s: float = 60.0,
                 lost_after_s: float = 900.0,
                 secret_names: Sequence[str] = (), kept_names: Iterable[str] = ()):
        self.secret_names = tuple(secret_names)
        kept = frozenset(kept_names)
        self.run: Runner = runner or (lambda argv: run_command(argv, secret_names, kept,
                                                               lambda: self.stopping()))
        self.retries, self.retry_wait_s = retries, retry_wait_s
        self.min_poll_s, self.max_poll_s = min_poll_s, max_poll_s
        self._poll_s = min_poll_s
        self._next_poll = 0.0
        self._last_squeue = -math.inf
        self._live: dict[str, JobState] = {}
        self._final: dict[str, JobState] = {}
        self._dirs: dict[str, Path] = {}
        self._names: dict[str, str] = {}
        self.lost_after_s = lost_after_s
        self._unknown_since: dict[str, tuple[float, int]] = {}   # job -> (first miss, misses)
        self._ended_unlisted: dict[str, JobState] = {}   # job -> the end its status.json gives
        self._inputs_noted = False

    @staticmethod
    def available() -> bool:
        return all(shutil.which(c) for c in ("sbatch", "squeue", "scancel"))

    @staticmethod
    def reachable(timeout_s: float = 15.0) -> bool:
        """Whether a slurmctld answers (clients installed is not a configured cluster):
        `scontrol ping` asks each controller (primary and backups) and says which is UP. A
        query of no real job (`squeue -j 0`) is refused by the client alone."""
        return SlurmScheduler.ping(timeout_s) == "up"

    @staticmethod
    def ping(timeout_s: float = 15.0) -> str | None:
        """'up' when a slurmctld answers; scontrol's line when it names controllers that are
        all DOWN (a configured cluster whose controller is restarting); None when scontrol
        knows of no cluster (clients installed, never configured)."""
        if conf_problem():
            return None
        try:
            done = subprocess.run(["scontrol", "ping"], capture_output=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            return None
        lines = done.stdout.decode(errors="replace").splitlines()
        if any(" is UP" in ln for ln in lines):
            return "up"
        return next((ln.strip() for ln in lines if " is DOWN" in ln), None)

    # -- the client calls -----------------------------------------------------------------

    def _pause(self, seconds: float) -> None:
        """A wait between tries, cut short when a stop is asked for."""
        wait_unless(seconds, self.stopping)

    def _call(self, argv: Sequence[str], what: str, ok_errors: tuple[str, ...] = (),
              recover: Callable[[], str | None] | None = None) -> _Answer:
        """Run a client; retry transient failures; raise SchedulerError on real ones. The
        answer says how long the attempt that answered took: an outage's failed attempts and
        waits are no sign of a busy slurmctld.

        `recover` runs before each retry and may return the answer instead (a submission
        that got through although its client timed out). With `recover`, a failure that leaves
        it unsure whether the request got through is not retried here: it raises a retryable
        error, and the caller looks for the answer until it could have arrived (settle_s).
        Once a stop is asked for (`give_up_when`), a failure is not tried again, and a query
        under way is ended unanswered (run_command): a retryable error at once."""
        wait = self.retry_wait_s
        for attempt in range(self.retries + 1):
            if attempt and recover is not None and (found := recover()) is not None:
                return _Answer(found, 0.0)
            asked = time.monotonic()
            try:
                proc = self.run(argv)
            except QueryStopped as exc:
                raise SchedulerError(f"{what}: {exc}", retryable=True) from None
            except subprocess.TimeoutExpired:
                err, unsure = f"{argv[0]} did not answer within its timeout", True
            except OSError as exc:
                if exc.errno not in UNSTARTED:   # not installed, not executable: no wait cures it
                    raise SchedulerError(f"{what}: cannot run {argv[0]}: {exc.strerror}") from None
                err, unsure = f"cannot run {argv[0]}: {exc.strerror}", False
            else:
                err = (proc.stderr or "").strip()
                if proc.returncode == 0 or any(e in err.lower() for e in ok_errors):
                    return _Answer(proc.stdout, time.monotonic() - asked)
                if proc.returncode < 0:   # killed, e.g. by a scancel of the controller's job
                    err = f"{argv[0]} was ended by signal {-proc.returncode} before it answered"
                    unsure = True
                elif any(t in err.lower() for t in TRANSIENT):
                    unsure = any(u in err.lower() for u in UNSURE)
                else:
                    raise SchedulerError(f"{what}: {argv[0]} failed (exit {proc.returncode}): "
                                         f"{err or '(no message)'}",
                                         retryable=any(t in err.lower() for t in SUBMIT_LIMITS))
            if recover is not None and unsure:
                if (found := recover()) is not None:
                    return _Answer(found, 0.0)
                raise SchedulerError(f"{what}: {argv[0]}: {err}; it may still have gone "
                                     f"through, so it is looked for by its token before any "
                                     f"new attempt", unsure=True)
            if attempt == self.retries:
                break
            if not self.stopping():
                _log.warning("%s: %s: %.300s; attempt %d of %d in %g s", what, argv[0], err,
                             attempt + 2, self.retries + 1, wait)
                self._pause(wait)
            if self.stopping():
                raise SchedulerError(f"{what}: {argv[0]}: {err}; not tried again: stopping",
                                     retryable=True)
            wait = min(wait * 2, 60.0)
        raise SchedulerError(f"{what}: {argv[0]} kept failing with a transient error after "
                             f"{self.retries + 1} attempts: {err}", retryable=True)

    # -- interface --------------------------------------------------------------------------

    def _note_sbatch_inputs(self) -> None:
        """Say once, at the first submission, which SBATCH_* variables sbatch is not given."""
        if not self._inputs_noted and (note := sbatch_inputs_note()):
            _log.warning("%s", note)
        self._inputs_noted = True

    def submit(self, script: Path, token: str) -> str:
        self._note_sbatch_inputs()
        script = Path(script).resolve()
        name = read_submission(script, token).get("job-name") or script.name  # sbatch's default
        out = self._call(["sbatch", "--parsable", f"--export=ALL,{SCHEDULED_ENV}=1", str(script)],
                         f"submitting {script}",
                         recover=lambda: self.find_by_token(token, name)).text
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise SchedulerError(f"submitting {script}: sbatch answered {out.strip()!r}, not a job id")
        self._dirs[job_id] = script.parent
        self._next_poll = 0.0
        return job_id

    def test_submit(self, script: Path) -> str:
        """What sbatch says of a job script without submitting it (`--test-only`): an unknown
        partition, or more CPUs, memory or GPUs than any node has, is refused here rather than
        by the run's first phase."""
        try:
            proc = self.run(["sbatch", "--test-only", str(Path(script).resolve())])
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SchedulerError(f"sbatch --test-only {script}: {exc}") from None
        answer = (proc.stderr or "").strip()   # sbatch answers a test on stderr, either way
        if proc.returncode:
            raise SchedulerError(f"sbatch --test-only {script}: {answer or '(no message)'}")
        return answer

    def cancel(self, job_id: str, name: str, why: str | None = None) -> None:
        """A job Slurm has forgotten (ended past MinJobAge) is "Invalid job id specified" to
        scancel: gone either way, so done. `why` is added to the job's comment first (its
        token kept), for squeue and sacct; a comment Slurm refuses still lets the job go."""
        if why:
            self._say_why(job_id, name, why)
        self._call(["scancel", f"--name={name}", str(job_id)], f"cancelling job {job_id} ({name})",
                   ok_errors=(NO_SUCH_JOB,))
        self._next_poll = 0.0

    def _say_why(self, job_id: str, name: str, why: str) -> None:
        """`why` after the comment of the job, while it bears `name` (scontrol has no --name
        guard: a recorded id may since be another's), once: a cancel tried again says it
        again."""
        why = " ".join(why.split())
        try:
            rows, _ = self._squeue_rows([f"--jobs={job_id}", f"--name={name}"])
            comment = next((c for j, _, c in rows if j == str(job_id)), None)
            if comment is not None and why not in comment:
                text = ",".join(filter(None, (comment, why)))
                self._call(["scontrol", "update", f"JobId={job_id}",
                            f"Comment={text[:COMMENT_MAX]}"], f"commenting job {job_id}")
        except SchedulerError as exc:
            _log.warning("job %s is cancelled without its reason in its comment: %s", job_id, exc)

    def submit_call(self, fn: Callable[..., Any], args: Sequence[Any], folder: Path,
                    job: CallJob) -> str:
        import submitit  # login-node import cost only when a monitor is needed

        self._note_sbatch_inputs()
        ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=0)
        ex.update_parameters(job_name=job.name, time=job.minutes, partition=job.partition,
                             account=job.account, qos=job.qos, cpus_per_task=job.cpus,
                             mem=job.mem, setup=setup_script(job.setup, job.setup_dir),
                             comment=job.comment,
                             wckey=None)   # not submitit's own "submitit" key: sites may enforce them
        try:
            with credentials_withheld(self.secret_names):
                return str(ex.submit(fn, *args).job_id)
        except (subprocess.CalledProcessError, OSError, submitit.core.utils.FailedJobError,
                submitit.core.utils.FailedSubmissionError) as exc:
            raise SchedulerError(f"submitting the monitor job {job.name}: {exc}",
                                 retryable=True) from None

    def find_by_token(self, token: str, name: str) -> str | None:
        """The newest job of that name, any user's, whose --comment carries the token (squeue
        lists finished jobs for MinJobAge; older ones are the caller's to find in status.json).
        Asked by name, as `--me` would miss a group member's job and no filter at all would
        list the whole cluster's queue."""
        found = [int(job_id) for job_id, _, comment in self._squeue_rows(["--name=" + name])[0]
                 if f"token={token}" in comment.split(",") and job_id.isdigit()]
        return str(max(found)) if found else None

    def states(self, job_ids: Iterable[str], node_dirs: Mapping[str, Path] | None = None,
               names: Mapping[str, str] | None = None) -> dict[str, JobState]:
        ids = list(dict.fromkeys(str(j) for j in job_ids))
        self._dirs.update({str(k): Path(v) for k, v in (node_dirs or {}).items()})
        self._names.update({str(k): v for k, v in (names or {}).items()})
        out = {j: self._final[j] for j in ids if j in self._final}
        todo = [j for j in ids if j not in out]
        if not todo:
            return out
        if time.monotonic() < self._next_poll and all(j in self._live for j in todo):
            return out | {j: self._live[j] for j in todo}
        polled, took = self._poll(["--jobs=" + ",".join(todo), *self._name_filter(todo)])
        found = {s.job_id: s for s in polled}
        missing = [j for j in todo if j not in found]
        if missing:
            found.update(self._forgotten(missing))
        found.update(self._lost(todo, [j for j in todo if j not in found]))
        changed = any(self._live.get(j) != s for j, s in found.items())
        for j, s in found.items():
            if s.final:
                self._final[j] = s
                self._live.pop(j, None)
            else:
                self._live[j] = s
        self._poll_s = self.min_poll_s if changed else min(self._poll_s * 2, self.max_poll_s)
        # A squeue that takes seconds means a busy slurmctld: ask it at most a tenth of the time.
        slow = 10 * took if took >= SLOW_QUERY_S else 0.0
        self._next_poll = time.monotonic() + max(self._poll_s, slow)
        return out | found

    def listed(self, job_ids: Iterable[str], name: str) -> dict[str, JobState]:
        """What squeue says of those jobs that still bear `name`; a recorded id since given to
        another job (ids wrapped or reset, a run copied to another cluster) is left out, like
        a job long ended."""
        ids = list(dict.fromkeys(str(j) for j in job_ids))
        if not ids:
            return {}
        return {s.job_id: s for s in self._poll(["--jobs=" + ",".join(ids), f"--name={name}"])[0]}

    def _name_filter(self, job_ids: list[str]) -> list[str]:
        """squeue's --name option when every job's name is known: squeue then lists only those
        of them that still bear their names, and a job that has since taken a recorded id (ids
        wrapped or reset, a run copied to another cluster) is looked up as the recorded job,
        whose own status.json says how it ended."""
        if not all(j in self._names for j in job_ids):
            return []
        return ["--name=" + ",".join(sorted({self._names[j] for j in job_ids}))]

    def _lost(self, asked: list[str], unknown: list[str]) -> dict[str, JobState]:
        """Jobs no source knows: absent (too new to be listed, or slurmdbd lagging) until they
        have been unknown for `lost_after_s` across several polls, then failed as lost. A
        job's clock is reset only when a poll that asked about it found it."""
        now = time.monotonic()
        for j in asked:
            if j not in unknown:
                self._unknown_since.pop(j, None)
                self._ended_unlisted.pop(j, None)
        lost = {}
        for j in unknown:
            first, misses = self._unknown_since.get(j, (now, 0))
            self._unknown_since[j] = (first, misses + 1)
            if misses + 1 >= LOST_AFTER_MISSES and now - first >= self.lost_after_s:
                lost[j] = self._ended_unlisted.pop(j) if j in self._ended_unlisted else JobState(
                    j, LOST, Status.FAILED, None, f"lost: neither squeue, sacct nor its "
                    f"status.json has known the job for {now - first:.0f} s", "none")
        return lost

    # -- the sources, in order ---------------------------------------------------------------

    def _squeue_rows(self, which: list[str]) -> tuple[list[tuple[str, list[str], str]], float]:
        """(job id, [state, reason, exit status], comment) of each job squeue's `which` options
        select, and how long squeue took to answer."""
        argv = ["squeue", "--noheader", "--states=all", f"--Format={_SQUEUE_FORMAT}", *which]
        # The least poll period holds between any two squeues, not only between polls: the
        # monitor's state, or a name check, asked just after the phases' poll waits it out.
        self._pause(self._last_squeue + min(self.min_poll_s, self.least_poll_s)
                    - time.monotonic())
        self._last_squeue = time.monotonic()
        answer = self._call(argv, "polling jobs", ok_errors=(NO_SUCH_JOB,))
        rows = []
        for line in answer.text.splitlines():
            fields = line.split("|", 4)
            if len(fields) == 5:
                rows.append((fields[0].strip(), fields[1:4], fields[4].strip()))
        return rows, answer.took_s

    def _poll(self, which: list[str]) -> tuple[list[JobState], float]:
        """One squeue call for every job its `which` options select; how long it took."""
        out = []
        rows, took = self._squeue_rows(which)
        for job_id, (state, reason, wait_status), _ in rows:
            code, signal = _exit_status(wait_status)
            why = None if reason in ("None", "") else reason
            out.append(job_state(job_id, state, code, why or signal, "squeue"))
        return out, took

    def _forgotten(self, job_ids: list[str]) -> dict[str, JobState]:
        found = self._accounting(["sacct", "--allocations"], job_ids, "sacct")
        rest = [j for j in job_ids if j not in found]
        if rest:
            found.update(self._accounting(["sacct", "--completion"], rest, "sacct -c"))
        for j in job_ids:
            if j not in self._dirs or (j in found and found[j].final):
                continue
            state = state_from_status_file(j, self._dirs[j])
            if j not in found:
                # "running" there may be a live job squeue skipped and sacct cannot confirm:
                # left unknown, so only a long silence (`_lost`) ends it.
                if state is not None and state.raw != LOST:
                    found[j] = state
            elif state is not None and state.raw != LOST:
                # Alive in accounting alone, ended by its own word: a runaway record slurmdbd
                # kept past a slurmctld crash, or a live job squeue skipped this once (its
                # status.json from an attempt before a requeue). Unknown until the silence
                # `_lost` waits out has passed, then ended as the job itself wrote.
                del found[j]
                self._ended_unlisted[j] = state
        return found

    def _accounting(self, argv: list[str], job_ids: list[str], source: str) -> dict[str, JobState]:
        """Final states from an accounting source; a cluster without it yields nothing, and a
        row under another name than the job's is another job's (sacct -c ignores --name)."""
        argv = argv + ["--noheader", "--parsable2", "--jobs=" + ",".join(job_ids),
                       "--format=JobID,State,ExitCode,JobName"]
        try:
            text = self._call(argv, f"reading {source}").text
        except SchedulerError:
            if self.stopping():   # no answer, not "no such job": nothing is counted as lost
                raise
            return {}
        found: dict[str, JobState] = {}
        for line in text.splitlines():   # a requeued job has one row per attempt: the last wins
            fields = line.split("|")
            if len(fields) >= 3 and fields[0] in job_ids and (
                    len(fields) < 4 or self._names.get(fields[0], fields[3]) == fields[3]):
                code, signal = _exit_pair(fields[2])
                state = job_state(fields[0], fields[1], code, signal, source)
                found[fields[0]] = state
        return found   # a non-final row (RUNNING, PENDING...) means alive, not unknown
