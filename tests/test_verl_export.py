"""jobs/export_adapter.py against a checkpoint in verl 0.9.1's layout and a stub `verl.model_merger`.

The stub is a real module on PYTHONPATH that records its arguments and writes what verl's
merger writes (lora_adapter/ with adapter_config.json, plus a copy of the base weights),
taking lora_alpha from the checkpoint's lora_train_meta.json the way verl does (0 if absent).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmzero_slurm.paths import JOBS

EXPORT = JOBS / "export_adapter.py"

STUB = '''
import argparse, json, os, sys, time
p = argparse.ArgumentParser()
p.add_argument("op"); p.add_argument("--backend"); p.add_argument("--local_dir")
p.add_argument("--target_dir")
a = p.parse_args()
with open(os.environ["MERGER_LOG"], "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
time.sleep(float(os.environ.get("MERGER_SLEEP", "0")))
if os.environ.get("MERGER_FAIL"):
    sys.exit("out of memory")
meta_file = os.path.join(a.local_dir, "lora_train_meta.json")
meta = json.load(open(meta_file)) if os.path.exists(meta_file) else {}
out = os.path.join(a.target_dir, "lora_adapter")
os.makedirs(out)
json.dump({"peft_type": "LORA", "r": meta.get("r", 8), "lora_alpha": meta.get("lora_alpha", 0),
           "target_modules": ["q_proj"]}, open(os.path.join(out, "adapter_config.json"), "w"))
open(os.path.join(out, "adapter_model.safetensors"), "wb").write(b"weights")
open(os.path.join(a.target_dir, "model.safetensors"), "wb").write(b"base copy")
'''


@pytest.fixture
def stub_env(tmp_path):
    root = tmp_path / "stub"
    (root / "verl" / "model_merger").mkdir(parents=True)
    (root / "verl" / "__init__.py").write_text("")
    (root / "verl" / "model_merger" / "__init__.py").write_text("")
    (root / "verl" / "model_merger" / "__main__.py").write_text(STUB)
    log = tmp_path / "merger.log"
    return {**os.environ, "PYTHONPATH": str(root), "MERGER_LOG": str(log)}, log


def verl_checkpoint(parent: Path, step: int, meta: dict | None) -> Path:
    """A checkpoint folder as verl 0.9.1's FSDP checkpoint manager leaves it (2 ranks)."""
    actor = parent / "ckpt" / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "huggingface" / "config.json").write_text('{"model_type": "qwen3"}')
    (actor / "fsdp_config.json").write_text('{"FSDP_version": 2, "world_size": 2}')
    for rank in range(2):
        for kind in ("model", "optim", "extra_state"):
            (actor / f"{kind}_world_size_2_rank_{rank}.pt").write_bytes(b"\0")
    if meta is not None:
        (actor / "lora_train_meta.json").write_text(json.dumps(meta))
    (parent / "ckpt" / "latest_checkpointed_iteration.txt").write_text(str(step))
    return actor


def run_export(env, parent, step, *extra):
    return subprocess.run([sys.executable, str(EXPORT), "--parent-dir", str(parent),
                           "--step", str(step), *extra], env=env, capture_output=True, text=True)


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


def test_two_siblings_at_once_merge_once(tmp_path, stub_env):
    env, log = stub_env
    parent = tmp_path / "p"
    verl_checkpoint(parent, 10, {"r": 8, "lora_alpha": 16})
    env = {**env, "MERGER_SLEEP": "1"}
    cmd = [sys.executable, str(EXPORT), "--parent-dir", str(parent), "--step", "10"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
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
