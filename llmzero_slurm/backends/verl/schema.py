"""Check a verl override list against verl's own Hydra schema before anything is submitted.

Composing `ppo_trainer` with Hydra's compose API from the installed package's config directory
is exactly what `python3 -m verl.trainer.main_ppo` does at start-up, so a misspelt key fails
here on the login node instead of after a job has waited in the queue for GPUs. It needs only
hydra-core and verl installed with `--no-deps` (verl itself is never imported). Where they are
missing, `check_overrides` says so and returns instead of failing: a login node may lack them.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any, Sequence

from ...errors import ConfigError
from .grammar import parse_override
from .traps import check_traps

CONFIG_NAME = "ppo_trainer"
# Keys main_ppo needs that verl leaves missing or fills with a placeholder default.
REQUIRED_SET = ("actor_rollout_ref.model.path",)
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
    try:
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            cfg = hydra_compose(CONFIG_NAME, overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_bad_key(exc, overrides), "verl 0.9.1's config refuses it: "
                          + str(exc).strip().splitlines()[0]) from None
    _check_required(cfg, overrides)
    return cfg


def check_overrides(overrides: Sequence[str]) -> str | None:
    """Compose and check; return None when checked, or the reason the check was skipped."""
    reason = unavailable_reason()
    if reason:
        return f"verl override list not checked on this machine: {reason}"
    compose(overrides)
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
