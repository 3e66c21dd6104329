"""Errors a user can act on. Each names the thing that is wrong (a key, a file, a job)."""
from __future__ import annotations

import errno
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence


class LLMZeroError(Exception):
    """Base of every error this package raises on purpose; the CLI prints it without a traceback."""

    exit_code = 1


class ConfigError(LLMZeroError):
    """A bad experiment configuration; the message names the key and the fix."""

    exit_code = 2

    def __init__(self, key: str, problem: str):
        super().__init__(f"config key '{key}': {problem}")
        self.key, self.problem = key, problem

    @property
    def errors(self) -> list[ConfigError]:
        """Each problem this error reports: itself alone, unless it is a ConfigErrors."""
        return [self]


class YamlSyntaxError(ConfigError):
    """A YAML file that does not parse: a slip of typing (the run's own files are written
    whole, atomically), which a run's frozen experiment.yaml reads as a hand edit."""


class ConfigErrors(ConfigError):
    """Every problem found in one configuration, each on a line of its own, so a user fixes
    them in one round. `key` and `problem` are the first's, for callers that name one."""

    def __init__(self, errors: Sequence[ConfigError], source: str = "the configuration"):
        super().__init__(errors[0].key, errors[0].problem)
        self._errors = list(errors)
        self.args = ("\n  ".join([f"{len(errors)} problems found in {source}:", *map(str, errors)]),)

    @property
    def errors(self) -> list[ConfigError]:
        return self._errors


class ConfigProblems:
    """The problems of one configuration's independent keys and checks, collected so that
    all of them are raised together instead of one per round of fixing."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def add(self, key: str, problem: str) -> None:
        """Keep a problem found by a check that goes on to its next key."""
        self.errors.append(ConfigError(key, problem))

    @contextmanager
    def collect(self, prefix: str = "") -> Iterator[None]:
        """Run the block, keeping what it refuses (its keys under `prefix`) instead of raising."""
        try:
            yield
        except ConfigError as exc:
            self.errors += [ConfigError(prefix + e.key, e.problem) if prefix else e
                            for e in exc.errors]

    def refused(self, *keys: str) -> bool:
        """Whether a problem was found at, under or above one of `keys`: a check reading such
        a key would see its default instead, and could report a problem that is none."""
        return any(e.key == k or e.key.startswith(k + ".") or k.startswith(e.key + ".")
                   for e in self.errors for k in keys)

    def check(self, check: Callable[[], object], *reads: str) -> None:
        """Run `check`, keeping its problems, unless a key it `reads` was refused already."""
        if not self.refused(*reads):
            with self.collect():
                check()

    def raise_all(self, source: str = "the configuration", order: Sequence[str] = ()) -> None:
        """Raise what was found, if anything: one problem as itself (its message as ever),
        more as ConfigErrors, by their top-level keys' places in `order` (the file's), those
        of sections the file leaves out last."""
        def place(error: ConfigError) -> int:
            top = error.key.split(".")[0]
            return order.index(top) if top in order else len(order)
        found = sorted(self.errors, key=place)
        if len(found) > 1:
            raise ConfigErrors(found, source)
        if found:
            raise found[0]


FROZEN = "this run's configuration as frozen when it started"
EDITED = "this run's frozen configuration, was edited since the run started"


def listed(errors: Sequence[ConfigError]) -> str:
    """Several config problems, one per indented line, as every refusal of a frozen config
    shows them."""
    return "\n  ".join(map(str, errors))


class RefusedRunConfig(ConfigError):
    """A run's frozen experiment.yaml refused as it is read, keeping every refusal of it."""

    def __init__(self, refused: ConfigError):
        super().__init__(refused.key, refused.problem)
        self._errors = refused.errors
        self.problems = listed(refused.errors)

    @property
    def errors(self) -> list[ConfigError]:
        return self._errors


class FrozenConfigError(RefusedRunConfig):
    """A run's frozen experiment.yaml that this install refuses. The run's own release accepted
    it, so the cause is a change of release (a newer one wrote a key this one lacks, or this
    one checks a value more strictly), not the user's typing: said so, with the way on."""

    def __init__(self, path: Any, refused: ConfigError, version: str, created_by: str | None):
        super().__init__(refused)
        unknown = "was written by a newer release: read, stop and resume the run with "
        if created_by:      # meta.json names it (runs made from 0.2.0 on)
            accepted = f"llmzero-slurm {created_by}, which started the run"
            starter = f"llmzero-slurm {created_by}"
            unknown += f"that one ({starter}) or a later one"
            if _release(created_by) < _release(version):   # the key was dropped since
                unknown = f"is one this release no longer has: read, stop and resume the run with {starter}"
        else:
            accepted, starter = "the llmzero-slurm that started the run", "the release that started the run"
            unknown += "that one (or later)"
        self.args = (
            f"{path}, {FROZEN}, is refused by this "
            f"llmzero-slurm ({version}):\n  {self.problems}\n"
            f"It was accepted by {accepted}. A key unknown here {unknown}. "
            "A value refused here is checked more strictly by this release: set it in that file "
            "to one it accepts to resume with this release (llmzero-status, -report and -stop "
            f"read the run as it is), or carry on with {starter}.",)


def _release(version: str) -> tuple[int, ...]:
    """A release's number, to order two (an unreadable one orders as newest: not older)."""
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return (1 << 30,)


class EditedConfigError(RefusedRunConfig):
    """A run's frozen experiment.yaml refused after a hand edit (the README invites tuning
    it): the run's own release wrote it, or it differs from the copy frozen with it, so the
    cause is the edit, not another release. Named as such, with the copy as the way back."""

    def __init__(self, path: Any, refused: ConfigError, copy: Any | None):
        super().__init__(refused)
        self.args = (f"{path}, {EDITED} and is refused:\n  {self.problems}\nFix that in {path.name}, "
                     f"{way_back(path, copy)} (llmzero-stop can stop the run meanwhile).",)


def way_back(path: Any, copy: Any | None) -> str:
    """How a hand-edited frozen experiment.yaml at `path` gets back what the run was started
    with: from `copy` (llmzero-repair), or by hand where there is none."""
    if copy is None:
        return "or put back what it held when the run started"
    return (f"or `llmzero-repair {path.parent}` puts back {copy.name}, the copy frozen when the "
            "run started, keeping the edited file beside it")


class HyperparameterError(ConfigError):
    """A hyperparameter value that must never reach a script."""

    def __init__(self, key: str, value: Any, problem: str):
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(key, f"{problem} (got {shown})")
        self.value = value


class UsageError(LLMZeroError):
    """A command-line argument that names nothing there is (a run directory, a node): the
    user's typing, not damaged state."""

    exit_code = 2


class EnvironmentVariableError(LLMZeroError):
    """An environment variable this package reads names something unusable."""

    exit_code = 2

    def __init__(self, name: str, problem: str):
        super().__init__(f"environment variable {name}: {problem}")


class StateError(LLMZeroError):
    """A state file on shared storage is corrupt, torn, or of an unknown schema version."""

    exit_code = 3

    def __init__(self, path: Any, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


class StorageError(StateError):
    """A state file could not be written (disk full, quota exceeded, read-only filesystem).
    The write was atomic, so the file still holds what it held before."""


FULL = (errno.ENOSPC, errno.EDQUOT)


def full_storage(exc: BaseException) -> StorageError | None:
    """A full disk or quota met outside the atomic writer (a folder made, a file appended,
    a figure saved) as the StorageError those writes raise, naming the file; None for any
    other error. Quota counts files too, so even a mkdir can fail this way."""
    if isinstance(exc, OSError) and exc.errno in FULL and exc.filename is not None:
        return StorageError(exc.filename, f"could not be written ({exc.strerror})")
    return None


def storage_remedy(exc: BaseException) -> str:
    """What cures a write the storage refused, by its cause: space for a full disk or quota,
    write access for a refusal (a folder made read-only under a run), a remount for a
    read-only filesystem; freeing space cures none of the last two."""
    cause = exc if isinstance(exc, OSError) else exc.__cause__
    code = getattr(cause, "errno", None)
    if code in (errno.EACCES, errno.EPERM):
        return "make it writable for you again (its permissions, ACL or immutable flag)"
    if code == errno.EROFS:
        return "have its filesystem mounted read-write again"
    if code in FULL or code is None:
        return "free space"
    return "once the storage takes writes again"


class LockTimeout(LLMZeroError):
    """Another process holds the run's lock for longer than we are willing to wait."""

    exit_code = 4


class SchedulerError(LLMZeroError):
    """The batch system refused or failed a request (after retries for transient errors).

    `retryable`: the same request may succeed later (the controller is down, or a submit
    limit is reached), as opposed to a refusal that no waiting cures (an unknown partition).
    `unsure`: the request may have gone through although no answer came (a timed-out sbatch),
    so a submission is looked for before it is sent again."""

    exit_code = 5

    def __init__(self, message: str, retryable: bool = False, unsure: bool = False):
        super().__init__(message)
        self.retryable = retryable or unsure
        self.unsure = unsure


class DataError(LLMZeroError):
    """A dataset or reward file that cannot be used; the message names the file and the row."""

    exit_code = 2

    def __init__(self, path: Any, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


class InputsChangedError(LLMZeroError):
    """A run's reward or data file outside it differs from the one it was created with: its
    scores so far and any new ones would be measured differently."""

    exit_code = 2
