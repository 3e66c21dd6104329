"""Turn an agent's raw answer into checked values, or say precisely what is wrong with it.

An `AnswerError` message is written for the LLM: it is sent back verbatim in the single repair
round, so it names the field, the value and the rule. Nothing an LLM writes reaches a script
without passing `hparams.merge` here.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ..backends.base import TrainerBackend
from ..errors import HyperparameterError
from ..hparams import CAPACITY, LENGTH_KEYS, MODEL, PARAMS, knobs, merge
from ..methods.space import Bounds

STEPS = "total_training_steps"
PROPOSAL_FIELDS = ("diagnosis", "changes", "checkpoint_step", "additional_steps", "no_change")
MAX_ADDITIONAL_STEPS = 100000
FAILURE_CLASSES = ("oom", "timeout", "node_fault", "user_code", "setup", "unknown")
FIX_ACTIONS = ("change", "retry", "give_up")
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)


class AnswerError(ValueError):
    """The answer cannot be used; the message tells the LLM what to fix."""


class NothingUntried(Exception):
    """No proposal is left for the parent that no sibling took and search.space allows; the
    message says why. The parent takes no more children, rather than training one again."""


@dataclass
class Proposal:
    diagnosis: str
    changes: dict[str, Any]
    checkpoint: int | None          # a parent's saved global step; None = from scratch
    additional_steps: int
    hparams: dict[str, Any]         # the child's full validated configuration
    source: str = "heuristic"       # which backend produced it


@dataclass
class Fix:
    failure: str                    # one of FAILURE_CLASSES
    action: str                     # one of FIX_ACTIONS
    changes: dict[str, Any] = field(default_factory=dict)
    hparams: dict[str, Any] = field(default_factory=dict)
    message: str = ""               # for the user when the chain should stop
    source: str = "heuristic"


def extract_json(text: str) -> dict[str, Any]:
    """The answer's JSON object: the last fenced block, else the last balanced {...}."""
    blocks = _FENCED.findall(text)
    candidates = blocks[::-1] or _balanced_objects(text)
    if not candidates:
        raise AnswerError("no JSON object found; end your answer with one ```json block")
    try:
        data = json.loads(candidates[0])
    except json.JSONDecodeError as exc:
        raise AnswerError(f"the JSON block is not valid JSON ({exc.msg} at line {exc.lineno} "
                          f"column {exc.colno})") from None
    except RecursionError:   # a few KB of brackets exhaust the decoder's stack
        raise AnswerError("the JSON block is nested too deeply; give one flat object of the "
                          "requested fields") from None
    except ValueError as exc:    # an integer past Python's digit limit (sys.int_info)
        digits = re.search(r"has (\d+) digits", str(exc))
        raise AnswerError(f"the JSON block holds a number of {digits[1] if digits else 'too many'} "
                          "digits; give each value as a plain number") from None
    if not isinstance(data, dict):
        raise AnswerError("the JSON block must be an object")
    return data


def _balanced_objects(text: str) -> list[str]:
    """Top-level {...} spans, last first."""
    spans, depth, start = [], 0, -1
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                spans.append(text[start:i + 1])
    return spans[::-1]


def _int_field(data: Mapping[str, Any], key: str, low: int, high: int) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not value.is_integer()):
        raise AnswerError(f"'{key}' must be an integer, got {value!r:.60}")
    if not low <= value <= high:
        raise AnswerError(f"'{key}' must be between {low} and {high}, got {value}")
    return int(value)


def _changes(data: Mapping[str, Any], parent: Mapping[str, Any], resuming: bool,
             backend: TrainerBackend) -> tuple[dict[str, Any], dict[str, Any]]:
    changes = data.get("changes", {})
    if not isinstance(changes, dict):
        raise AnswerError("'changes' must be an object of hyperparameter: value")
    for key in LENGTH_KEYS:
        if key in changes:
            raise AnswerError(f"do not set '{key}' in changes: the system computes it from "
                              "additional_steps")
    try:
        hparams = merge(parent, changes, backend.name)
    except HyperparameterError as exc:
        raise AnswerError(f"changes: {exc}") from None
    if resuming:
        _same_adapter(parent, hparams)
        for key, value in hparams.items():
            param, old = PARAMS[key], parent.get(key)
            if old is None or value == old:
                continue
            if param.category == CAPACITY and value < old:
                raise AnswerError(f"changes: '{key}' may not shrink when resuming (parent "
                                  f"{old}, proposed {value}); capacity only grows along a "
                                  "strategy")
    return {k: hparams[k] for k in changes}, hparams


def _same_adapter(parent: Mapping[str, Any], hparams: Mapping[str, Any]) -> None:
    """A resumed phase loads an adapter trained with the parent's LoRA settings; the trainer
    refuses another shape (exit 2), which would end the chain."""
    for key, value in hparams.items():
        old = parent.get(key)
        if PARAMS[key].category == MODEL and old is not None and value != old:
            raise AnswerError(f"changes: '{key}' cannot change when resuming from a "
                              f"checkpoint (the adapter has {key}={old})")


def schedule(parent: Mapping[str, Any], hparams: dict[str, Any], additional_steps: int,
             backend: TrainerBackend) -> dict[str, Any]:
    """Set the phase length: `total_training_steps`, and enough epochs for the dataloader.

    The parent's steps per epoch scale with the batch-size ratio, so a new batch size keeps
    the epoch count consistent (the arithmetic the paper left to the LLM).
    """
    out = dict(hparams, total_training_steps=additional_steps)
    old_steps, old_epochs = parent.get(STEPS), parent.get("total_epochs")
    old_bs, new_bs = parent.get("train_batch_size"), hparams.get("train_batch_size")
    if old_steps and old_epochs and old_bs and new_bs:
        steps_per_epoch = old_steps / old_epochs * old_bs / new_bs
        out["total_epochs"] = max(1, math.ceil(additional_steps / steps_per_epoch))
    return merge({}, out, backend.name)


def _within(bounds: Bounds | None, hparams: Mapping[str, Any]) -> None:
    """The user's search.space holds for the whole configuration, the phase's length too."""
    problem = bounds.problem(hparams) if bounds else None
    if problem:
        raise AnswerError(problem)


# A child already tried from a parent: the checkpoint it started from (None: the base model)
# and its configuration. The same knobs from another start are another experiment.
Tried = tuple[int | None, Mapping[str, Any]]


def _untried(planned: Mapping[str, Any], start: int | None, parent: Mapping[str, Any],
             scratch_only: bool, taken: Sequence[Tried]) -> None:
    """Not a configuration tried from the parent; a forced fresh start not the parent's own."""
    if scratch_only and knobs(planned) == knobs(parent):
        raise AnswerError("a fresh strategy must not repeat the configuration above: change at "
                          "least one value")
    if (start, knobs(planned)) in [(at, knobs(hp)) for at, hp in taken]:
        raise AnswerError("this configuration repeats a configuration already tried from this "
                          "point (listed with how each did); propose a different one")


def check_proposal(data: Mapping[str, Any], parent: Mapping[str, Any], checkpoints: list[int],
                   scratch_only: bool, backend: TrainerBackend, source: str,
                   bounds: Bounds | None = None,
                   taken: Sequence[Tried] = ()) -> Proposal:
    """Every rule a proposal must meet, whoever wrote it (LLM or heuristic). `taken`: the
    children already tried from the parent (its siblings, defaults filled in)."""
    unknown = sorted(str(k) for k in data if k not in PROPOSAL_FIELDS)
    if unknown:
        raise AnswerError(f"unknown field(s) {', '.join(repr(k[:40]) for k in unknown[:5])}: the "
                          f"answer's fields are {', '.join(PROPOSAL_FIELDS)}; hyperparameter "
                          "changes go under 'changes'")
    diagnosis = data.get("diagnosis")
    if not isinstance(diagnosis, str) or not diagnosis.strip():
        raise AnswerError("'diagnosis' must be a non-empty string")
    step = data.get("checkpoint_step")
    if step is not None:
        if scratch_only:
            raise AnswerError("this proposal must train from scratch: set checkpoint_step to "
                              "null")
        if isinstance(step, bool) or not isinstance(step, int) or step not in checkpoints:
            raise AnswerError(f"checkpoint_step {step!r:.40} is not a saved step; choose one of "
                              f"{checkpoints} or null for scratch")
    additional = _int_field(data, "additional_steps", 1, MAX_ADDITIONAL_STEPS)
    changes, hparams = _changes(data, parent, step is not None, backend)
    if step is not None and hparams == dict(parent) and data.get("no_change") is not True:
        raise AnswerError("'changes' leave the parent's configuration as it is, so the child "
                          "would repeat its parent; change a value, or set \"no_change\": true "
                          "to continue training unchanged")
    planned = schedule(parent, hparams, additional, backend)
    _untried(planned, step, parent, scratch_only, taken)
    _within(bounds, planned)
    return Proposal(diagnosis.strip()[:4000], changes, step, additional, planned, source)


def check_fix(data: Mapping[str, Any], hparams: Mapping[str, Any], backend: TrainerBackend,
              source: str, resuming: bool = False, bounds: Bounds | None = None) -> Fix:
    """`resuming`: the debug child loads a checkpoint, so its LoRA settings are fixed."""
    failure, action = data.get("class"), data.get("action")
    if failure not in FAILURE_CLASSES:
        raise AnswerError(f"'class' must be one of {list(FAILURE_CLASSES)}, got {failure!r:.40}")
    if action not in FIX_ACTIONS:
        raise AnswerError(f"'action' must be one of {list(FIX_ACTIONS)}, got {action!r:.40}")
    message = data.get("message", "")
    if not isinstance(message, str):
        raise AnswerError("'message' must be a string")
    if action == "give_up" and not message.strip():
        raise AnswerError("'message' must tell the user what to do when action is give_up")
    if action != "change":
        return Fix(failure, action, {}, dict(hparams), message.strip()[:2000], source)
    changes = data.get("changes")
    if not isinstance(changes, dict) or not changes:
        raise AnswerError("action 'change' needs a non-empty 'changes' object")
    merged = _fix_schedule(changes, hparams, backend)
    if resuming:
        _same_adapter(hparams, merged)
    _fix_within(bounds, hparams, merged)
    if merged == dict(hparams):
        raise AnswerError("'changes' repeat the failed configuration; change something or use "
                          "action 'retry'")
    return Fix(failure, action, {k: merged[k] for k in changes}, merged, message.strip()[:2000],
               source)


def _fix_within(bounds: Bounds | None, failed: Mapping[str, Any],
                fixed: Mapping[str, Any]) -> None:
    """search.space holds for a fix as for a proposal, except that a fix may keep the failed
    phase's own length, which a budget cut may have put below the space's lower bound (the
    debug child plans the uncut length again); a length a fix shortens to keeps to the space."""
    if bounds and fixed.get(STEPS) == failed.get(STEPS):
        bounds = replace(bounds, keys={k: d for k, d in bounds.keys.items() if k != STEPS})
    _within(bounds, fixed)


def _fix_schedule(changes: Mapping[str, Any], hparams: Mapping[str, Any],
                  backend: TrainerBackend) -> dict[str, Any]:
    """The fixed configuration. A fix may shorten the failed phase (a time limit), never
    lengthen it or leave it unbounded past the sample budget; its epochs follow in code, as a
    proposal's do."""
    if "total_epochs" in changes:
        raise AnswerError("do not set 'total_epochs' in changes: the system computes it from "
                          "total_training_steps")
    planned = hparams.get(STEPS)
    if STEPS in changes:
        _int_field(changes, STEPS, 1, planned or MAX_ADDITIONAL_STEPS)
    try:
        merged = merge(hparams, changes, backend.name)
    except HyperparameterError as exc:
        raise AnswerError(f"changes: {exc}") from None
    steps = merged.get(STEPS)
    return schedule(hparams, merged, steps, backend) if steps else merged
