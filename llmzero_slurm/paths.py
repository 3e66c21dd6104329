"""Where the project's templates and job programs live (beside the package in a checkout, inside
it in a non-editable install), and where the cpu trainer caches its base models and task data."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .errors import ConfigError, EnvironmentVariableError

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent           # what the package is imported from: the checkout, or site-packages
# A checkout keeps templates/ and jobs/ at its top level; a wheel ships them inside the package
# (setup.cfg), never as site-packages/templates, a name other distributions install too.
_DATA = PACKAGE if (PACKAGE / "templates").is_dir() else ROOT
TEMPLATES = _DATA / "templates"
JOBS = _DATA / "jobs"
# A checkout's top level holds this project alone: another Python (the phases') may take it first
# on its path. An install's ROOT is a whole site-packages, whose packages would then shadow that
# Python's own (its numpy, pyarrow, torch): it goes last.
ROOT_FIRST = _DATA == ROOT
CACHE_ENV = "LLMZERO_CACHE"
# Every template's text, read with the code: an upgrade in place under a running controller
# must not pair its loaded code with the next release's templates (a value one wants that the
# code does not pass fails each report or phase script until a restart).
TEMPLATE_TEXTS = {path.relative_to(TEMPLATES).as_posix(): path.read_text(encoding="utf-8")
                  for path in sorted(TEMPLATES.rglob("*.j2"))}


def install_stamp() -> str:
    """What this install's code, templates and job programs are now: a digest of every file's
    path, size and time of change, which an upgrade in place (pip, git pull) changes."""
    digest = hashlib.sha256()
    for folder in (PACKAGE,) if _DATA == PACKAGE else (PACKAGE, TEMPLATES, JOBS):
        for path in sorted(folder.rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():   # Python's own writes
                continue
            info = path.stat()
            digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


class InstallWatch:
    """Tells, once, that this install's files changed under a long-running process: an
    upgrade in place leaves it running the code and templates it loaded beside the new job
    programs."""

    def __init__(self) -> None:
        self._stamp: str | None = install_stamp()     # None once the change was told

    def changed(self) -> bool:
        if self._stamp is None or install_stamp() == self._stamp:
            return False
        self._stamp = None
        return True


DEFAULT_CACHE = "~/.cache/llmzero"


def cache_dir(given: str | Path | None = None) -> Path:
    """The cpu trainer's cache folder: `given` (trainer.cache_dir), else $LLMZERO_CACHE, else
    ~/.cache/llmzero. The one reader of the variable."""
    return Path(given or os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def check_cache_dir(given: str | Path | None, given_as: str) -> Path:
    """cache_dir(given), refused when a file stands where it or a parent must be a folder (it
    failed every phase at run time); the error names what set it, `given_as` for `given`."""
    folder = cache_dir(given)
    there = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if there is None or there.is_dir():
        return folder
    problem = (f"{there} is a file, but the cpu trainer keeps its base models and task data in "
               f"the folder {folder}")
    if given:
        raise ConfigError(given_as, f"{problem}: give a folder")
    if os.environ.get(CACHE_ENV):
        raise EnvironmentVariableError(CACHE_ENV, f"{problem}: point {CACHE_ENV} at a folder, "
                                                  "or unset it")
    raise EnvironmentVariableError(CACHE_ENV, f"is unset, and {problem}: set it to a folder")
