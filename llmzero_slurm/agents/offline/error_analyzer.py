"""The offline error analyzer: the failure's class from the Slurm state and the log tail, and
the smallest fix that addresses it."""
from __future__ import annotations

import re
from typing import Any, Mapping

from ...backends.base import TrainerBackend
from ...hparams import micro_batch_within
from ...methods.space import NO_BOUNDS, Bounds
from ..answers import AnswerError, Fix, check_fix
from .knobs import scale


# Failure signatures, most specific first: (class, Slurm states, log patterns).
_SIGNATURES: tuple[tuple[str, set[str], str], ...] = (
    ("oom", {"OUT_OF_MEMORY"}, r"out of memory|OutOfMemoryError|CUDA error: out of memory|"
                               r"oom[-_ ]kill|Cannot allocate memory|MemoryError"),
    ("timeout", {"TIMEOUT", "DEADLINE"}, r"DUE TO TIME LIMIT"),
    ("node_fault", {"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"},
     r"NCCL (error|WARN)|ncclSystemError|Connection (reset|refused)|RayActorError|"
     r"GCS|node .* (down|failure)|Socket Timeout|unhandled system error|"
     r"No space left on device|Disk quota exceeded|"   # retried once space is freed
     # ... or once the run's storage takes writes again: a read-only remount, a write the
     # phase's own folder refused (made read-only under the run), the script's status.json
     r"Read-only file system|\[Errno (1|13)\] [^:\n]*: '[^'\n]*/nodes/\d+/|"
     r"^llmzero: could not write "),
    # The phase script's own line when a slurm.setup line failed, before any training (a
    # setup line's own traceback included).
    ("setup", set(), r"^llmzero: error: the script exited with code \d+ during setup"),
    ("user_code", set(), r"Traceback \(most recent call last\)"),
)


def classify(state: str | None, log_tail: str) -> str:
    state = (state or "").upper().split()[0] if state else ""
    for failure, states, pattern in _SIGNATURES:
        if state in states or re.search(pattern, log_tail, re.I | re.M):
            return failure
    return "unknown"


# An exception line, its class maybe dotted (safetensors._safetensors_rust.SafetensorError: ...),
# or a program's own "error: " line, with or without its name before it (cpu_grpo: error: ...);
# not Slurm's own epilogue ("srun: error: node: task 0: Exited with exit code 1"), which says
# only that the program failed.
_ERROR_LINE = re.compile(r"^(?!srun:|slurmstepd:)([\w.]*(Error|Exception)\b|([\w.-]+: )?error: )")


QUOTED_CHARS = 1000   # of the error line: whole for the trainers' own advice (~400 characters)


def last_error_line(log_tail: str) -> str | None:
    """The job's own last word on why it failed (cut to QUOTED_CHARS); None when it wrote no
    error line."""
    lines = [ln.strip() for ln in log_tail.splitlines() if _ERROR_LINE.match(ln.strip())]
    if not lines:
        return None
    line = lines[-1]
    return line if len(line) <= QUOTED_CHARS else \
        f"{line[:QUOTED_CHARS]}\u2026 (cut; the whole line is in the job log)"


def _quoted_error(log_tail: str) -> str:
    return last_error_line(log_tail) or "see the job log"


# A resumed run does not retry a chain that gave up, so the advice must not promise it.
NOT_RETRIED = "this chain is not retried: fix the cause, then start a new run"

BAD_INPUT_EXIT = 2   # the trainers' exit code for input they refuse (config, data, reward)


def cannot_succeed_by_retrying(exit_code: int | None) -> bool:
    """A job that refused its input fails the same way however often it is retried."""
    return exit_code == BAD_INPUT_EXIT


def _halved_micro(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """Half the micro batch, or the largest size below that the mini batch's samples split
    into evenly (ceil(3 / 2) = 2 does not split 3 x 3)."""
    micro = hparams.get("ppo_micro_batch_size_per_gpu")
    return {"ppo_micro_batch_size_per_gpu": micro_batch_within(hparams, micro / 2)} if micro else {}


TIME_LIMIT_SHARE = 0.7   # of the steps a timed-out phase managed, what its fix plans

# What the user can do when no fix within the bounds is left (a fix's class is oom or timeout).
_NO_FIX = {"oom": "out of memory with the smallest batches: use more GPUs per node or a "
                  "shorter max_response_length",
           "timeout": "the phase hit its time limit: raise slurm.time in experiment.yaml"}


def analyze(state: str | None, exit_code: int | None, log_tail: str,
            hparams: Mapping[str, Any], backend: TrainerBackend,
            steps_done: int | None = None, bounds: Bounds = NO_BOUNDS) -> Fix:
    """Classify a failure and pick the smallest fix that addresses it, within the user's
    `bounds` (search.space). A phase that hit its time limit after `steps_done` steps is
    re-planned to fit: a share of what it managed. Never raises (the fallback of every LLM
    fix): a fix the checks refuse gives up, saying why, since retrying unchanged would fail
    the same way."""
    failure = classify(state, log_tail)
    data: dict[str, Any]
    if cannot_succeed_by_retrying(exit_code):
        data = {"action": "give_up", "message": f"the job refused its input (exit "
                f"{exit_code}): {_quoted_error(log_tail)}; {NOT_RETRIED}"}
        failure = "user_code"
    elif failure in _NO_FIX:
        if failure == "oom":
            changes = {**_halved_micro(hparams),
                       **scale(hparams, "log_prob_micro_batch_size_per_gpu", 0.5),
                       **scale(hparams, "max_num_seqs", 0.5)}
            if backend.reads("gpu_memory_utilization"):
                changes.update(scale(hparams, "gpu_memory_utilization", 0.85, 0.3))
        else:
            changes = ({"total_training_steps": max(1, int(steps_done * TIME_LIMIT_SHARE))}
                       if steps_done else scale(hparams, "total_training_steps", 0.6))
        changes = {k: v for k, v in bounds.clamp(changes).items() if hparams.get(k) != v}
        data = ({"action": "change", "changes": changes} if changes else
                {"action": "give_up", "message": _NO_FIX[failure]})
    elif failure == "node_fault":
        data = {"action": "retry"}
    elif failure == "user_code":
        data = {"action": "give_up", "message": "the job failed in task code (data or reward): "
                f"{_quoted_error(log_tail)}; {NOT_RETRIED}"}
    elif failure == "setup":
        data = {"action": "give_up", "message": f"{_quoted_error(log_tail)}: fix the slurm.setup "
                "lines in experiment.yaml (llmzero-start --check --on-cluster runs them on a "
                f"compute node); {NOT_RETRIED}"}
    else:
        data = {"action": "retry", "message": f"unrecognised failure (exit code {exit_code})"}
    try:
        return check_fix({"class": failure, **data}, hparams, backend, "heuristic", bounds=bounds)
    except AnswerError as exc:   # only a change can be refused, and only oom and timeout change
        return Fix(failure, "give_up", {}, dict(hparams),
                   f"{_NO_FIX[failure]} (its fix {data['changes']} is refused: {exc})")
