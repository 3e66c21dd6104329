#!/usr/bin/env python3
"""Run one GRPO training phase of the embedded CPU trainer (the program a phase script runs).

Examples:
  cpu_grpo.py --task addition --output-dir runs/x/nodes/0001 lr=1e-3 total_training_steps=100
  cpu_grpo.py --task addition --output-dir runs/x/nodes/0002 \\
      --init-adapter runs/x/nodes/0001/ckpt/global_step_50 --step-offset 50 kl_loss_coef=0.1

Writes OUTPUT_DIR/metrics.jsonl (appended, verl file-logger format) and PEFT adapter folders
OUTPUT_DIR/ckpt/global_step_N/. Rerun with the same --output-dir (a Slurm requeue) and it
resumes its own newest checkpoint with optimizer, RNG and data position.

Exit codes: 0 finished; 1 unexpected error, or a full disk or quota (one line naming it); 2 bad
arguments, hyperparameters, data or reward file; 3 out of memory (a line containing "out of
memory" names the torch error); 143 stopped by SIGTERM (scancel, time limit, preemption)
after saving and flushing (during the warm start: within a step, its base not cached).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a plain checkout

import yaml

from llmzero_slurm.cputrain.defaults import (
    DEFAULTS, WARM_START_BAND, WARM_START_MAX_STEPS, with_defaults)
from llmzero_slurm.errors import FULL, ConfigError, LLMZeroError
from llmzero_slurm.paths import CACHE_ENV, DEFAULT_CACHE, check_cache_dir
from llmzero_slurm.hparams import validate_hparams
from llmzero_slurm.tasks import TASKS

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_OOM, EXIT_TERMINATED = 0, 1, 2, 3, 143


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="cpu_grpo.py", description=__doc__.split("\n\n")[0],
        epilog="Hyperparameters are key=value in the shared vocabulary (llmzero_slurm/hparams.py)"
               "; unset keys take these defaults: " + ", ".join(
                   f"{k}={v}" for k, v in DEFAULTS.items()))
    data = parser.add_argument_group("data (either --task or all four files)")
    data.add_argument("--task", help=f"a built-in task: {', '.join(TASKS)}")
    data.add_argument("--train-files", type=Path, help="verl-format parquet of the train split")
    data.add_argument("--val-files", type=Path, help="parquet of the validation split")
    data.add_argument("--test-files", type=Path, help="parquet of the test split")
    data.add_argument("--reward-path", type=Path, help="python file defining the reward")
    data.add_argument("--reward-name", default="compute_score",
                      help="the reward function in that file (default compute_score)")
    parser.add_argument("--output-dir", type=Path, required=True,
                        help="phase directory: metrics.jsonl and ckpt/ go here")
    parser.add_argument("--init-adapter", type=Path,
                        help="a parent's PEFT adapter folder to start from (weights only)")
    parser.add_argument("--step-offset", type=int, default=0,
                        help="global step of the parent checkpoint; steps log as K+1, K+2, ...")
    parser.add_argument("--cache-dir", type=Path,
                        help="where base models and task data are cached "
                             f"(default: ${CACHE_ENV} or {DEFAULT_CACHE})")
    parser.add_argument("--max-memory-mb", type=int,
                        help="memory limit; beyond it allocations fail (exit 3)")
    warm = parser.add_argument_group(
        "base model (a supervised warm start on the training split, cached)")
    warm.add_argument("--warm-start-band", metavar="LOW:HIGH", type=_band,
                      help="train until greedy accuracy on a held-out slice of the training "
                           "split is in this band (default: the built-in task's band, else "
                           "{:.2f}:{:.2f})".format(*WARM_START_BAND))
    warm.add_argument("--warm-start-max-steps", type=int, metavar="N",
                      help="give up (exit 2) when the band is not reached in N steps "
                           f"(default {WARM_START_MAX_STEPS})")
    warm.add_argument("--warm-start-steps", type=int, metavar="N",
                      help="instead of a band: exactly N supervised steps (0: no warm start)")
    parser.add_argument("hparams", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    files = (args.train_files, args.val_files, args.test_files, args.reward_path)
    if (args.task is None) == all(f is None for f in files) or (
            args.task is None and not all(files)):
        parser.error("give either --task NAME or all of --train-files, --val-files, "
                     "--test-files and --reward-path")
    if args.step_offset < 0:
        parser.error("--step-offset must be >= 0")
    args.hparams = parse_hparams(args.hparams)
    args.cache_dir = check_cache_dir(args.cache_dir, "--cache-dir")
    return args


def _band(text: str) -> tuple[float, float]:
    low, sep, high = text.partition(":")
    try:
        return float(low), float(high)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW:HIGH accuracies, got {text!r}") from None


def parse_hparams(pairs: list[str]) -> dict:
    """key=value pairs (values in YAML syntax) over the defaults, validated as a whole."""
    given = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ConfigError(pair[:80], "hyperparameters are given as key=value")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ConfigError(key, f"value {text[:80]!r} is not valid YAML") from None
        given[key] = _as_number(value)
    return validate_hparams(with_defaults(given), "cpu")


def _as_number(value):
    """YAML 1.1 reads 1e-3 (no dot) as text; people and scripts mean the number."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def main(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
    except LLMZeroError as exc:
        print(f"cpu_grpo: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    stop: dict[str, int | None] = {"signal": None}
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stop.update(signal=signum))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Arrow's default allocator reserves ~1 GB of address space, which would count against
    # --max-memory-mb; the system allocator keeps the data segment close to what is used.
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    # Idle OpenMP threads that spin instead of sleeping make an oversubscribed node (many
    # small jobs on few cores) 15x slower; sleeping costs nothing measurable here.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from llmzero_slurm.cputrain.session import run_phase   # torch loads only past argument checks
    from llmzero_slurm.cputrain.memory import is_out_of_memory
    try:
        finished = run_phase(args, should_stop=lambda: stop["signal"] is not None)
    except LLMZeroError as exc:
        print(f"cpu_grpo: error: {exc}", file=sys.stderr)
        return exc.exit_code if exc.exit_code == EXIT_BAD_INPUT else EXIT_ERROR
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno in FULL:   # a line, not a traceback
            print(f"cpu_grpo: error: {exc.filename or args.output_dir}: could not be written "
                  f"({exc.strerror}); free space, then rerun: it resumes its last checkpoint",
                  file=sys.stderr)
            return EXIT_ERROR
        if not is_out_of_memory(exc):
            raise
        print(f"cpu_grpo: out of memory: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_OOM
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not finished:
        print("cpu_grpo: stopped by SIGTERM; the steps it finished are checkpointed", file=sys.stderr)
        return EXIT_TERMINATED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
