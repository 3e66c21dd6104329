"""A site's install: a wheel (what `pip install .` builds) holds the templates, the job programs
and the commands, and a phase script rendered from that install names its own files."""
from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from llmzero_slurm.cli.__main__ import COMMANDS
from llmzero_slurm.paths import ROOT
from test_verl_phase import HP as VERL_HPARAMS

# What the build reads; a copy keeps build/ and *.egg-info out of the checkout.
BUILD_INPUTS = ("setup.cfg", "pyproject.toml", "README.md", "llmzero_slurm", "templates", "jobs")

RENDER = """
import json, sys
from pathlib import Path
from llmzero_slurm import paths
from llmzero_slurm.config import SlurmConfig, TaskConfig
from llmzero_slurm.render import PhaseSpec, render
from verl_stubs import verl_checkpoint
site, nodes = Path(sys.argv[1]), Path(sys.argv[2])
assert Path(paths.__file__).is_relative_to(site), paths.__file__
parent = nodes / "0003"
verl_checkpoint(parent, 20, {"r": 64, "lora_alpha": 64, "task_type": "CAUSAL_LM"})
(parent / "verl_step_offset").write_text("10")
data = [str(nodes / "data.parquet")]
for spec in (PhaseSpec("exp1", 7, "evolve", nodes / "0007", "tok7", {"lr": 1e-5},
                       task=TaskConfig(builtin="addition")),
             PhaseSpec("exp1", 8, "evolve", nodes / "0008", "tok8", json.loads(sys.argv[3]),
                       backend="verl", slurm=SlurmConfig(gpus_per_node=2), model_path="Qwen/Qwen3-8B",
                       task=TaskConfig(train_files=data, val_files=data, reward_path=data[0]),
                       resume_dir=parent, resume_step=30)):
    print(render(spec) + "\f")
"""


def files(folder: Path, pattern: str) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob(pattern)}


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
    assert files(package / "templates", "*.j2") == files(ROOT / "templates", "*.j2")
    jobs = {f"jobs/{name}" for name in files(ROOT / "jobs", "*.py")}
    assert files(package, "*.py") == files(ROOT / "llmzero_slurm", "*.py") | jobs

    entries = configparser.ConfigParser()
    entries.read(next(site.glob("*.dist-info")) / "entry_points.txt")
    assert sorted(entries["console_scripts"]) == sorted(f"llmzero-{c}" for c in COMMANDS)

    env = {**os.environ, "PYTHONPATH": f"{site}:{ROOT / 'tests'}"}
    rendered = subprocess.run([sys.executable, "-c", RENDER, str(site), str(tmp_path / "nodes"),
                               json.dumps(VERL_HPARAMS)],
                              env=env, cwd=tmp_path, capture_output=True, text=True)
    assert rendered.returncode == 0, rendered.stderr
    cpu, verl = rendered.stdout.split("\f")[:2]
    assert f"{package}/jobs/cpu_grpo.py" in cpu and f"llmz_install={site}\n" in cpu
    # every program the verl script runs, its variables as the script exports them
    exported = dict(re.findall(r"^export (LLMZ_\w+)=(\S+)$", verl, re.M))
    programs = re.findall(r'"\$(LLMZ_\w+)/([^"$]+\.py)"', verl)
    assert {Path(name).name for _, name in programs} >= {"export_adapter.py", "metrics_copy.py"}
    assert [f"${v}/{p}" for v, p in programs if not Path(exported[v], p).is_file()] == []

    module, _, function = entries["console_scripts"]["llmzero-status"].partition(":")
    run = subprocess.run([sys.executable, "-c", f"import sys; sys.argv[0] = 'llmzero-status'; "
                          f"from {module} import {function}; {function}()", "--help"],
                         env=env, cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.startswith("usage: llmzero-status"), run.stderr
