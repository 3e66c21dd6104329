"""A run's inputs from outside it (the reward file, the parquet data) are fingerprinted when
it is created and compared on every resume: scores measured with another reward or other data
must not join its search tree."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from llmzero_slurm.cli.start import open_or_create, parse_args
from llmzero_slurm.config import parse_config
from llmzero_slurm.errors import ConfigError, LLMZeroError, StateError
from llmzero_slurm.paths import ROOT
from llmzero_slurm.store.inputs import INPUTS

from conftest import verl_task_files

SCORE = ("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
         "    return float(solution_str == str(ground_truth))\n")


def cli(name: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLMZERO_PYTHON": sys.executable}
    env.pop("ANTHROPIC_API_KEY", None)
    return subprocess.run([str(ROOT / "bin" / f"llmzero-{name}"), *args], capture_output=True,
                          text=True, env=env, timeout=300)


def file_run(tmp_path: Path, train: Path | None = None) -> tuple[Path, dict[str, Path], Path]:
    """A local run of the addition task given as files (train: a file or folder of parquet);
    its run directory, data files and experiment.yaml."""
    files = verl_task_files(tmp_path / "data")
    reward = tmp_path / "reward.py"
    reward.write_text(SCORE)
    files["reward"] = reward
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "scheduler": "local", "task": {
        "train_files": [str(train or files["train"])], "val_files": [str(files["val"])],
        "test_files": [str(files["test"])], "reward_path": str(reward),
        "warm_start": {"steps": 0}}}))
    store = open_or_create(parse_args([str(path), "--run-dir", str(tmp_path / "run")]))
    return store.root, files, path


def snapshot(run: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != "tree.lock"}


def test_a_resume_after_the_reward_file_was_edited_is_refused_before_anything_is_written(tmp_path):
    """User report: the reward file was edited and the run resumed; on the cpu backend evolve
    phases failed (another base, their adapter refused), on verl old and new scores mixed in
    one tree. The resume now refuses, exit 2, naming the file and the choice."""
    run, files, path = file_run(tmp_path)
    assert (run / INPUTS).exists()
    files["reward"].write_text(SCORE.replace("==", "!="))
    before = snapshot(run)
    for args in ([str(run)], [str(run), "--detach"], [str(run), "--submit"],
                 [str(path), "--run-dir", str(run)]):
        done = cli("start", *args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        said = done.stderr
        assert f"task.reward_path {files['reward']}" in said and "sha256" in said, said
        assert "put" in said and "back as it was" in said and "new run" in said, said
        assert snapshot(run) == before
    # read-only commands never refuse for it
    assert cli("status", str(run)).returncode == 0
    assert cli("report", str(run)).returncode == 0
    stop = cli("stop", str(run))
    assert stop.returncode == 0 and "no controller is running" in stop.stdout
    # put back, the run resumes
    files["reward"].write_text(SCORE)
    assert open_or_create(parse_args([str(run)])).root == run


def test_check_of_a_run_directory_says_an_input_changed(tmp_path):
    """A user who edits the reward and runs --check on the run was told all is well; the
    resume then refused."""
    run, files, _ = file_run(tmp_path)
    files["reward"].write_text(SCORE + "# edited\n")
    done = cli("start", str(run), "--check")
    assert done.returncode == 2, done.stdout + done.stderr
    assert any(line.startswith("[FAIL] inputs since the run was created:") for line in
               done.stdout.splitlines()), done.stdout
    files["reward"].write_text(SCORE)
    done = cli("start", str(run), "--check")
    assert "[ok] inputs since the run was created: the reward and data files are as" \
        in done.stdout, done.stdout


def test_a_replaced_data_file_is_refused_naming_what_changed(tmp_path):
    run, files, _ = file_run(tmp_path)
    table = pq.read_table(files["val"])
    pq.write_table(table.slice(0, len(table) - 1), files["val"])
    with pytest.raises(LLMZeroError) as err:
        open_or_create(parse_args([str(run)]))
    said = str(err.value)
    assert err.value.exit_code == 2 and f"task.val_files {files['val']}" in said, said
    assert "bytes" in said and "footer" in said and "train_files" not in said, said


def test_a_file_of_a_parquet_folder_replaced_or_added_is_refused(tmp_path):
    folder = tmp_path / "train"
    folder.mkdir()
    table = pq.read_table(verl_task_files(tmp_path / "parts")["train"])
    pq.write_table(table.slice(0, 2000), folder / "a.parquet")
    pq.write_table(table.slice(2000), folder / "b.parquet")
    run, _, _ = file_run(tmp_path, train=folder)
    assert open_or_create(parse_args([str(run)])).root == run   # unchanged: resumes
    pq.write_table(table.slice(0, 10), folder / "c.parquet")
    with pytest.raises(LLMZeroError, match=r"task.train_files .*train: c.parquet added"):
        open_or_create(parse_args([str(run)]))
    (folder / "c.parquet").unlink()
    pq.write_table(table.slice(2000, 1000), folder / "b.parquet")
    with pytest.raises(LLMZeroError, match=r"b.parquet: size \d+ -> \d+ bytes"):
        open_or_create(parse_args([str(run)]))


def test_a_create_cut_short_before_its_record_leaves_no_run_to_resume_unchecked(tmp_path,
                                                                              monkeypatch):
    """Review: inputs.json was written after meta.json; a start killed between the two left a
    run that every later start resumed with its inputs unchecked. The record is now part of the
    create: cut short, the folder is a half-made run, and the next start makes it whole."""
    from llmzero_slurm.store import inputs

    def killed(*args, **kwargs):
        raise KeyboardInterrupt
    with monkeypatch.context() as patched:
        patched.setattr(inputs, "write_json", killed)
        with pytest.raises(KeyboardInterrupt):
            file_run(tmp_path)
    run, files, _ = file_run(tmp_path)
    assert (run / INPUTS).exists()
    files["reward"].write_text(SCORE.replace("==", "!="))
    assert cli("start", str(run)).returncode == 2


def test_a_run_from_before_the_record_and_one_whose_file_is_gone_resume(tmp_path, capsys):
    """A run made before this release has no record: resumed unchecked, as before. A file gone
    is left to the phases to name (a moved file never locks a user out of the run)."""
    run, files, _ = file_run(tmp_path)
    files["val"].unlink()
    assert open_or_create(parse_args([str(run)])).root == run
    assert f"{files['val']} is not there" in capsys.readouterr().out
    (run / INPUTS).unlink()
    files["reward"].write_text(SCORE.replace("==", "!="))
    assert open_or_create(parse_args([str(run)])).root == run


def test_a_damaged_record_is_named_with_the_way_out(tmp_path):
    run, _, _ = file_run(tmp_path)
    (run / INPUTS).write_text('{"version": 1, "files": [{}]}')
    with pytest.raises(StateError, match="removed, the run resumes with its inputs unchecked"):
        open_or_create(parse_args([str(run)]))


def test_a_builtin_task_records_nothing(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("name: x\nscheduler: local\ntask:\n  builtin: addition\n")
    store = open_or_create(parse_args([str(path), "--run-dir", str(tmp_path / "run")]))
    assert not (store.root / INPUTS).exists()
    assert open_or_create(parse_args([str(store.root)])).root == store.root


@pytest.mark.parametrize("value", ["none", None, 0])
def test_warm_start_none_says_to_write_steps_0(value):
    with pytest.raises(ConfigError, match=r"task.warm_start.*\{steps: 0\}"):
        parse_config({"name": "x", "task": {"builtin": "addition", "warm_start": value}})


def test_checks_warm_start_refusal_names_the_config_key_not_the_trainers_flag(tmp_path):
    from llmzero_slurm.controller import data_checks
    from llmzero_slurm.errors import DataError
    from llmzero_slurm.tasks.dataset import materialize
    files = materialize("addition", tmp_path / "data")
    reward = tmp_path / "reward.py"
    reward.write_text(SCORE.replace("str(ground_truth)", "f'#### {ground_truth}'"))
    task = {"train_files": [str(files["train"])], "val_files": [str(files["val"])],
            "test_files": [str(files["test"])], "reward_path": str(reward)}
    with pytest.raises(DataError) as err:
        data_checks.check_data(parse_config({"name": "x", "task": task}))
    said = str(err.value)
    assert "task.warm_start.steps (0 for none: warm_start: {steps: 0})" in said, said
    assert "--warm-start" not in said


def test_a_data_file_replaced_while_the_run_runs_stops_it_before_its_next_phase(tmp_path):
    """User report: the training file was rewritten while a search ran; each phase created
    after that failed with 'adapter was trained on base X, this phase uses Y' (exit 2) and the
    search spent its budget on them, never naming the file. The controller now compares the
    record before it creates each phase and stops as a resume would, naming the file; the phase
    that ran keeps its record."""
    import io

    from llmzero_slurm.controller.controller import Controller
    from llmzero_slurm.errors import InputsChangedError
    from llmzero_slurm.methods.base import MethodContext, PhasePlan
    from llmzero_slurm.search.policy import Action
    from llmzero_slurm.search.tree import Kind, Status
    from llmzero_slurm.store.run_store import RunStore
    from controller_doubles import ScriptedMethod, ScriptedScheduler
    from metrics_files import val_rows, write_metrics

    run, files, _ = file_run(tmp_path)
    hp = {"lr": 1e-3, "total_training_steps": 10, "save_freq": 10}

    def trains_while_the_user_edits(node) -> None:
        write_metrics(node.metrics_file, val_rows({10: 0.5}), append=True)
        (node.ckpt / "global_step_10").mkdir(parents=True)
        table = pq.read_table(files["train"])
        pq.write_table(table.slice(1), files["train"])

    def evolve(tree):
        return None if tree[0].status.pending else PhasePlan(
            Action(Kind.EVOLVE, 0), {**hp, "lr": 5e-4}, 10, "evolve")

    store = RunStore.open(run)
    sched = ScriptedScheduler([["RUNNING", trains_while_the_user_edits, "COMPLETED"],
                               ["RUNNING", "FAILED"]])   # what the cpu phase did
    method = ScriptedMethod(MethodContext(store.config, store.node_dir, store.proposals_dir), [
        lambda tree: PhasePlan(Action(Kind.SCRATCH, None), dict(hp), diagnosis="root"), evolve])
    ctl = Controller(store, sched, method, poll_s=0.001, out=io.StringIO())
    with pytest.raises(InputsChangedError) as err:
        ctl.run()
    said = str(err.value)
    assert f"task.train_files {files['train']}" in said and "footer" in said, said
    assert "no phase was created" in said, said
    tree = store.load_tree()
    assert len(tree) == 1 and tree[0].status is Status.COMPLETED
    assert tree[0].results.best_val == 0.5 and len(sched.jobs) == 1
