"""#SBATCH options, each value checked against what sbatch parses.

#SBATCH lines cannot be quoted, so every value is accepted only from a safe character set, and
every bad value of one section is named at once: a `slurm:` section with several typos is
mended in one round of `--check`. The phase, controller and check jobs take their options here.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import ConfigError, ConfigProblems
from .job_settings import CheckJob, ControllerJobConfig, SlurmConfig
from .schedulers.base import parse_time

MAX_VALUE = 4096
# Partition, account and qos values: comma-separated names, nothing a #SBATCH line could misread.
_SLURM_NAMES = re.compile(r"^[A-Za-z0-9_.+-]{1,64}(,[A-Za-z0-9_.+-]{1,64})*$")
_WORD = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")                 # a GPU type
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.,&|\[\]*:!()-]{1,256}$")
_MEM = re.compile(r"^[0-9]{1,9}[KMGT]?$")                       # memory_size's spelling
_SIZE = re.compile(r"^([0-9]{1,9})(?:([KMGT])B?)?$", re.I)       # what sbatch reads as one
_DIRECTIVE_PATH = re.compile(r"^/[A-Za-z0-9_./+,=@:~-]*$")       # no space, quote, % or control
_EXTRA = re.compile(r"^--([a-z][a-z0-9-]*)(=[^\s\"'\\`$;%#]{1,256})?$")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Directives the controller relies on; extra_directives may not replace them.
MANAGED = frozenset({"job-name", "output", "error", "comment", "open-mode", "requeue",
                     "no-requeue", "parsable", "wrap", "chdir", "signal", "export"})
# The size of a job, which the scripts set from the config: a second directive for it would
# override the config's (or clash with it) unseen. Grouped by what sets them.
_NTASKS_OPTIONS = ("ntasks", "ntasks-per-node", "ntasks-per-core", "ntasks-per-socket",
                   "ntasks-per-gpu")
_CPUS_OPTIONS = ("cpus-per-task", "cpus-per-gpu")
_GPUS_OPTIONS = ("gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket", "gres")
_MEM_OPTIONS = ("mem", "mem-per-cpu", "mem-per-gpu")
# A --gres or --tres-per-task entry that asks for GPUs or slices of one (gpu:2, gres/gpu:a100=2,
# shard:2, gres/mps:50): sbatch keeps --gpus-per-task=2 as that same entry, so each is refused
# as --gpus-per-task is. Other node resources (nvme:1, license/matlab:1) stay the user's.
_GPU_ENTRY = re.compile(r"(?:^|,)(?:gres[/:])?(gpu|shard|mps)(?:[:=,]|$)", re.I)
# Where a job runs, which config keys set: the run's other jobs follow the key, not a line.
_WHERE = ("partition", "account", "qos")       # what every section of the config may set
_PLACEMENT = (*_WHERE, "constraint")
# Options that break the submission itself, and why.
_BREAKS = {
    "wait": "sbatch would answer only when the job ends: the controller would wait in sbatch "
            "for each job's whole run",
    "test-only": "sbatch submits no job with it (it only estimates a start time): the "
                 "controller would find no job id in its answer",
    "hold": "every job would be queued held until someone releases it (scontrol release): "
            "the search would wait for ever",
    "export-file": "it adds a file's variables to every job's environment, past the "
                   "credential filter llmzero-slurm submits through: set variables in "
                   "slurm.setup lines (credentials excepted) or in the shell that submits",
}
# Every long option the extra-directive rules refuse or read, and (so none is misread as an
# abbreviation of another) every sbatch option whose name starts another's here or shares
# its first word (--tres is --tres-bind or --tres-per-task).
RULED = MANAGED | {"array", "cluster", "clusters", "nodes", "time", *_NTASKS_OPTIONS,
                   *_CPUS_OPTIONS, *_GPUS_OPTIONS, *_MEM_OPTIONS, *_PLACEMENT, *_BREAKS,
                   "wait-all-nodes", "tres-per-task", "tres-bind"}
WARN_SIGNAL_S = 120     # --signal=B:USR1@N: the script learns a time limit is near


def checked(key: str, value: Any, pattern: re.Pattern | None = None, what: str = "") -> str:
    """`value` as a string that fits on one line of a script (and `pattern`, if given)."""
    if not isinstance(value, str):
        raise ConfigError(key, f"must be a string (got {type(value).__name__})")
    if len(value) > MAX_VALUE:
        raise ConfigError(key, f"is {len(value)} characters long; the limit is {MAX_VALUE}")
    if _CONTROL.search(value):
        raise ConfigError(key, f"contains a newline or control character: {value[:60]!r}")
    if pattern is not None and not pattern.match(value):
        raise ConfigError(key, f"{what} (got {value[:60]!r})")
    return value


def phase_directives(s: SlurmConfig) -> list[str]:
    """The #SBATCH options `slurm:` gives a phase, after the ones that name it; every bad
    value among them is named at once."""
    return _each_named(
        "the phase script's #SBATCH lines",
        lambda: placement_directives("slurm", s.partition, s.account, s.qos),
        lambda: _constraint(s.constraint),
        lambda: [f"--nodes={_count('slurm.nodes', s.nodes, 1)}", "--ntasks-per-node=1"],
        lambda: [f"--cpus-per-task={_count('slurm.cpus_per_task', s.cpus_per_task, 1)}"],
        lambda: _gpus(s),
        lambda: [mem_directive("slurm.mem", s.mem)] if s.mem is not None else [],
        lambda: [time_directive("slurm.time", s.time)],
        lambda: ["--exclusive"] if s.exclusive else [],
        lambda: ["--requeue" if s.requeue else "--no-requeue", f"--signal=B:USR1@{WARN_SIGNAL_S}"],
        lambda: extra_directives("slurm.extra_directives", s.extra_directives, {
            "nodes": "slurm.nodes", "time": "slurm.time", "mem": "slurm.mem",
            **dict.fromkeys(_NTASKS_OPTIONS, "slurm.nodes (one task per node; the trainer "
                                             "starts its own workers)"),
            **dict.fromkeys(_CPUS_OPTIONS, "slurm.cpus_per_task"),
            **dict.fromkeys(_gpu_options(s), "slurm.gpus_per_node (with slurm.gpu_type and "
                                             "slurm.gpu_directive)"),
            # Without slurm.mem the script asks for no memory: a per-CPU or per-GPU size is
            # then the user's own choice, not a second spelling of the config's.
            **dict.fromkeys(_MEM_OPTIONS if s.mem is not None else (), "slurm.mem")},
            {o: f"slurm.{o}" for o in _PLACEMENT}))


def _gpu_options(s: SlurmConfig) -> tuple[str, ...]:
    """The GPU options an extra directive may not add: all of them, but --gres only where the
    script's own GPUs are a --gres line, since a phase may need it for other resources (nvme:1;
    its GPU entries are refused by _GPU_ENTRY)."""
    return tuple(o for o in _GPUS_OPTIONS
                 if o != "gres" or (s.gpus_per_node and s.gpu_directive == "gres"))


def _each_named(source: str, *parts: Callable[[], list[str]]) -> list[str]:
    """The directives of `parts` in order; the bad values of all of them are raised together,
    so a section with several typos is mended in one round of --check."""
    problems, out = ConfigProblems(), []
    for part in parts:
        with problems.collect():
            out += part()
    problems.raise_all(source)
    return out


def _count(key: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(key, f"must be an integer >= {low} (got {value!r})")
    return value


def _constraint(constraint: str | None) -> list[str]:
    if constraint is None:
        return []
    return ["--constraint=" + checked("slurm.constraint", constraint, _CONSTRAINT,
                                    "must be a Slurm feature expression without spaces")]


def _gpus(s: SlurmConfig) -> list[str]:
    """The GPU request of each phase node, in the spelling its cluster wants."""
    if s.gpu_directive not in ("gpus-per-node", "gres"):
        raise ConfigError("slurm.gpu_directive", "must be 'gpus-per-node' or 'gres'")
    gpus = str(_count("slurm.gpus_per_node", s.gpus_per_node, 0))
    if not s.gpus_per_node:
        return []
    if s.gpu_type is not None:
        gpus = checked("slurm.gpu_type", s.gpu_type, _WORD, "must be a GPU type name") + ":" + gpus
    return [f"--gres=gpu:{gpus}" if s.gpu_directive == "gres" else f"--gpus-per-node={gpus}"]


def placement_directives(where: str, partition: str | None, account: str | None,
                         qos: str | None) -> list[str]:
    """--partition/--account/--qos for the values given, each checked (`where` names them)."""
    problems, out = ConfigProblems(), []
    for key, value in (("partition", partition), ("account", account), ("qos", qos)):
        if value is not None:
            with problems.collect():
                out.append(f"--{key}=" + checked(f"{where}.{key}", value, _SLURM_NAMES,
                                                 "must be comma-separated Slurm names"))
    problems.raise_all()
    return out


def memory_size(value: Any) -> Any:
    """A memory size in the one spelling the scripts carry (16000, 16G): sbatch reads a plain
    integer as megabytes, and a K, M, G or T suffix in any case, a B after it ignored. Anything
    else is returned as text, for mem_directive to refuse under its key."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return value
    text = str(value).strip()
    match = _SIZE.match(text)
    return match.group(1) + (match.group(2) or "").upper() if match else text


def mem_directive(key: str, mem: str) -> str:
    return "--mem=" + checked(key, mem, _MEM, "must be a size like 16G, 4000M or 4000 "
                                              "(megabytes); K, M, G or T, with an optional B")


def time_directive(key: str, time: str) -> str:
    try:
        parse_time(checked(key, time))
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None
    return f"--time={time}"


def extra_directives(where: str, lines: list[str], sized: Mapping[str, str],
                     placed: Mapping[str, str]) -> list[str]:
    """The user's own #SBATCH options: one long option each, none that llmzero-slurm sets
    itself, nothing that would send the job (and every later query) to another cluster.
    `sized`: the options the script sets from the config, and the key that sets each;
    `placed`: the placement options a config key gives, set or not, and that key."""
    problems = ConfigProblems()
    for i, line in enumerate(lines):
        with problems.collect():
            _extra(f"{where}[{i}]", line, sized, placed)
    problems.raise_all()
    return list(lines)


def _extra(key: str, line: str, sized: Mapping[str, str], placed: Mapping[str, str]) -> None:
    if "#" in checked(key, line):
        raise ConfigError(key, "sbatch reads a #SBATCH line only up to a '#' (--job-name=ab#cd "
                               f"is read as ab): leave the '#' out (got {line[:60]!r})")
    match = _EXTRA.match(line)
    if not match:
        raise ConfigError(key, "must be one long option like --reservation=name, without "
                               f"spaces, quotes or shell characters (got {line[:60]!r})")
    written = match.group(1)
    option = _option(key, written)
    read_as = (f"--{written} stands for --{option} (sbatch takes any unambiguous prefix of "
               "an option's name): " if option != written else "")
    if option == "export":
        raise ConfigError(key, f"{read_as}--export is given on sbatch's command line, which "
                               "wins over #SBATCH lines: every job runs in the submitting "
                               "environment, less its credentials (llmzero-slurm strips them). "
                               "Set a variable in the shell that submits, or in slurm.setup "
                               "lines for the phases")
    if option in MANAGED:
        raise ConfigError(key, f"{read_as}--{option} is set by llmzero-slurm itself")
    if option in _BREAKS:
        raise ConfigError(key, f"{read_as}--{option} breaks the submission: {_BREAKS[option]}")
    if option in sized:
        raise ConfigError(key, f"{read_as}--{option} is already in the script, from "
                               f"{sized[option]}")
    gpu = _GPU_ENTRY.search((match.group(2) or "=")[1:])
    if option in ("gres", "tres-per-task") and "gpus-per-task" in sized and gpu:
        raise ConfigError(key, f"{read_as}a {gpu.group(1).lower()} entry of --{option} asks for GPUs "
                               f"(or slices of one), as --gpus-per-task does: what a phase "
                               f"gets comes from {sized['gpus-per-task']} (got {line[:60]!r})")
    if option in placed:
        raise ConfigError(key, f"{read_as}set {placed[option]} instead: a second --{option} "
                               "line would quietly win over it in this job alone, while the "
                               "run's other jobs follow the key")
    if option == "array":
        raise ConfigError(key, f"{read_as}--array would make one phase several jobs, which "
                               "squeue and sacct list as <id>_<task>: the controller tracks one "
                               "job per phase. Run other seeds as experiments of their own")
    if option in ("cluster", "clusters"):
        raise ConfigError(key, f"{read_as}--clusters would send phases to another cluster while "
                               "squeue, sacct and scancel ask this one; run llmzero-start where "
                               "that cluster is the default (SLURM_CONF) instead")


def _option(key: str, name: str) -> str:
    """The option sbatch reads `name` as, where that is one of RULED: its exact name first,
    else the one option it abbreviates; `name` itself for any other option."""
    if name in RULED:
        return name
    options = sorted(o for o in RULED if o.startswith(name))
    if len(options) > 1:
        raise ConfigError(key, f"--{name} is ambiguous ({', '.join('--' + o for o in options)}): "
                               "write the option's full name")
    return options[0] if options else name


def output_folder(key: str, folder: Path) -> str:
    return checked(key, str(folder), _DIRECTIVE_PATH, "must be an absolute path without "
                   "spaces, quotes or '%' (it goes into #SBATCH --output)")


def cpu_job_directives(section: str, job: ControllerJobConfig | CheckJob, time_key: str,
                       own: list[str]) -> list[str]:
    """The placement and size of a one-task CPU job (the controller's, a cluster check), its
    `own` lines (requeue policy) before the user's extra directives."""
    return _each_named(
        f"`{section}:`",
        lambda: placement_directives(section, job.partition, job.account, job.qos),
        lambda: ["--nodes=1", "--ntasks=1",
                 f"--cpus-per-task={_count(f'{section}.cpus', job.cpus, 1)}"],
        lambda: [mem_directive(f"{section}.mem", job.mem)],
        lambda: [time_directive(time_key, job.time), *own],
        lambda: extra_directives(f"{section}.extra_directives", job.extra_directives, {
            **dict.fromkeys(("nodes", *_NTASKS_OPTIONS),
                            "llmzero-slurm itself (one task on one node)"),
            **dict.fromkeys(_CPUS_OPTIONS, f"{section}.cpus"),
            **dict.fromkeys(_MEM_OPTIONS, f"{section}.mem"), "time": time_key},
            {o: f"{section}.{o}" for o in _WHERE}))
