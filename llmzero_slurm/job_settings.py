"""Where the run's batch jobs go: the phases (`slurm:`), the monitor (`monitor:`) and the
controller when it runs as a job (`controller:`). Plain settings; the #SBATCH lines are
checked in sbatch_options.py, as the file is read and again as each script is rendered."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class SlurmConfig:
    """#SBATCH directives and environment set-up for phase jobs."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    nodes: int = 1
    gpus_per_node: int = 0
    gpu_directive: str = "gpus-per-node"   # or "gres" for clusters that want --gres=gpu:N
    gpu_type: str | None = None
    cpus_per_task: int = 2
    mem: str | None = None
    time: str = "01:00:00"
    exclusive: bool = False
    extra_directives: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    setup_dir: str | None = None     # where `setup` runs; load_config: the config's folder
    requeue: bool = True


@dataclass
class MonitorConfig:
    """Where the monitor job (the early stopper, which calls the LLM) runs: many clusters give
    only some partitions a route out. Unset keys take the phases' own `slurm:` values."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None


@dataclass
class ControllerJobConfig:
    """The controller as a batch job (`llmzero-start --submit`): a small, long CPU job, e.g.
    in a site's workflow QOS, for sites that end long processes on login nodes."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str = "1-00:00:00"
    cpus: int = 1
    mem: str = "4G"
    extra_directives: list[str] = field(default_factory=list)


@dataclass
class CheckJob:
    """One short job of the cluster-side preflight (`llmzero-start --check --on-cluster`): where
    it runs (`where` names the config section the placement came from, for messages), the
    user's setup lines it runs first, and the interpreter that runs its checks."""

    mode: str                          # environment | endpoint
    where: str
    python: str
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    cpus: int = 1
    mem: str = "2G"
    time: str = "00:10:00"
    extra_directives: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    setup_dir: str | None = None


def setup_script(lines: Sequence[str], folder: str | None) -> list[str]:
    """The slurm.setup `lines` as every job runs them: from `folder` (slurm.setup_dir), so that a
    relative path in them means one thing, though a phase starts in its node folder, a check
    job where sbatch ran and the monitor where the controller runs; the job then goes back
    where it was. Without a folder (a config not read from a file), or where the node does not
    see it (a config written to a login node's /tmp), where the job is, said in its output."""
    if not lines or folder is None:
        return list(lines)
    quoted = shlex.quote(folder)
    return ["llmz_setup_from=$PWD",
            f"cd -- {quoted} 2>/dev/null || echo 'llmzero: warning: cannot enter "
            f"slurm.setup_dir '{quoted}'; the slurm.setup lines run from '\"$PWD\" >&2",
            *lines, 'cd -- "$llmz_setup_from"']
