"""One phase's complete, trap-checked Hydra override list, built from its PhaseSpec.

Three sources, in this order: fixed choices that make a run a GRPO phase of this system
(estimator, file logger, per-phase checkpoint directory with `resume_mode=auto`, data files,
reward function); the shared hyperparameters, each on the verl key(s) that read it; the raw
`trainer.overrides` of the experiment.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ...errors import ConfigError
from ...job_settings import SlurmConfig
from ..spec import PhaseSpec
from .grammar import hydra_value
from .keys import FILE_LOGGER_ENV, HPARAM_KEYS, VERL_METRICS_FILE
from .settings import VerlSettings
from .traps import check_raw_overrides, check_traps


# What a phase would lack without each cadence: verl's default for both is -1 (never).
UNSET_CADENCES = {
    "save_freq": "never saves a checkpoint, so no phase could ever start from this one",
    "test_freq": "validates only before training, so the phase would end without a score",
}


# verl 0.9.1 places one bundle of 3 CPUs and a GPU per GPU (ResourcePoolManager's
# max_colocate_count) and waits for the whole placement group; its other actors (task runner,
# 8 agent-loop workers, reward and queue actors) each need a free CPU to be placed.
RAY_CPUS_PER_GPU, RAY_SPARE_CPUS = 3, 8


def ray_cpus(slurm: SlurmConfig) -> int:
    """The CPUs Ray is told each node has: the allocation's, but never fewer than verl reserves
    there, or its placement group waits forever while the job holds its GPUs to the time limit.
    Ray's count only schedules; the processes run on the CPUs the allocation has."""
    return max(slurm.cpus_per_task, RAY_CPUS_PER_GPU * slurm.gpus_per_node + RAY_SPARE_CPUS)


@dataclass(frozen=True)
class ParentAdapter:
    """The exported adapter an evolve (or debug-of-evolve) phase starts from."""

    path: str
    lora_rank: int          # the rank it was trained with


def build_overrides(spec: PhaseSpec, hparams: Mapping[str, Any], settings: VerlSettings,
                    adapter: ParentAdapter | None = None, carried: bool = False) -> list[str]:
    """The complete, trap-checked Hydra override list of one phase. `carried`: the parent's
    scores at the resume step are carried into this phase, so verl does not validate again."""
    hp = dict(hparams)
    task = spec.task
    unset = [name for name in UNSET_CADENCES if not hp.get(name)]
    if unset:
        raise ConfigError(f"hparams.{unset[0]}", "; ".join(
            f"{name} must be set for the verl backend: verl's default (-1) "
            f"{UNSET_CADENCES[name]}" for name in unset))
    if adapter is not None:
        parent_rank = adapter.lora_rank or 0
        if parent_rank <= 0:
            raise ConfigError("hparams.lora_rank", "a phase that resumes from a parent adapter "
                              "needs the parent's lora_rank > 0 (verl ignores the adapter "
                              "otherwise)")
        if hp.get("lora_rank", parent_rank) != parent_rank:
            raise ConfigError("hparams.lora_rank", f"is {hp['lora_rank']} but the parent "
                              f"adapter has rank {parent_rank}; LoRA rank is fixed along a "
                              "strategy")
        hp["lora_rank"] = parent_rank
    if hp.get("total_training_steps"):
        # verl stops at the end of total_epochs even before total_training_steps, skipping
        # the last step's save and validation; an epoch has at least one step, so this many
        # epochs leave the step count in charge, as the vocabulary promises.
        hp["total_epochs"] = max(hp.get("total_epochs", 1), hp["total_training_steps"])
    node_dir = str(spec.node_dir).rstrip("/")
    pairs: list[tuple[str, Any]] = [
        ("algorithm.adv_estimator", "grpo"),
        ("actor_rollout_ref.rollout.name", settings.rollout_engine),
        ("actor_rollout_ref.model.path", spec.model_path),
        ("data.train_files", list(task.train_files)),
        # Validation and test go through verl's validation loop together; their data_source
        # values keep the scores apart (val-core/<source>/...), see metrics_copy.
        ("data.val_files", [*task.val_files, *task.test_files]),
        ("trainer.logger", ["console", "file", *settings.extra_loggers]),
        ("trainer.project_name", f"llmzero-{spec.experiment}"),
        ("trainer.experiment_name", f"node-{spec.node_id:04d}"),
        ("trainer.default_local_dir", f"{node_dir}/ckpt"),
        ("trainer.resume_mode", "auto"),
        ("trainer.nnodes", spec.slurm.nodes),
        ("trainer.n_gpus_per_node", spec.slurm.gpus_per_node),
    ]
    if task.reward_path:
        pairs += [("reward.custom_reward_function.path", task.reward_path),
                  ("reward.custom_reward_function.name", task.reward_name)]
    for name, value in hp.items():
        if name not in HPARAM_KEYS:
            raise ConfigError(f"hparams.{name}", "has no verl counterpart")
        pairs += [(key, _verl_typed(name, value)) for key in HPARAM_KEYS[name]]
    if spec.resume_step:
        # verl shuffles the training set anew in every run from data.seed (unset: a fresh
        # generator's fixed seed), so each phase of a strategy would train again on the
        # batches its first phase began with. An order per resume step: siblings share one.
        pairs = [p for p in pairs if p[0] != "data.seed"]
        pairs.append(("data.seed", int(hp.get("seed") or 0) + spec.resume_step))
    if hp.get("lora_rank"):
        # With LoRA the rollout engine must load real weights, not verl's dummy init.
        pairs.append(("actor_rollout_ref.rollout.load_format", "safetensors"))
    if adapter is not None:
        pairs.append(("actor_rollout_ref.model.lora_adapter_path", adapter.path))
    if carried:
        pairs.append(("trainer.val_before_train", False))
    if spec.slurm.nodes == 1:
        # verl starts Ray itself here; left null, Ray would claim every CPU of the node, not
        # the allocation's (verl's own config asks for a fixed number under Slurm). Several
        # nodes join the cluster the job started, and ray.init refuses num_cpus then.
        pairs.append(("ray_kwargs.ray_init.num_cpus", ray_cpus(spec.slurm)))
        # The dashboard's fixed port (8265) would collide with another phase on the node.
        pairs.append(("+ray_kwargs.ray_init.include_dashboard", False))
    overrides = [f"{key}={_spelled(key, value)}" for key, value in pairs]
    overrides.append(f"{FILE_LOGGER_ENV}={hydra_value(f'{node_dir}/{VERL_METRICS_FILE}')}")
    check_raw_overrides(settings.overrides, spec.secret_names, settings.logger_credentials())
    overrides += settings.overrides
    check_traps(overrides)
    return overrides


def _verl_typed(name: str, value: Any) -> Any:
    """Adapt a vocabulary value to the type verl's dataclass declares for it."""
    if name == "lora_alpha":
        # HFModelConfig.lora_alpha is an int: verl refuses a float (16.0 too) as the job
        # starts. peft, the cpu trainer, takes any, so the shared vocabulary allows fractions.
        if not float(value).is_integer():
            raise ConfigError("hparams.lora_alpha", f"is {value}, but verl 0.9.1 reads "
                              "lora_alpha as an integer and fails the job as it starts; "
                              "use a whole number")
        return int(value)
    if name == "target_modules" and "," in value:
        return [v for v in value.split(",") if v]   # verl takes one name or a list
    return value


def _spelled(key: str, value: Any) -> str:
    try:
        return hydra_value(value)
    except ConfigError as exc:
        raise ConfigError(key, exc.problem) from None
