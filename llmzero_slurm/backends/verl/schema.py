"""Check a verl override list against verl's own Hydra schema before anything is submitted.

Composing `ppo_trainer` with Hydra's compose API from the installed package's config directory
is exactly what `python3 -m verl.trainer.main_ppo` does at start-up, so a misspelt key fails
here on the login node instead of after a job has waited in the queue for GPUs. It needs only
hydra-core (with its dependencies) and verl installed with `--no-deps` (verl itself is never
imported). Where they are missing, `check_overrides` says so and returns instead of failing: a
login node may lack them.
"""
from __future__ import annotations

import difflib
import importlib.util
import re
from pathlib import Path
from typing import Any, Sequence

from ...errors import ConfigError, ConfigProblems
from .grammar import parse_override
from .keys import WHOLE_FLOATS
from .traps import INSTEAD, check_traps

CONFIG_NAME = "ppo_trainer"
# Keys main_ppo needs that verl leaves missing or fills with a placeholder default.
REQUIRED_SET = ("actor_rollout_ref.model.path",)
HYDRA_NEEDS = ("omegaconf", "antlr4")   # what hydra-core imports; absent after --no-deps
_BAD_OVERRIDE = re.compile(r"override '([^']+)'|key '([^']+)'|at '([^']+)'", re.IGNORECASE)


def verl_config_dir() -> Path | None:
    """verl's Hydra config directory, found without importing verl (which needs torch, ray...)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"
    return path if (path / f"{CONFIG_NAME}.yaml").is_file() else None


def unavailable_reason() -> str | None:
    """Why the schema check cannot run here, or None when it can."""
    if importlib.util.find_spec("hydra") is None:
        return "hydra-core is not installed (pip install hydra-core)"
    missing = [m for m in HYDRA_NEEDS if importlib.util.find_spec(m) is None]
    if missing:     # hydra-core installed with --no-deps: importing it would fail
        return (f"hydra-core's dependencies are not installed ({', '.join(missing)}): "
                "pip install hydra-core, without --no-deps")
    if verl_config_dir() is None:
        return ("verl's config is not installed (pip install --no-deps verl==0.9.1 "
                "gives it without verl's GPU dependencies)")
    return None


def compose(overrides: Sequence[str]) -> Any:
    """verl's resolved `ppo_trainer` config with the overrides applied.

    Raises ConfigError naming the offending key when verl's schema refuses an override, an
    interpolation cannot be resolved, or a mandatory key is left unset.
    """
    reason = unavailable_reason()
    if reason:
        raise ConfigError("<verl schema>", f"cannot check overrides: {reason}")
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    check_traps(overrides)
    defaults = None
    try:
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            defaults = hydra_compose(CONFIG_NAME)
            cfg = hydra_compose(CONFIG_NAME, overrides=list(overrides))
        _check_new_keys_and_types(defaults, cfg, overrides)
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as exc:
        key = _bad_key(exc, overrides)
        first = str(exc).strip().splitlines()[0].rstrip(".")
        raise ConfigError(key, "verl 0.9.1's config refuses it: " + first
                          + (_did_you_mean(defaults, key) or _plus_hint(first, key, overrides))
                          ) from None
    _check_required(cfg, overrides)
    _check_gpu_split(cfg)
    return cfg


def verl_default(key: str) -> Any:
    """verl's own value of `key` where no override sets it, or None where its config cannot
    be read here."""
    if unavailable_reason():
        return None
    from hydra import compose as hydra_compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return OmegaConf.select(hydra_compose(CONFIG_NAME), key)


def _check_gpu_split(cfg: Any) -> None:
    """verl's rules for splitting the work over the job's GPUs: its validate_config refuses
    the first batch rule as the job starts, after its wait in the queue; the rollout replica
    is checked once the actor is loaded on every GPU (engine_workers.init_model), and the
    other batch rules only at the first log-probabilities or actor update (engine_workers.
    infer_batch and train_mini_batch, engine.utils.prepare_micro_batches), after a validation
    pass and a rollout."""
    n_gpus = cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes
    rollout = cfg.actor_rollout_ref.rollout
    replica = (rollout.tensor_model_parallel_size * rollout.data_parallel_size
               * rollout.pipeline_model_parallel_size)
    if n_gpus % replica:
        raise ConfigError("hparams.tensor_model_parallel_size", f"the {replica} GPUs of a rollout "
                          f"replica must divide the job's {n_gpus} (tensor x data x pipeline "
                          "parallel sizes of the rollout engine)")
    actor = cfg.actor_rollout_ref.actor
    if actor.use_dynamic_bsz:
        return      # token-budgeted micro-batches
    for section, name in ((actor, "ppo_micro_batch_size"),
                          (cfg.actor_rollout_ref.rollout, "log_prob_micro_batch_size")):
        if section[name] is None and section[f"{name}_per_gpu"] is None:
            raise ConfigError(f"hparams.{name}_per_gpu", "must be set: "
                              "verl 0.9.1 has no default, and its validate_config refuses the "
                              "phase as the job starts")
    if actor.strategy not in ("fsdp", "fsdp2"):
        return      # Megatron's own parallel layout
    ranks = n_gpus // max(1, actor.fsdp_config.ulysses_sequence_parallel_size)
    n = cfg.actor_rollout_ref.rollout.n
    step, update = cfg.data.train_batch_size * n, actor.ppo_mini_batch_size * n
    micro = actor.ppo_micro_batch_size_per_gpu
    if step % n_gpus:
        raise ConfigError("hparams.train_batch_size", f"train_batch_size x rollout_n: {step} "
                          f"responses a step must split evenly over the job's {n_gpus} GPUs")
    if update % ranks:
        raise ConfigError("hparams.ppo_mini_batch_size", f"ppo_mini_batch_size x rollout_n: "
                          f"{update} responses an update must split evenly over {ranks} GPUs "
                          "(data-parallel ranks)")
    if micro and (update // ranks) % micro:
        raise ConfigError("hparams.ppo_micro_batch_size_per_gpu", f"is {micro}, but must divide "
                          f"the {update // ranks} responses each of the {ranks} GPUs gets per "
                          "update (ppo_mini_batch_size x rollout_n / GPUs)")
    log_prob = rollout.log_prob_micro_batch_size_per_gpu
    if log_prob and (step // ranks) % log_prob:
        raise ConfigError("hparams.log_prob_micro_batch_size_per_gpu", f"is {log_prob}, but "
                          f"must divide the {step // ranks} responses each of the {ranks} GPUs "
                          "gets per step (train_batch_size x rollout_n / GPUs)")


def _check_new_keys_and_types(defaults: Any, cfg: Any, overrides: Sequence[str]) -> None:
    """What Hydra lets through and verl trips on later: a `+key` added to a section verl turns
    into a dataclass (its `_target_`), which has no such field (usually a misspelling), and a
    value whose type differs from the default's (`use_remove_padding=ture` is a string)."""
    from omegaconf import OmegaConf

    for text in overrides:
        prefix, key, value = parse_override(text)
        if prefix == "~" or value is None:
            continue
        section_key, _, leaf = key.rpartition(".")
        section = OmegaConf.select(defaults, section_key) if section_key else defaults
        if not OmegaConf.is_dict(section):
            continue
        if leaf not in section.keys():    # `in section` is False for a MISSING (???) value
            if "_target_" in section:
                raise ConfigError(key, f"verl 0.9.1 has no '{leaf}' in {section_key} (read "
                                  f"into {section['_target_']}, which refuses unknown fields)"
                                  + _did_you_mean(defaults, key))
            continue
        if OmegaConf.is_missing(section, leaf) or OmegaConf.is_interpolation(section, leaf):
            continue
        default, given = section[leaf], OmegaConf.select(cfg, key)
        target = section.get("_target_")
        int_field = type(default) is int and target is not None \
            and leaf not in WHOLE_FLOATS.get(target, ())
        # Outside a dataclass's int field a number is a number (entropy_coeff's default is 0).
        wanted = (int,) if int_field else \
            {bool: (bool,), int: (int, float), float: (int, float)}.get(type(default))
        if wanted and given is not None and (type(given) not in wanted):
            raise ConfigError(key, f"is {given!r} ({type(given).__name__}), but verl's "
                              f"default {default!r} is a "
                              f"{'boolean' if isinstance(default, bool) else 'number'}"
                              + ("; write true or false" if isinstance(default, bool) else "")
                              + (f", and {target} declares it an int: write a whole number"
                                 if int_field else ""))


def _plus_hint(refusal: str, key: str, overrides: Sequence[str]) -> str:
    """What to write for Hydra's two refusals of a `+` (Hydra's own hint is on a line the
    refusal leaves out): a key verl's config has takes none, one it lacks needs it."""
    if refusal.startswith("Could not append to config"):
        return "; verl's config has the key: write it without the leading +"
    if refusal.startswith("Could not override"):
        value = next((v for _, k, v in map(parse_override, overrides) if k == key), None)
        return f"; verl's config has no such key: append it as +{key}={value}"
    return ""


def _did_you_mean(defaults: Any, key: str) -> str:
    """'; did you mean K?' with the key of `key`'s section in verl's config closest to it (a
    misspelling), or ''. A key verl ignores (a trap) is never the answer: what replaces it is."""
    from omegaconf import OmegaConf

    section_key, _, leaf = key.rpartition(".")
    if defaults is None:
        return ""
    section = OmegaConf.select(defaults, section_key) if section_key else defaults
    if not OmegaConf.is_dict(section) or leaf in section.keys():
        return ""
    close = difflib.get_close_matches(leaf, [str(k) for k in section.keys()], n=1)
    if not close:
        return ""
    found = f"{section_key}.{close[0]}" if section_key else close[0]
    return f"; did you mean {INSTEAD.get(found, found)}?"


def check_overrides(overrides: Sequence[str]) -> str | None:
    """Compose and check; return None when checked, or the reason the check was skipped.
    Hydra stops at the first override it refuses: each refused one is taken out and the rest
    composed again, so that every one is named at once (ConfigErrors), not one per round."""
    reason = unavailable_reason()
    if reason:
        return f"verl override list not checked on this machine: {reason}"
    problems, left = ConfigProblems(), list(overrides)
    while True:
        try:
            compose(left)
            break
        except ConfigError as exc:
            problems.errors += exc.errors
            refused = {e.key for e in exc.errors}
            kept = [o for o in left if parse_override(o)[1] not in refused]
            if len(kept) == len(left):   # not one override's own problem: nothing to take out
                break
            left = kept
    problems.raise_all("verl 0.9.1's config")
    return None


def _check_required(cfg: Any, overrides: Sequence[str]) -> None:
    from omegaconf import OmegaConf

    rollout = cfg.actor_rollout_ref.rollout
    if OmegaConf.is_missing(rollout, "name"):
        raise ConfigError("actor_rollout_ref.rollout.name",
                          "is mandatory in verl 0.9.1 (vllm or sglang)")
    given = {parse_override(text)[1] for text in overrides}
    for key in REQUIRED_SET:
        if key not in given:
            raise ConfigError(key, "must be set: verl's default is a placeholder path")
    model = cfg.actor_rollout_ref.model
    if model.lora_adapter_path is not None and int(model.lora_rank) <= 0:
        raise ConfigError("actor_rollout_ref.model.lora_adapter_path",
                          "is ignored by verl unless lora_rank > 0")
    if any(value is not None for value in cfg.custom_reward_function.values()):
        raise ConfigError("custom_reward_function",
                          "is ignored by verl 0.9.1; use reward.custom_reward_function.*")


def _bad_key(exc: Exception, overrides: Sequence[str]) -> str:
    """The key an exception is about, preferring one that appears in the override list."""
    text = str(exc)
    keys = [parse_override(o)[1] for o in overrides]
    for match in _BAD_OVERRIDE.finditer(text):
        found = next(g for g in match.groups() if g)
        for key in keys:
            if key == found or key.endswith("." + found) or found.endswith(key):
                return key
        return found
    for key in keys:
        if key in text:
            return key
    return "<verl overrides>"
