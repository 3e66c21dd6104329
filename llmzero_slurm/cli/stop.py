"""llmzero-stop: ask a run's controller to stop, optionally cancelling its running phases.

The request is a file in the run directory, so it reaches a controller on any login node. It
names that controller: if it dies before acting on it, a controller started later ignores it
(and clears it), and one seen to die while this waits is taken for no controller (below).
Without --cancel, running phases continue and a later llmzero-start re-attaches to them.
With no controller alive, this does what a stopping controller does: cancels the phases with
--cancel, and always the monitor job, withdrawing the LLM key that was handed to it. Either
way a controller job (llmzero-start --submit) still queued is cancelled: it would start later
and resume the run. Every job is tried: those the scheduler refuses to cancel (a colleague's,
in a run a group shares) are named, and the exit code is 5. A frozen experiment.yaml refused
after a hand edit is read from its copy (experiment.yaml.bak)."""
from __future__ import annotations

import argparse
import sys
import time

from ..controller.controller_job import cancel_waiting, waiting_line, withdraw_key
from ..controller.keeper import MonitorKeeper
from ..controller.lease import Lease
from ..controller.stop_request import (cancel_phases, clear_stop_request, refused_cancels,
                                       request_stop)
from ..errors import SchedulerError, StateError, UsageError
from ..render import LiveCopy, live_copy
from ..schedulers import make_scheduler
from ..store.run_store import RunStore
from .common import add_run_dir, open_run, run_main, seconds_or_zero

STILL_EVERY_S = 30.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="llmzero-stop", description=__doc__)
    add_run_dir(p)
    p.add_argument("--cancel", action="store_true", help="also scancel the running phases")
    p.add_argument("--wait", type=seconds_or_zero, default=120.0, metavar="S",
                   help="seconds to wait for the controller to exit (default 120; 0: do not wait)")
    args = p.parse_args(argv)
    store = open_run(args.run_dir, stopping=True)
    copy = live_copy(store.root, store.load_tree())
    if copy is not None:
        return stop_copy(store, copy, args.cancel)
    lease = Lease(store)
    info = request_stop(store, args.cancel)
    if info is None:
        print("no controller is running for this run", flush=True)
        return reported(without_controller(store, args.cancel))
    print(f"stop requested from controller on {info['host']} pid {info['pid']}"
          + (" (cancelling running phases)" if args.cancel else ""), flush=True)
    refused = cancel_controller_jobs(store, queued_only=True)   # it would resume the run later
    started = time.monotonic()
    deadline, said = started + args.wait, started
    if args.wait:
        print(f"waiting up to {args.wait:g} s for it to stop (it acts at its next poll)",
              flush=True)
    while time.monotonic() < deadline:
        if time.monotonic() - said >= still_every(args.wait):
            said = time.monotonic()
            print(f"controller still running after {said - started:.0f} s of {args.wait:g} s",
                  flush=True)
        try:
            held = lease.read()
        except StateError:      # cannot be told now: wait on
            time.sleep(1.0)
            continue
        if held and held.get("token") == info.get("token") and not lease.holder_alive(held):
            # killed (its lease file stays): nobody will act on the request, so act as if
            # no controller held the run, as a later llmzero-stop would
            print("the controller ended without acting on the stop request", flush=True)
            clear_stop_request(store, info.get("token"))
            return reported(refused + without_controller(store, args.cancel))
        if (held or {}).get("token") != info.get("token"):
            print("controller stopped", flush=True)
            refused += refused_cancels(store, info.get("token"))
            refused += cancel_controller_jobs(store, queued_only=True)   # one queued since
            return reported(refused)
        time.sleep(1.0)
    if args.wait:
        print(f"controller still running after {args.wait:.0f} s (it acts at its next poll; "
              "a controller started later ignores the request)")
        return reported(refused) or 1
    return reported(refused)


def still_every(wait_s: float) -> float:
    """How often a wait for the controller is said to go on: every 30 s, and about four times
    in a shorter wait, so that no wait is silent for long nor floods the terminal."""
    return min(STILL_EVERY_S, max(1.0, wait_s / 4))


def stop_copy(store: RunStore, copy: LiveCopy, cancel: bool) -> int:
    """A run copied while its original's phases were in flight: the jobs it records (phases,
    monitor, controller) are the original's, and it has no controller of its own (a resume of
    it is refused), so nothing is cancelled or requested. --cancel is the wrong run named:
    exit 2, naming the original's stop."""
    if cancel:
        print(f"error: {copy.line(store.root)}; nothing was cancelled: llmzero-stop --cancel "
              f"{copy.origin} cancels them", file=sys.stderr)
        return UsageError.exit_code
    print(f"note: {copy.line(store.root)}; the copy has no controller of its own and nothing "
          f"was cancelled: llmzero-stop {copy.origin} stops the original")
    return 0


def without_controller(store: RunStore, cancel: bool) -> list[SchedulerError]:
    """What a stopping controller does, done here: cancel a controller job not yet started,
    withdraw the LLM key, the phases with --cancel, and the monitor; the refusals."""
    refused = cancel_controller_jobs(store)     # a controller job that has not started yet
    withdraw_key(store)                         # which no longer needs the key it was left
    scheduler = make_scheduler(store.config.scheduler, store.root)
    if cancel:
        jobs, phases_refused = cancel_phases(store, store.load_tree(), scheduler)
        print(f"cancelled {len(jobs)} queued or running phase(s)"
              + (f": jobs {', '.join(jobs)}" if jobs else ""), flush=True)
        refused += phases_refused
    keeper = MonitorKeeper(store, scheduler)
    try:
        monitor = keeper.stop()   # what the controller does as it leaves
    except SchedulerError as exc:   # Slurm down: the refusals above are still said
        return [*refused, SchedulerError(f"the monitor job {keeper.recorded_job()} may still "
                                         f"run: {exc}")]
    if monitor is not None:
        print(f"cancelled the monitor job {monitor}")
    return refused


def cancel_controller_jobs(store: RunStore, queued_only: bool = False) -> list[SchedulerError]:
    """Cancel the controller jobs not holding the run, saying which; the refusals."""
    cancelled, refused, note = cancel_waiting(store, queued_only)
    for state in cancelled:
        print(f"cancelled {waiting_line(state, cancelled=True)}", flush=True)
    if note:
        print(f"note: {note}", flush=True)
    return refused


def reported(refused: list[SchedulerError]) -> int:
    """Name each job the scheduler would not cancel; the exit code they make."""
    for exc in refused:
        print(f"error: {exc}", file=sys.stderr, flush=True)
    return SchedulerError.exit_code if refused else 0


if __name__ == "__main__":
    run_main(main)
