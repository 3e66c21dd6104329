"""Stand-ins for verl's GPU programs in tests: only what cannot run without a GPU is replaced.

`stub_merger` puts a real `verl.model_merger` module on PYTHONPATH that records its arguments
and writes what verl's merger writes (lora_adapter/ with adapter_config.json, plus a copy of
the base weights), taking lora_alpha from the checkpoint's lora_train_meta.json the way verl
does (0 when absent). `verl_checkpoint` lays out a checkpoint as verl 0.9.1 saves it.
"""
from __future__ import annotations

import json
from pathlib import Path

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


def stub_merger(tmp_path: Path, env: dict) -> tuple[dict, Path]:
    """An environment whose `python -m verl.model_merger` is the stub; and the stub's call log."""
    root = tmp_path / "stub"
    (root / "verl" / "model_merger").mkdir(parents=True)
    (root / "verl" / "__init__.py").write_text("")
    (root / "verl" / "model_merger" / "__init__.py").write_text("")
    (root / "verl" / "model_merger" / "__main__.py").write_text(STUB)
    log = tmp_path / "merger.log"
    return {**env, "PYTHONPATH": str(root), "MERGER_LOG": str(log)}, log


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
