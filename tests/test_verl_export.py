"""jobs/export_adapter.py against a checkpoint in verl 0.9.1's layout and a stub `verl.model_merger`."""
from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmzero_slurm.paths import JOBS
from verl_stubs import stub_merger, verl_checkpoint

EXPORT = JOBS / "export_adapter.py"


@pytest.fixture
def stub_env(tmp_path):
    return stub_merger(tmp_path, dict(os.environ))


def export_cmd(parent, step):
    return [sys.executable, str(EXPORT),
            "--actor-dir", str(parent / "ckpt" / f"global_step_{step}" / "actor"),
            "--target-dir", str(parent / "export" / f"global_step_{step}")]


def run_export(env, parent, step, *extra):
    return subprocess.run([*export_cmd(parent, step), *extra], env=env, capture_output=True,
                          text=True)


def test_merger_gets_the_right_paths_and_siblings_reuse_it(tmp_path, stub_env):
    env, log = stub_env
    parent = tmp_path / "nodes" / "0003"
    actor = verl_checkpoint(parent, 40, {"r": 64, "lora_alpha": 64, "task_type": "CAUSAL_LM"})
    first = run_export(env, parent, 40, "--lora-rank", "64")
    assert first.returncode == 0, first.stderr
    adapter = parent / "export" / "global_step_40" / "lora_adapter"
    assert first.stdout.splitlines()[-1] == str(adapter)
    assert json.loads((adapter / "adapter_config.json").read_text())["lora_alpha"] == 64
    assert sorted(p.name for p in adapter.parent.iterdir()) == ["lora_adapter"]
    [call] = [json.loads(line) for line in log.read_text().splitlines()]
    assert call[:3] == ["merge", "--backend", "fsdp"]
    assert call[call.index("--local_dir") + 1] == str(actor)
    assert Path(call[call.index("--target_dir") + 1]).parent == adapter.parent.parent
    second = run_export(env, parent, 40)
    assert second.returncode == 0 and "reusing" in second.stdout
    assert len(log.read_text().splitlines()) == 1


def test_the_export_takes_the_umask_so_a_colleagues_child_can_read_it(tmp_path, stub_env):
    """verl's merger writes adapter_model.safetensors through safetensors, 0600 whatever the
    umask: under a group's umask 002 a child phase a colleague resumed could not load it."""
    env, _ = stub_env
    parent = tmp_path / "p"
    verl_checkpoint(parent, 10, {"r": 8, "lora_alpha": 16})
    done = subprocess.run(["sh", "-c", 'umask 002 && exec "$@"', "sh", *export_cmd(parent, 10)],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    adapter = Path(done.stdout.splitlines()[-1])
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in adapter.iterdir()} == \
        {"adapter_config.json": "0o664", "adapter_model.safetensors": "0o664"}


def test_two_siblings_at_once_merge_once(tmp_path, stub_env):
    env, log = stub_env
    parent = tmp_path / "p"
    verl_checkpoint(parent, 10, {"r": 8, "lora_alpha": 16})
    env = {**env, "MERGER_SLEEP": "1"}
    procs = [subprocess.Popen(export_cmd(parent, 10), env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs[0].splitlines()[-1] == outs[1].splitlines()[-1]
    assert len(log.read_text().splitlines()) == 1


def test_adapter_with_lora_alpha_zero_is_refused(tmp_path, stub_env):
    env, _ = stub_env
    parent = tmp_path / "p"
    verl_checkpoint(parent, 5, meta=None)   # no lora_train_meta.json: verl's merger writes alpha 0
    out = run_export(env, parent, 5)
    assert out.returncode == 4
    assert "lora_alpha is 0" in out.stderr
    assert not (parent / "export" / "global_step_5").exists()
    assert not [p for p in (parent / "export").iterdir() if p.name.startswith(".")]


def test_missing_step_lists_the_saved_ones(tmp_path, stub_env):
    env, log = stub_env
    parent = tmp_path / "p"
    verl_checkpoint(parent, 20, {"r": 8, "lora_alpha": 8})
    verl_checkpoint(parent, 100, {"r": 8, "lora_alpha": 8})
    out = run_export(env, parent, 30)
    assert out.returncode == 2
    assert "global_step_30" in out.stderr and "global_step_20, global_step_100" in out.stderr
    assert not log.exists()


def test_rank_mismatch_and_merger_failure(tmp_path, stub_env):
    env, _ = stub_env
    parent = tmp_path / "p"
    verl_checkpoint(parent, 1, {"r": 16, "lora_alpha": 32})
    out = run_export(env, parent, 1, "--lora-rank", "64")
    assert out.returncode == 4 and "rank 16" in out.stderr
    out = run_export({**env, "MERGER_FAIL": "1"}, parent, 1)
    assert out.returncode == 3 and "model_merger exited with 1" in out.stderr
    assert not (parent / "export" / "global_step_1").exists()


def test_an_export_stopped_by_sigterm_leaves_no_base_model_copy(tmp_path, stub_env):
    """scancel or the time limit during the merge: Python's default SIGTERM runs no finally,
    and each stopped attempt left its temporary folder, a full copy of the base model."""
    env, _ = stub_env
    parent = tmp_path / "p"
    verl_checkpoint(parent, 10, {"r": 8, "lora_alpha": 16})
    err = tmp_path / "err.txt"
    with open(err, "w") as out:     # not a pipe: a merger left running would hold it open
        export = subprocess.Popen(export_cmd(parent, 10), stdout=out, stderr=out,
                                  env={**env, "MERGER_SLEEP_AFTER": "60"})
    deadline = time.monotonic() + 30
    while not list((parent / "export").glob(".global_step_10.tmp-*/model.safetensors")):
        assert export.poll() is None and time.monotonic() < deadline, err.read_text()
        time.sleep(0.05)
    export.send_signal(signal.SIGTERM)
    assert export.wait(timeout=30) == 128 + signal.SIGTERM, err.read_text()
    assert sorted(p.name for p in (parent / "export").iterdir()) == ["global_step_10.lock"]


def test_a_killed_exporters_folder_on_this_host_is_removed_before_the_next_export(tmp_path,
                                                                                   stub_env):
    """A SIGKILL (the node's OOM killer, Slurm's KillWait) runs no cleanup at all: each retry
    of the phase left one more base-model copy beside the export."""
    env, _ = stub_env
    parent = tmp_path / "p"
    verl_checkpoint(parent, 10, {"r": 8, "lora_alpha": 16})
    gone = subprocess.Popen(["true"])
    gone.wait()
    host = socket.gethostname()
    left = {name: parent / "export" / f".global_step_10.tmp-{name}"
            for name in (f"{host}-{gone.pid}", f"{host}-{os.getpid()}", f"other-host-{gone.pid}")}
    for folder in left.values():
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"base copy")
    done = run_export(env, parent, 10)
    assert done.returncode == 0, done.stderr
    assert not left[f"{host}-{gone.pid}"].exists()
    assert left[f"{host}-{os.getpid()}"].exists()      # a live exporter's, here the test's own
    assert left[f"other-host-{gone.pid}"].exists()     # whether it lives cannot be told here


def test_a_rename_that_fails_for_another_reason_than_a_sibling_says_so(tmp_path, stub_env):
    """Any failed rename read as a sibling's win: a leftover folder in the way (ENOTEMPTY) was
    reported, on every retry, as a merger that found no LoRA weights."""
    env, _ = stub_env
    parent = tmp_path / "p"
    verl_checkpoint(parent, 10, {"r": 8, "lora_alpha": 16})
    target = parent / "export" / "global_step_10"
    target.mkdir(parents=True)
    (target / "leftover.txt").write_text("not an export")
    out = run_export(env, parent, 10)
    assert out.returncode == 1, out.stderr
    assert f"{target}" in out.stderr and os.strerror(errno.ENOTEMPTY) in out.stderr
    assert "lora_rank" not in out.stderr
    assert sorted(p.name for p in target.parent.iterdir()) == ["global_step_10",
                                                               "global_step_10.lock"]


def test_a_model_with_its_own_code_is_merged_trusting_it(tmp_path, stub_env):
    """Review: verl's merger reads the checkpoint's model config with trust_remote_code off
    unless told --trust-remote-code, so for a model that needs its own code (the phase ran with
    actor_rollout_ref.model.trust_remote_code=true) every child's export failed, exit 3. The
    phase now passes the flag on; without it the merger runs as before."""
    env, log = stub_env
    parent = tmp_path / "nodes" / "0003"
    verl_checkpoint(parent, 40, {"r": 64, "lora_alpha": 64, "task_type": "CAUSAL_LM"})
    done = run_export(env, parent, 40, "--trust-remote-code")
    assert done.returncode == 0, done.stderr
    verl_checkpoint(parent, 50, {"r": 64, "lora_alpha": 64, "task_type": "CAUSAL_LM"})
    assert run_export(env, parent, 50).returncode == 0
    trusted, plain = [json.loads(line) for line in log.read_text().splitlines()]
    assert "--trust-remote-code" in trusted and "--trust-remote-code" not in plain
