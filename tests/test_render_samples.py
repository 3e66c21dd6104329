"""`llmzero-start CONFIG --check --render DIR`: the phase scripts a search would submit, written
where a user can read and diff them, before anything is created (no run folder, no node)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from llmzero_slurm.cli.start import main
from llmzero_slurm.config import parse_config
from llmzero_slurm.errors import UsageError
from llmzero_slurm.paths import ROOT
from llmzero_slurm.tasks import reward_path
from conftest import verl_task_files

NAMES = ["first-phase.sbatch", "evolve-sample.sbatch", "debug-sample.sbatch"]


def config_file(tmp_path: Path, name: str) -> Path:
    config = yaml.safe_load((ROOT / "examples" / name).read_text())
    config["scheduler"] = "local"
    if config["backend"] == "verl":
        files = verl_task_files(tmp_path / "data")
        config["task"].update(train_files=[str(files["train"])], val_files=[str(files["val"])],
                              test_files=[str(files["test"])],
                              reward_path=str(reward_path("addition")))
        config["trainer"]["test_data_sources"] = ["addition_test"]
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("name", ["cpu-addition.yaml", "verl-qwen3-lora.yaml"])
def test_render_writes_the_scripts_and_creates_nothing_else(tmp_path, monkeypatch, capsys, name):
    """A verl user migrating a launch script wanted to read, and diff, the script the search
    submits before anything is created; --check rendered three and threw them away."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    path = config_file(tmp_path, name)
    before = sorted(p for p in tmp_path.rglob("*"))
    main([str(path), "--check", "--render", "scripts"])
    out = capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "scripts").iterdir()) == sorted(NAMES)
    assert sorted(p for p in tmp_path.rglob("*") if "scripts" not in p.parts) == before
    run_nodes = (tmp_path / "runs" / parse_config(yaml.safe_load(path.read_text())).name
                 / "nodes").resolve()
    for script in NAMES:
        file = tmp_path / "scripts" / script
        assert str(file.resolve()) in out
        text = file.read_text()
        assert subprocess.run(["bash", "-n", str(file)]).returncode == 0
        assert text.splitlines()[1].startswith("# rendered by llmzero-start --check --render")
        assert f"{run_nodes}/0000" in text and str(tmp_path / "scripts") not in text
        # Submitted by mistake, a sample refuses before its first command (#SBATCH lines kept).
        done = subprocess.run(["bash", str(file)], capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "1"})
        assert done.returncode == 2 and "a sample rendered by llmzero-start" in done.stderr
    if name.startswith("verl"):
        text = (tmp_path / "scripts" / "first-phase.sbatch").read_text()
        overrides = yaml.safe_load(path.read_text())["trainer"]["overrides"]
        lines = [line.strip() for line in text.splitlines()]
        assert overrides and all(f"{o} \\" in lines for o in overrides), text
        assert any(re.fullmatch(r"actor_rollout_ref\.model\.lora_rank=\S+ \\", line)
                   for line in lines), text


def test_render_refuses_a_folder_that_is_not_empty_and_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = config_file(tmp_path, "cpu-addition.yaml")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "launch.sh").write_text("old\n")
    with pytest.raises(UsageError, match=r"mine is not empty \(it holds launch.sh\)"):
        main([str(path), "--check", "--render", "mine"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml", "mine"]


def test_render_goes_with_check(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(tmp_path / "exp.yaml"), "--render", "x"])
    assert "--render goes with --check" in capsys.readouterr().err


def test_render_refuses_a_folder_inside_the_run_folder(tmp_path, monkeypatch, capsys):
    """Written there, the scripts would make the run's folder before its start, which then
    finds a folder that is not a run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    path = config_file(tmp_path, "cpu-addition.yaml")
    assert main([str(path), "--check", "--render", "runs/cpu-addition/scripts"]) == 2
    assert ("[FAIL] rendered scripts: runs/cpu-addition/scripts is inside runs/cpu-addition, "
            "the folder of the run") in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]
