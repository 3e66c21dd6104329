"""`python -m llmzero_slurm.cli COMMAND ARG...`, what bin/llmzero-* run. A command's imports
take seconds (more on a busy shared filesystem), and a Ctrl-C among them was a KeyboardInterrupt
traceback: here they run inside the guard the command itself runs in, so an interrupt at any
point ends it the same way (`interrupted`). Nothing is imported before the guard that Python's
own start has not loaded already (cli/__init__.py imports nothing), so what is left outside is
that start (its site and runpy, tens of milliseconds), where a Ctrl-C is Python's to report."""
import sys
from importlib import import_module

from . import interrupted

COMMANDS = ("start", "status", "stop", "report", "repair")


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name not in COMMANDS:
        print(f"usage: llmzero-{{{','.join(COMMANDS)}}} ... (run one of the symlinks)", file=sys.stderr)
        sys.exit(2)
    try:
        run_main = import_module(".common", __package__).run_main
        run_main(import_module(f".{name}", __package__).main, sys.argv[2:])
    except KeyboardInterrupt:
        interrupted()


if __name__ == "__main__":
    main()
