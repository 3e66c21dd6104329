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
p.add_argument("--target_dir"); p.add_argument("--trust-remote-code", action="store_true")
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
os.chmod(os.path.join(out, "adapter_model.safetensors"), 0o600)   # as safetensors 0.8 leaves it
open(os.path.join(a.target_dir, "model.safetensors"), "wb").write(b"base copy")
time.sleep(float(os.environ.get("MERGER_SLEEP_AFTER", "0")))    # still writing, for a signal
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


# The CPU stand-in for a verl environment on a compute node (`llmzero-start --check --on-cluster`).
# verl 0.9.1 is installed --no-deps in CI: its Hydra config is real, but `import verl` needs Ray,
# tensordict and the GPU stack. The stand-in is a `verl` package whose config directory is the
# installed verl's own (so composition is real), with the two modules the check calls besides:
# need_critic/need_reference_policy (verl's logic, without its Ray worker import) and a
# validate_config that applies verl's first two rules with verl's messages and logs each call.
STANDIN_PPO_UTILS = '''
def need_reference_policy(config):
    return config.algorithm.get("use_kl_in_reward", False) or config.actor_rollout_ref.actor.use_kl_loss


def need_critic(config):
    if config.critic.enable is not None:
        return bool(config.critic.enable)
    return config.algorithm.adv_estimator == "gae"
'''
STANDIN_CONFIG = '''
import json, os


def validate_config(config, use_reference_policy, use_critic):
    n_gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
    with open(os.environ["VERL_STANDIN_LOG"], "a") as fh:
        fh.write(json.dumps({"n_gpus": n_gpus, "use_reference_policy": bool(use_reference_policy),
                             "use_critic": bool(use_critic),
                             "lora_adapter_path": config.actor_rollout_ref.model.lora_adapter_path,
                             "val_before_train": config.trainer.val_before_train}) + "\\n")
    real_train_batch_size = config.data.train_batch_size * config.actor_rollout_ref.rollout.n
    assert real_train_batch_size % n_gpus == 0, (
        f"real_train_batch_size ({real_train_batch_size}) must be divisible by minimal possible "
        f"batch size ({n_gpus})")
    rollout = config.actor_rollout_ref.rollout
    if rollout.log_prob_micro_batch_size is not None and rollout.log_prob_micro_batch_size_per_gpu is not None:
        raise ValueError("[actor_rollout_ref.rollout] You have set both 'log_prob_micro_batch_size' "
                         "AND 'log_prob_micro_batch_size_per_gpu'.")
'''


def stub_verl_environment(root: Path, real_config_dir: Path) -> Path:
    """A folder to put first on PYTHONPATH: the stand-in `verl` (version 0.9.1) and an empty
    `vllm` (the rollout engine is only looked up, never imported, by the check)."""
    files = {"verl/__init__.py": '"""CPU stand-in for verl 0.9.1 (tests/verl_stubs.py)."""\n'
                                 '__version__ = "0.9.1"\n',
             "verl/trainer/__init__.py": "", "verl/trainer/ppo/__init__.py": "",
             "verl/trainer/ppo/utils.py": STANDIN_PPO_UTILS, "verl/utils/__init__.py": "",
             "verl/utils/config.py": STANDIN_CONFIG, "vllm/__init__.py": ""}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "verl" / "trainer" / "config").symlink_to(real_config_dir, target_is_directory=True)
    return root
