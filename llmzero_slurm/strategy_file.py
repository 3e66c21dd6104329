"""strategy.yaml: the best strategy of a search as a schedule another search can replay.

The report writes it; `search.method: replay` with `search.strategy_file` reads it. Format:

    format: llmzero-strategy/1
    experiment: add-cpu          # where it came from (informational)
    backend: cpu
    best_node: 7                 # the node with the best validation score
    best_val: 0.61
    best_val_step: 180           # global step of that score
    phases:                      # scratch first; phase i+1 resumes from phase i
    - node: 0                    # the source node (informational)
      kind: scratch
      start_step: 0              # global step the phase started at in the source search
      steps: 60                  # steps of this phase the strategy keeps: the next phase
                                 # resumed after them (the last phase: every step it trained)
      trained_steps: 100         # steps the phase trained in the source search
      resume_offset: null        # later phases: how far into the previous phase they resumed
                                 # (equals the previous phase's `steps`)
      diagnosis: "..."           # why the phase was started
      hparams: {lr: 0.001, ...}  # the phase's full configuration

Replay needs only `format`, and per phase `steps` and `hparams`: it trains each phase for
`steps` (as total_training_steps) and resumes the next from its last checkpoint. A key not
shown here is refused as a misspelling, and a `backend` other than the experiment's by name. Test-set
scores are left out on purpose: this file is an input to later searches.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from . import __version__
from .config import UniqueKeyLoader, read_yaml
from .errors import ConfigError
from .hparams import validate_hparams
from .store.atomic import write_text

FORMAT = "llmzero-strategy/1"
KEY = "search.strategy_file"
# What llmzero-report writes (report/strategy.py): any other key is a misspelling.
TOP_KEYS = ("format", "experiment", "backend", "best_node", "best_val", "best_val_step", "phases")
PHASE_KEYS = ("node", "kind", "start_step", "steps", "trained_steps", "resume_offset",
              "diagnosis", "hparams")


@dataclass(frozen=True)
class StrategyPhase:
    hparams: dict[str, Any]
    steps: int
    node: int | None = None


def write_strategy(document: dict[str, Any], path: Path) -> Path:
    header = ("# The best strategy of an llmzero-slurm search. Replay it on another task with\n"
              "#   search: {method: replay, strategy_file: <this file>}\n")
    write_text(path, header + yaml.safe_dump(document, sort_keys=False, width=100))
    return path


def _format_problem(given: Any) -> str:
    """Why a strategy of format `given` is not read: another release's is named as such."""
    if given is None:
        return f"is missing: a strategy.yaml written by llmzero-report begins with format: {FORMAT}"
    version = str(given).removeprefix("llmzero-strategy/")
    if str(given).startswith("llmzero-strategy/") and version.isdigit():
        newer = int(version) > int(FORMAT.rsplit("/", 1)[1])
        return (f"{given!r} is the format of {'a newer' if newer else 'an older'} llmzero-slurm; "
                f"this one ({__version__}) reads {FORMAT!r}: replay it with "
                f"{'that release or a later one' if newer else 'the release that wrote it'}")
    return f"must be {FORMAT!r} (got {given!r})"


def load_strategy(path: str | Path, backend: str) -> list[StrategyPhase]:
    """Read and check a strategy file; every error names the file and the key."""
    path = Path(path).expanduser()

    def bad(key: str, problem: str) -> ConfigError:
        return ConfigError(KEY, f"{path}: {key}: {problem}")

    if not path.exists():   # moved or removed with the report of its source run
        raise ConfigError(KEY, f"cannot read {path}: no such file; a replay reads its strategy "
                          "file at every start, a resume's too: put it back, or set "
                          "search.strategy_file to where it is now (in the run's own "
                          "experiment.yaml, for a run already made)")
    data = read_yaml(path, KEY, UniqueKeyLoader)   # a hand edit's second lr: not silently last
    if not isinstance(data, dict):
        raise bad("<top>", "must be a mapping (a strategy.yaml written by llmzero-report)")
    if data.get("format") != FORMAT:
        raise bad("format", _format_problem(data.get("format")))
    _known_keys(data, TOP_KEYS, "", "a strategy file", bad)
    if data.get("backend") not in (None, backend):
        raise bad("backend", f"is {data['backend']}, and this experiment's is {backend}: the "
                  "strategy's values (lr, lengths, batch sizes) are that trainer's; replay it "
                  f"with that backend, or write backend: {backend} in the file to try them here")
    raw = data.get("phases")
    if not isinstance(raw, list) or not raw:
        raise bad("phases", "must be a non-empty list of phases")
    phases: list[StrategyPhase] = []
    for i, entry in enumerate(raw):
        where = f"phases[{i}]"
        if not isinstance(entry, dict):
            raise bad(where, "must be a mapping with steps and hparams")
        _known_keys(entry, PHASE_KEYS, f"{where}.", "a phase", bad)
        if "steps" not in entry:
            raise bad(f"{where}.steps", "is missing: the steps this phase trains")
        steps = entry.get("steps")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise bad(f"{where}.steps", f"must be a positive integer (got {steps!r})")
        if not isinstance(entry.get("hparams"), dict):
            raise bad(f"{where}.hparams", "must be a mapping of hyperparameter: value")
        try:
            hparams = validate_hparams(entry["hparams"], backend)
        except ConfigError as exc:
            raise bad(f"{where}.hparams.{exc.key}", exc.problem) from None
        if phases and hparams.get("lora_rank") != phases[0].hparams.get("lora_rank"):
            raise bad(f"{where}.hparams.lora_rank",
                      "differs from phases[0]: a phase loads the previous phase's adapter")
        node = entry.get("node")
        phases.append(StrategyPhase(hparams, steps, node if isinstance(node, int) else None))
    return phases


def _known_keys(data: dict[Any, Any], known: tuple[str, ...], where: str, what: str,
                bad: Callable[[str, str], ConfigError]) -> None:
    """Refuse a key llmzero-report does not write: a hand edit's misspelt `step:` would
    otherwise read as a phase without steps, and a misspelt informational key vanish."""
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise bad(f"{where}{key}", f"is not a key of {what} ({hint}known: {', '.join(known)})")
