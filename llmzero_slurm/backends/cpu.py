"""The embedded CPU GRPO trainer (jobs/cpu_grpo.py): tests, CI and demos on any machine."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..paths import JOBS
from .base import TrainerBackend

if TYPE_CHECKING:
    from .spec import PhaseSpec


def hparam_arg(key: str, value: object) -> str:
    """key=value in the spelling the trainers parse (YAML scalars)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    else:
        text = repr(value) if isinstance(value, float) else str(value)
    return f"{key}={text}"


class CpuBackend(TrainerBackend):
    name = "cpu"
    template = "phase/cpu.sbatch.j2"
    trainer_keys = {"python": str, "cache_dir": str, "max_memory_mb": int}

    def defaults(self) -> dict[str, Any]:
        from ..cputrain.defaults import DEFAULTS
        return {k: v for k, v in DEFAULTS.items() if v is not None}

    def command(self, spec: "PhaseSpec") -> list[str]:
        task = spec.task
        argv = [spec.python, str(JOBS / "cpu_grpo.py")]
        if task.builtin:
            argv.append(f"--task={task.builtin}")
        else:
            for key in ("train_files", "val_files", "test_files"):
                if len(getattr(task, key)) != 1:
                    raise ConfigError(f"task.{key}", "the cpu trainer reads exactly one parquet "
                                                     "file per split (or use task.builtin)")
            if not task.reward_path:
                raise ConfigError("task.reward_path", "is required when the data comes from files")
            # --opt=value keeps a path that starts with '-' from reading as an option.
            argv += [f"--train-files={task.train_files[0]}", f"--val-files={task.val_files[0]}",
                     f"--test-files={task.test_files[0]}", f"--reward-path={task.reward_path}"]
        argv.append(f"--output-dir={spec.node_dir}")
        if spec.resume_dir is not None:
            adapter = spec.resume_dir / "ckpt" / f"global_step_{spec.resume_step}"
            argv += [f"--init-adapter={adapter}", f"--step-offset={spec.resume_step}"]
        if "cache_dir" in spec.trainer:
            argv.append(f"--cache-dir={spec.trainer['cache_dir']}")
        if "max_memory_mb" in spec.trainer:
            argv.append(f"--max-memory-mb={spec.trainer['max_memory_mb']}")
        return argv + [hparam_arg(k, v) for k, v in sorted(spec.hparams.items())]

    def env(self, spec: "PhaseSpec") -> dict[str, str]:
        return {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
