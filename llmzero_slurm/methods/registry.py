"""The search methods by name: the one list of them. `make_method` loads a method's class
only when a run uses it, and experiment.yaml's `search:` section is checked against this list."""
from __future__ import annotations

from ..errors import ConfigError

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


def check_method(method: str, has_space: bool) -> None:
    """Refuse an unknown method, and a `search.space` that the method would ignore."""
    if method not in METHODS:
        raise ConfigError("search.method", f"must be one of {', '.join(METHODS)}")
    if has_space and method not in READS_SPACE:
        raise ConfigError("search.space", "is read only by the methods "
                          f"{', '.join(READS_SPACE)}; remove it or change search.method")
