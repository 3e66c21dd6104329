"""`python -m llmzero_slurm.cli COMMAND ARG...`, what bin/llmzero-* run (an install's llmzero-*
scripts run entry()). A command's imports take seconds (more on a busy shared filesystem), and a
Ctrl-C among them was a KeyboardInterrupt traceback: here they run inside the guard the command
itself runs in, so an interrupt at any point ends it the same way (`interrupted`). Nothing is
imported before the guard that Python's own start has not loaded already (cli/__init__.py
imports nothing), so what is left outside is that start (its site and runpy, tens of
milliseconds), where a Ctrl-C is Python's to report."""
import _signal  # type: ignore[import-not-found]  # loaded by Python's start; signal.py loads enum
import sys
from importlib import import_module

from . import interrupted

COMMANDS = ("start", "status", "stop", "report", "repair")
# What a missing requirement asks for: bin/llmzero-* run a checkout's .venv or $LLMZERO_PYTHON;
# an install's scripts run the Python it was installed into.
CHECKOUT_FIX = ("Run `make venv` (or `make search`) once in the checkout, or set LLMZERO_PYTHON to "
                "a Python that has llmzero-slurm installed")
INSTALL_FIX = "Install llmzero-slurm again with its requirements (pip install without --no-deps)"


def entry() -> None:
    """An install's llmzero-COMMAND script: the command its name says, as bin/llmzero-cli does."""
    sys.argv[1:1] = [sys.argv[0].rpartition("/")[2].removeprefix("llmzero-")]
    main(INSTALL_FIX)


def main(fix: str = CHECKOUT_FIX) -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name not in COMMANDS:
        print(f"usage: llmzero-{{{','.join(COMMANDS)}}} ... (run one of the symlinks)", file=sys.stderr)
        sys.exit(2)
    # While the modules load, a Ctrl-C ends the command from its handler: raised there as
    # KeyboardInterrupt, it may land in a callback the import system runs (a module lock's
    # weakref callback), where Python only prints "Exception ignored" and goes on. A SIGINT
    # ignored from the start (a suite run in the background) stays ignored.
    guarded = _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
    if guarded:
        _signal.signal(_signal.SIGINT, lambda signum, frame: interrupted())
    try:
        try:
            run_main = import_module(".common", __package__).run_main
            command = import_module(f".{name}", __package__).main
        except ModuleNotFoundError as exc:
            # A requirement missing (a clone with no .venv, so python3; a .venv that is a
            # dangling link) is one line saying what to do. One of llmzero_slurm's own modules
            # missing is a bug: raised as it is.
            if not exc.name or exc.name.partition(".")[0] == "llmzero_slurm":
                raise
            print(f"error: no usable environment: {sys.executable} cannot import {exc.name}, "
                  f"which llmzero-slurm needs. {fix}", file=sys.stderr)
            sys.exit(2)
        if guarded:     # the command's own Ctrl-C handling (run_main) from here on
            _signal.signal(_signal.SIGINT, _signal.default_int_handler)
        run_main(command, sys.argv[2:])
    except KeyboardInterrupt:
        interrupted()


if __name__ == "__main__":
    main()
