"""The CPU trainer's hyperparameter defaults, in the shared vocabulary of `hparams.py`.

Torch-free so the controller and the agents can show what an unset key means. The values
are the "good settings" of the testbed: from a base at 0.55 they add about +0.15 to +0.2 of
2-digit addition accuracy in a hundred steps on every numeric path measured (32 prompts and a
temperature of 0.7 learn about twice as fast as 16 prompts at 1.0; benchmarks/cpu_trainer.py).
"""
from __future__ import annotations

from typing import Any, Mapping

from ..hparams import PARAMS

# The warm start's target for a user's own files (a built-in task brings its own BASE_BAND) and
# when it gives up; here, torch-free, so that cpu_grpo.py --help can state them.
WARM_START_BAND = (0.55, 0.70)
WARM_START_MAX_STEPS = 4000

DEFAULTS: dict[str, Any] = {
    "lr": 1e-3,
    "weight_decay": 0.0,
    "grad_clip": 1.0,
    "use_kl_loss": True,
    "kl_loss_coef": 0.04,
    "kl_loss_type": "low_var_kl",
    "use_kl_in_reward": False,
    "kl_in_reward_coef": 0.001,
    "clip_ratio_low": 0.2,
    "clip_ratio_high": 0.28,
    "temperature": 0.7,
    "entropy_coeff": 0.0,
    "norm_adv_by_std_in_grpo": True,
    "rollout_n": 8,
    "max_response_length": 8,
    "max_prompt_length": 32,
    "total_epochs": 1,
    "total_training_steps": None,
    "save_freq": 25,
    "test_freq": 10,
    "seed": 1,
    "train_batch_size": 32,
    "ppo_mini_batch_size": 8,
    "log_prob_micro_batch_size_per_gpu": 256,
    "lora_rank": 8,
    "lora_alpha": 16.0,
    "target_modules": "all-linear",
}


def with_defaults(given: Mapping[str, Any]) -> dict[str, Any]:
    """`given` over DEFAULTS. An unset micro-batch means the whole mini-batch in one pass, or
    the largest part of it that divides it evenly and stays within the vocabulary's bound."""
    full = {**DEFAULTS, **given}
    if "ppo_micro_batch_size_per_gpu" not in full:
        try:
            sequences = int(full["ppo_mini_batch_size"]) * int(full["rollout_n"])
        except (TypeError, ValueError):
            return full   # validation reports the bad value by name
        cap = PARAMS["ppo_micro_batch_size_per_gpu"].high
        limit = sequences if cap is None else min(sequences, int(cap))
        full["ppo_micro_batch_size_per_gpu"] = max(
            d for d in range(1, limit + 1) if sequences % d == 0)
    return full
