"""A training phase, described as data, rendered into the sbatch script that runs it.

The script is the single source of truth for a phase: the controller submits it, a person can
rerun it by hand (`sbatch phase.sbatch`, or `bash phase.sbatch` without a cluster), in place or
from its start into another folder (LLMZ_RERUN_DIR, see templates/phase/base.sbatch.j2).
Every value that reaches it is checked here first: hyperparameters by `validate_hparams`,
directives against Slurm's syntax, paths and names against what a script can carry. Words on
the shell's side are quoted with shlex.quote; #SBATCH lines cannot be quoted, so their values
are only accepted from a safe character set. Errors name the offending key. The controller's own
batch script (`llmzero-start --submit`) and the cluster-side preflight's short jobs
(`llmzero-start --check --on-cluster`) are rendered here too, under the same checks.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import jinja2

from .backends import TrainerBackend, get_backend
from .backends.spec import PhaseSpec
from .job_settings import SLURM_NAMES, CheckJob, ControllerJobConfig
from .errors import ConfigError
from .hparams import validate_hparams
from .paths import ROOT, TEMPLATES
from .schedulers.base import parse_time
from .search.tree import Kind
from .store.atomic import write_text

__all__ = ["PhaseSpec", "render", "write_phase_script"]   # PhaseSpec: the backends' own type

MAX_VALUE = 4096
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_WORD = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")                 # partition, account, qos, gpu type
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.,&|\[\]*:!()-]{1,256}$")
_MEM = re.compile(r"^[0-9]{1,9}[KMGT]?$")
_DIRECTIVE_PATH = re.compile(r"^/[A-Za-z0-9_./+,=@:~-]*$")       # no space, quote, % or control
_EXTRA = re.compile(r"^--([a-z][a-z0-9-]*)(=[^\s\"'\\`$;%]{1,256})?$")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Directives the controller relies on; extra_directives may not replace them.
MANAGED = frozenset({"job-name", "output", "error", "comment", "open-mode", "requeue",
                     "no-requeue", "parsable", "wrap", "chdir"})
WARN_SIGNAL_S = 120     # --signal=B:USR1@N: the script learns a time limit is near


def _text(key: str, value: Any, pattern: re.Pattern | None = None, what: str = "") -> str:
    if not isinstance(value, str):
        raise ConfigError(key, f"must be a string (got {type(value).__name__})")
    if len(value) > MAX_VALUE:
        raise ConfigError(key, f"is {len(value)} characters long; the limit is {MAX_VALUE}")
    if _CONTROL.search(value):
        raise ConfigError(key, f"contains a newline or control character: {value[:60]!r}")
    if pattern is not None and not pattern.match(value):
        raise ConfigError(key, f"{what} (got {value[:60]!r})")
    return value


def _token(value: Any) -> str:
    return _text("token", value, _TOKEN, "must be 1-64 letters, digits, '_' or '-'")


def _setup(lines: list[str]) -> list[str]:
    """The user's `slurm.setup` lines, each one a line of the script."""
    return [_text(f"slurm.setup[{i}]", line) for i, line in enumerate(lines)]


def _directives(spec: PhaseSpec) -> list[str]:
    """The #SBATCH options of a phase, each value checked for a line sbatch parses."""
    s = spec.slurm
    node_dir = _text("node_dir", str(spec.node_dir), _DIRECTIVE_PATH,
                     "must be an absolute path without spaces, quotes or '%' (it goes into "
                     "#SBATCH --output)")
    out = [f"--job-name={spec.job_name}",
           f"--comment=llmz:node={spec.node_id:04d},token={spec.token}",
           f"--output={node_dir}/slurm-%j.out",
           "--open-mode=append"]
    out += placement_directives("slurm", s.partition, s.account, s.qos)
    if s.constraint is not None:
        out.append("--constraint=" + _text("slurm.constraint", s.constraint, _CONSTRAINT,
                                           "must be a Slurm feature expression without spaces"))
    for key, value, low in (("nodes", s.nodes, 1), ("cpus_per_task", s.cpus_per_task, 1),
                            ("gpus_per_node", s.gpus_per_node, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"slurm.{key}", f"must be an integer >= {low} (got {value!r})")
    out += [f"--nodes={s.nodes}", "--ntasks-per-node=1", f"--cpus-per-task={s.cpus_per_task}"]
    if s.gpus_per_node:
        gpus = str(s.gpus_per_node)
        if s.gpu_type is not None:
            gpus = _text("slurm.gpu_type", s.gpu_type, _WORD, "must be a GPU type name") + ":" + gpus
        if s.gpu_directive == "gres":
            out.append(f"--gres=gpu:{gpus}")
        elif s.gpu_directive == "gpus-per-node":
            out.append(f"--gpus-per-node={gpus}")
        else:
            raise ConfigError("slurm.gpu_directive", "must be 'gpus-per-node' or 'gres'")
    if s.mem is not None:
        out.append(mem_directive("slurm.mem", s.mem))
    out.append(time_directive("slurm.time", s.time))
    if s.exclusive:
        out.append("--exclusive")
    out.append("--requeue" if s.requeue else "--no-requeue")
    out.append(f"--signal=B:USR1@{WARN_SIGNAL_S}")
    out += extra_directives("slurm.extra_directives", s.extra_directives)
    return out


def placement_directives(where: str, partition: str | None, account: str | None,
                         qos: str | None) -> list[str]:
    """--partition/--account/--qos for the values given, each checked (`where` names them)."""
    return [f"--{key}={_text(f'{where}.{key}', value, SLURM_NAMES, 'must be comma-separated names')}"
            for key, value in (("partition", partition), ("account", account), ("qos", qos))
            if value is not None]


def mem_directive(key: str, mem: str) -> str:
    return "--mem=" + _text(key, mem, _MEM, "must be a size like 16G or 4000M")


def time_directive(key: str, time: str) -> str:
    try:
        parse_time(_text(key, time))
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None
    return f"--time={time}"


def extra_directives(where: str, lines: list[str]) -> list[str]:
    """The user's own #SBATCH options: one long option each, none that llmzero-slurm sets
    itself, nothing that would send the job (and every later query) to another cluster."""
    out = []
    for i, line in enumerate(lines):
        key = f"{where}[{i}]"
        match = _EXTRA.match(_text(key, line))
        if not match:
            raise ConfigError(key, "must be one long option like --reservation=name, without "
                                   f"spaces, quotes or shell characters (got {line[:60]!r})")
        if match.group(1) in MANAGED:
            raise ConfigError(key, f"--{match.group(1)} is set by llmzero-slurm itself")
        if match.group(1) in ("cluster", "clusters"):
            raise ConfigError(key, "--clusters would send phases to another cluster while "
                              "squeue, sacct and scancel ask this one; run llmzero-start where "
                              "that cluster is the default (SLURM_CONF) instead")
        out.append(line)
    return out


def _check(spec: PhaseSpec, backend: TrainerBackend) -> PhaseSpec:
    """Validate every field of the spec; return it with hyperparameters typed."""
    _text("experiment", spec.experiment, _NAME, "must be 1-40 letters, digits, '-' or '_'")
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


_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=False,
                          undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def render(spec: PhaseSpec, backend: TrainerBackend | None = None) -> str:
    """The phase script's text; raises ConfigError naming the first bad value."""
    backend = backend or get_backend(spec.backend)
    spec = _check(spec, backend)
    directives = _directives(spec)
    outputs = replace(spec, node_dir=Path(NODE_DIR_STANDIN))
    argv = backend.command(outputs)
    for i, arg in enumerate(argv):
        _text(f"command[{i}]", arg)
    env = backend.env(outputs)
    for name, value in env.items():
        _text(f"env.{name}", name, re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$"), "must be a variable name")
        _text(f"env.{name}", value)
    return _ENV.get_template(backend.template).render(
        spec=spec, directives=directives, setup=list(spec.slurm.setup),
        node_dir=shlex.quote(str(spec.node_dir)),
        env=[(name, shell_word(value)) for name, value in env.items()],
        command=" ".join(shell_word(a) for a in argv))


def write_phase_script(spec: PhaseSpec, backend: TrainerBackend | None = None) -> Path:
    """Render into <node_dir>/phase.sbatch (atomically, executable) and return its path."""
    text = render(spec, backend)
    path = Path(spec.node_dir) / "phase.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text)
    path.chmod(0o755)
    return path


def _output_folder(key: str, folder: Path) -> str:
    return _text(key, str(folder), _DIRECTIVE_PATH, "must be an absolute path without spaces, "
                 "quotes or '%' (it goes into #SBATCH --output)")


def _cpu_job(section: str, job: ControllerJobConfig | CheckJob, time_key: str,
             own: list[str]) -> list[str]:
    """The placement and size of a one-task CPU job (the controller's, a cluster check), its
    `own` lines (requeue policy) before the user's extra directives."""
    if isinstance(job.cpus, bool) or not isinstance(job.cpus, int) or job.cpus < 1:
        raise ConfigError(f"{section}.cpus", f"must be an integer >= 1 (got {job.cpus!r})")
    return [*placement_directives(section, job.partition, job.account, job.qos),
            "--nodes=1", "--ntasks=1", f"--cpus-per-task={job.cpus}",
            mem_directive(f"{section}.mem", job.mem), time_directive(time_key, job.time),
            *own, *extra_directives(f"{section}.extra_directives", job.extra_directives)]


CONTROLLER_WARN_S = 300     # the controller job's USR1: time to stop cleanly and requeue
CONTROLLER_SCRIPT = "controller.sbatch"


def render_controller(experiment: str, run_dir: Path, job: ControllerJobConfig,
                      command: list[str]) -> str:
    """The controller's own batch script: `command` (llmzero-start on the run directory) in
    a small, long, requeueable CPU job that requeues itself near its limit."""
    run = _output_folder("run_dir", run_dir)
    directives = [f"--job-name=llmz-{_text('experiment', experiment, _NAME, 'a name')}-controller",
                  f"--comment=llmz:controller,run={experiment}",
                  f"--output={run}/controller-%j.out", "--open-mode=append",
                  *_cpu_job("controller", job, "controller.time",
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
        command=" ".join(shlex.quote(a) for a in command))


def write_controller_script(experiment: str, run_dir: Path, job: ControllerJobConfig,
                            command: list[str]) -> Path:
    """Render into <run_dir>/controller.sbatch (atomically, executable) and return its path."""
    path = Path(run_dir) / CONTROLLER_SCRIPT
    write_text(path, render_controller(experiment, Path(run_dir), job, command))
    path.chmod(0o755)
    return path


CHECK_SETUP_DONE = "llmzero: setup done"   # the check job's output: slurm.setup went through


def render_check_job(experiment: str, folder: Path, job: CheckJob, token: str, plan: Path) -> str:
    """A cluster-side preflight job: the phases' setup lines, then the checks of `plan` run by
    `job.python`. Output to <folder>/<mode>-<jobid>.out; never requeued (it changes nothing)."""
    where = _output_folder("folder", folder)
    mode = _text("mode", job.mode, _NAME, "a name")
    setup = _setup(job.setup)
    directives = [f"--job-name=llmz-{_text('experiment', experiment, _NAME, 'a name')}-check",
                  f"--comment=llmz:check,run={experiment},token="
                  + _token(token),
                  f"--output={where}/{mode}-%j.out",
                  *_cpu_job(job.where, job, "check time", ["--no-requeue"])]
    return _ENV.get_template("preflight/preflight.sbatch.j2").render(
        directives=directives, experiment=experiment, mode=mode, setup=setup,
        setup_done=shlex.quote(CHECK_SETUP_DONE), repo=shlex.quote(str(ROOT)),
        python=shlex.quote(_text("python", job.python)),
        plan=shlex.quote(_text("plan", str(plan))),
        script=shlex.quote(f"{where}/{mode}.sbatch"))


def write_check_job(experiment: str, folder: Path, job: CheckJob, token: str, plan: Path) -> Path:
    """Render into <folder>/<mode>.sbatch (atomically) and return its path."""
    path = Path(folder) / f"{job.mode}.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, render_check_job(experiment, Path(folder), job, token, plan))
    return path
