"""Which prompts a dataset's splits may share: the check `--check` runs on a user's files."""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from ..errors import LLMZeroError
from .dataset import Example

HELD_OUT_OVERLAP = 0.01   # public sets repeat a few prompts across splits; more is a leak


class Split(NamedTuple):
    name: str
    repeat_effect: str      # what a prompt repeated within the split does
    held_out_rule: str      # why a later split must not repeat its prompts


SPLITS = {   # by config key, in the order the files are read
    "task.train_files": Split("training", "trained on more often",
                              "held-out scores must come from prompts the policy never trained on"),
    "task.val_files": Split("validation", "each copy counts in its score",
                            "a test score must come from prompts the search never selected on"),
    "task.test_files": Split("test", "each copy counts in its score", ""),
}


def check_splits(key: str, path: str, examples: Sequence[Example],
                 prompts: dict[str, set[Any]]) -> list[str]:
    """Notes on one file of split `key`, read after the earlier splits' files (whose prompts
    `prompts` collects). Validation prompts must be new to the policy, test prompts new to the
    search as well: selecting on memorised answers, or a test score over prompts the search
    selected on, measures nothing. Repeats within a split are said, never refused."""
    def prompt(ex: Example) -> tuple[tuple[str, str], ...]:
        return tuple((m["role"], m["content"]) for m in ex.messages)
    split, keyed = SPLITS[key], [prompt(ex) for ex in examples]
    notes = []
    own = prompts.setdefault(key, set())
    repeated = 0
    for p in keyed:
        repeated += p in own
        own.add(p)
    if repeated:
        notes.append(f"{path}: {repeated} of {len(examples)} rows repeat a prompt already in "
                     f"the {split.name} split ({split.repeat_effect})")
    for earlier in list(SPLITS)[:list(SPLITS).index(key)]:
        seen = [ex for ex, p in zip(examples, keyed) if p in prompts.get(earlier, ())]
        if not seen:
            continue
        said = (f"{path}: {len(seen)} of {len(examples)} prompts are also in the "
                f"{SPLITS[earlier].name} split (e.g. {seen[0].messages[-1]['content']!r:.80})")
        if len(seen) > HELD_OUT_OVERLAP * len(examples):
            raise LLMZeroError(f"{said}; {SPLITS[earlier].held_out_rule} (at most "
                               f"{HELD_OUT_OVERLAP:.0%} may repeat)")
        notes.append(said)
    return notes
