"""Shared CLI plumbing: errors become one clear line and a meaningful exit code.

Exit codes: 0 done, 1 failure, 2 bad configuration or arguments (a run directory or node
that is not there), 3 corrupt or unwritable state (a full disk), 4 lock timeout, 5 batch-system
error, 6 another controller holds the run, 7 the search ended without a completed phase,
129/130/143 stopped by a signal (SIGHUP, SIGINT, SIGTERM), 141 the reader of the output left
early (`| head`).
"""
from __future__ import annotations

import argparse
import errno
import grp
import math
import os
import stat
import sys
from pathlib import Path
from typing import Callable

from .. import __version__
from . import interrupted
from ..config import load_config
from ..render import follow_move, live_copy
from ..report.mark import MARK as REPORT_MARK
from ..errors import (EDITED, FROZEN, ConfigError, EditedConfigError, LLMZeroError, StateError,
                      UsageError, full_storage, listed, way_back)
from ..store.atomic import umask
from ..store.lock_wait import say_long_waits
from ..store.meta_repair import open_run_store
from ..store.schema import CONFIG, CONFIG_COPY, differs_from_copy, edited_by_hand
from ..store.run_store import RunStore


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> None:
    """Run a command: a wait for a lock past a few seconds is said on stderr (lock_wait)."""
    say_long_waits(lambda line: print(line, file=sys.stderr, flush=True))
    try:
        code = main(argv)
    except LLMZeroError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        interrupted()
    except BrokenPipeError:
        # Python's advice: point stdout at devnull so the flush at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141
    except OSError as exc:
        full = full_storage(exc)
        if full is not None:      # a full disk or quota: named, as the atomic writes say it
            print(f"error: {full}", file=sys.stderr)
            sys.exit(full.exit_code)
        if exc.errno not in DENIED or exc.filename is None:
            raise
        # A file of a run shared by a group that this user may not read or write (a
        # colleague's umask, a read-only mount): named, as unwritable state, not a traceback.
        hint = "" if exc.errno == errno.EROFS else \
            " (a run a group shares wants umask 002 and a setgid group folder)"
        denied = StateError(exc.filename, f"{exc.strerror}{hint}")
        print(f"error: {denied}", file=sys.stderr)
        code = denied.exit_code
    sys.exit(code)


DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)   # what no retry or other input would change


def seconds(text: str) -> float:
    """An argparse type: a finite duration > 0. A zero, negative or nan poll interval made
    the controller poll in a tight loop; an infinite one never polls."""
    return _duration(text, zero=False)


def seconds_or_zero(text: str) -> float:
    """An argparse type: a finite duration >= 0, where 0 means "do not wait"."""
    return _duration(text, zero=True)


def _duration(text: str, zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value > 0 or zero and value == 0)):
        raise argparse.ArgumentTypeError(f"must be a number of seconds {'>=' if zero else '>'} 0 "
                                         f"(got {text!r})")
    return value


def add_run_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, help="the run directory (runs/<experiment>)")


def open_run(path: Path, stopping: bool = False) -> RunStore:
    """The run at `path`: a path that is not there, a file, or a folder holding none of a run's
    files is the user's typing (exit 2); a folder with part of a run is damaged state (exit 3).
    `stopping`: a frozen config refused after a hand edit is read from its copy instead, so a
    typo never keeps a run from being stopped."""
    if not path.exists():
        raise UsageError(f"no run directory at {path}")
    if not path.is_dir():   # e.g. the experiment.yaml the run was started from
        raise UsageError(f"{path} is a file, not a run directory (give the run's folder, "
                         "runs/<experiment>)")
    refuse_lost_meta(path)
    refuse_report_folder(path)
    if not (path / "meta.json").exists():
        parts = {"experiment.yaml": path / "experiment.yaml", "nodes/": path / "nodes"}
        have = [name for name, part in parts.items() if part.exists()]
        if not have:    # the user's typing, as a path that is not there
            raise UsageError(f"{path} is not a run directory (no meta.json, experiment.yaml or "
                             "nodes/); start one with llmzero-start")
        lacking = " or ".join(["meta.json", *(name for name in parts if name not in have)])
        raise StateError(path, f"is a damaged run directory: it has {' and '.join(have)} but no "
                         f"{lacking}; llmzero-repair rebuilds meta.json only from experiment.yaml "
                         "and nodes/: put back what is missing")
    try:
        store = open_run_store(path, reading=True)
    except EditedConfigError as exc:
        copy = path / CONFIG_COPY
        if not stopping or not copy.exists():
            raise
        print(f"warning: {exc.errors[0]} in the edited {path / 'experiment.yaml'}: stopping the "
              f"run as {copy.name} has it", file=sys.stderr)
        config = load_config(copy)
        return RunStore.of(path, config)
    if store.refused:
        print(f"warning: {refused_values(store.root, store.refused)}", file=sys.stderr)
    return store


def refuse_report_folder(path: Path) -> None:
    """A report folder given for its run (tab completion): it holds nodes/ too (each node's
    curves), which must not read as a damaged run; the user's typing, naming the run."""
    if (path / REPORT_MARK).exists():
        run = f"the run is {path.parent}" if (path.parent / "meta.json").exists() else \
            "give the run's folder (runs/<experiment>)"
        raise UsageError(f"{path} is a report folder that llmzero-report wrote, not a run "
                         f"directory: {run}")


def follow_moved_run(store: RunStore) -> None:
    """A run copied or moved (tar, cp) since its phase scripts were rendered: they are pointed
    at where it is now (render.follow_move), said in one line; a copy whose original's phases
    are in flight is refused first (refuse_live_copy)."""
    refuse_live_copy(store)
    moved = follow_move(store.root)
    if moved is not None:
        print(f"note: {store.root} was moved here from {moved[0]}: {moved[1]} phase script(s) "
              "now name its node folders here")


def refuse_live_copy(store: RunStore) -> None:
    """UsageError (exit 2, nothing written) for a resume or repair of a run copied while its
    original's phases were in flight: repointed, it would watch the original's jobs as its own
    (its monitor cancelling them), their results landing in the original's folders."""
    copy = live_copy(store.root, store.load_tree())
    if copy is not None:
        raise UsageError(f"{copy.line(store.root)}; resumed or repaired, the copy would take "
                         f"them for its own. Nothing was changed. Let them end (or stop them: "
                         f"llmzero-stop --cancel {copy.origin}), then copy the run again; or resume the original "
                         f"instead: llmzero-start {copy.origin}")


def refused_values(root: Path, refused: list[ConfigError]) -> str:
    """What reading the run past values of its frozen config that this release refuses says:
    a hand edit (edited_by_hand) named as one, with the way back; else another release's."""
    problems = listed(refused)
    frozen = root / CONFIG
    if edited_by_hand(root):
        copy = root / CONFIG_COPY if differs_from_copy(root) else None
        return (f"{frozen}, {EDITED} and holds values this llmzero-slurm ({__version__}) "
                f"refuses:\n  {problems}\n"
                "They are read as they are to show, report or stop the run; a resume needs each "
                f"fixed in {frozen.name}, {way_back(frozen, copy)}.")
    return (f"{frozen}, {FROZEN}, holds values this llmzero-slurm ({__version__}) refuses:\n"
            f"  {problems}\nThey are read as the release that started the run accepted them; a "
            "resume with this release needs each set to a value it accepts.")


def lost_meta(path: Path) -> bool:
    """Whether `path` is a run that lost its meta.json (deleted, a partial copy): its frozen
    config and node folders are there, and llmzero-repair rebuilds the rest from them."""
    return not (path / "meta.json").exists() and (path / "experiment.yaml").is_file() \
        and (path / "nodes").is_dir()


def refuse_lost_meta(path: Path) -> None:
    """StateError for a run that lost its meta.json: named as damaged, not as no run at all."""
    if lost_meta(path):
        raise StateError(path / "meta.json", f"is missing; llmzero-repair {path} rebuilds meta.json "
                                             "from the node folders")


def group_note(root: Path) -> str | None:
    """A warning when the run (or the folder holding it) is shared with a group but this
    process's umask keeps that group from writing what it writes: a colleague's resume or stop
    would later fail on those files (a lock, a node folder) with Permission denied."""
    mask = umask()
    if not mask & stat.S_IWGRP:
        return None
    for folder in (root, root.parent):
        try:
            info = folder.stat()
        except OSError:
            continue
        if info.st_mode & stat.S_IWGRP and not info.st_mode & stat.S_ISVTX:   # not /tmp
            try:
                group = grp.getgrgid(info.st_gid).gr_name
            except KeyError:
                group = str(info.st_gid)
            return (f"note: {folder} is writable by group {group}, but your umask {mask:03o} "
                    f"keeps that group from writing the files this run adds; start it under "
                    f"umask {mask & ~stat.S_IWGRP:03o} so your group can resume and stop it")
    return None


def run_dir_conflict(config: Path, run_dir: Path | None) -> str | None:
    """Why `--run-dir` cannot go with a run directory given as CONFIG, which is resumed where it
    is: a user asking for a second run there would have the first resumed instead."""
    if run_dir is None or not (config / "meta.json").exists() or \
            run_dir.resolve() == config.resolve():
        return None
    return (f"{config} is a run directory, resumed where it is: --run-dir {run_dir} is for a new "
            f"run, from a config (for one with this run's: llmzero-start "
            f"{config / 'experiment.yaml'} --run-dir {run_dir})")
