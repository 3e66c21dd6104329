"""A training phase, described as data, rendered into the sbatch script that runs it.

The script is the single source of truth for a phase: the controller submits it, a person can
rerun it by hand (`sbatch phase.sbatch`, or `bash phase.sbatch` without a cluster), in place or
from its start into another folder (LLMZ_RERUN_DIR, see templates/phase/base.sbatch.j2).
Every value that reaches it is checked here first: hyperparameters by `validate_hparams`,
#SBATCH values by sbatch_options.py, paths and names against what a script can carry. Words on
the shell's side are quoted with shlex.quote. Errors name the offending key. The controller's own
batch script (`llmzero-start --submit`) and the cluster-side preflight's short jobs
(`llmzero-start --check --on-cluster`) are rendered here too, under the same checks.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

import jinja2

from .backends import TrainerBackend, get_backend
from .backends.spec import PhaseSpec
from .sbatch_options import checked, cpu_job_directives, output_folder, phase_directives
from .errors import ConfigError
from .job_names import check_job_name, controller_job_name
from .job_settings import CheckJob, ControllerJobConfig, setup_script
from .hparams import validate_hparams
from .paths import ROOT, ROOT_FIRST, TEMPLATE_TEXTS
from .schedulers.base import parse_time
from .schedulers.job_env import (CREDENTIAL, LLM_KEYS, MIN_SECRET_CHARS, VARIABLE_NAME,
                                 check_setup_lines)
from .search.tree import Kind, Tree
from .store.atomic import write_text
from .store.schema import same_run

__all__ = ["PhaseSpec", "render", "write_phase_script"]   # PhaseSpec: the backends' own type

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _token(value: Any) -> str:
    return checked("token", value, _TOKEN, "must be 1-64 letters, digits, '_' or '-'")


def _setup(lines: list[str]) -> list[str]:
    """The user's `slurm.setup` lines, each one a line of the script."""
    return [checked(f"slurm.setup[{i}]", line) for i, line in enumerate(lines)]


def _directives(spec: PhaseSpec) -> list[str]:
    """The #SBATCH options of a phase: its name, token and log, then its `slurm:` section's."""
    node_dir = output_folder("node_dir", spec.node_dir)
    out = [f"--job-name={spec.job_name}",
           f"--comment=llmz:node={spec.node_id:04d},token={spec.token}",
           f"--output={node_dir}/slurm-%j.out",
           "--open-mode=append"]
    return out + phase_directives(spec.slurm)


def credential_rule(names: Iterable[str], kept: Iterable[str] = ()) -> dict[str, Any]:
    """What a script unsets before any child starts (shell.j2's drop_credentials): job_env's
    rule, the one the controller's submissions follow, with the credential variables `names`
    and without the trainer's own (`kept`). `sbatch`: how its hints say to submit it by hand,
    the LLM keys left out (sbatch keeps the environment it is given with the job)."""
    def variables(key: str, values: Iterable[str]) -> list[str]:
        return sorted(checked(key, v, VARIABLE_NAME, "must be a variable name") for v in values)
    names = variables("secret_names", names)
    return {"pattern": shlex.quote(CREDENTIAL.pattern), "min_chars": MIN_SECRET_CHARS,
            "names": names, "kept": variables("kept", kept),
            "sbatch": " ".join(["env", *(f"-u {n}" for n in sorted({*names, *LLM_KEYS})),
                                "sbatch"])}


def _check(spec: PhaseSpec, backend: TrainerBackend) -> PhaseSpec:
    """Validate every field of the spec; return it with hyperparameters typed."""
    checked("experiment", spec.experiment, _NAME, "must be 1-40 letters, digits, '-' or '_'")
    if isinstance(spec.node_id, bool) or not isinstance(spec.node_id, int) or spec.node_id < 0:
        raise ConfigError("node_id", f"must be a non-negative integer (got {spec.node_id!r})")
    if spec.kind not in {k.value for k in Kind}:
        raise ConfigError("kind", f"must be one of {[k.value for k in Kind]} (got {spec.kind!r})")
    _token(spec.token)
    if isinstance(spec.resume_step, bool) or not isinstance(spec.resume_step, int) \
            or spec.resume_step < 0:
        raise ConfigError("resume_step", f"must be a non-negative integer (got {spec.resume_step!r})")
    _setup(spec.slurm.setup)
    hparams = validate_hparams(spec.hparams, backend.name)
    trainer = backend.check_trainer(spec.trainer)
    check_setup_lines(spec.slurm.setup, spec.secret_names, backend.kept_credentials(trainer))
    return replace(spec, hparams=hparams, trainer=trainer)


# The phase's own outputs follow $LLMZ_NODE_DIR in its script, so that a rerun by hand can send
# them to another folder (LLMZ_RERUN_DIR): the backend builds its argv and environment for this
# stand-in node directory, and each occurrence is written as the variable.
NODE_DIR_STANDIN = "/@LLMZ_NODE_DIR@"
_DOUBLE_QUOTED = re.compile(r'([\\"$`])')     # what a backslash keeps literal in "..."


def shell_word(arg: str) -> str:
    """`arg` quoted for the shell, any stand-in node directory in it read from $LLMZ_NODE_DIR."""
    pieces = arg.split(NODE_DIR_STANDIN)
    if len(pieces) == 1:
        return shlex.quote(arg)
    return '"' + "${LLMZ_NODE_DIR}".join(_DOUBLE_QUOTED.sub(r"\\\1", p) for p in pieces) + '"'


_ENV = jinja2.Environment(loader=jinja2.DictLoader(TEMPLATE_TEXTS), autoescape=False,
                          undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def render(spec: PhaseSpec, backend: TrainerBackend | None = None) -> str:
    """The phase script's text; raises ConfigError naming the first bad value."""
    backend = backend or get_backend(spec.backend)
    spec = _check(spec, backend)
    directives = _directives(spec)
    outputs = replace(spec, node_dir=Path(NODE_DIR_STANDIN))
    argv = backend.command(outputs)
    for i, arg in enumerate(argv):
        checked(f"command[{i}]", arg)
    words = [shell_word(a) for a in argv]
    env = backend.env(outputs)
    for name, value in env.items():
        checked(f"env.{name}", name, VARIABLE_NAME, "must be a variable name")
        checked(f"env.{name}", value)
    return _ENV.get_template(backend.template).render(
        spec=spec, directives=directives, setup=setup_script(spec.slurm.setup,
                                                              spec.slurm.setup_dir),
        credentials=credential_rule(spec.secret_names, backend.kept_credentials(spec.trainer)),
        node_dir=shlex.quote(str(spec.node_dir)), install=shlex.quote(str(ROOT)),
        env=[(name, shell_word(value)) for name, value in env.items()],
        command=" ".join(words), words=words)


def write_phase_script(spec: PhaseSpec, backend: TrainerBackend | None = None) -> Path:
    """Render into <node_dir>/phase.sbatch (atomically, executable) and return its path."""
    text = render(spec, backend)
    path = Path(spec.node_dir) / "phase.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text, mode=0o777)     # executable, and the group's as the umask says
    return path


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run directory whose node folders cannot go into #SBATCH lines: a run created
    elsewhere and moved (tar, cp) to a path with a space would fail each new phase for good."""
    output_folder("run_dir", run_dir)


# The line of a phase script naming its node folder; output_folder allows no quote or space in it.
_NODE_DIR_LINE = re.compile(r"^export LLMZ_NODE_DIR='?([^'\s]+)'?$", re.M)


def follow_move(run_dir: Path) -> tuple[str, int] | None:
    """Point the phase scripts of a run copied or moved (tar, cp) since they were rendered at
    where it is now, `run_dir` (absolute), so that none reruns by hand into the run it came
    from (run by hand from elsewhere, a script refuses: base.sbatch.j2). Only the run's own
    paths change in them; the data's, outside the run, stay. Where it came from and how many
    scripts changed, or None where none named another folder. A copy whose original's jobs
    are still in flight must be refused first (live_copy)."""
    root = output_folder("run_dir", run_dir)
    moved = _named_elsewhere(Path(root))
    for path, text, origin in moved:
        write_text(path, text.replace(f"{origin}/", f"{root}/"), mode=0o777)
    return (moved[-1][2], len(moved)) if moved else None


def _named_elsewhere(root: Path) -> list[tuple[Path, str, str]]:
    """The phase scripts under `root` whose node folder line names another run folder: each
    with its text and that folder."""
    found = []
    for path in sorted(root.glob("nodes/*/phase.sbatch")):
        text = path.read_text(encoding="utf-8")
        line = _NODE_DIR_LINE.search(text)
        named = Path(line.group(1)) if line else path.parent
        if named != path.parent and named.name == path.parent.name and named.parent.name == "nodes":
            found.append((path, text, str(named.parent.parent)))
    return found


@dataclass(frozen=True)
class LiveCopy:
    """A run copied (cp -a) from `origin`, which still holds the same run, while phases were
    in flight: their jobs, in the copy's records, are the original's."""

    origin: str
    jobs: list[str]     # "node 3 (job 1234)", each in flight

    def line(self, root: Path) -> str:
        return (f"{root} is a copy of the run at {self.origin}, made while its phases were in "
                f"flight: the jobs of {', '.join(self.jobs)} are that run's")


def live_copy(run_dir: Path, tree: Tree) -> LiveCopy | None:
    """The check start, repair and stop make before acting on a run's jobs: a copy whose
    phase scripts name an original that still holds the same run (store.schema.same_run),
    while its records show jobs in flight, which the original runs (and records the results
    of). None for a moved run (its origin gone, or holding no run or another), or a copy with
    nothing in flight, which resumes as a run of its own."""
    moved = _named_elsewhere(Path(run_dir).absolute())
    origin = moved[-1][2] if moved else None
    if origin is None or not same_run(run_dir, origin) or Path(origin).samefile(run_dir):
        return None
    jobs = [f"node {n.id} (job {n.submission.job_id or 'not yet known'})" for n in tree
            if n.status.in_flight]
    return LiveCopy(origin, jobs) if jobs else None


CONTROLLER_WARN_S = 300     # the controller job's USR1: time to stop cleanly and requeue
CONTROLLER_SCRIPT = "controller.sbatch"


def render_controller(experiment: str, run_dir: Path, job: ControllerJobConfig,
                      command: list[str], token: str, secret_names: Sequence[str] = (),
                      kept: Iterable[str] = ()) -> str:
    """The controller's own batch script: `command` (llmzero-start on the run directory) in
    a small, long, requeueable CPU job that requeues itself near its limit. Its --comment
    carries `token`, by which a job whose sbatch answer was lost is found, as a phase's is.
    Submitted by hand, it drops the credentials (`secret_names`: the LLM key's variable)
    but those its phases' trainer reads (`kept`), as llmzero-start --submit sends it."""
    run = output_folder("run_dir", run_dir)
    name = controller_job_name(checked("experiment", experiment, _NAME, "a name"))
    directives = [f"--job-name={name}",
                  f"--comment=llmz:controller,run={experiment},token={_token(token)}",
                  f"--output={run}/controller-%j.out", "--open-mode=append",
                  *cpu_job_directives("controller", job, "controller.time",
                            ["--requeue", f"--signal=B:USR1@{CONTROLLER_WARN_S}"])]
    # Within the warning of its limit at its start, the job would requeue itself at once, again
    # and again, and never search.
    if parse_time(job.time) < 2 * CONTROLLER_WARN_S:
        raise ConfigError("controller.time", f"must be at least {2 * CONTROLLER_WARN_S // 60} "
                          f"minutes (got {job.time!r}): the job requeues itself "
                          f"{CONTROLLER_WARN_S // 60} minutes before its limit")
    return _ENV.get_template("controller/controller.sbatch.j2").render(
        directives=directives, experiment=experiment, run_dir=shlex.quote(run),
        script=shlex.quote(f"{run}/{CONTROLLER_SCRIPT}"),
        credentials=credential_rule(secret_names, kept),
        command=" ".join(shlex.quote(a) for a in command))


def write_controller_script(experiment: str, run_dir: Path, job: ControllerJobConfig,
                            command: list[str], token: str, secret_names: Sequence[str] = (),
                            kept: Iterable[str] = ()) -> Path:
    """Render into <run_dir>/controller.sbatch (atomically, executable) and return its path."""
    path = Path(run_dir) / CONTROLLER_SCRIPT
    write_text(path, render_controller(experiment, Path(run_dir), job, command, token,
                                       secret_names, kept), mode=0o777)
    return path


CHECK_SETUP_DONE = "llmzero: setup done"   # the check job's output: slurm.setup went through


def render_check_job(experiment: str, folder: Path, job: CheckJob, token: str, plan: Path,
                     secret_names: Sequence[str] = ()) -> str:
    """A cluster-side preflight job: the phases' setup lines, then the checks of `plan` run by
    `job.python`, none of them with a credential (`secret_names`: the LLM key's variable).
    Output to <folder>/<mode>-<jobid>.out; never requeued (it changes nothing)."""
    where = output_folder("folder", folder)
    mode = checked("mode", job.mode, _NAME, "a name")
    setup = setup_script(_setup(job.setup), job.setup_dir)
    name = check_job_name(checked("experiment", experiment, _NAME, "a name"))
    directives = [f"--job-name={name}",
                  f"--comment=llmz:check,run={experiment},token="
                  + _token(token),
                  f"--output={where}/{mode}-%j.out",
                  *cpu_job_directives(job.where, job, "check time", ["--no-requeue"])]
    return _ENV.get_template("preflight/preflight.sbatch.j2").render(
        directives=directives, experiment=experiment, mode=mode, setup=setup,
        credentials=credential_rule(secret_names),
        setup_done=shlex.quote(CHECK_SETUP_DONE), repo=shlex.quote(str(ROOT)),
        repo_first=ROOT_FIRST,
        python=shlex.quote(checked("python", job.python)),
        plan=shlex.quote(checked("plan", str(plan))),
        script=shlex.quote(f"{where}/{mode}.sbatch"))


def write_check_job(experiment: str, folder: Path, job: CheckJob, token: str, plan: Path,
                    secret_names: Sequence[str] = ()) -> Path:
    """Render into <folder>/<mode>.sbatch (atomically) and return its path."""
    path = Path(folder) / f"{job.mode}.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, render_check_job(experiment, Path(folder), job, token, plan, secret_names))
    return path
