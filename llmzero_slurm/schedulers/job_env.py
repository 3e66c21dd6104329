"""The environment a job inherits from the process that submits it, less every credential
and less the Slurm variables of a job that process itself runs in.

Training never calls an LLM, and user reward code runs inside the phase job, so no LLM key of
any name may reach it: not as a variable the script unsets later (it would still sit in
/proc/<pid>/environ), not under a custom name (`agents.api_key_env`), not copied under another
name. Both schedulers submit with this environment, so their jobs never see the key; the
monitor job, started through submitit (which takes no environment of its own), is submitted
while the credentials are withheld from this process's environment. The credentials the
phases' trainer itself reads, named by its backend (a logger's key), pass to the phases and
to the controller's own job, which submits them.

A controller running as a Slurm job (`llmzero-start --submit`, or started inside an salloc)
has its own job's variables, and sbatch exports them: Slurm sets a new job's own values only
for what that job has, so SLURM_RESTART_COUNT of a requeued controller job, or its
SLURM_MEM_PER_NODE when the phase sets no `mem` (srun reads it as its memory request), would
reach the phase. Only the client's own settings (SLURM_CONF) pass on.

sbatch reads its input variables (SBATCH_JOB_NAME, SBATCH_PARTITION, SBATCH_TIMELIMIT...) with
precedence over a script's #SBATCH lines: a user's .bashrc value would replace what the job
script says, the job name the controller tracks its jobs by included. None passes on.
"""
from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Iterable, Iterator, Mapping, Sequence

from ..errors import ConfigError

# Names that hold a service credential: ANTHROPIC_API_KEY, OPENAI_API_KEY, ANTHROPIC_AUTH_TOKEN,
# a gateway's ACCESS_TOKEN. HF_TOKEN is not among them: a job may download its model with it.
# The job scripts apply it too (bash's [[ =~ ]], case ignored): keep it POSIX ERE.
CREDENTIAL = re.compile(r"API_?KEY|AUTH_?TOKEN|ACCESS_?TOKEN|SECRET", re.I)
# The agents' default key variables (config.AgentConfig.key_env), which a user's shell may
# hold whichever one the run uses: the scripts' hints to rerun by hand leave them out of sbatch.
LLM_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")
MIN_SECRET_CHARS = 8    # a value this short is no key; dropping its copies would drop noise
# A job's own variables (SLURM_JOB_ID, SLURM_MEM_PER_NODE, SLURMD_NODENAME...), and the ones kept.
JOB_VARIABLE = re.compile(r"SLURMD?_")
CLIENT_SETTINGS = frozenset({"SLURM_CONF"})
SBATCH_INPUT = "SBATCH_"
VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")   # what a shell can name and unset


# A shell word that assigns a variable (NAME=..., NAME+=...): at a command's start or after
# export, declare, env..., not inside another word (--api_key=...). Group 2: the value's text.
_ASSIGNMENT = re.compile(r"(?:^|[\s;&|(){}`])([A-Za-z_][A-Za-z0-9_]*)\+?=(\S*)")


def is_credential(name: str, names: Iterable[str] = (), keep: Iterable[str] = ()) -> bool:
    """Whether no job may hold the variable `name` (see without_credentials)."""
    return name in names or (CREDENTIAL.search(name) is not None and name not in keep)


def credential_written(name: str, value: str, names: Iterable[str] = (),
                       keep: Iterable[str] | None = ()) -> str | None:
    """Why a config may not set the variable `name` to `value` in a job script (a setup
    line, a trainer override), or None. No credential may be set at all: the trainer and the
    reward code would read it, and a value would lie in the script for anyone who can read
    the run. One the trainer reads itself (`keep`) may be read from elsewhere ($(cat FILE)),
    not written out. `keep` None: not known yet (the trainer's section is its backend's to
    read), so any credential but `names` is taken for one the trainer may keep."""
    if name in names or (keep is not None and is_credential(name, names, keep)):
        return (f"sets {name}, a credential variable: no job may hold one (its trainer and "
                "the reward code it runs could read it), and a value given here is written "
                "into every job script. Leave the key to the shell that runs llmzero-start")
    kept = CREDENTIAL.search(name) if keep is None else name in keep
    if kept and value and not any(c in value for c in "$`"):
        return (f"writes the value of {name} into every job script: export it in the shell "
                "that runs llmzero-start instead (the phases get it from there), or read it "
                f"here from a file ({name}=$(cat FILE))")
    return None


def check_setup_lines(lines: Sequence[str], names: Iterable[str],
                      keep: Iterable[str] | None) -> None:
    """Refuse a slurm.setup line that sets a credential (credential_written), naming it:
    `names` the LLM key's variable, `keep` the credentials the phases' trainer reads."""
    names, keep = set(names), None if keep is None else set(keep)
    for i, line in enumerate(lines):
        for match in _ASSIGNMENT.finditer(line):
            if why := credential_written(match[1], match[2], names, keep):
                raise ConfigError(f"slurm.setup[{i}]", why)


def without_credentials(env: Mapping[str, str] | None = None, names: Iterable[str] = (),
                        keep: Iterable[str] = ()) -> dict[str, str]:
    """`env` (default: this process's) without credential variables, the variables `names`,
    and any other variable holding one of their values. `keep`: credential variables the
    trainer reads itself (a logger's key, TrainerBackend.kept_credentials)."""
    env = dict(os.environ if env is None else env)
    names, kept = set(names), set(keep)
    secret = {n for n in env if is_credential(n, names, kept)}
    values = {env[n] for n in secret if len(env.get(n, "")) >= MIN_SECRET_CHARS}
    return {k: v for k, v in env.items() if k not in secret and v not in values}


def new_job_environment(env: Mapping[str, str] | None = None, names: Iterable[str] = (),
                        keep: Iterable[str] = ()) -> dict[str, str]:
    """What a job submitted from `env` (default: this process's) may inherit: no credential
    but those in `keep`, and, when `env` is itself a Slurm job's, none of that job's Slurm
    variables."""
    kept = {k: v for k, v in without_credentials(env, names, keep).items()
            if not k.startswith(SBATCH_INPUT)}
    if "SLURM_JOB_ID" not in kept:
        return kept
    return {k: v for k, v in kept.items() if not JOB_VARIABLE.match(k) or k in CLIENT_SETTINGS}


def sbatch_inputs_note(env: Mapping[str, str] | None = None) -> str | None:
    """What to tell the user when `env` (default: this process's) sets sbatch input variables,
    by name (new_job_environment leaves them out); None when it sets none."""
    names = sorted(n for n in (os.environ if env is None else env) if n.startswith(SBATCH_INPUT))
    if not names:
        return None
    return (f"{', '.join(names)} (set in this environment) not passed to sbatch: they would "
            "override the #SBATCH lines of every job it submits; set the experiment's slurm:, "
            "monitor: or controller: section instead")


@contextmanager
def credentials_withheld(names: Iterable[str] = ()) -> Iterator[None]:
    """This process's environment as a new job may inherit it (`new_job_environment`) for the
    duration: for a library that starts jobs from os.environ and takes no environment of its
    own (submitit)."""
    kept = new_job_environment(names=names)
    withheld = {k: v for k, v in os.environ.items() if k not in kept}
    for name in withheld:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(withheld)
