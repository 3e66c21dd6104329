"""Export a parent phase's LoRA adapter from a verl 0.9.1 checkpoint, once per parent step.

verl saves sharded FSDP state (`ckpt/global_step_N/actor/model_world_size_W_rank_R.pt`), not a
PEFT folder, so an evolve phase first runs verl's own merger:

    python -m verl.model_merger merge --backend fsdp \
        --local_dir PARENT/ckpt/global_step_N/actor --target_dir TARGET

which writes `lora_adapter/{adapter_config.json,adapter_model.safetensors}` there. Sibling
phases resuming from the same parent step share that folder: the first takes a lock, merges
into a private temporary folder and renames it into place, so no phase ever reads a half
export; where the filesystem has no working flock, the rename alone still keeps it correct.
The merger also writes the unchanged base weights, a second copy of the base model per
export; only the adapter is kept. A SIGTERM (scancel, the time limit) still removes the
temporary folder, and one left by an exporter of this host that was killed outright is
removed before the next export. verl's merger falls back to lora_alpha 0 when its metadata
is missing, which silently disables the adapter, so such an export is refused.

Runs inside a phase job, with the job's Python (standard library only here).
Exit codes: 0 adapter ready (its path is the last line printed), 1 the export could not be
renamed into place, 2 bad arguments or no such checkpoint, 3 the merger failed, 4 the exported
adapter is unusable.
"""
from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

ADAPTER = "lora_adapter"


class ExportError(Exception):
    def __init__(self, exit_code: int, message: str):
        super().__init__(message)
        self.exit_code = exit_code


def check_checkpoint(actor: Path) -> None:
    """Refuse a step without verl's sharded actor weights, listing the steps that exist."""
    if actor.is_dir() and any(actor.glob("model_world_size_*_rank_*.pt")):
        return
    ckpt = actor.parent.parent
    steps = sorted((p.name for p in ckpt.glob("global_step_*")), key=_step_number)
    listed = ", ".join(steps) if steps else "none"
    raise ExportError(2, f"no verl actor checkpoint in {actor} (model_world_size_*_rank_*.pt); "
                         f"steps saved in {ckpt}: {listed}")


def check_adapter(folder: Path, expect_rank: int | None = None) -> dict:
    """Return the adapter's config, or raise saying why PEFT would load it wrongly."""
    config_file = folder / ADAPTER / "adapter_config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(4, f"{config_file} is missing: the merger found no LoRA weights "
                             "in the checkpoint (was the parent trained with lora_rank > 0?)") from None
    except ValueError as exc:
        raise ExportError(4, f"{config_file} is not valid JSON: {exc}") from None
    if not (folder / ADAPTER / "adapter_model.safetensors").is_file():
        raise ExportError(4, f"{folder / ADAPTER} has no adapter_model.safetensors")
    alpha, rank = config.get("lora_alpha"), config.get("r")
    if not isinstance(alpha, (int, float)) or alpha <= 0:
        raise ExportError(4, f"{config_file}: lora_alpha is {alpha!r}; verl's merger writes 0 "
                             "when the checkpoint's lora_train_meta.json is missing, and an "
                             "adapter scaled by 0 does nothing")
    if not isinstance(rank, int) or rank <= 0:
        raise ExportError(4, f"{config_file}: r is {rank!r}, not a positive rank")
    if expect_rank is not None and rank != expect_rank:
        raise ExportError(4, f"{config_file}: rank {rank} differs from the parent's "
                             f"lora_rank {expect_rank}")
    return config


@contextmanager
def export_lock(path: Path) -> Iterator[None]:
    """Hold an flock on `path` where the filesystem supports it; otherwise rely on the rename."""
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            print(f"export_adapter: no flock on {path} ({exc.strerror}); relying on rename",
                  file=sys.stderr)
        yield


def run_merger(python: str, actor: Path, target: Path, trust_code: bool = False) -> None:
    """verl's merger; `trust_code`: the model needs its own code, which the merger runs only
    when told (it reads the checkpoint's model config)."""
    cmd = [python, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
           "--local_dir", str(actor), "--target_dir", str(target),
           *(["--trust-remote-code"] if trust_code else [])]
    print("export_adapter: " + " ".join(cmd), flush=True)
    result = subprocess.run(cmd)
    if result.returncode != 0:
        raise ExportError(3, f"verl.model_merger exited with {result.returncode} for {actor}")


def export(actor: Path, target: Path, python: str, expect_rank: int | None = None,
           trust_code: bool = False) -> Path:
    """The adapter folder of `actor` in `target`, exporting it unless a sibling already did."""
    check_checkpoint(actor)
    if (target / ADAPTER).is_dir():
        check_adapter(target, expect_rank)
        print(f"export_adapter: reusing {target / ADAPTER}")
        return target / ADAPTER
    target.parent.mkdir(parents=True, exist_ok=True)
    with export_lock(target.parent / f"{target.name}.lock"):
        if (target / ADAPTER).is_dir():     # a sibling finished while we waited
            check_adapter(target, expect_rank)
            return target / ADAPTER
        remove_abandoned(target)
        tmp = target.parent / f"{_tmp_prefix(target)}{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            run_merger(python, actor, tmp, trust_code)
            check_adapter(tmp, expect_rank)
            for entry in tmp.iterdir():     # keep the adapter, drop the base-model copy
                if entry.name != ADAPTER:
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            take_umask(tmp / ADAPTER)
            try:
                os.rename(tmp, target)
            except OSError as exc:
                if not (target / ADAPTER).is_dir():     # not another exporter's (no flock)
                    stray = f"; it exists without {ADAPTER}/: remove it" if target.exists() else ""
                    raise ExportError(1, f"cannot rename the export into {target} "
                                         f"({exc.strerror}){stray}") from None
                check_adapter(target, expect_rank)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target / ADAPTER


def _tmp_prefix(target: Path) -> str:
    """The name of this host's temporary exports of `target`, less the exporter's pid."""
    return f".{target.name}.tmp-{socket.gethostname()}-"


def remove_abandoned(target: Path) -> None:
    """Remove the temporary exports of `target` whose exporter, on this host, is gone (killed
    outright: SIGKILL, the OOM killer), each a full copy of the base model. Another host's
    exporter cannot be asked after: its folder is left."""
    prefix = _tmp_prefix(target)
    for tmp in target.parent.glob(f"{prefix}*"):
        pid = tmp.name[len(prefix):]
        if pid.isdigit() and not _alive(int(pid)):
            print(f"export_adapter: removing {tmp}, left by exporter {pid}, which is gone")
            shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:     # another user's
        pass
    return True


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM as SystemExit, so that `finally` removes the temporary export (Python's own
    handling ends at once) and subprocess.run ends the merger."""
    sys.exit(128 + signum)


def take_umask(folder: Path) -> None:
    """Give the adapter's files the mode the job's umask asks for: safetensors writes weights
    0600 whatever the umask, and a colleague's child phase in the run a group shares could not
    read them. (The package's own is cputrain/checkpoint.py's; this job imports no package.)"""
    mask = os.umask(0o022)      # read it back: this job runs one thread
    os.umask(mask)
    for path in folder.iterdir():
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o666 & ~mask)


def _step_number(name: str) -> int:
    tail = name.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Export a parent phase's LoRA adapter from its verl checkpoint at a step "
                    "(shared by sibling phases). Exit codes: 0 ready, 1 rename failed, "
                    "2 no such checkpoint, 3 merger failed, 4 unusable adapter.")
    parser.add_argument("--actor-dir", type=Path, required=True,
                        help="the parent's PARENT/ckpt/global_step_N/actor")
    parser.add_argument("--target-dir", type=Path, required=True,
                        help="where the export goes (shared by siblings); the adapter is "
                             "TARGET/lora_adapter")
    parser.add_argument("--lora-rank", type=int, help="the parent's lora_rank, checked")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter that has verl installed (default: this one)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="the model needs its own code (verl's merger reads its config)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        path = export(args.actor_dir, args.target_dir, args.python, args.lora_rank,
                      args.trust_remote_code)
    except ExportError as exc:
        print(f"export_adapter: {exc}", file=sys.stderr)
        return exc.exit_code
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
