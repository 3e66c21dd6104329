"""The hyperparameter vocabulary shared by every trainer backend, agent and template.

One name per knob, spelled as verl's leaf key where verl has one, so an LLM that knows verl
reads it without translation. Every value that can reach a job script passes through
`validate_hparams`; it is the only gate, so rendering can trust what it receives.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import HyperparameterError

# Categories say how a knob may move between phases (paper §4.3: capacity accumulates,
# regularisation oscillates); agents and reports group by them.
CAPACITY = "capacity"
REGULARISATION = "regularisation"
BATCH = "batch"
SCHEDULE = "schedule"
MEMORY = "memory"
MODEL = "model"

# A phase's length: computed in code from its steps, never by an agent, and no change of
# strategy when it differs between phases.
LENGTH_KEYS = ("total_training_steps", "total_epochs")

# Why verl, which would train the whole model without a rank, needs one for this search.
VERL_NEEDS_LORA = ("every phase after the first starts from its parent's LoRA adapter, and with "
                   "none verl trains the whole model and saves no adapter to start from")

# fullmatch: `$` alone also matches before a final newline, which no script line may hold.
_SAFE_TEXT = re.compile(r"[A-Za-z0-9_.,:+\-]{1,64}")


@dataclass(frozen=True)
class Param:
    name: str
    type: type
    category: str
    description: str
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] | None = None
    backends: tuple[str, ...] | None = None   # the trainers that read it; None: every one
    nullable: bool = False
    # A trainer that needs more than `low`, or takes less than `high`: {backend: (bound, why)}.
    low_for: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    high_for: Mapping[str, tuple[float, str]] = field(default_factory=dict)

    def bounds(self, backend: str | None = None) -> tuple[float | None, float | None]:
        """The range a trainer takes: the general one narrowed by its own bounds."""
        low, high = self.low, self.high
        own_low, _ = self.low_for.get(backend or "", (low, ""))
        own_high, _ = self.high_for.get(backend or "", (high, ""))
        return (own_low if low is None or own_low is None else max(low, own_low),
                own_high if high is None or own_high is None else min(high, own_high))

    def read_by(self, backend: str) -> bool:
        """Whether the trainer `backend` reads this key: a new trainer reads the general ones."""
        return self.backends is None or backend in self.backends

    def check(self, value: Any, backend: str | None = None, written: bool = False) -> Any:
        """Return the value coerced to the declared type, or raise naming the key. `written`:
        see validate_hparams."""
        if value is None:
            if self.nullable:
                return None
            raise HyperparameterError(self.name, value, "must not be null")
        if self.type is bool:
            if not isinstance(value, bool):
                raise HyperparameterError(self.name, value, "must be true or false")
            return value
        if self.type is int:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise HyperparameterError(self.name, value, "must be an integer")
            if isinstance(value, float) and written:
                raise HyperparameterError(self.name, value, "must be an integer, without a "
                                                            "decimal point")
            if isinstance(value, float) and not value.is_integer():
                raise HyperparameterError(self.name, value, "must be an integer")
            value = int(value)
        elif self.type is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise HyperparameterError(self.name, value, not_a_number(value))
            value = float(value)
            if not math.isfinite(value):
                raise HyperparameterError(self.name, value, "must be finite")
        elif self.type is str:
            if not isinstance(value, str) or not _SAFE_TEXT.fullmatch(value):
                raise HyperparameterError(
                    self.name, value, "must be 1-64 characters of letters, digits and _.,:+-")
        if self.choices is not None and value not in self.choices:
            raise HyperparameterError(self.name, value, f"must be one of {list(self.choices)}")
        if self.low is not None and value < self.low:
            raise HyperparameterError(self.name, value, f"must be >= {self.low}")
        if self.high is not None and value > self.high:
            raise HyperparameterError(self.name, value, f"must be <= {self.high}")
        for sign, bounds in ((">=", self.low_for), ("<=", self.high_for)):
            bound, why = bounds.get(backend or "", (None, ""))
            if bound is not None and (value < bound if sign == ">=" else value > bound):
                raise HyperparameterError(self.name, value, f"must be {sign} {bound:g} with the "
                                                            f"{backend} backend: {why}")
        return value


def not_a_number(value: Any) -> str:
    """Why a value is no number, naming YAML 1.1's trap: PyYAML reads 1e-3 (no decimal point,
    or no sign after the e) as the text '1e-3', the way learning rates are usually written."""
    match = re.fullmatch(r"([-+]?[0-9]+)(\.[0-9]*)?[eE]([-+]?)([0-9]+)", str(value))
    if not isinstance(value, str) or match is None:
        return "must be a number"
    whole, point, sign, exponent = match.groups()
    written = f"{whole}{point or '.0'}e{sign or '+'}{exponent}"
    if written == value:   # a float to YAML too, so it was quoted
        return "must be a number, not quoted text"
    return f"must be a number; YAML reads {value} as text: write it as {written}"


def _p(*args: Any, **kwargs: Any) -> tuple[str, Param]:
    param = Param(*args, **kwargs)
    return param.name, param


PARAMS: dict[str, Param] = dict([
    # Optimisation and regularisation: free to move both ways between phases.
    _p("lr", float, REGULARISATION,
       "Actor learning rate. Too high shows as KL and grad-norm spikes then reward collapse; "
       "too low as a flat validation curve with tiny updates.", 1e-8, 1e-1),
    _p("weight_decay", float, REGULARISATION,
       "AdamW weight decay on the LoRA weights. Raise when training reward outruns validation.",
       0.0, 1.0),
    _p("grad_clip", float, REGULARISATION,
       "Maximum global gradient norm. Lower it when grad_norm spikes precede collapse.", 1e-4, 100.0),
    _p("kl_loss_coef", float, REGULARISATION,
       "Weight of the KL loss that ties the policy to the base model (adapter off). Raise it "
       "when KL climbs and rewards fall after it; lower it when learning has stalled.", 0.0, 10.0),
    _p("kl_loss_type", str, REGULARISATION,
       "Estimator of the KL loss.", choices=("low_var_kl", "kl", "abs", "mse", "k1", "k2", "k3")),
    _p("use_kl_loss", bool, REGULARISATION, "Add the KL loss to the policy loss."),
    _p("use_kl_in_reward", bool, REGULARISATION,
       "Subtract a KL penalty from the reward instead of (or besides) the KL loss."),
    _p("kl_in_reward_coef", float, REGULARISATION, "Coefficient of the in-reward KL penalty.",
       0.0, 10.0),
    _p("clip_ratio_low", float, REGULARISATION,
       "Lower PPO ratio clip (1 - low). Policy-ratio clipping, unrelated to response truncation.",
       0.0, 0.99),
    _p("clip_ratio_high", float, REGULARISATION,
       "Upper PPO ratio clip (1 + high). A higher bound lets rare tokens gain probability "
       "faster and keeps entropy up.", 0.0, 10.0),
    _p("temperature", float, REGULARISATION,
       "Sampling temperature of rollouts. Higher explores more; too low makes every sample in "
       "a group identical, so the group advantage is zero.", 0.05, 3.0),
    _p("entropy_coeff", float, REGULARISATION,
       "Entropy bonus. GRPO recipes keep it at 0.", 0.0, 0.1),
    _p("norm_adv_by_std_in_grpo", bool, REGULARISATION,
       "Divide group-relative advantages by the group's standard deviation."),
    # Capacity: only ever grows along a strategy.
    _p("rollout_n", int, CAPACITY,
       "Completions sampled per prompt (the GRPO group). More gives better advantage estimates "
       "at linear cost.", 2, 64),
    _p("max_response_length", int, CAPACITY,
       "Maximum generated tokens. Raise it when response_length/clip_ratio (truncation) is high.",
       1, 131072),
    _p("max_prompt_length", int, CAPACITY, "Maximum prompt tokens.", 1, 131072),
    _p("total_epochs", int, SCHEDULE, "Passes over the training set.", 1, 10000),
    _p("total_training_steps", int, SCHEDULE,
       "Steps this phase trains; when set it overrides the epoch count.", 1, 1000000,
       nullable=True),
    _p("save_freq", int, SCHEDULE, "Save a checkpoint every this many steps.", 1, 100000),
    _p("test_freq", int, SCHEDULE, "Validate every this many steps.", 1, 100000),
    _p("seed", int, SCHEDULE, "Random seed of data order and sampling.", 0, 2**31 - 1),
    # Batch shape.
    _p("train_batch_size", int, BATCH, "Prompts per training step.", 1, 65536),
    _p("ppo_mini_batch_size", int, BATCH,
       "Prompts per optimiser update; a step makes train_batch_size / ppo_mini_batch_size updates.",
       1, 65536),
    _p("ppo_micro_batch_size_per_gpu", int, BATCH,
       "Sequences per forward/backward pass on one device (gradient accumulation).", 1, 4096),
    _p("log_prob_micro_batch_size_per_gpu", int, BATCH,
       "Sequences per pass when recomputing log-probabilities.", 1, 4096),
    # LoRA: fixed along a strategy (a child loads its parent's adapter).
    _p("lora_rank", int, MODEL, "LoRA rank; fixed for every phase of a strategy.", 0, 1024,
       low_for={"cpu": (1, "it trains LoRA adapters only"), "verl": (1, VERL_NEEDS_LORA)},
       # verl 0.9.1 raises as its vLLM rollout starts (get_vllm_max_lora_rank); peft takes any.
       high_for={"verl": (512, "vLLM, verl's rollout engine, serves no LoRA rank above 512, "
                               "and verl fails such a phase as it starts")}),
    _p("lora_alpha", float, MODEL, "LoRA scaling numerator.", 0.0, 4096.0),
    _p("target_modules", str, MODEL, "Modules that get LoRA adapters (e.g. all-linear)."),
    # Rollout engine memory (verl only).
    _p("gpu_memory_utilization", float, MEMORY,
       "Fraction of GPU memory the rollout engine may take.", 0.05, 0.99, backends=("verl",)),
    _p("tensor_model_parallel_size", int, MEMORY,
       "GPUs that shard one rollout engine replica.", 1, 64, backends=("verl",)),
    _p("max_num_seqs", int, MEMORY,
       "Concurrent sequences in the rollout engine; lower on OOM.", 1, 65536, backends=("verl",)),
])

def validate_hparams(values: Mapping[str, Any], backend: str | None = None,
                     written: bool = False) -> dict[str, Any]:
    """Check a full or partial configuration; return a typed copy.

    Unknown keys, wrong types, out-of-range values and broken batch arithmetic are refused
    with an error naming the key, so nothing unchecked can reach a rendered script. An
    integer knob given as 8.0 is taken as 8 (an LLM's JSON may spell any number so), unless
    the values are `written` by a person in experiment.yaml, whose other integer settings
    refuse a float too.
    """
    if not isinstance(values, Mapping):
        raise HyperparameterError("<hparams>", values, "must be a mapping of name: value")
    out: dict[str, Any] = {}
    for key, value in values.items():
        param = PARAMS.get(key)
        if param is None:
            raise HyperparameterError(str(key)[:80], value, "is not a known hyperparameter "
                                      f"(known: {', '.join(sorted(PARAMS))})")
        if backend is not None and not param.read_by(backend):
            raise HyperparameterError(key, value, f"is not used by the {backend} backend")
        out[key] = param.check(value, backend, written)
    _check_batches(out)
    return out


def _check_batches(hp: Mapping[str, Any]) -> None:
    tbs, mini = hp.get("train_batch_size"), hp.get("ppo_mini_batch_size")
    if tbs is not None and mini is not None:
        if mini > tbs or tbs % mini:
            raise HyperparameterError(
                "ppo_mini_batch_size", mini, f"must divide train_batch_size ({tbs})")
    micro, n = hp.get("ppo_micro_batch_size_per_gpu"), hp.get("rollout_n")
    if mini is not None and micro is not None and n is not None and (mini * n) % micro:
        raise HyperparameterError(
            "ppo_micro_batch_size_per_gpu", micro,
            f"must divide ppo_mini_batch_size * rollout_n ({mini * n})")
    if hp.get("lora_rank") and hp.get("lora_alpha") == 0:
        raise HyperparameterError("lora_alpha", 0, "must be > 0 when lora_rank > 0")


def micro_batch_within(hp: Mapping[str, Any], at_most: float) -> int:
    """The largest ppo_micro_batch_size_per_gpu up to `at_most` (at least 1) that divides
    `hp`'s ppo_mini_batch_size * rollout_n, as _check_batches requires."""
    limit = max(1, int(at_most))
    mini, n = hp.get("ppo_mini_batch_size"), hp.get("rollout_n")
    if mini is None or n is None:
        return limit
    return max(d for d in range(1, limit + 1) if (mini * n) % d == 0)


def merge(base: Mapping[str, Any], changes: Mapping[str, Any],
          backend: str | None = None) -> dict[str, Any]:
    """A child's configuration: the parent's with the proposed changes, checked as a whole."""
    return validate_hparams({**base, **changes}, backend)


def knobs(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """A configuration without its length: a phase the budget cut short tried the same knobs,
    and a phase that only runs longer changed nothing of its strategy."""
    return {k: v for k, v in hparams.items() if k not in LENGTH_KEYS}
