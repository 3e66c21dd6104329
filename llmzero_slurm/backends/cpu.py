"""The embedded CPU GRPO trainer (jobs/cpu_grpo.py): tests, CI and demos on any machine."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

from ..config import TaskConfig
from ..errors import ConfigError
from ..paths import JOBS, check_cache_dir
from .base import TokenCounter, TrainerBackend

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

    def check_trainer(self, extras: Mapping[str, Any]) -> dict[str, Any]:
        """A memory cap of 0 would mean none at all, and a negative one fails in the job."""
        extras = super().check_trainer(extras)
        if extras.get("max_memory_mb", 1) < 1:
            raise ConfigError("trainer.max_memory_mb", "must be at least 1 (MB); leave it out "
                                                       "for no limit")
        return extras

    def defaults(self) -> dict[str, Any]:
        from ..cputrain.defaults import DEFAULTS
        return {k: v for k, v in DEFAULTS.items() if v is not None}

    def token_counter(self, model_path: str | None) -> TokenCounter:
        """The embedded trainer's character tokenizer (torch-free)."""
        from ..cputrain.tokenizer import CharTokenizer
        tok = CharTokenizer()
        return TokenCounter(lambda messages: len(tok.prompt_ids([dict(m) for m in messages])),
                            tok.answer_length, "the CPU trainer's characters",
                            tok.unknown)

    def command(self, spec: "PhaseSpec") -> list[str]:
        task = spec.task
        argv = [self.python(spec.trainer), str(JOBS / "cpu_grpo.py")]
        if task.builtin:
            argv.append(f"--task={task.builtin}")
        else:
            for key in ("train_files", "val_files", "test_files"):
                given = len(getattr(task, key))
                if given != 1:
                    raise ConfigError(f"task.{key}", ("is missing" if not given else
                                                      f"names {given} files") + ": the cpu "
                                      "trainer reads exactly one parquet file per split (or use "
                                      "task.builtin)")
            if not task.reward_path:
                raise ConfigError("task.reward_path", "is required when the data comes from files")
            # --opt=value keeps a path that starts with '-' from reading as an option.
            argv += [f"--train-files={task.train_files[0]}", f"--val-files={task.val_files[0]}",
                     f"--test-files={task.test_files[0]}", f"--reward-path={task.reward_path}"]
            if task.reward_name != TaskConfig.reward_name:
                argv.append(f"--reward-name={task.reward_name}")
        warm = task.warm_start
        if warm.band is not None:
            argv.append(f"--warm-start-band={warm.band[0]}:{warm.band[1]}")
        if warm.max_steps is not None:
            argv.append(f"--warm-start-max-steps={warm.max_steps}")
        if warm.steps is not None:
            argv.append(f"--warm-start-steps={warm.steps}")
        argv.append(f"--output-dir={spec.node_dir}")
        if spec.resume_dir is not None:
            adapter = spec.resume_dir / "ckpt" / f"global_step_{spec.resume_step}"
            argv += [f"--init-adapter={adapter}", f"--step-offset={spec.resume_step}"]
        check_cache_dir(spec.trainer.get("cache_dir"), "trainer.cache_dir")
        if "cache_dir" in spec.trainer:
            argv.append(f"--cache-dir={spec.trainer['cache_dir']}")
        if "max_memory_mb" in spec.trainer:
            argv.append(f"--max-memory-mb={spec.trainer['max_memory_mb']}")
        return argv + [hparam_arg(k, v) for k, v in sorted(spec.hparams.items())]

    def env(self, spec: "PhaseSpec") -> dict[str, str]:
        """Everything the numbers depend on is fixed here, so that `bash phase.sbatch` by hand
        gives the scheduled run's metrics: the thread count (not whatever the shell or the node
        offers), and MKL's reproducible mode (by default MKL may pick kernels by memory
        alignment, which differs from run to run). A numeric path chosen in the controller's
        environment (MKL_CBWR, ATEN_CPU_CAPABILITY) is carried into the script."""
        threads = str(spec.slurm.cpus_per_task)
        env = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
               "MKL_CBWR": os.environ.get("MKL_CBWR") or "AUTO,STRICT"}
        if os.environ.get("ATEN_CPU_CAPABILITY"):
            env["ATEN_CPU_CAPABILITY"] = os.environ["ATEN_CPU_CAPABILITY"]
        return env
