"""Checkpoint folders: a PEFT adapter plus the trainer state, written atomically.

`ckpt/global_step_N/` holds adapter_config.json + adapter_model.safetensors (loadable by
peft, and the contract a child phase starts from) and trainer_state.pt (optimizer, RNGs and
data position) so a requeued job resumes exactly. Folders appear by rename, never half-written,
their files fsynced first (a power loss cannot leave a named folder of empty files).
"""
from __future__ import annotations

import os
import pickle
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from .. import __version__
from ..errors import StateError
from ..store.atomic import fsync_dir, fsync_tree, umask
from ..store.schema import FIRST_RECORDED

STATE_FILE = "trainer_state.pt"
_FOLDER = re.compile(r"^global_step_(\d+)$")
_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def save(ckpt_dir: Path, step: int, model: Any, state: dict[str, Any], device: str) -> Path:
    """Write global_step_<step>/ via a temporary folder and a rename; the state records the
    release and the device type that wrote it (load_state, unresumable)."""
    state = {**state, "llmzero_version": __version__, "device": device}
    return save_adapter(ckpt_dir / f"global_step_{step}", model,
                        lambda tmp: save_state(state, tmp / STATE_FILE))


def save_state(state: dict[str, Any], path: Path) -> None:
    """Through a Python file: a full disk then raises OSError (No space left on device), where
    torch's own writer says only 'unexpected pos', which reads as a bug in the task's code."""
    with open(path, "wb") as fh:
        torch.save(state, fh)


def save_adapter(final: Path, model: Any, extra: Callable[[Path], None]) -> Path:
    """Write the adapter and what `extra` adds into a temporary folder, then rename it to
    `final`, replacing an older one (a rerun of the same step, or a better best). The older
    one is renamed aside before it is deleted: deleting it in place, a job killed midway
    (OOM killer, KillWait, node loss) left a folder with best.json but no weights."""
    tmp = _aside(final, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with warnings.catch_warnings():   # peft looks for a hub config of our in-code base model
        warnings.filterwarnings("ignore", message="Could not find a config file")
        try:
            model.save_pretrained(str(tmp))
        except Exception as exc:
            # safetensors' writer says a full disk as SafetensorError '... (os error 28)'
            code = _OS_ERROR.search(str(exc))
            if code is None:
                raise
            raise OSError(int(code[1]), os.strerror(int(code[1])), str(tmp)) from exc
    extra(tmp)
    take_umask(tmp)
    fsync_tree(tmp)     # on disk before the rename, as store/atomic.py's JSON files are
    old = _aside(final, "old")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)
    return final


def remove_adapter(final: Path) -> None:
    """Delete an adapter folder, renamed aside first: a job killed midway leaves no part of it
    under its name, and remove_partial deletes the rest."""
    tmp = _aside(final, "tmp")
    os.replace(final, tmp)
    fsync_dir(final.parent)
    shutil.rmtree(tmp)


def _aside(final: Path, kind: str) -> Path:
    """This process's hidden name for `final` while it is written ("tmp") or replaced ("old");
    remove_partial knows both."""
    return final.parent / f".{final.name}.{os.getpid()}.{kind}"


def take_umask(folder: Path) -> None:
    """Give the files of `folder` the mode the umask asks for: safetensors writes its weights
    0600 whatever the umask, so a colleague sharing the run (umask 002) could not start a
    child phase from the adapter, nor load the base model a shared cache holds."""
    mask = umask()
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o666 & ~mask)


def latest(ckpt_dir: Path) -> tuple[int, Path] | None:
    """The newest complete checkpoint (step, folder), or None."""
    found = []
    if ckpt_dir.is_dir():
        for entry in ckpt_dir.iterdir():
            match = _FOLDER.match(entry.name)
            if match and (entry / STATE_FILE).exists():
                found.append((int(match.group(1)), entry))
    return max(found) if found else None


def remove_partial(folder: Path, name: str = "global_step_*") -> None:
    """Delete the temporary folders of `name` (a glob) that a killed job left behind; an
    older folder set aside by a replacement that never put the new one in place is put back."""
    for entry in folder.glob(f".{name}.*.tmp"):
        shutil.rmtree(entry, ignore_errors=True)
    for entry in folder.glob(f".{name}.*.old"):
        final = folder / entry.name[1:].rsplit(".", 2)[0]
        if final.exists():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            os.replace(entry, final)


def load_state(folder: Path, device: str | None = None) -> dict[str, Any]:
    """On the CPU, whichever device wrote it: a CUDA state then loads on a CPU-only host, to be
    refused by name (the optimizer moves its state to its parameters' device itself). With
    `device`, a state written on another device type is refused: CPU and CUDA random
    generators keep states of different kinds, so the run could not go on as it would have
    (a state from before the device was recorded is not checked). Read with weights_only:
    the state is numbers, text and tensors, and a full unpickling would run any code a file
    in the (shared) run directory names; such a file is refused, named."""
    path = folder / STATE_FILE
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's own message is a page of advice to load it unsafely: its one line of cause.
        why = next((line.split("error:", 1)[1].split(" was not", 1)[0].strip()
                    for line in str(exc).splitlines() if "WeightsUnpickler error:" in line),
                   type(exc).__name__)
        raise StateError(path, "holds more than a trainer state (numbers, text and tensors), "
                         f"so it was not loaded ({why[:200]}): llmzero-slurm's trainer did not "
                         "write it. Rerun the phase from its start into a folder of its own "
                         "(LLMZ_RERUN_DIR)") from None
    written = state.get("device", device)
    if device is not None and written != device:
        where = "a GPU is visible" if written == "cuda" else \
            "no GPU is visible (CUDA_VISIBLE_DEVICES=)"
        raise StateError(path, f"written on {written}, this run trains on {device}, and a "
                         f"checkpoint resumes on the device type that wrote it: resume it where "
                         f"{where}, or rerun the phase from its start into a folder of its own "
                         "(LLMZ_RERUN_DIR)")
    return state


def unresumable(state: dict[str, Any], path: Path, exc: Exception) -> StateError:
    """A state another release wrote in a form this one cannot resume, named with that
    release (its "llmzero_version"), not a bare KeyError."""
    made = state.get("llmzero_version")
    by = f"llmzero-slurm {made}" if made else f"a release before llmzero-slurm {FIRST_RECORDED}"
    why = f"no {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0][:200]
    return StateError(path, f"written by {by}, which this llmzero-slurm ({__version__}) cannot "
                      f"resume ({why}): rerun the phase from its start into a folder of its own "
                      "(LLMZ_RERUN_DIR), or resume it with that release")
