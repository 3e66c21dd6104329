"""Which verl 0.9.1 keys read each hyperparameter of the shared vocabulary, and which keys
llmzero sets per phase (read from verl's source; check again when the version changes)."""
from __future__ import annotations

FILE_LOGGER_ENV = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"
VERL_METRICS_FILE = "verl_metrics.jsonl"   # verl's file logger, in the node directory
STEP_OFFSET_FILE = "verl_step_offset"      # a verl phase's first global step, written by its job
# verl's checkpoint tracker, written after a step's shards: steps above it are half-written.
TRACKER_FILE = "latest_checkpointed_iteration.txt"

# trainer.logger's names (verl/utils/tracking.py Tracking.supported_backend): fit() asserts
# on any other, after the job's queue wait and model load.
LOGGERS = ("wandb", "mlflow", "swanlab", "vemlp_wandb", "tensorboard", "console", "clearml",
           "trackio", "file", "rl_insight")

# Shared vocabulary name -> the verl 0.9.1 keys that read it (read from verl's source).
HPARAM_KEYS: dict[str, tuple[str, ...]] = {
    "lr": ("actor_rollout_ref.actor.optim.lr",),
    "weight_decay": ("actor_rollout_ref.actor.optim.weight_decay",),
    "grad_clip": ("actor_rollout_ref.actor.optim.clip_grad",),
    "kl_loss_coef": ("actor_rollout_ref.actor.kl_loss_coef",),
    "kl_loss_type": ("actor_rollout_ref.actor.kl_loss_type",),
    "use_kl_loss": ("actor_rollout_ref.actor.use_kl_loss",),
    "use_kl_in_reward": ("algorithm.use_kl_in_reward",),
    "kl_in_reward_coef": ("algorithm.kl_ctrl.kl_coef",),
    "clip_ratio_low": ("actor_rollout_ref.actor.clip_ratio_low",),
    "clip_ratio_high": ("actor_rollout_ref.actor.clip_ratio_high",),
    "temperature": ("actor_rollout_ref.rollout.temperature",),
    "entropy_coeff": ("actor_rollout_ref.actor.entropy_coeff",),
    "norm_adv_by_std_in_grpo": ("algorithm.norm_adv_by_std_in_grpo",),
    "rollout_n": ("actor_rollout_ref.rollout.n",),
    "max_response_length": ("data.max_response_length",),
    "max_prompt_length": ("data.max_prompt_length",),
    "total_epochs": ("trainer.total_epochs",),
    "total_training_steps": ("trainer.total_training_steps",),
    "save_freq": ("trainer.save_freq",),
    "test_freq": ("trainer.test_freq",),
    "seed": ("data.seed", "actor_rollout_ref.rollout.seed"),
    "train_batch_size": ("data.train_batch_size",),
    "ppo_mini_batch_size": ("actor_rollout_ref.actor.ppo_mini_batch_size",),
    "ppo_micro_batch_size_per_gpu": ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",),
    "log_prob_micro_batch_size_per_gpu": (
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"),
    "lora_rank": ("actor_rollout_ref.model.lora_rank",),
    "lora_alpha": ("actor_rollout_ref.model.lora_alpha",),
    "target_modules": ("actor_rollout_ref.model.target_modules",),
    "gpu_memory_utilization": ("actor_rollout_ref.rollout.gpu_memory_utilization",),
    "tensor_model_parallel_size": ("actor_rollout_ref.rollout.tensor_model_parallel_size",),
    "max_num_seqs": ("actor_rollout_ref.rollout.max_num_seqs",),
}

# Keys set per phase by this module; a raw override of one would silently undo the search.
# Each with what to write instead ({value}: the override's value), for a pasted launch script.
_DROP = "drop it"
PHASE_KEYS: dict[str, str] = {
    "algorithm.adv_estimator": f"every phase is GRPO (grpo): {_DROP}",
    "actor_rollout_ref.rollout.name": "set trainer.rollout_engine: {value} (vllm or sglang)",
    "actor_rollout_ref.model.path": "set model_path: {value}",
    "actor_rollout_ref.model.lora_adapter_path": (
        "each evolve phase starts from its parent's exported adapter: " + _DROP),
    "data.train_files": "list them in task.train_files",
    "data.val_files": "list them in task.val_files (held-out test rows in task.test_files)",
    "reward.custom_reward_function.path": "set task.reward_path: {value}",
    "reward.custom_reward_function.name": "set task.reward_name: {value}",
    "trainer.logger": "console and file always log: set trainer.extra_loggers: {value}",
    "trainer.project_name": f"every phase logs as llmzero-<name>, from the config's name: {_DROP}",
    "trainer.experiment_name": f"every phase logs as node-NNNN, its node's number: {_DROP}",
    "trainer.default_local_dir": f"every phase checkpoints in its node folder's ckpt/: {_DROP}",
    "trainer.resume_mode": f"auto, so that a requeued phase resumes its checkpoint: {_DROP}",
    "trainer.val_before_train": (
        "a scratch phase validates the base model (the gain over it that llmzero-status and the "
        f"report state), an evolve phase carries its parent's scores at its start: {_DROP}"),
    "trainer.nnodes": "set slurm.nodes: {value}",
    "trainer.n_gpus_per_node": "set slurm.gpus_per_node: {value}",
    FILE_LOGGER_ENV.lstrip("+"): f"the phase's metrics are copied from this file: {_DROP}",
}

# Keys whose verl default interpolates a managed key (${oc.select:<that key>,...} in verl's
# config): a raw override would freeze them while the search changes the key they follow.
# Left out: names (trace.*, prometheus.served_model_name) and the distillation teacher's
# inference settings, a model of its own.
FOLLOWERS: dict[str, str] = {
    "actor_rollout_ref.rollout.prompt_length": "data.max_prompt_length",
    "actor_rollout_ref.rollout.response_length": "data.max_response_length",
    "actor_rollout_ref.actor.rollout_n": "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.ref.rollout_n": "actor_rollout_ref.rollout.n",
    "critic.rollout_n": "actor_rollout_ref.rollout.n",
    "critic.ppo_mini_batch_size": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.rollout.n_gpus_per_node": "trainer.n_gpus_per_node",
}

# Fields verl's dataclasses declare float although its YAML writes their default as a whole
# number (by the section's `_target_`); every other int default in such a section is an int
# field, which refuses a float (2.0 too) as the job starts.
WHOLE_FLOATS: dict[str, tuple[str, ...]] = {
    "verl.workers.config.FSDPActorConfig": ("entropy_coeff",),
    "verl.workers.config.RolloutConfig": ("top_p", "over_sample_rate"),
    "verl.workers.config.SamplingConfig": ("temperature",),
}
