"""The rendered job scripts as the clusters' own shells run them: older bash and util-linux
(Enterprise Linux 7 and 8), the user's setup lines, and the credentials of the shell that
starts a script by hand."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from llmzero_slurm.config import SlurmConfig
from llmzero_slurm.errors import ConfigError
from llmzero_slurm.job_settings import CheckJob
from llmzero_slurm.render import render_check_job, write_phase_script

from test_render import argv_dump, env_dump, spec

# Older bash builds to run the scripts with (bash 4.2 of EL7, 4.4 of EL8), colon-separated;
# each test that needs them skips without.
OLD_BASHES = [b for b in os.environ.get("LLMZ_TEST_OLD_BASHES", "").split(":") if b]
PATH = "/usr/bin:/bin"


def run(script: Path, *shell: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*(shell or ("bash",)), str(script)], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env={"PATH": PATH, **env})


def record(script: Path) -> dict:
    return json.loads((script.parent / "status.json").read_text())


def test_status_json_stays_json_without_epochrealtime(tmp_path):
    """bash 4.4 (EL8) has no $EPOCHREALTIME (bash 5.0): under set -u the time of every record
    failed ("EPOCHREALTIME: unbound variable") and status.json read "started_at": , which
    no JSON reader takes. A bash without it is stood in for by unsetting it at start-up."""
    startup = tmp_path / "bash44"
    startup.write_text("unset EPOCHREALTIME\n")
    script = write_phase_script(spec(tmp_path, trainer={"python": argv_dump(tmp_path)}))
    done = run(script, cwd=tmp_path, BASH_ENV=str(startup))
    assert done.returncode == 0 and "unbound" not in done.stderr, done.stderr
    status = record(script)
    assert status["finished_at"] >= status["started_at"] > 1e9


FLOCK_2_23 = """#!/bin/bash
# flock of util-linux 2.23 (EL7): no -E, so a held lock exits 1 (getopt refuses -E: 64).
for arg in "$@"; do [[ $arg == -E* ]] && { echo "flock: invalid option -- 'E'" >&2; exit 64; }; done
exec REAL "$@"
"""


def test_a_held_phase_lock_turns_a_second_job_away_with_an_old_flock(tmp_path):
    """The lock that keeps two jobs from training in one folder asked flock for exit code
    75 (-E, util-linux 2.25): on EL7's flock the option was refused, that read as "no
    locks on this filesystem", and the second job trained beside the first."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "flock").write_text(FLOCK_2_23.replace("REAL", shutil.which("flock")))
    (bin_dir / "flock").chmod(0o755)
    s = spec(tmp_path, trainer={"python": argv_dump(tmp_path)})
    script = write_phase_script(s)
    with open(s.node_dir / "phase.lock", "a") as held:     # the node's own job, training
        fcntl.flock(held, fcntl.LOCK_EX)
        done = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, env={"PATH": f"{bin_dir}:{PATH}"})
    assert done.returncode == 3 and "another job is training in" in done.stderr, done.stderr
    assert not (s.node_dir / "argv.json").exists()


@pytest.mark.parametrize("bash", OLD_BASHES or [pytest.param(None, marks=pytest.mark.skip(
    reason="no older bash to run with (LLMZ_TEST_OLD_BASHES)"))])
@pytest.mark.parametrize("key", [{}, {"ANTHROPIC_API_KEY": "sk-ant-test-0001112223"}],
                         ids=["no-key", "key"])
def test_a_phase_runs_to_the_end_under_older_bash(tmp_path, bash, key):
    """bash 4.2 and 4.3 read an empty array's "${a[@]}" under set -u as an unbound variable:
    with no credential in the environment the script ended before it started anything."""
    script = write_phase_script(spec(tmp_path, trainer={"python": argv_dump(tmp_path)}))
    done = run(script, bash, cwd=tmp_path, **key)
    assert done.returncode == 0 and "unbound" not in done.stderr, done.stderr
    assert record(script)["state"] == "completed"


@pytest.mark.parametrize("shell", ["sh", *OLD_BASHES])
def test_a_shell_too_old_or_not_bash_is_refused_at_once(tmp_path, shell):
    """`sh phase.sbatch` (dash) or a bash older than 4.2 stops before it does anything,
    saying what it needs, with exit 2 (a bash of 4.2 or later runs it)."""
    version = subprocess.run([shell, "-c", "echo ${BASH_VERSION:-0.0}"], capture_output=True,
                             text=True).stdout.strip()
    if shell == "sh" and version != "0.0":
        pytest.skip("sh is bash here")
    script = write_phase_script(spec(tmp_path, trainer={"python": argv_dump(tmp_path)}))
    done = run(script, shell, cwd=tmp_path)
    if tuple(int(n) for n in version.split(".")[:2]) >= (4, 2):
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2 and "needs bash 4.2 or newer" in done.stderr, done.stderr
    assert not (script.parent / "status.json").exists()


@pytest.mark.parametrize("bash", OLD_BASHES or [pytest.param(None, marks=pytest.mark.skip(
    reason="no older bash to run with (LLMZ_TEST_OLD_BASHES)"))])
def test_a_check_job_runs_its_checks_under_older_bash(tmp_path, bash):
    """The cluster-side preflight's job unsets credentials as a phase does: under bash 4.2
    it stopped there, and the check blamed the setup lines."""
    job = CheckJob("environment", "controller", env_dump(tmp_path), setup=["true"])
    script = tmp_path / "check.sbatch"
    script.write_text(render_check_job("exp", tmp_path, job, "t", tmp_path / "plan.json"))
    done = run(script, bash, cwd=tmp_path, LLMZ_NODE_DIR=str(tmp_path))
    assert done.returncode == 0 and (tmp_path / "env.json").exists(), done.stderr


# What common activations do: conda's activate.d hooks read variables that may be unset
# (conda/conda#9979), and a line may end a pipeline early (`... | head -1`).
LAX_SETUP = ['[ -z "$LLMZ_NEVER_SET" ]', "yes | head -n 1 >/dev/null",
             'x=$(false | true) && export LLMZ_FROM_SETUP="set up"']


def test_setup_lines_run_as_a_login_shell_would_in_every_job(tmp_path):
    """The setup lines ran under the script's own set -u and pipefail: an activation that
    reads an unset variable, or a pipeline whose first command a `head` cut short, ended
    every phase and every check job "during setup", though the monitor's job ran the same
    lines fine. They run with errexit alone; a failing line still ends the job, named."""
    s = spec(tmp_path, trainer={"python": env_dump(tmp_path)},
             slurm=SlurmConfig(setup=LAX_SETUP))
    phase = write_phase_script(s)
    check = tmp_path / "check.sbatch"
    check.write_text(render_check_job("exp", tmp_path, CheckJob(
        "environment", "controller", env_dump(tmp_path), setup=LAX_SETUP), "t", tmp_path / "p"))
    for script, where in ((phase, s.node_dir), (check, tmp_path)):
        done = run(script, cwd=tmp_path, LLMZ_NODE_DIR=str(where))
        assert done.returncode == 0, done.stderr
        assert json.loads((where / "env.json").read_text())["LLMZ_FROM_SETUP"] == "set up"
        text = script.read_text()     # the script's own options are back after them
        assert text.index(LAX_SETUP[-1]) < text.index("set +e -u -o pipefail")
    failing = write_phase_script(replace(s, slurm=SlurmConfig(setup=["false", "echo never"])))
    done = run(failing, cwd=tmp_path)
    assert done.returncode == 1 and "never" not in done.stdout
    assert record(failing)["reason"] == "the script exited with code 1 during setup"
    # said in the job's output too, where the error analyzer reads why the job failed
    assert "llmzero: error: the script exited with code 1 during setup" in done.stderr


# A verl phase's trainer: section with the wandb logger, which logs in with WANDB_API_KEY.
WANDB = {"test_data_sources": ["gsm8k_test"], "extra_loggers": ["wandb"]}
KEYS_SH = """export ANTHROPIC_API_KEY=sk-ant-from-bashrc-123456
export LLMZ_COPY_OF_IT=$ANTHROPIC_API_KEY
export WANDB_API_KEY=wandb-from-bashrc-0001
"""


def test_a_key_a_setup_line_brings_back_is_dropped_again(tmp_path):
    """The credentials were dropped before the setup lines: one that sources ~/.bashrc or a
    .env exporting ANTHROPIC_API_KEY handed the key to the trainer and the reward code. They
    are dropped again after the setup lines, a copy under another name too, in every job
    that runs them."""
    (tmp_path / "keys.sh").write_text(KEYS_SH)
    setup = [f"source {tmp_path}/keys.sh"]
    s = spec(tmp_path, trainer={"python": env_dump(tmp_path)}, slurm=SlurmConfig(setup=setup))
    check = tmp_path / "check.sbatch"
    check.write_text(render_check_job("exp", tmp_path, CheckJob(
        "environment", "controller", env_dump(tmp_path), setup=setup), "t", tmp_path / "p"))
    for script, where in ((write_phase_script(s), s.node_dir), (check, tmp_path)):
        assert run(script, cwd=tmp_path, LLMZ_NODE_DIR=str(where)).returncode == 0
        trainer = json.loads((where / "env.json").read_text())
        assert not {"ANTHROPIC_API_KEY", "LLMZ_COPY_OF_IT", "WANDB_API_KEY"} & set(trainer)


def test_a_logger_key_a_setup_line_exports_still_reaches_the_trainer(tmp_path):
    """What the trainer reads itself (the key of a logger it is configured with) stays."""
    from test_verl_phase import script_of, spec as verl_spec, stub_programs
    (tmp_path / "keys.sh").write_text(KEYS_SH)
    phase = verl_spec(tmp_path, trainer=WANDB, slurm=SlurmConfig(gpus_per_node=2, setup=[f"source {tmp_path}/keys.sh"]))
    env, log, _ = stub_programs(tmp_path)
    done = subprocess.run(["bash", str(script_of(phase))], env={**env, "SLURM_JOB_ID": "48"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    trainer = (log / "main_ppo.environ").read_text()
    assert "WANDB_API_KEY=wandb-from-bashrc-0001\n" in trainer
    assert "ANTHROPIC_API_KEY" not in trainer and "LLMZ_COPY_OF_IT" not in trainer


@pytest.mark.parametrize("line, name, read", [
    ("export ANTHROPIC_API_KEY=sk-ant-api03-abcdef", "ANTHROPIC_API_KEY", True),
    ("module load x && declare -x SITE_AUTH_TOKEN=abc", "SITE_AUTH_TOKEN", True),
    ("env MY_LLM_CRED=$(cat ~/.key) true", "MY_LLM_CRED", True),      # agents.api_key_env
    ("export A=1 WANDB_API_KEY=wandb-literal-0001", "WANDB_API_KEY", True),
    # Still a key handed to the job, though read from a file; whether the trainer reads it
    # itself (a logger's) is its backend's to say, as each phase is rendered.
    ("export OPENAI_API_KEY=$(cat ~/.openai)", "OPENAI_API_KEY", False),
])
def test_a_setup_line_that_sets_a_credential_is_refused_naming_it(tmp_path, line, name, read):
    """`export ANTHROPIC_API_KEY=sk-...` in slurm.setup landed verbatim in every phase.sbatch
    (mode 0755) and handed the key to the job; so would a variable read from a file. Refused
    as a phase is rendered and, all that can be told without the backend, as the config is
    read, naming the line and the variable."""
    from llmzero_slurm.config import parse_config
    from llmzero_slurm.render import render
    with pytest.raises(ConfigError) as err:
        render(spec(tmp_path, slurm=SlurmConfig(setup=["module load cuda", line]),
                    secret_names=("MY_LLM_CRED",)))
    assert err.value.key == "slurm.setup[1]" and name in err.value.problem
    config = {"name": "demo", "task": {"builtin": "addition"},
              "agents": {"api_key_env": "MY_LLM_CRED"}, "slurm": {"setup": ["true", line]}}
    if not read:
        parse_config(config)
        return
    with pytest.raises(ConfigError) as err:
        parse_config(config)
    assert "slurm.setup[1]" in str(err.value) and name in str(err.value)


def test_setup_lines_may_name_credentials_without_setting_them(tmp_path):
    """What a line may do: read a logger key the trainer is configured with from a file,
    unset a key, set a variable that is no credential, pass an option named like one."""
    from test_verl_phase import spec as verl_spec
    from llmzero_slurm.render import render
    fine = ["export WANDB_API_KEY=$(cat ~/.wandb_key)", "unset ANTHROPIC_API_KEY",
            "export HF_TOKEN=$(cat ~/.hf)", "tool --api_key=none --openai_api_key_file=x"]
    render(verl_spec(tmp_path, trainer=WANDB, slurm=SlurmConfig(gpus_per_node=2, setup=fine)))
    with pytest.raises(ConfigError, match=r"writes the value of WANDB_API_KEY into every job"):
        render(verl_spec(tmp_path, trainer=WANDB, slurm=SlurmConfig(
            gpus_per_node=2, setup=["export WANDB_API_KEY=wandb-literal-0001"])))


@pytest.mark.parametrize("override, name", [
    ("+ray_kwargs.ray_init.runtime_env.env_vars.OPENAI_API_KEY=sk-test-4445556667",
     "OPENAI_API_KEY"),
    ("+ray_kwargs.ray_init.runtime_env.env_vars={ANTHROPIC_API_KEY:sk-ant-1234567}",
     "ANTHROPIC_API_KEY"),
    ("++ray_kwargs.ray_init.runtime_env.env_vars.MY_LLM_CRED=x", "MY_LLM_CRED"),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_API_KEY=wandb-literal", "WANDB_API_KEY"),
])
def test_an_override_that_sets_a_credential_is_refused_naming_it(tmp_path, monkeypatch,
                                                               override, name):
    """trainer.overrides go into phase.sbatch as they are: a key given to Ray's workers there
    was written into every script and handed to the trainer and the reward code. A logger's
    key read from the job's environment is the trainer's own."""
    monkeypatch.setenv("WANDB_API_KEY", "wandb-0001112223")     # verl's schema resolves it
    from test_verl_phase import spec as verl_spec
    from llmzero_slurm.render import render
    with pytest.raises(ConfigError) as err:
        render(verl_spec(tmp_path, trainer={**WANDB, "overrides": [override]},
                         secret_names=("MY_LLM_CRED",)))
    assert err.value.key.startswith("trainer.overrides") and name in str(err.value)
    render(verl_spec(tmp_path, trainer={**WANDB, "overrides": [
        "+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_API_KEY=${oc.env:WANDB_API_KEY}"]}))


# A trainer that records its parent's environment as the kernel shows it to any process of
# the user: /proc/<pid>/environ keeps what a process was started with, unset or not.
PARENT_DUMP = f"""#!{sys.executable}
import os, sys
with open(os.environ["LLMZ_PARENT_DUMP"], "ab") as fh:
    fh.write(open(f"/proc/{{os.getppid()}}/environ", "rb").read().replace(b"\\0", b"\\n"))
"""
HAND = {"ANTHROPIC_API_KEY": "sk-ant-test-0001112223", "LLMZ_COPY": "sk-ant-test-0001112223",
        "OPENAI_API_KEY": "sk-test-4445556667"}


def parent_dump(tmp_path: Path) -> str:
    dump = tmp_path / "parent-dump"
    dump.write_text(PARENT_DUMP)
    dump.chmod(0o755)
    return str(dump)


@pytest.mark.parametrize("job", [{}, {"SLURM_JOB_ID": "51", "SLURM_RESTART_COUNT": "1"}],
                         ids=["bash", "requeued"])
def test_a_rerun_by_hand_starts_again_without_the_shells_keys(tmp_path, job):
    """A rerun by hand unset the keys, but the shell running the script was started with
    them: the trainer and the reward code read them from /proc/$PPID/environ. A script that
    finds a credential starts itself again without it, once, requeue or not."""
    dump = tmp_path / "environ.txt"
    s = spec(tmp_path, trainer={"python": parent_dump(tmp_path)},
             slurm=SlurmConfig(setup=[f"tr '\\0' '\\n' </proc/$$/environ >>{dump}"]))
    done = run(write_phase_script(s), cwd=tmp_path, LLMZ_PARENT_DUMP=str(dump), **HAND, **job)
    assert done.returncode == 0 and done.stdout.count("llmzero: job ") == 1, done.stderr
    seen = dump.read_text()
    assert seen.count("LLMZ_PARENT_DUMP=") == 2          # the setup lines' view, the trainer's
    assert not [value for value in HAND.values() if value in seen], seen


def test_a_startup_file_that_exports_a_key_again_cannot_make_it_loop(tmp_path):
    """BASH_ENV (Lmod sets it) is read by every bash the script starts, itself again
    included: one that exports a key would have it start itself for ever. It starts again
    once; the key is then unset as before, and the trainer never has it."""
    startup = tmp_path / "bashenv"
    startup.write_text("export ANTHROPIC_API_KEY=sk-ant-test-0001112223\n")
    s = spec(tmp_path, trainer={"python": env_dump(tmp_path)})
    done = run(write_phase_script(s), cwd=tmp_path, BASH_ENV=str(startup), **HAND)
    assert done.returncode == 0 and done.stdout.count("llmzero: job ") == 1, done.stderr
    assert not set(HAND) & set(json.loads((s.node_dir / "env.json").read_text()))


def test_the_hints_to_rerun_by_hand_leave_the_key_out_of_sbatch(tmp_path):
    """The scripts said "Rerun by hand: sbatch phase.sbatch": from the shell that runs
    llmzero-start that hands sbatch the LLM key, which slurmctld keeps with the job."""
    from test_render import controller_job
    phase = write_phase_script(spec(tmp_path, secret_names=("MY_LLM_CRED",))).read_text()
    check = render_check_job("exp", tmp_path, CheckJob("environment", "controller", "python3"),
                             "t", tmp_path / "p", ["MY_LLM_CRED"])
    unset = "env -u ANTHROPIC_API_KEY -u MY_LLM_CRED -u OPENAI_API_KEY sbatch"
    assert f"# {unset} phase.sbatch" in phase and f"{unset} --export=ALL,LLMZ_RERUN_DIR" in phase
    assert f"{unset} {tmp_path}/environment.sbatch" in check
    controller = controller_job(tmp_path).read_text()
    assert f"llmzero-start {tmp_path} --submit" in controller
    assert "env -u ANTHROPIC_API_KEY -u OPENAI_API_KEY sbatch" in controller
    for text in (phase, check, controller):
        assert "by hand: sbatch" not in text


def test_a_check_job_by_hand_starts_again_without_the_shells_keys(tmp_path):
    dump = tmp_path / "environ.txt"
    check = tmp_path / "check.sbatch"
    check.write_text(render_check_job("exp", tmp_path, CheckJob(
        "environment", "controller", env_dump(tmp_path),
        setup=[f"tr '\\0' '\\n' </proc/$$/environ >{dump}"]), "t", tmp_path / "p"))
    done = run(check, cwd=tmp_path, LLMZ_NODE_DIR=str(tmp_path), **HAND)
    assert done.returncode == 0, done.stderr
    assert "PATH=" in dump.read_text() and not set(HAND) & {
        line.split("=")[0] for line in dump.read_text().splitlines()}


def test_the_controller_job_by_hand_starts_without_the_key_and_as_submitted_keeps_its_own(
        tmp_path):
    """The controller's own job takes the LLM key from controller-key/, never from its
    environment: by hand it starts again without the shell's keys. As llmzero-start --submit
    sent it (LLMZ_SCHEDULED), its environment is already the one it may hold, a logger's
    key for the phases included."""
    from llmzero_slurm.config import ControllerJobConfig
    from llmzero_slurm.render import write_controller_script
    dump = tmp_path / "environ.txt"
    script = write_controller_script("exp1", tmp_path, ControllerJobConfig(time="1:00:00"),
                                     [parent_dump(tmp_path)], "tok-c")
    for scheduled in ({}, {"LLMZ_SCHEDULED": "1", "WANDB_API_KEY": "wandb-0001112223"}):
        done = run(script, cwd=tmp_path, LLMZ_PARENT_DUMP=str(dump), SLURM_JOB_ID="61",
                   **({} if scheduled else HAND), **scheduled)
        assert done.returncode == 0, done.stderr
    by_hand, submitted = dump.read_text().split("LLMZ_PARENT_DUMP=", 2)[1:]
    assert not [value for value in HAND.values() if value in by_hand]
    assert "WANDB_API_KEY=wandb-0001112223" in submitted


@pytest.mark.slurm
def test_a_phase_sbatch_by_hand_starts_without_the_key_on_slurm(tmp_path):
    """Under sbatch the script is slurmd's spooled copy ($0): it starts that again."""
    dump = tmp_path / "environ.txt"
    s = spec(tmp_path, trainer={"python": parent_dump(tmp_path)},
             slurm=SlurmConfig(cpus_per_task=1, time="00:05:00"))
    script = write_phase_script(s)
    job = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True,
                         check=True, env={**os.environ, **HAND, "LLMZ_PARENT_DUMP": str(dump)}
                         ).stdout.strip().split(";")[0]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (
            (s.node_dir / "status.json").exists() and record(script)["state"] != "running"):
        time.sleep(1)
    output = (s.node_dir / f"slurm-{job}.out").read_text()
    assert record(script)["state"] == "completed", output
    seen = dump.read_text()
    assert "LLMZ_PARENT_DUMP=" in seen and not [v for v in HAND.values() if v in seen], seen


def test_the_hint_to_rerun_elsewhere_keeps_slurms_notices(tmp_path):
    """Without --output, a rerun's log starts in the node folder and moves to DIR as the job
    starts: Slurm's own notices (a requeue's, a cancel's) went to the file it left behind."""
    phase = write_phase_script(spec(tmp_path)).read_text()
    assert "--export=ALL,LLMZ_RERUN_DIR=DIR --output=DIR/slurm-%j.out phase.sbatch" in phase
    assert "DIR made first" in phase
