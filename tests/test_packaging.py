"""A site's install: a wheel (what `pip install .` builds) holds the templates, the job programs
and the commands, and a phase script rendered from that install names its own files."""
from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from llmzero_slurm.cli.__main__ import COMMANDS
from llmzero_slurm.paths import ROOT

# What the build reads; a copy keeps build/ and *.egg-info out of the checkout.
BUILD_INPUTS = ("setup.cfg", "pyproject.toml", "README.md", "llmzero_slurm",
                "templates", "jobs")

RENDER = """
import sys
from pathlib import Path
from llmzero_slurm import paths
from llmzero_slurm.config import TaskConfig
from llmzero_slurm.render import PhaseSpec, render
site = Path(sys.argv[1])
assert Path(paths.__file__).is_relative_to(site), paths.__file__
assert paths.TEMPLATES.is_relative_to(site) and paths.JOBS.is_relative_to(site)
assert (paths.TEMPLATES / "phase" / "cpu.sbatch.j2").is_file()
spec = PhaseSpec("exp1", 7, "evolve", Path(sys.argv[2]), "tok-abc", {"lr": 1e-5},
                 task=TaskConfig(builtin="addition"))
print(render(spec))
"""


def test_a_wheel_ships_the_templates_jobs_and_commands(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif (ROOT / name).exists():
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "-w", str(tmp_path / "dist"), str(source)], check=True)
    site = tmp_path / "site"
    wheel, = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)       # a pure-Python wheel's install, less its scripts
    assert not (site / "templates").exists() and not (site / "jobs").exists()   # not top level
    package = site / "llmzero_slurm"
    def templates(folder: Path) -> set[str]:
        return {p.relative_to(folder).as_posix() for p in folder.rglob("*.j2")}
    assert templates(package / "templates") == templates(ROOT / "templates")
    def modules(folder: Path) -> set[str]:
        return {p.relative_to(folder).as_posix() for p in folder.rglob("*.py")}
    assert modules(package) == modules(ROOT / "llmzero_slurm") | {f"jobs/{m}" for m in modules(ROOT / "jobs")}

    entries = configparser.ConfigParser()
    entries.read(next(site.glob("*.dist-info")) / "entry_points.txt")
    assert sorted(entries["console_scripts"]) == sorted(f"llmzero-{c}" for c in COMMANDS)

    env = {**os.environ, "PYTHONPATH": str(site)}
    node = tmp_path / "nodes" / "0007"
    script = subprocess.run([sys.executable, "-c", RENDER, str(site), str(node)], env=env,
                            cwd=tmp_path, capture_output=True, text=True)
    assert script.returncode == 0, script.stderr
    assert f"{package}/jobs/cpu_grpo.py" in script.stdout
    assert f"llmz_install={site}\n" in script.stdout

    module, _, function = entries["console_scripts"]["llmzero-status"].partition(":")
    run = subprocess.run([sys.executable, "-c", f"import sys; sys.argv[0] = 'llmzero-status'; "
                          f"from {module} import {function}; {function}()", "--help"],
                         env=env, cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.startswith("usage: llmzero-status"), run.stderr
