"""From the phase script's arguments and environment to a phase: device, threads, warm start."""
from __future__ import annotations

from argparse import Namespace

import pytest
import torch

from llmzero_slurm.cputrain import session
from llmzero_slurm.cputrain.memory import limit_memory
from llmzero_slurm.errors import DataError, EnvironmentVariableError


@pytest.fixture
def threads_set(monkeypatch) -> list[int]:
    """The thread counts the session asks torch for (the test's own torch is left alone)."""
    asked: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", asked.append)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    return asked


def test_a_warm_start_max_steps_of_zero_is_refused_not_replaced_by_the_default():
    args = Namespace(task="addition", warm_start_band=None, warm_start_max_steps=0,
                     warm_start_steps=None)
    with pytest.raises(DataError, match="--warm-start-max-steps.*positive"):
        session.warm_start_plan(args)


@pytest.mark.parametrize("value, threads", [("3", 3), ("4,2", 4), (" 2 , 1", 2)])
def test_openmp_thread_lists_take_the_outer_levels_count(value, threads, threads_set,
                                                         monkeypatch):
    """OpenMP reads OMP_NUM_THREADS as one count per nesting level; `4,2` crashed int()."""
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    session.pick_device()
    assert threads_set == [threads]


def test_an_unusable_thread_count_names_its_variable(threads_set, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "many")
    with pytest.raises(EnvironmentVariableError, match="OMP_NUM_THREADS.*'many'"):
        session.pick_device()


def test_a_gpu_phase_keeps_its_cpu_threads_to_its_share(threads_set, monkeypatch):
    """With a GPU visible, torch kept its own thread count (every core of the node): a phase
    sharing a GPU node crowded its neighbours' CPUs, and the warm start, trained on the CPU
    there too, landed on another base than a one-thread run of the same data (measured on an
    H200 node: held-out 0.610 after 1100 steps with 16 threads, 0.598 after 1190 with one)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert session.pick_device() == torch.device("cuda")
    assert threads_set == [2]


def test_a_gpu_memory_cap_reaches_torchs_allocator(monkeypatch):
    """torch's set_per_process_memory_fraction wants a device index: the bare `cuda` device
    the session picks made every phase with --max-memory-mb on a GPU exit with a ValueError
    traceback (seen on an H200 node). Only the allocator's C entry point is stood in for;
    torch's own argument checks run as they do there."""
    set_to: list[tuple[float, int]] = []
    monkeypatch.setattr(torch.cuda.memory, "_lazy_init", lambda: None)
    monkeypatch.setattr(torch._C, "_cuda_setMemoryFraction",
                        lambda fraction, index: set_to.append((fraction, index)), raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: Namespace(total_memory=8 * 2**30))
    limit_memory(1024, torch.device("cuda"))
    assert set_to == [(0.125, 0)]


def test_a_phase_says_when_its_answers_cannot_fit_its_responses(tmp_path):
    """User report: a search started without --check on data whose answers were longer than
    max_response_length scored 0.000 in every phase, and no log said why (the start reads
    only the files' footers). The phase now says, per split, how many answers its responses
    can never hold."""
    import subprocess
    import sys

    from llmzero_slurm.paths import ROOT
    from llmzero_slurm.tasks import get_task, reward_path
    from llmzero_slurm.tasks.dataset import generate_rows, write_parquet

    rows = generate_rows(get_task("addition"), {"train": 64, "val": 16, "test": 16})
    long = [{**r, "reward_model": {"style": "rule", "ground_truth": "1" * 20}} for r in rows["val"]]
    for split, split_rows in {**rows, "val": long}.items():
        write_parquet(split_rows, tmp_path / f"{split}.parquet")
    done = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "cpu_grpo.py"), "--output-dir", str(tmp_path / "n"),
         "--cache-dir", str(tmp_path / "cache"), "--warm-start-steps", "0",
         "--reward-path", str(reward_path("addition")),
         *(f"--{split}-files={tmp_path / split}.parquet" for split in ("train", "val", "test")),
         "total_training_steps=1", "train_batch_size=8", "rollout_n=2", "max_response_length=8"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stdout.splitlines() if "max_response_length" in line]
    assert notes == [f"note: {tmp_path / 'val'}.parquet: 16 of 16 ground-truth answers need more "
                     "than max_response_length=8 tokens (the longest 21): cut off in every "
                     "rollout, they can never score; raise hparams.max_response_length"], done.stdout
