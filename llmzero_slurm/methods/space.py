"""The hyperparameter spaces of the static baselines, with documented defaults per backend,
and the bounds of llmzero's agents.

`search.space` in experiment.yaml replaces the method's default space. It has one shape for
every method: each key is a hyperparameter of `hparams.PARAMS`; its value is either a plain
value (fixed in every trial or phase) or the method's kind of entry:

    random     {loguniform: [low, high]} | {uniform: [low, high]} | {choice: [a, b, ...]}
    grid       [a, b, ...]       swept; points are the Cartesian product in key order
    guidebook  [v1, v2, ...]     one value per phase; every list has the phase count's length
    llmzero    random's entries, or [a, b, ...] as a choice: bounds every proposal keeps to
               (no default: unset, the agents range over the vocabulary)

Defaults. verl follows the paper (Appendix B.2 / E.1, Tables 13-14). The cpu backend uses an
analogue scaled to the embedded trainer, whose tiny model learns at lr ~1e-3 and collapses at
1e-2: learning rates span that range, ranks and batches are its small sizes, and training
steps stand in for epochs (an epoch of a generated task has no fixed length).
"""
from __future__ import annotations

import itertools
import math
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import ConfigError
from ..hparams import PARAMS, merge, validate_hparams
from .distribution import Distribution

RANDOM_SPACES: dict[str, dict[str, Any]] = {
    "verl": {
        "lr": {"loguniform": [1e-5, 1e-4]},
        "kl_loss_coef": {"loguniform": [1e-5, 1e-3]},
        "temperature": {"uniform": [0.6, 1.2]},
        "clip_ratio_high": {"uniform": [0.15, 0.35]},
        "train_batch_size": {"choice": [64, 128, 256]},
        "lora_rank": {"choice": [16, 32, 64, 128]},
        "rollout_n": {"choice": [6, 8, 12]},
        "total_epochs": {"choice": [3, 5]},
        "max_response_length": {"choice": [4096, 8192]},
    },
    "cpu": {
        "lr": {"loguniform": [1e-4, 1e-2]},
        "kl_loss_coef": {"loguniform": [1e-3, 1e-1]},
        "temperature": {"uniform": [0.6, 1.2]},
        "clip_ratio_high": {"uniform": [0.15, 0.35]},
        "train_batch_size": {"choice": [8, 16, 32]},
        "lora_rank": {"choice": [4, 8, 16]},
        "rollout_n": {"choice": [4, 8, 12]},
        "total_training_steps": {"choice": [100, 200]},
    },
}

GRID_SPACES: dict[str, dict[str, Any]] = {
    "verl": {"lr": [1e-5, 3e-5, 5e-5, 1e-4], "lora_rank": [64, 128],
             "total_epochs": 5, "max_response_length": 8192},
    "cpu": {"lr": [3e-4, 1e-3, 3e-3, 1e-2], "lora_rank": [4, 8], "total_training_steps": 200},
}

# Capacity grows phase by phase; everything else stays at the experiment's hparams. The cpu
# phases are 50 steps so the trainer's default save_freq (25) lands a checkpoint at each end.
GUIDEBOOK_SCHEDULES: dict[str, dict[str, Any]] = {
    "verl": {"total_training_steps": 60, "max_response_length": [4096, 6144, 8192],
             "rollout_n": [6, 8, 12]},
    "cpu": {"total_training_steps": 50, "max_response_length": [4, 6, 8],
            "rollout_n": [4, 8, 12]},
}


# The methods that draw every phase's values from a space, with their default spaces.
DEFAULT_SPACES: dict[str, dict[str, dict[str, Any]]] = {
    "random": RANDOM_SPACES, "grid": GRID_SPACES, "guidebook": GUIDEBOOK_SCHEDULES}


def method_space(method: str, space: Mapping[str, Any], backend: str) -> Mapping[str, Any]:
    """The space `method` reads: search.space, else its default for `backend`; empty for a
    method without one (llmzero's agents: only what the bounds set)."""
    return space or DEFAULT_SPACES.get(method, {}).get(backend, {})


def length_limit(method: str, space: Mapping[str, Any], backend: str,
                 key: str) -> tuple[Any, str] | None:
    """The largest value of a length `key` any phase of `method` runs, and a phrase saying
    where it comes from; None when its phases keep hparams' value. Answers longer than that
    can never be written; a smaller value that cuts some off is a deliberate trade (a grid's
    cheap trials, a guidebook's curriculum), so it is not what binds."""
    spec = method_space(method, space, backend).get(key)
    if isinstance(spec, Mapping):        # {choice: [...]} or {uniform: [low, high]}
        spec = next(iter(spec.values()), None)
    values = [v for v in (spec if isinstance(spec, list) else [spec])
              if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not values:
        return None
    where = "search.space" if space else f"the {method} method's default space (search.space " \
                                         "replaces it)"
    return max(values), f"{where} gives no phase more than {key}={max(values)}"


def _where(key: str) -> str:
    return f"search.space.{key}"


def _check_value(key: str, value: Any, backend: str) -> Any:
    """One hyperparameter value, re-keyed so the error names its place in the config."""
    try:
        return validate_hparams({key: value}, backend, written=True)[key]
    except ConfigError as exc:
        raise ConfigError(_where(key), exc.problem) from None


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or key not in PARAMS:
        raise ConfigError(_where(str(key)[:80]), "is not a known hyperparameter "
                          f"(known: {', '.join(sorted(PARAMS))})")
    return key


def parse_random_space(space: Mapping[str, Any], backend: str) -> dict[str, Distribution]:
    out: dict[str, Distribution] = {}
    for key, spec in space.items():
        key = _check_key(key)
        if isinstance(spec, list):   # the grammar of grid's space, written for random's
            raise ConfigError(_where(key), "is a list, a grid's or guidebook's entry: random "
                              f"draws from {{choice: {spec}}}, {{uniform: [low, high]}} or "
                              "{loguniform: [low, high]}, or takes one fixed value")
        if not isinstance(spec, Mapping):
            out[key] = Distribution("fixed", (_check_value(key, spec, backend),))
            continue
        if len(spec) != 1 or next(iter(spec)) not in ("choice", "uniform", "loguniform"):
            raise ConfigError(_where(key), "must be a value or one of {choice: [...]}, "
                              "{uniform: [low, high]}, {loguniform: [low, high]}")
        kind, values = next(iter(spec.items()))
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{_where(key)}.{kind}", "must be a non-empty list")
        values = [_check_value(key, v, backend) for v in values]
        if kind != "choice":
            if len(values) != 2 or not values[0] < values[1]:
                raise ConfigError(f"{_where(key)}.{kind}", f"must be [low, high] with low < high (got {values})")
            if PARAMS[key].type not in (int, float):
                raise ConfigError(f"{_where(key)}.{kind}", "needs a numeric hyperparameter; "
                                  "use choice")
            if kind == "loguniform" and values[0] <= 0:
                raise ConfigError(f"{_where(key)}.{kind}", "needs low > 0")
        out[key] = Distribution(kind, tuple(values))
    return out


@dataclass(frozen=True)
class Bounds:
    """search.space of the llmzero method: what every phase the agents plan keeps to. An LLM's
    answer outside it goes back to the LLM; the offline agents move their knobs only as far as
    it allows. Empty: the vocabulary's own ranges alone. `job`: why the experiment's job
    could not run a configuration (a batch its GPUs cannot split), asked after the space."""

    keys: Mapping[str, Distribution]
    job: Callable[[Mapping[str, Any]], str | None] | None = None

    def problem(self, hparams: Mapping[str, Any]) -> str | None:
        for key, dist in self.keys.items():
            if key in hparams and not dist.admits(hparams[key]):
                return f"{key} {hparams[key]} is outside search.space ({key}: {dist.text()})"
        return self.job(hparams) if self.job else None

    def keeping(self, job: Callable[[Mapping[str, Any]], str | None]) -> "Bounds":
        return dataclasses.replace(self, job=job)

    def clamp(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return {k: self.keys[k].nearest(v) if k in self.keys else v for k, v in values.items()}

    def lines(self) -> list[str]:
        return [f"{key}: {dist.text()}" for key, dist in self.keys.items()]


NO_BOUNDS = Bounds({})


def parse_bounds(space: Mapping[str, Any], backend: str) -> Bounds:
    """random's grammar, a plain list being a choice too (as a grid or guidebook writes one).
    No total_epochs: code derives each phase's from its steps, so no answer could keep it."""
    if "total_epochs" in space:
        raise ConfigError(_where("total_epochs"), "cannot bound llmzero's phases: each phase's "
                          "epochs are computed from its steps; bound total_training_steps "
                          "instead")
    return Bounds(parse_random_space({k: {"choice": v} if isinstance(v, list) else v
                                      for k, v in space.items()}, backend))


def _lists(space: Mapping[str, Any], backend: str) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Split a grid/guidebook space into fixed values and per-key lists, all checked."""
    fixed: dict[str, Any] = {}
    lists: dict[str, list[Any]] = {}
    for key, spec in space.items():
        key = _check_key(key)
        if isinstance(spec, list):
            if not spec:
                raise ConfigError(_where(key), "must not be an empty list")
            lists[key] = [_check_value(key, v, backend) for v in spec]
        elif isinstance(spec, Mapping):
            raise ConfigError(_where(key), "must be a value or a list of values")
        else:
            fixed[key] = _check_value(key, spec, backend)
    return fixed, lists


def grid_points(space: Mapping[str, Any], backend: str) -> list[dict[str, Any]]:
    """Every point of the grid, first key varying slowest. A value listed twice would train
    the same configuration twice (1.0e-3 and 0.001 are one value), so it is refused."""
    fixed, lists = _lists(space, backend)
    for key, values in lists.items():
        twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if twice is not None:
            raise ConfigError(_where(key), f"lists {twice} twice: each grid point would run twice")
    return [{**dict(zip(lists, combo)), **fixed} for combo in itertools.product(*lists.values())]


def schedule_phases(space: Mapping[str, Any], backend: str) -> list[dict[str, Any]]:
    """The guidebook's phases: list entries give one value per phase, plain values repeat."""
    fixed, lists = _lists(space, backend)
    lengths = {len(v) for v in lists.values()}
    if len(lengths) > 1:
        detail = ", ".join(f"{k}: {len(v)}" for k, v in lists.items())
        raise ConfigError("search.space", f"every per-phase list needs the same length ({detail})")
    count = lengths.pop() if lengths else 1
    return [{**{k: v[i] for k, v in lists.items()}, **fixed} for i in range(count)]


def fit_batches(base: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """Keep the batch shape legal around sampled or swept batch sizes and rollout counts.

    Mini and micro batches are divisors of what they split, not choices of the space: when a
    drawn train_batch_size or rollout_n no longer divides evenly, each shrinks to the largest
    divisor of its configured value that fits (keys set by the space itself are left alone).
    """
    hp = {**base, **values}
    out = dict(values)
    tbs, mini = hp.get("train_batch_size"), hp.get("ppo_mini_batch_size")
    if tbs and mini and "ppo_mini_batch_size" not in values and tbs % mini:
        out["ppo_mini_batch_size"] = mini = math.gcd(mini, tbs)
    micro, n = hp.get("ppo_micro_batch_size_per_gpu"), hp.get("rollout_n")
    if mini and micro and n and "ppo_micro_batch_size_per_gpu" not in values and (mini * n) % micro:
        out["ppo_micro_batch_size_per_gpu"] = math.gcd(micro, mini * n)
    return out


def full_config(base: Mapping[str, Any], values: Mapping[str, Any], backend: str,
                what: str) -> dict[str, Any]:
    """The experiment's hparams with a trial's or phase's values, checked as a whole."""
    try:
        return merge(base, fit_batches(base, values), backend)
    except ConfigError as exc:
        raise ConfigError("search.space", f"{what} is not a valid configuration: {exc}") from None
