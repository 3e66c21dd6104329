"""llmzero-start --detach: the controller in the background, as a process of its own."""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from ..controller.lease import Lease
from ..store.run_store import RunStore


def detach(store: RunStore, args: argparse.Namespace) -> int:
    """Run the controller on the run directory in a new session, output to controller.log."""
    log = store.root / "controller.log"
    cmd = controller_command(store, args)
    with open(log, "ab") as out:
        start = out.tell()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        code = _started(proc, Lease(store))
    except KeyboardInterrupt:      # Ctrl-C stops this wait, not the controller it started
        print(f"\ninterrupted: the controller goes on in the background (pid {proc.pid}); "
              f"log: {log}\nstop it: llmzero-stop {store.root}", file=sys.stderr, flush=True)
        return 130
    said = _written(log, start)
    if code is not None:       # it ended before it held the run: say why, from its log
        if code == 0:    # a finished run: its controller has nothing left to do
            print(f"the controller ended at once, with success; {log}:\n{said}")
            return 0
        print(f"error: the controller exited at once (code {code}); {log}:\n{said}",
              file=sys.stderr)
        return code if code > 0 else 1     # negative: ended by a signal
    for warning in _warnings(said):     # an LLM that did not answer its trial, ...
        print(warning, file=sys.stderr)
    print(f"controller started in the background (pid {proc.pid}); log: {log}\n"
          f"watch: llmzero-status {store.root}   stop: llmzero-stop {store.root}")
    return 0


def _written(log: Path, start: int) -> str:
    """What the controller wrote to its log from offset `start`: this start's part."""
    with open(log, "rb") as written:
        written.seek(start)
        return written.read().decode(errors="replace").strip()


def _warnings(said: str) -> list[str]:
    """The warnings a controller wrote before it held the run, each with its indented lines:
    in its log alone, a start that went on without the LLM would say so to no one."""
    kept, inside = [], False
    for line in said.splitlines():
        inside = line.startswith("warning: ") or (inside and line.startswith("  "))
        if inside:
            kept.append(line)
    return kept


DETACH_WAIT_S = 60.0   # a controller holds its lease within seconds; imports take the most


def _started(proc: subprocess.Popen, lease: Lease) -> int | None:
    """Wait until the detached controller holds the run's lease (None) or has ended (its exit
    code), so a start that fails at once is not reported as running."""
    deadline = time.monotonic() + DETACH_WAIT_S
    while time.monotonic() < deadline:
        if (code := proc.poll()) is not None:
            return code
        held = lease.peek()
        if held and held.get("pid") == proc.pid:
            return None
        time.sleep(0.2)
    return None


def controller_command(store: RunStore, args: argparse.Namespace) -> list[str]:
    """This program on the run directory, as --detach and --submit run it."""
    cmd = [sys.executable, "-m", "llmzero_slurm.cli.start", str(store.root)]
    if args.cancel_on_stop:
        cmd.append("--cancel-on-stop")
    if args.poll is not None:
        cmd += ["--poll", str(args.poll)]
    return cmd
