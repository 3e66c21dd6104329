"""From parsed command-line arguments to a running phase: device, threads, data, limits."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Callable

import torch

from ..errors import EnvironmentVariableError
from ..tasks import dataset, get_task, reward_path
from ..tasks.reward_file import fingerprint, load_reward
from .memory import limit_memory
from .tokenizer import CharTokenizer
from .trainer import GRPOTrainer, Phase
from .defaults import WARM_START_BAND, WARM_START_MAX_STEPS
from .warmstart import WarmStart, WarmStartStopped


def pick_device() -> torch.device:
    """CUDA when present, else the CPU; either way OMP_NUM_THREADS CPU threads (the phase
    script fixes it), else as many as Slurm grants, else one. The warm start trains on the
    CPU on a GPU node too, and its base depends on the thread count.

    The tensors are tiny, so a second thread buys little and, on a shared node, costs more
    in contention than it gains (measured: 0.73 s/step with one thread, 1.28 s with two).
    """
    torch.set_num_threads(_thread_count())
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _thread_count() -> int:
    """OMP_NUM_THREADS, else SLURM_CPUS_PER_TASK, else one. OpenMP reads OMP_NUM_THREADS as a
    list, one count per nesting level (`4,2`): this process's threads are the first."""
    for name in ("OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK"):
        value = os.environ.get(name)
        if value:
            first = value.split(",")[0].strip()
            if not first.isdigit():
                raise EnvironmentVariableError(name, f"{value!r} is not a thread count")
            return max(1, int(first))
    return 1


def warm_start_plan(args: argparse.Namespace) -> WarmStart:
    """The warm start the arguments ask for; a built-in task brings its own band."""
    band = args.warm_start_band or (get_task(args.task).BASE_BAND if args.task else WARM_START_BAND)
    max_steps = args.warm_start_max_steps   # 0 is refused, not taken for "unset"
    return WarmStart(band=band, max_steps=WARM_START_MAX_STEPS if max_steps is None else max_steps,
                     steps=args.warm_start_steps,
                     reward=None if args.task else fingerprint(args.reward_path, args.reward_name))


def unfit_answers(path: str | Path, examples: list[dataset.Example], limit: int) -> str | None:
    """A note on the ground truths a response of `limit` tokens can never hold: a start reads
    only the files' footers, and without `--check` (which refuses them) every phase on such
    data would score 0 with nothing in any log to say why."""
    lengths = [CharTokenizer().answer_length(ex.answer) for ex in examples]
    over = sum(n > limit for n in lengths)
    if not over:
        return None
    return (f"note: {path}: {over} of {len(lengths)} ground-truth answers need more than "
            f"max_response_length={limit} tokens (the longest {max(lengths)}): cut off in every "
            "rollout, they can never score; raise hparams.max_response_length")


def run_phase(args: argparse.Namespace, should_stop: Callable[[], bool]) -> bool:
    """Train one phase as the arguments say; False when stopped early."""
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    device = pick_device()
    if args.task:
        files = dataset.materialize(args.task, Path(args.cache_dir) / "tasks")
        reward_file = reward_path(args.task)
    else:
        files = {"train": args.train_files, "val": args.val_files, "test": args.test_files}
        reward_file = args.reward_path

    def split(name: str) -> list[dataset.Example]:
        """A split's rows; a file the user named is named with its config key when missing."""
        return dataset.read_examples(files[name], None if args.task else f"task.{name}_files")

    args.output_dir.mkdir(parents=True, exist_ok=True)
    splits = {name: split(name) for name in ("train", "val", "test")}
    if not args.task:     # a built-in task's long answers are part of its design (reverse)
        for name, examples in splits.items():
            if note := unfit_answers(files[name], examples, args.hparams["max_response_length"]):
                print(note, flush=True)
    phase = Phase(train=splits["train"], val=splits["val"], test=splits["test"],
                  reward=load_reward(reward_file, args.reward_name), reward_path=Path(reward_file),
                  hparams=args.hparams, output_dir=args.output_dir,
                  cache_dir=Path(args.cache_dir), device=device,
                  warm_start=warm_start_plan(args), init_adapter=args.init_adapter,
                  step_offset=args.step_offset)
    torch.manual_seed(args.hparams["seed"])   # LoRA's initialisation draws from the global RNG
    try:
        trainer = GRPOTrainer(phase, should_stop=should_stop)
    except WarmStartStopped as stopped:
        print(stopped, flush=True)
        return False
    if args.max_memory_mb:
        limit_memory(args.max_memory_mb, device)
    return trainer.run(should_stop)
