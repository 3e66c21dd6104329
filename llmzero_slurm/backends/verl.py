"""The verl 0.9.1 backend: one phase's configuration as Hydra overrides of verl's `ppo_trainer`.

Everything verl-specific that a phase needs is decided here, as a plain list of
`key=value` strings that `python3 -m verl.trainer.main_ppo` accepts verbatim. The list is
built from three sources, in this order:

1. fixed choices that make a run a GRPO phase of this system (estimator, file logger,
   per-phase checkpoint directory with `resume_mode=auto`, data files, reward function);
2. the shared hyperparameter vocabulary (`llmzero_slurm.hparams`), each name mapped to the
   verl key(s) that really read it;
3. raw extra overrides from the experiment config, `trainer.overrides` (a list of strings),
   for anything the vocabulary does not cover, e.g. `actor_rollout_ref.model.use_shm=true`.

verl 0.9.1 has keys that compose without error yet do nothing; those traps, and raw overrides
of keys this module manages, are refused with the reason before any script is written.

The `trainer:` section of experiment.yaml for `backend: verl` takes:

    python: python3                # the interpreter with verl on the GPU nodes
    rollout_engine: vllm           # actor_rollout_ref.rollout.name (vllm | sglang)
    overrides: []                  # raw Hydra overrides appended last (checked, see above)
    extra_loggers: []              # e.g. [wandb]; 'console' and 'file' are always on
    test_data_sources: []          # data_source values of task.test_files (read from the
                                   # parquet when omitted) whose val-core/ metrics are test scores
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..errors import ConfigError
from ..paths import ROOT
from .base import TrainerBackend

if TYPE_CHECKING:
    from ..render import PhaseSpec

ROLLOUT_ENGINES = ("vllm", "sglang")
FILE_LOGGER_ENV = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"
VERL_METRICS_FILE = "verl_metrics.jsonl"

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
PHASE_KEYS = (
    "algorithm.adv_estimator", "actor_rollout_ref.rollout.name", "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.lora_adapter_path", "data.train_files", "data.val_files",
    "reward.custom_reward_function.path", "reward.custom_reward_function.name",
    "trainer.logger", "trainer.project_name", "trainer.experiment_name",
    "trainer.default_local_dir", "trainer.resume_mode", "trainer.nnodes",
    "trainer.n_gpus_per_node", FILE_LOGGER_ENV.lstrip("+"),
)

# Keys that compose in verl 0.9.1 but have no effect there (checked in its source).
TRAPS: dict[str, str] = {
    "custom_reward_function": (
        "the top-level custom_reward_function.* still composes in verl 0.9.x but main_ppo "
        "never reads it; the reward function is reward.custom_reward_function.path/.name "
        "(set task.reward_path and task.reward_name)"),
    "reward_model": (
        "the top-level reward_model.* is verl's legacy layout and main_ppo ignores it; "
        "use reward.reward_model.*"),
    "actor_rollout_ref.actor.grad_clip": (
        "nothing in verl 0.9.1 reads actor.grad_clip; gradient clipping is "
        "actor_rollout_ref.actor.optim.clip_grad (set hparams.grad_clip)"),
}

_OVERRIDE = re.compile(r"^(?P<prefix>~|\+\+|\+)?(?P<key>[A-Za-z_][A-Za-z0-9_.@/-]*)(?:=(?P<value>.*))?$",
                       re.DOTALL)
_BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_QUOTE_RUN = re.compile(r'(\\*)("|$)')
_HYDRA_WORDS = {"true", "false", "null", "nan", "inf", "none", "yes", "no", "on", "off"}


@dataclass
class VerlSettings:
    """The `trainer:` section of an experiment config when `backend: verl`."""

    rollout_engine: str = "vllm"
    overrides: list[str] = field(default_factory=list)
    extra_loggers: list[str] = field(default_factory=list)
    test_data_sources: list[str] = field(default_factory=list)

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> "VerlSettings":
        known = {"rollout_engine", "overrides", "extra_loggers", "test_data_sources"}
        for key in section:
            if key not in known:
                raise ConfigError(f"trainer.{key}", f"unknown key for the verl backend "
                                  f"(known: {', '.join(sorted(known))})")
        settings = cls(**section)
        if settings.rollout_engine not in ROLLOUT_ENGINES:
            raise ConfigError("trainer.rollout_engine", f"must be one of {list(ROLLOUT_ENGINES)}")
        for key in ("overrides", "extra_loggers", "test_data_sources"):
            value = getattr(settings, key)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"trainer.{key}", "must be a list of strings")
        for logger in settings.extra_loggers:
            if not _BARE.match(logger):
                raise ConfigError("trainer.extra_loggers", f"{logger!r} is not a logger name")
        check_raw_overrides(settings.overrides)
        return settings


@dataclass
class PhaseInputs:
    """What one phase needs besides its hyperparameters: where things are and how big it is."""

    experiment: str
    node_id: int
    node_dir: str
    model_path: str
    train_files: Sequence[str]
    val_files: Sequence[str]
    test_files: Sequence[str] = ()
    reward_path: str | None = None
    reward_name: str = "compute_score"
    nnodes: int = 1
    gpus_per_node: int = 8
    adapter_path: str | None = None     # evolve/debug-of-evolve: the parent's exported adapter
    parent_lora_rank: int | None = None  # the rank that adapter was trained with


def hydra_value(value: Any) -> str:
    """Spell a Python value in Hydra's override grammar (strings double-quoted unless bare words)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        if "${" in value:
            raise ConfigError("<value>", f"{value!r} contains '${{', which Hydra would "
                              "treat as an interpolation; rename the path")
        if _BARE.match(value) and value.lower() not in _HYDRA_WORDS:
            return value
        # Hydra keeps backslashes literal except in a run that precedes a quote (or the
        # closing quote): such runs are doubled, and the quote itself is escaped.
        return '"' + _QUOTE_RUN.sub(lambda m: m[1] * 2 + ('\\"' if m[2] else ""), value) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    raise ConfigError("<value>", f"cannot pass a {type(value).__name__} to verl")


def parse_override(text: str) -> tuple[str, str, str | None]:
    """Split a Hydra override into (prefix, key, value); the error names the bad string."""
    match = _OVERRIDE.match(text.strip()) if isinstance(text, str) else None
    if match is None or (match["value"] is None and match["prefix"] != "~"):
        raise ConfigError("trainer.overrides", f"{text!r} is not a Hydra override "
                          "(expected key=value, +key=value, ++key=value or ~key)")
    return match["prefix"] or "", match["key"], match["value"]


def trap_reason(key: str) -> str | None:
    """Why a key must not be set, or None when it is fine."""
    for trap, reason in TRAPS.items():
        if key == trap or key.startswith(trap + "."):
            return reason
    return None


def check_raw_overrides(overrides: Iterable[str]) -> None:
    """Refuse user overrides that are traps or that would undo what the search sets per phase."""
    managed = {key: name for name, keys in HPARAM_KEYS.items() for key in keys}
    for text in overrides:
        _, key, _ = parse_override(text)
        reason = trap_reason(key)
        if reason:
            raise ConfigError(f"trainer.overrides: {key}", reason)
        if key in managed:
            raise ConfigError(f"trainer.overrides: {key}",
                              f"is set from hparams.{managed[key]}; change that instead")
        if key in PHASE_KEYS:
            raise ConfigError(f"trainer.overrides: {key}",
                              "is set per phase by llmzero (see llmzero_slurm/backends/verl.py)")


def check_traps(overrides: Sequence[str]) -> None:
    """Refuse a complete override list containing a verl 0.9.1 trap.

    Besides the dead keys, `lora_adapter_path` is ignored by verl unless `lora_rank > 0`, so
    an evolve phase would silently restart from the base model.
    """
    settings: dict[str, str | None] = {}
    for text in overrides:
        _, key, value = parse_override(text)
        reason = trap_reason(key)
        if reason:
            raise ConfigError(key, reason)
        settings[key] = value
    adapter = settings.get("actor_rollout_ref.model.lora_adapter_path")
    if adapter not in (None, "null"):
        rank = settings.get("actor_rollout_ref.model.lora_rank") or "0"
        if not rank.isdigit() or int(rank) <= 0:
            raise ConfigError("actor_rollout_ref.model.lora_adapter_path",
                              "verl ignores lora_adapter_path unless actor_rollout_ref.model."
                              f"lora_rank > 0 (lora_rank is {rank}); the phase would start "
                              "from the base model")


def build_overrides(phase: PhaseInputs, hparams: Mapping[str, Any],
                    settings: VerlSettings) -> list[str]:
    """The complete, trap-checked Hydra override list of one phase."""
    hp = dict(hparams)
    if phase.adapter_path is not None:
        parent_rank = phase.parent_lora_rank or 0
        if parent_rank <= 0:
            raise ConfigError("hparams.lora_rank", "a phase that resumes from a parent adapter "
                              "needs the parent's lora_rank > 0 (verl ignores the adapter "
                              "otherwise)")
        if hp.get("lora_rank", parent_rank) != parent_rank:
            raise ConfigError("hparams.lora_rank", f"is {hp['lora_rank']} but the parent "
                              f"adapter has rank {parent_rank}; LoRA rank is fixed along a "
                              "strategy")
        hp["lora_rank"] = parent_rank
    node_dir = phase.node_dir.rstrip("/")
    pairs: list[tuple[str, Any]] = [
        ("algorithm.adv_estimator", "grpo"),
        ("actor_rollout_ref.rollout.name", settings.rollout_engine),
        ("actor_rollout_ref.model.path", phase.model_path),
        ("data.train_files", list(phase.train_files)),
        # Validation and test go through verl's validation loop together; their data_source
        # values keep the scores apart (val-core/<source>/...), see verl_metrics.
        ("data.val_files", [*phase.val_files, *phase.test_files]),
        ("trainer.logger", ["console", "file", *settings.extra_loggers]),
        ("trainer.project_name", f"llmzero-{phase.experiment}"),
        ("trainer.experiment_name", f"node-{phase.node_id:04d}"),
        ("trainer.default_local_dir", f"{node_dir}/ckpt"),
        ("trainer.resume_mode", "auto"),
        ("trainer.nnodes", phase.nnodes),
        ("trainer.n_gpus_per_node", phase.gpus_per_node),
    ]
    if phase.reward_path:
        pairs += [("reward.custom_reward_function.path", phase.reward_path),
                  ("reward.custom_reward_function.name", phase.reward_name)]
    for name, value in hp.items():
        if name not in HPARAM_KEYS:
            raise ConfigError(f"hparams.{name}", "has no verl counterpart")
        pairs += [(key, _verl_typed(name, value)) for key in HPARAM_KEYS[name]]
    if hp.get("lora_rank"):
        # With LoRA the rollout engine must load real weights, not verl's dummy init.
        pairs.append(("actor_rollout_ref.rollout.load_format", "safetensors"))
    if phase.adapter_path is not None:
        pairs.append(("actor_rollout_ref.model.lora_adapter_path", phase.adapter_path))
    overrides = [f"{key}={_spelled(key, value)}" for key, value in pairs]
    overrides.append(f"{FILE_LOGGER_ENV}={hydra_value(f'{node_dir}/{VERL_METRICS_FILE}')}")
    check_raw_overrides(settings.overrides)
    overrides += settings.overrides
    check_traps(overrides)
    return overrides


def _verl_typed(name: str, value: Any) -> Any:
    """Adapt a vocabulary value to the type verl's dataclass declares for it."""
    if name == "lora_alpha" and float(value).is_integer():
        return int(value)   # HFModelConfig.lora_alpha is an int
    if name == "target_modules" and "," in value:
        return [v for v in value.split(",") if v]   # verl takes one name or a list
    return value


def _spelled(key: str, value: Any) -> str:
    try:
        return hydra_value(value)
    except ConfigError as exc:
        raise ConfigError(key, str(exc).split(": ", 1)[1]) from None


STEP_OFFSET_FILE = "verl_step_offset"   # a verl phase's first global step, written by its job


def data_sources(path: str) -> set[str]:
    """The data_source values of a verl parquet file (the names its validation scores get)."""
    import pyarrow.parquet as pq

    try:
        column = pq.read_table(path, columns=["data_source"]).column("data_source")
    except (OSError, KeyError, ValueError) as exc:
        raise ConfigError("trainer.test_data_sources", f"cannot read data_source from {path} "
                          f"({exc}); list the test files' data sources there instead") from None
    return {str(v) for v in column.to_pylist()}


def held_out_sources(task: Any, settings: VerlSettings) -> list[str]:
    """Data sources whose validation-loop scores are held-out test scores.

    verl names validation metrics by data_source only, so a source shared between the
    validation and test files would mix the two scores into one curve: refused.
    """
    if not task.test_files:
        return []
    sources = set(settings.test_data_sources)
    if not sources:
        sources = set().union(*(data_sources(f) for f in task.test_files))
        shared = sources & set().union(*(data_sources(f) for f in task.val_files))
        if shared:
            raise ConfigError("task.test_files", f"share data_source {sorted(shared)} with "
                              "task.val_files; verl would log both as one val-core/ score, so "
                              "give the test rows their own data_source")
    for source in sources:
        if not re.match(r"^[^\s'\"\\$`]{1,200}$", source):
            raise ConfigError("trainer.test_data_sources", f"{source!r}: use a data_source "
                              "without spaces, quotes or shell characters")
    return sorted(sources)


class VerlBackend(TrainerBackend):
    """Phases run by `python3 -m verl.trainer.main_ppo` on GPU nodes (templates/phase/verl.sbatch.j2)."""

    name = "verl"
    template = "phase/verl.sbatch.j2"
    trainer_keys = {"python": str, "rollout_engine": str, "overrides": list,
                    "extra_loggers": list, "test_data_sources": list}

    def check_trainer(self, extras: Mapping[str, Any]) -> dict[str, Any]:
        extras = super().check_trainer(extras)
        VerlSettings.from_config({k: v for k, v in extras.items() if k != "python"})
        return extras

    def overrides(self, spec: "PhaseSpec") -> list[str]:
        """The phase's Hydra overrides, except trainer.nnodes (the job fills in $SLURM_NNODES)."""
        settings = VerlSettings.from_config({k: v for k, v in spec.trainer.items() if k != "python"})
        if not spec.model_path:
            raise ConfigError("model_path", "the verl backend needs the HF model directory "
                              "(or hub id cached on the cluster)")
        if spec.task.builtin or not spec.task.train_files or not spec.task.val_files:
            raise ConfigError("task", "the verl backend needs task.train_files and "
                              "task.val_files (parquet in verl's format), not a builtin task")
        adapter = parent_rank = None
        if spec.resume_dir is not None:
            adapter = str(self.export_dir(spec) / "lora_adapter")
            parent_rank = spec.hparams.get("lora_rank", 0)
        inputs = PhaseInputs(
            spec.experiment, spec.node_id, str(spec.node_dir), spec.model_path,
            spec.task.train_files, spec.task.val_files, spec.task.test_files,
            spec.task.reward_path, spec.task.reward_name, nnodes=spec.slurm.nodes,
            gpus_per_node=spec.slurm.gpus_per_node, adapter_path=adapter,
            parent_lora_rank=parent_rank)
        return [o for o in build_overrides(inputs, spec.hparams, settings)
                if not o.startswith("trainer.nnodes=")]

    def command(self, spec: "PhaseSpec") -> list[str]:
        """main_ppo's argv, refused here (before any submission) if verl's schema rejects it."""
        from .verl_schema import check_overrides

        overrides = self.overrides(spec)
        skipped = check_overrides([*overrides, f"trainer.nnodes={spec.slurm.nodes}"])
        if skipped:
            logging.getLogger(__name__).warning("node %04d: %s", spec.node_id, skipped)
        python = spec.trainer.get("python", "python3")
        return [python, "-m", "verl.trainer.main_ppo", *overrides]

    def export_dir(self, spec: "PhaseSpec") -> Path:
        """Where siblings resuming from the same parent step share its exported adapter."""
        assert spec.resume_dir is not None
        return Path(spec.resume_dir) / "export" / f"global_step_{spec.resume_step}"

    def step_offset(self, node_dir: Path) -> int:
        """verl numbers checkpoints from 0 in every phase; the job records its first global step."""
        offset_file = Path(node_dir) / STEP_OFFSET_FILE
        try:
            return int(offset_file.read_text().strip())
        except (OSError, ValueError):
            raise ConfigError("resume", f"{offset_file} is missing or unreadable: the "
                              "phase did not run as a verl phase") from None

    def parent_actor_dir(self, spec: "PhaseSpec") -> Path:
        """The parent's verl checkpoint at the resume step (verl numbers steps per phase)."""
        assert spec.resume_dir is not None
        offset = self.step_offset(spec.resume_dir)
        local = spec.resume_step - offset
        if local < 0:
            raise ConfigError("resume", f"step {spec.resume_step} is before the parent's first "
                              f"step {offset}")
        return Path(spec.resume_dir) / "ckpt" / f"global_step_{local}" / "actor"

    def env(self, spec: "PhaseSpec") -> dict[str, str]:
        settings = VerlSettings.from_config({k: v for k, v in spec.trainer.items() if k != "python"})
        env = {"LLMZ_PYTHON": spec.trainer.get("python", "python3"),
               "LLMZ_REPO": str(ROOT),
               "LLMZ_STEP_OFFSET": str(spec.resume_step),
               "LLMZ_VERL_METRICS": f"{spec.node_dir}/{VERL_METRICS_FILE}",
               "LLMZ_TEST_SOURCES": " ".join(held_out_sources(spec.task, settings)),
               "LLMZ_GPUS_PER_NODE": str(spec.slurm.gpus_per_node)}
        if spec.resume_dir is not None:
            env["LLMZ_PARENT_ACTOR"] = str(self.parent_actor_dir(spec))
            env["LLMZ_ADAPTER_EXPORT"] = str(self.export_dir(spec))
            env["LLMZ_LORA_RANK"] = str(spec.hparams.get("lora_rank", 0))
        return env
