"""The search methods by name: the one list of them, each with what of `search:` it reads. A new
method is one entry here. `make_method` loads a method's class only when a run uses it, and
experiment.yaml's `search:` section is checked against this list."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..search.settings import SearchSettings


@dataclass(frozen=True)
class Entry:
    """A method's class as "module:Class", and what of `search:` the method reads: said here,
    not asked of the class, so that checking a config or `llmzero-status` imports no method."""

    path: str
    reads_space: bool = False   # its plan is drawn from `search.space`, or its agents keep to it
    tree: bool = False          # reads TREE_SETTINGS; its class's early_stopping says the same
    seeded: bool = False        # draws with search.seed


METHODS: dict[str, Entry] = {
    "llmzero": Entry("llmzero_slurm.methods.llmzero:LLMZeroMethod", reads_space=True, tree=True),
    "practitioner": Entry("llmzero_slurm.methods.practitioner:PractitionerMethod"),
    "random": Entry("llmzero_slurm.methods.random_search:RandomSearchMethod", reads_space=True,
                    seeded=True),
    "grid": Entry("llmzero_slurm.methods.grid:GridMethod", reads_space=True),
    "guidebook": Entry("llmzero_slurm.methods.guidebook:GuidebookMethod", reads_space=True),
    "replay": Entry("llmzero_slurm.methods.replay:ReplayMethod"),
}
READS_SPACE = tuple(name for name, entry in METHODS.items() if entry.reads_space)
# What the tree methods alone read: the tree policy's constants (search/policy.py,
# search/scoring.py) and their monitor job's. The others plan their phases without a tree or a
# stopper.
TREE_SETTINGS = ("exploration_c", "temperature", "fail_penalty", "early_penalty",
                 "fail_forgiven", "max_evolve_children", "max_debug_children", "max_debug_depth",
                 "min_scratch_ratio", "virtual_loss", "early_stopping", "early_stop_interval_s")


def _named(has: str) -> str:
    """The methods whose entry has the flag `has`, as a message names them."""
    return " and ".join(name for name, entry in METHODS.items() if getattr(entry, has))


def check_method(method: str, has_space: bool) -> None:
    """Refuse an unknown method, and a `search.space` that the method would ignore."""
    if method not in METHODS:
        raise ConfigError("search.method", f"must be one of {', '.join(METHODS)}")
    if has_space and method not in READS_SPACE:
        raise ConfigError("search.space", "is read only by the methods "
                          f"{', '.join(READS_SPACE)}; remove it or change search.method")


def unread_note(search: SearchSettings) -> str | None:
    """What `search` sets away from its defaults that its method never reads, said by --check
    and a new run's start; None when nothing. Said, not refused as an ignored `space` is: one
    experiment.yaml is commonly run under several methods to compare them, and these keys
    change nothing in a static plan. search.seed draws random's trials only: a run "with
    another seed" of any other method sets hparams' seed."""
    default = SearchSettings()

    def unread(keys: tuple[str, ...]) -> str:
        return ", ".join(f"search.{key}={shown(getattr(search, key))}" for key in keys
                         if getattr(search, key) != getattr(default, key))

    said = []
    entry = METHODS[search.method]
    if not entry.tree and (tree := unread(TREE_SETTINGS)):
        said.append(f"{tree}: {_named('tree')}'s tree search and early stopper alone do, so "
                    "they change nothing in this run")
    if not entry.seeded and (seed := unread(("seed",))):
        said.append(f"{seed}: the {_named('seeded')} method's draws alone do (the trainer seeds from "
                    "hparams' seed), so it changes nothing in this run")
    return f"{search.method} does not read {'; nor '.join(said)}" if said else None


def no_stopper(search: SearchSettings) -> str | None:
    """Why a run has no early stopper, said where its saving would be ("early stopping saved
    none" reads as a stopper that let every phase run); None when llmzero's monitor runs."""
    if not METHODS[search.method].tree:
        return f"{search.method} runs every phase to its planned end"
    return None if search.early_stopping else "search.early_stopping is false"


def shown(value: object) -> str:
    """As YAML writes it: `true`, `3` (not Python's `True`, `3.0`)."""
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)
