"""The verl TrainerBackend: phases run by `python3 -m verl.trainer.main_ppo` on GPU nodes."""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Mapping

from ...errors import ConfigError, LLMZeroError
from ...paths import JOBS, ROOT
from ..base import TokenCounter, TrainerBackend
from ..spec import PhaseSpec
from .data import held_out_sources
from ...store.atomic import write_text
from ...store.node_dir import NodeDir
from .metrics_copy import scores_at
from .keys import HPARAM_KEYS, STEP_OFFSET_FILE, TRACKER_FILE, VERL_METRICS_FILE
from .overrides import ParentAdapter, build_overrides, ray_cpus
from .schema import check_overrides, verl_default
from .settings import VerlSettings


class VerlBackend(TrainerBackend):
    """Phases run by `python3 -m verl.trainer.main_ppo` on GPU nodes (templates/phase/verl.sbatch.j2)."""

    name = "verl"
    template = "phase/verl.sbatch.j2"
    trainer_keys = {"python": str, "rollout_engine": str, "overrides": list,
                    "extra_loggers": list, "test_data_sources": list}

    def check_trainer(self, extras: Mapping[str, Any]) -> dict[str, Any]:
        extras = super().check_trainer(extras)
        self.settings(extras)
        return extras

    @staticmethod
    def settings(trainer: Mapping[str, Any]) -> VerlSettings:
        """The `trainer:` section's verl settings (`python` is every backend's key)."""
        return VerlSettings.from_config({k: v for k, v in trainer.items() if k != "python"})

    def python(self, trainer: Mapping[str, Any]) -> str:
        """verl runs from the cluster's own environment (slurm.setup), not this one's."""
        return str(trainer.get("python") or "python3")

    def kept_credentials(self, trainer: Mapping[str, Any]) -> frozenset[str]:
        """The login keys of the loggers in `trainer.extra_loggers` (wandb: WANDB_API_KEY)."""
        return self.settings(trainer).logger_credentials()

    def own_default(self, key: str) -> Any:
        """verl's config file's value (read where hydra and verl's config are installed)."""
        return verl_default(HPARAM_KEYS[key][0]) if key in HPARAM_KEYS else None

    def overrides(self, spec: PhaseSpec) -> list[str]:
        """The phase's Hydra overrides, except trainer.nnodes (the job fills in $SLURM_NNODES)."""
        settings = self.settings(spec.trainer)
        if not spec.model_path:
            raise ConfigError("model_path", "the verl backend needs the HF model directory "
                              "(or hub id cached on the cluster)")
        if spec.task.builtin or not spec.task.train_files or not spec.task.val_files:
            raise ConfigError("task", "the verl backend needs task.train_files and "
                              "task.val_files (parquet in verl's format), not a builtin task")
        adapter = None
        if spec.resume_dir is not None:
            adapter = ParentAdapter(str(self.export_dir(spec) / "lora_adapter"),
                                    spec.hparams.get("lora_rank", 0))
        return [o for o in build_overrides(spec, spec.hparams, settings, adapter,
                                           carried=self.carries_validation(spec))
                if not o.startswith("trainer.nnodes=")]

    def plan_problem(self, spec: PhaseSpec) -> str | None:
        """The render's own check of the phase: verl's batch rules depend on all the job's
        GPUs, which the vocabulary's checks do not know. Problems of the experiment rather
        than of the hyperparameters are the render's to report."""
        if problem := super().plan_problem(spec):
            return problem
        try:
            self.checked_overrides(spec)
        except ConfigError as exc:
            key = exc.key.removeprefix("hparams.")
            return f"{key}: {exc.problem}" if key != exc.key else None
        return None

    def carries_validation(self, spec: PhaseSpec) -> bool:
        """Whether the parent validated the resume step: then the phase carries those scores
        instead of spending a validation pass (minutes of GPU time) on the same weights."""
        return spec.resume_dir is not None and any(
            k.startswith("val-core/")
            for k in scores_at(Path(spec.resume_dir) / "metrics.jsonl", spec.resume_step))

    def checked_overrides(self, spec: PhaseSpec) -> tuple[list[str], str | None]:
        """The phase's overrides, checked by verl's schema with the node count the job passes
        (batches split over every node's GPUs); and why the check was skipped here, if it was."""
        overrides = self.overrides(spec)
        return overrides, check_overrides([*overrides, f"trainer.nnodes={spec.slurm.nodes}"])

    def command(self, spec: PhaseSpec) -> list[str]:
        """main_ppo's argv, refused here (before any submission) if verl's schema rejects it."""
        overrides, skipped = self.checked_overrides(spec)
        if skipped:
            logging.getLogger(__name__).warning("node %04d: %s", spec.node_id, skipped)
        return [self.python(spec.trainer), "-m", "verl.trainer.main_ppo", *overrides]

    def export_dir(self, spec: PhaseSpec) -> Path:
        """Where siblings resuming from the same parent step share its exported adapter."""
        assert spec.resume_dir is not None
        return Path(spec.resume_dir) / "export" / f"global_step_{spec.resume_step}"

    def step_offset(self, node_dir: Path) -> int:
        """verl numbers checkpoints from 0 in every phase; the job records its first global step."""
        offset_file = Path(node_dir) / STEP_OFFSET_FILE
        try:
            return int(offset_file.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            raise ConfigError("resume", f"{offset_file} is missing or unreadable: the "
                              "phase did not run as a verl phase") from None

    def token_counter(self, model_path: str | None) -> TokenCounter:
        """The model's own tokenizer and chat template, when transformers and the model's files
        are on this machine (nothing is downloaded by a preflight)."""
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise LLMZeroError("transformers is not installed on this machine") from None
        if model_path and Path(model_path).is_absolute() and not Path(model_path).is_dir():
            # The config anchors folders, so this is no hub id: transformers would say it is
            # a malformed one.
            raise LLMZeroError(f"model_path {model_path} is not a folder on this machine (one "
                               "that only the compute nodes see is read by --check --on-cluster)")
        try:
            tok = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise LLMZeroError(f"the tokenizer of {model_path} is not on this machine "
                               f"({str(exc).splitlines()[0][:160]})") from None

        def prompt(messages: Any) -> int:
            if not tok.chat_template:     # verl applies it to every prompt: the job would fail
                raise LLMZeroError(f"{model_path}'s tokenizer has no chat template, and verl "
                                   "applies one to every prompt: use a model (or tokenizer "
                                   "folder) that has one")
            # The ids alone: transformers 5 returns them with their attention mask by default.
            return len(tok.apply_chat_template(list(messages), add_generation_prompt=True,
                                               tokenize=True, return_dict=False))
        return TokenCounter(prompt, lambda text: len(tok.encode(text, add_special_tokens=False))
                            + 1, f"{model_path}'s tokenizer")

    def record_start(self, node_dir: Path, start_step: int) -> None:
        """The job writes its first global step (verl numbers steps from 0 in every phase)."""
        Path(node_dir).mkdir(parents=True, exist_ok=True)
        write_text(Path(node_dir) / STEP_OFFSET_FILE, f"{start_step}\n")

    def checkpoint_steps(self, files: NodeDir) -> list[int]:
        """Only complete checkpoints: at or below verl's tracker (written after the shards)
        and with the model shard of every rank, so a step cut off mid-save is never a parent."""
        try:
            latest = int((files.ckpt / TRACKER_FILE).read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return []
        offset = self.step_offset(files.path)
        return [s for s in files.checkpoints(offset)
                if s - offset <= latest and _all_shards(files.checkpoint_dir(s - offset))]

    def parent_actor_dir(self, spec: PhaseSpec) -> Path:
        """The parent's verl checkpoint at the resume step (verl numbers steps per phase)."""
        assert spec.resume_dir is not None
        offset = self.step_offset(spec.resume_dir)
        local = spec.resume_step - offset
        if local < 0:
            raise ConfigError("resume", f"step {spec.resume_step} is before the parent's first "
                              f"step {offset}")
        return NodeDir(spec.resume_dir).checkpoint_dir(local) / "actor"

    def env(self, spec: PhaseSpec) -> dict[str, str]:
        settings = self.settings(spec.trainer)
        env = {"LLMZ_PYTHON": self.python(spec.trainer),
               "LLMZ_REPO": str(ROOT),
               "LLMZ_JOBS": str(JOBS),      # not ROOT/jobs in an install: inside the package
               "LLMZ_STEP_OFFSET": str(spec.resume_step),
               "LLMZ_VERL_METRICS": f"{spec.node_dir}/{VERL_METRICS_FILE}",
               "LLMZ_VERL_TRACKER": f"{spec.node_dir}/ckpt/{TRACKER_FILE}",
               "LLMZ_TEST_SOURCES": " ".join(held_out_sources(spec.task, settings)),
               "LLMZ_GPUS_PER_NODE": str(spec.slurm.gpus_per_node),
               "LLMZ_RAY_CPUS": str(ray_cpus(spec.slurm))}
        if spec.model_path and Path(spec.model_path).is_absolute():
            # A model in a folder needs nothing from the hub, and on a node without internet
            # each hub call transformers or vLLM makes would wait for its timeout. A hub id
            # (never absolute: the config anchors folders) may be downloaded.
            env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        if spec.resume_dir is not None:
            if self.carries_validation(spec):
                env["LLMZ_PARENT_METRICS"] = str(Path(spec.resume_dir) / "metrics.jsonl")
                env["LLMZ_PARENT_NODE"] = str(int(Path(spec.resume_dir).name))
            env["LLMZ_PARENT_ACTOR"] = str(self.parent_actor_dir(spec))
            env["LLMZ_ADAPTER_EXPORT"] = str(self.export_dir(spec))
            env["LLMZ_LORA_RANK"] = str(spec.hparams.get("lora_rank", 0))
            if settings.trusts_remote_code():
                env["LLMZ_TRUST_REMOTE_CODE"] = "1"
        return env


_SHARD = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")


def _all_shards(step_dir: Path) -> bool:
    """Whether actor/ holds model_world_size_W_rank_R.pt for every rank R < W."""
    try:
        names = [e.name for e in (step_dir / "actor").iterdir()]
    except OSError:
        return False
    found = [(int(m.group(1)), int(m.group(2))) for n in names if (m := _SHARD.match(n))]
    sizes = {w for w, _ in found}
    return len(sizes) == 1 and {r for _, r in found} == set(range(sizes.pop()))
