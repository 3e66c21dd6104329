"""The search methods by name: the one list of them. `make_method` loads a method's class
only when a run uses it, and experiment.yaml's `search:` section is checked against this list."""
from __future__ import annotations

from ..errors import ConfigError
from ..search.settings import SearchSettings

# name -> "module:Class"
METHODS: dict[str, str] = {
    "llmzero": "llmzero_slurm.methods.llmzero:LLMZeroMethod",
    "practitioner": "llmzero_slurm.methods.practitioner:PractitionerMethod",
    "random": "llmzero_slurm.methods.random_search:RandomSearchMethod",
    "grid": "llmzero_slurm.methods.grid:GridMethod",
    "guidebook": "llmzero_slurm.methods.guidebook:GuidebookMethod",
    "replay": "llmzero_slurm.methods.replay:ReplayMethod",
}
# The methods whose plan is drawn from `search.space` (methods/space.py), and llmzero, whose
# agents keep to it.
READS_SPACE = ("random", "grid", "guidebook", "llmzero")
# What llmzero alone reads: its tree policy's constants (search/policy.py, search/scoring.py)
# and its monitor job's. The other methods plan their phases without a tree or a stopper.
TREE_SETTINGS = ("exploration_c", "temperature", "fail_penalty", "early_penalty",
                 "fail_forgiven", "max_evolve_children", "max_debug_children", "max_debug_depth",
                 "min_scratch_ratio", "virtual_loss", "early_stopping", "early_stop_interval_s")


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
    if search.method != "llmzero" and (tree := unread(TREE_SETTINGS)):
        said.append(f"{tree}: llmzero's tree search and early stopper alone do, so they change "
                    "nothing in this run")
    if search.method != "random" and (seed := unread(("seed",))):
        said.append(f"{seed}: the random method's draws alone do (the trainer seeds from "
                    "hparams' seed), so it changes nothing in this run")
    return f"{search.method} does not read {'; nor '.join(said)}" if said else None


def no_stopper(search: SearchSettings) -> str | None:
    """Why a run has no early stopper, said where its saving would be ("early stopping saved
    none" reads as a stopper that let every phase run); None when llmzero's monitor runs."""
    if search.method != "llmzero":
        return f"{search.method} runs every phase to its planned end"
    return None if search.early_stopping else "search.early_stopping is false"


def shown(value: object) -> str:
    """As YAML writes it: `true`, `3` (not Python's `True`, `3.0`)."""
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)
