"""Keys verl 0.9.1 accepts but ignores, and raw overrides that would undo what the search
sets or break resuming from a phase's checkpoints: refused with the reason before any script
is written."""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

import yaml

from ...config import SHELL_VARIABLE
from ...errors import ConfigError, ConfigProblems
from ...hparams import LENGTH_KEYS
from ...schedulers.job_env import credential_written
from .grammar import parse_override
from .keys import FOLLOWERS, HPARAM_KEYS, PHASE_KEYS

# Keys that compose in verl 0.9.1 but have no effect there (checked in its source).
TRAPS: dict[str, str] = {
    "custom_reward_function": (
        "the top-level custom_reward_function.* still composes in verl 0.9.x but main_ppo "
        "never reads it; the reward function is reward.custom_reward_function.path/.name "
        "(set task.reward_path and task.reward_name)"),
    "reward_model": (
        "the top-level reward_model.* is verl's legacy layout and main_ppo ignores it; "
        "use reward.reward_model.*"),
    "actor_rollout_ref.actor.grad_clip": (
        "nothing in verl 0.9.1 reads actor.grad_clip; gradient clipping is "
        "actor_rollout_ref.actor.optim.clip_grad (set hparams.grad_clip)"),
}
# What to write instead of a trap that a misspelling is closest to ('grad_clipp').
INSTEAD: dict[str, str] = {
    "actor_rollout_ref.actor.grad_clip": "actor_rollout_ref.actor.optim.clip_grad (hparams.grad_clip)",
}


# Raw overrides that break resuming: a requeue of the phase and every child start from the
# complete step folders of its ckpt/, told by verl's tracker (VerlBackend.checkpoint_steps).
_DELETES = "verl then deletes older step folders, which child phases may still start from"
CHECKPOINT_BREAKERS: dict[str, str] = {
    "actor_rollout_ref.actor.checkpoint.async_save": (
        "with async_save verl 0.9.1 never writes latest_checkpointed_iteration.txt, so no "
        "step counts as saved: no child could start from the phase, and a requeue would "
        "restart it at step 0"),
    "trainer.max_actor_ckpt_to_keep": _DELETES,
    "trainer.remove_previous_ckpt_in_save": _DELETES,
    "trainer.del_local_ckpt_after_load": (
        "verl then deletes the step folder a requeued phase resumed from, which child phases "
        "may still start from"),
}
# The model shards hold the adapter a child exports and a requeue reloads.
RESUME_CONTENTS = ("actor_rollout_ref.actor.checkpoint.save_contents",
                   "actor_rollout_ref.actor.checkpoint.load_contents")


def checkpoint_problem(key: str, value: str | None) -> str | None:
    """Why a raw override would break resuming from the phase's checkpoints, or None (verl's
    own default, written out, breaks nothing)."""
    if value is not None and value.strip().lower() in ("false", "null", "~"):
        return None
    if key in RESUME_CONTENTS and value is not None:
        items = [v.strip(" '\"") for v in value.strip().strip("[]").split(",")]
        if "model" not in items:
            return ("must include model: the model shards hold the adapter that child "
                    "phases export and a requeued phase reloads")
    return CHECKPOINT_BREAKERS.get(key)


# A launch script's ` \` line continuation or trailing `$@`, copied with a line.
_SCRIPT_TAIL = re.compile(r"(?:\\|\s\$[@*]|\s\"\$[@*]\")$")
_FALSE = ("false", "no", "off", "0", "null", "~")


def value_problem(key: str, value: str | None) -> str | None:
    """Why an override's value would not do in a phase what it did in a launch script, or None."""
    text = (value or "").strip()
    if tail := _SCRIPT_TAIL.search(text):
        return (f"ends with {tail[0].strip()!r}, a launch script's line continuation (or its "
                "arguments): take it off")
    if len(text) > 2 and text[0] == text[-1] and text[0] in "'\"" and text[1] in "[{":
        return (f"{text[0]}{text[1]}...{text[-2]}{text[-1]} is quoted as a launch script quotes "
                "it for its shell, but here the quotes reach Hydra, which reads one string: "
                f"write {text[1:-1]} without them")
    found = SHELL_VARIABLE.search(text)
    if found:
        name = found[0].strip("${}")
        return (f"{found[0]} is a shell variable, which a launch script's shell expands; the "
                "phase script passes overrides to verl as written, so verl would read it "
                f"literally: write the value out, or ${{oc.env:{name}}} for the job's own")
    if key == "data.shuffle" and (value or "").strip(" '\"").lower() in _FALSE:
        return ("every phase is a new verl run, which reads the training set from its first "
                "batch: in order, each phase of a strategy would train again on the rows its "
                "first phase began with (llmzero shuffles with data.seed = seed + the phase's "
                "start step): drop it")
    return None


def trap_reason(key: str) -> str | None:
    """Why a key must not be set, or None when it is fine."""
    for trap, reason in TRAPS.items():
        if key == trap or key.startswith(trap + "."):
            return reason
    return None


# An entry of a mapping an override gives: {OPENAI_API_KEY: sk-..., ...}.
_ENTRY = re.compile(r"(?:^|[{,\s])([A-Za-z_][A-Za-z0-9_]*)\s*:")


def credential_problem(prefix: str, key: str, value: str | None, names: Iterable[str],
                       keep: Iterable[str]) -> str | None:
    """Why an override sets a credential (job_env.credential_written), or None: the variable
    is its key's last part (`...runtime_env.env_vars.OPENAI_API_KEY=`) or an entry of the
    mapping it gives. The override would be written into every phase script as it is."""
    if prefix == "~":
        return None
    for name in [key.rsplit(".", 1)[-1], *_ENTRY.findall(value or "")]:
        if why := credential_written(name, value or "", names, keep):
            return why
    return None


def check_raw_overrides(overrides: Iterable[str], names: Iterable[str] = (),
                        keep: Iterable[str] = ()) -> None:
    """Refuse user overrides that are traps, that break resuming, or that would undo what the
    search sets per phase, or freeze a key that follows one of those, or that set a
    credential: `names` the LLM key's variable, `keep` those the trainer's loggers read. Every
    refusal at once, each with what to write instead: a pasted launch script has dozens."""
    managed = {key: name for name, keys in HPARAM_KEYS.items() for key in keys}
    problems = ConfigProblems()
    for text in overrides:
        with problems.collect():
            prefix, key, value = parse_override(text)
            reason = trap_reason(key) or credential_problem(prefix, key, value, names, keep)
            followed = FOLLOWERS.get(key, key)
            via = "" if followed == key else \
                f"follows {followed} (verl's default interpolates it), which "
            if not reason and followed in managed:
                name, line = managed[followed], f"{managed[followed]}: {yaml_spelling(value)}"
                # A launch script's length is its whole run's; here a run is a tree of phases.
                keeps = ("it is each phase's length here, a run's being search.budget_*" if
                         name in LENGTH_KEYS else f"`{line}` in search.space keeps it for the "
                         "whole run")
                reason = f"{via}is set from hparams.{name}" + (
                    f": write `{line}` under hparams: instead (the search's first phase starts "
                    f"from it; {keeps})" if not via and value is not None else
                    "; change that instead")
            elif not reason and followed in PHASE_KEYS:
                # verl's own two loggers are always on; `~key` has no value to show
                shown = "..." if value is None else yaml_spelling(
                    value, without=("console", "file") if key == "trainer.logger" else ())
                reason = f"{via}is set per phase by llmzero: " \
                    + PHASE_KEYS[followed].format(value=shown)
            reason = reason or value_problem(key, value) or checkpoint_problem(key, value)
            if reason:
                raise ConfigError(f"trainer.overrides: {key}", reason)
    problems.raise_all("trainer.overrides")


def yaml_spelling(value: str | None, without: Sequence[str] = ()) -> str:
    """A Hydra override's value as YAML reads it back (`3e-6` as 3.0e-06: YAML 1.1 reads the
    former as text), the shell's quotes and line continuation a pasted launch script kept
    taken off; list items in `without` left out."""
    text = _SCRIPT_TAIL.sub("", (value or "").strip()).strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    items: Any
    if text.startswith("[") and text.endswith("]"):
        items = [v.strip(" '\"") for v in text[1:-1].split(",") if v.strip(" '\"")]
        items = [v for v in items if v not in without]
    else:
        items = {"true": True, "false": False}.get(text.lower(), text)
        for kind in (int, float):
            try:
                items = kind(text)
                break
            except ValueError:
                pass
    return yaml.safe_dump([items], default_flow_style=True, width=1 << 16).strip()[1:-1]


def check_traps(overrides: Sequence[str]) -> None:
    """Refuse a complete override list containing a verl 0.9.1 trap.

    Besides the dead keys, `lora_adapter_path` is ignored by verl unless `lora_rank > 0`, so
    an evolve phase would silently restart from the base model; and under LoRA a `dummy`
    load_format leaves the rollout engine on random weights.
    """
    settings: dict[str, str | None] = {}
    for text in overrides:
        _, key, value = parse_override(text)
        reason = trap_reason(key)
        if reason:
            raise ConfigError(key, reason)
        settings[key] = value
    rank = settings.get("actor_rollout_ref.model.lora_rank") or "0"
    lora = rank.isdigit() and int(rank) > 0
    if lora and settings.get("actor_rollout_ref.rollout.load_format") == "dummy":
        raise ConfigError("actor_rollout_ref.rollout.load_format",
                          "with LoRA verl syncs only the adapter to the rollout engine, which "
                          "would generate from random weights: leave load_format to llmzero "
                          "(safetensors)")
    adapter = settings.get("actor_rollout_ref.model.lora_adapter_path")
    if adapter not in (None, "null"):
        if not lora:
            raise ConfigError("actor_rollout_ref.model.lora_adapter_path",
                              "verl ignores lora_adapter_path unless actor_rollout_ref.model."
                              f"lora_rank > 0 (lora_rank is {rank}); the phase would start "
                              "from the base model")
