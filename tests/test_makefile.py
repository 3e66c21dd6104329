"""What the Makefile's entry points show a user on a fresh machine."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from llmzero_slurm.paths import ROOT


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_install_says_what_it_installs_before_the_silent_torch_download(tmp_path):
    """`make search` installs torch with `pip -q`: a first run sat silent for minutes with no
    word of what it was doing. A line before it says what it installs and that it can take
    minutes."""
    printed = subprocess.run(["make", "-n", f"VENV={tmp_path}/venv", "venv"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    commands = printed.replace("\\\n", " ").splitlines()
    torch = next(i for i, line in enumerate(commands) if " torch " in line and "pip" in line)
    said = [line for line in commands[:torch] if line.startswith("echo")]
    assert said and "torch" in said[-1] and "minutes" in said[-1]
