"""The training data order: a phase that starts at global step k reads on from where one long
run would be at step k, so a chain of phases sees fresh prompts, as a resumed verl run does."""
from __future__ import annotations

import pytest

from llmzero_slurm.cputrain.data_stream import DataStream


def batches(stream: DataStream, n: int) -> list[list[int]]:
    return [stream.next_batch() for _ in range(n)]


@pytest.mark.parametrize("step", [0, 1, 2, 3, 5, 7])
def test_a_stream_started_at_step_k_matches_one_long_run_from_there(step):
    whole = batches(DataStream(100, 32, seed=4), 10)   # 3 batches an epoch
    assert batches(DataStream.at_step(100, 32, seed=4, step=step), 10 - step) == whole[step:]


def test_each_epoch_is_a_fresh_shuffle_without_the_ragged_tail():
    first, second = batches(DataStream(100, 32, seed=1), 3), batches(
        DataStream.at_step(100, 32, seed=1, step=3), 3)
    for epoch in (first, second):
        rows = [i for batch in epoch for i in batch]
        assert len(rows) == len(set(rows)) == 96   # 4 rows left over, as verl drops them
    assert first != second


def test_the_seed_fixes_the_order():
    assert batches(DataStream(50, 8, seed=2), 6) == batches(DataStream(50, 8, seed=2), 6)
    assert batches(DataStream(50, 8, seed=2), 6) != batches(DataStream(50, 8, seed=3), 6)
