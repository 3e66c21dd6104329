"""Crash-safe JSON files: a reader sees the old file or the new one, never a torn one.

Write = temp file in the same directory, flush, fsync, os.replace, fsync the directory (so the
rename itself survives a crash); a write that fails (a full disk, a quota) leaves the old file
as it was and raises StorageError naming the file. Read = parse or raise StateError naming it.
A new file gets the mode the process's umask (and the folder's default ACL) gives any file,
as `open` would, so a group sharing a run reads what it writes; only a secret asks for 0600.
A file replaced keeps its mode and group, as a user set them to share the run.
"""
from __future__ import annotations

import json
import os
import stat
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any, Callable

from .. import faults
from ..errors import StateError, StorageError


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """fsync every file under `folder`, then each folder below it and itself: what a folder
    written in full and then renamed into place (a checkpoint) needs before the rename, or a
    power loss can leave it whole by name with empty files."""
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_symlink():
            continue
        if path.is_dir():
            fsync_dir(path)
        elif path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    fsync_dir(folder)


def umask() -> int:
    """This process's umask, read without setting it (os.umask would, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(path: str | Path, data: Any, mode: int = 0o666) -> None:
    """Replace `path` with `data` as indented JSON, atomically and durably."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n", mode)


def write_text(path: str | Path, text: str, mode: int = 0o666) -> None:
    """Replace `path` with `text` atomically and durably."""
    write_bytes(path, text.encode("utf-8"), mode)


def write_bytes(path: str | Path, data: bytes, mode: int = 0o666) -> None:
    """Replace `path` with `data` atomically and durably."""
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    replace_with(path, write, mode)


def _new_temp(path: Path, mode: int) -> Path:
    """An empty temporary file beside `path`, created with `mode` less the umask. Not
    tempfile.mkstemp: its files are 0600 whatever the umask, and the rename would hand that
    mode to every record, leaving a group unable to read its own run. Replacing a file, it
    takes that file's mode and group instead (see `_keep_sharing`)."""
    while True:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            continue
        try:
            _keep_sharing(path, fd, mode)
        finally:
            os.close(fd)
        return tmp


def _keep_sharing(path: Path, fd: int, mode: int) -> None:
    """Give the file `fd` the mode and group of the file `path` it will replace, if any: a
    run a user shared (`chmod -R g+rX`, `chgrp -R proj`) must stay shared when a record is
    rewritten. Never more than `mode` allows (a secret stays 0600). What the filesystem or
    the user may not set (a group not theirs, an ACL-only fileset, NFSv4 id mapping) is
    left as it comes: the record matters more than its mode."""
    try:
        old = os.stat(path)
    except FileNotFoundError:
        return
    new, wanted = os.fstat(fd), stat.S_IMODE(old.st_mode) & mode
    if stat.S_IMODE(new.st_mode) != wanted:
        with suppress(OSError):
            os.fchmod(fd, wanted)
    if old.st_gid != new.st_gid:
        with suppress(OSError):
            os.fchown(fd, -1, old.st_gid)


TEMP_GRACE_S = 600.0   # a temporary file older than this has no writer left (one takes seconds)


def remove_stale_temps(folder: Path, ages: Callable[[list[Path]], list[float | None]]) -> None:
    """Delete the temporary files of replace_with in `folder` that a killed writer left, by
    their age on the file server's clock (`ages`); a live writer's are seconds old."""
    temps = [p for p in folder.glob(".*.tmp") if p.is_file()]
    for temp, age in zip(temps, ages(temps) if temps else []):
        if age is not None and age > TEMP_GRACE_S:
            temp.unlink(missing_ok=True)


def replace_with(path: str | Path, write: Callable[[Path], None], mode: int = 0o666) -> None:
    """Replace `path` with what `write` puts into a temporary file beside it (a JSON record,
    a report's figure): readers see the old file or the new one; a write that fails leaves the
    old one, removes the temporary file and raises StorageError naming `path`. The file gets
    `mode` less the umask from its creation on (0o600 for a secret: never readable by others),
    or the mode of the file it replaces, within `mode`."""
    path = Path(path)
    tmp = None
    try:
        faults.disk_full(path)
        tmp = _new_temp(path, mode)
        write(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp:
            tmp.unlink(missing_ok=True)
        # A missing folder is a bug or a removed run, not a storage problem.
        if isinstance(exc, OSError) and path.parent.is_dir():
            raise StorageError(path, f"could not be written ({exc.strerror or exc}); it still "
                                     "holds what it held before") from exc
        raise
    fsync_dir(path.parent)


def _aside(path: Path) -> Path:
    """<name>.damaged-<time> beside `path`, never an earlier one's name."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    kept, n = path.with_name(f"{path.name}.damaged-{stamp}"), 1
    while kept.exists():
        n += 1
        kept = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    return kept


def keep_copy(path: Path) -> Path:
    """Keep a damaged file's bytes as <name>.damaged-<time> before a rebuilt one replaces it.
    Unlike moving it aside, a kill or a full disk before the rebuilt file is in place leaves
    the damaged one where its readers find and name it, never no file at all. Bytes that
    cannot be read (a disk error) are moved aside instead."""
    try:
        data = path.read_bytes()
    except OSError:
        return set_aside(path)
    kept = _aside(path)

    def write(tmp: Path) -> None:
        tmp.write_bytes(data)
    replace_with(kept, write)
    return kept


def set_aside(path: Path) -> Path:
    """Move a damaged state file out of its readers' way, kept beside it as
    <name>.damaged-<time> for a person to look at (never over an earlier one); its new path.
    Every damaged file is kept under that name (here or by keep_copy), so each is found the
    same way."""
    kept = _aside(path)
    try:
        os.rename(path, kept)
    except OSError as exc:
        raise StorageError(path, f"is damaged and could not be moved aside to {kept.name} "
                                 f"({exc.strerror})") from None
    fsync_dir(path.parent)
    return kept


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; a missing, unreadable or corrupt file raises StateError with its path.
    An I/O error is its `__cause__`, for a caller that must not take a read failing for a
    file gone (a lease). Bytes that are not UTF-8 (a binary file, another encoding) are corrupt JSON too: every
    caller then treats them as it treats a torn file."""
    return parse_json(path, read_utf8(path))


def read_utf8(path: str | Path) -> str:
    """The text of the file at `path`; StateError as read_json's."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StateError(path, "missing") from None
    except OSError as exc:
        raise StateError(path, f"cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise StateError(path, f"corrupt JSON: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def parse_json(path: str | Path, text: str) -> Any:
    """The JSON `text` read from `path`; StateError naming it when it does not parse."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateError(Path(path), f"corrupt JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
