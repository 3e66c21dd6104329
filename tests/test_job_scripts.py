"""The rendered job scripts as the clusters' own shells run them: older bash and util-linux
(Enterprise Linux 7 and 8), the user's setup lines, and the credentials of the shell that
starts a script by hand."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from llmzero_slurm.config import SlurmConfig
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
