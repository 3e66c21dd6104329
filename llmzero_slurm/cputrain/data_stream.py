"""The order in which a phase reads its training prompts.

One shuffled order per epoch, fixed by the seed, with verl's ragged tail dropped. A phase that
starts at global step k (an evolve phase resuming its parent) reads on from where a single
run would be at step k, as a resumed verl run's dataloader does: a chain of phases then sees
the same prompts as one long run, instead of every child re-reading the first batches.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class DataStream:
    size: int          # training rows
    batch_size: int
    seed: int
    epoch: int = 0
    position: int = 0
    _order: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._order = self._shuffled()

    @classmethod
    def at_step(cls, size: int, batch_size: int, seed: int, step: int) -> "DataStream":
        """The stream as a run from step 0 would have it after `step` batches."""
        epoch, first = divmod(step, max(1, size // batch_size))
        return cls(size, batch_size, seed, epoch, first * batch_size)

    def next_batch(self) -> list[int]:
        """Row indices of the next batch."""
        if self.position + self.batch_size > len(self._order):
            self.epoch, self.position = self.epoch + 1, 0
            self._order = self._shuffled()
        picked = self._order[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return picked

    def _shuffled(self) -> list[int]:
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        return rng.sample(range(self.size), self.size)
