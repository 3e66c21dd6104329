"""From the phase script's arguments and environment to a phase: device, threads, warm start."""
from __future__ import annotations

from argparse import Namespace

import pytest
import torch

from llmzero_slurm.cputrain import session
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
