#!/usr/bin/env python3
"""What one controller poll costs the shared filesystem (a metadata server's load on Lustre,
GPFS or NFS): the file system calls of the controller as llmzero-start wires it (its report,
TensorBoard curves and monitor keeper), counted by strace, by call and by the run's file they
touch, for a poll where nothing changed (every phase running or finished) and for a poll in
which one phase finished. Also one `llmzero-status`, and one monitor pass.

Builds status_cost.py's run (--nodes phases, --running of them training, each with its
status.json, job output and checkpoints) for each size; the scheduler stands in for squeue
(its cost is slurmctld's, not the filesystem's) and answers from memory. Needs strace.
Run it with PYTHONPATH naming another checkout to count that one's package (before/after).

    python benchmarks/poll_cost.py [--nodes 30 300] [--running 8] [--steps 20]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import llmzero_slurm
from llmzero_slurm.schedulers.base import JobState, Scheduler, job_state
from llmzero_slurm.search.tree import Status
from llmzero_slurm.store.run_store import RunStore
from status_cost import build

PACKAGE = Path(llmzero_slurm.__file__).resolve().parent.parent
MARK = "/llmzero-poll-mark-"          # a stat of a path that is not there: strace sees it
MONITOR_JOB = "9999"
POLLS = ("first", "steady", "one finished", "steady after")


class Answering(Scheduler):
    """squeue's answers from memory: every job running, but the one told to finish."""

    name = "slurm"
    time_limited = False

    def __init__(self) -> None:
        self.finished: set[str] = set()

    def states(self, job_ids: Iterable[str], node_dirs: Mapping[str, Path] | None = None,
               names: Mapping[str, str] | None = None) -> dict[str, JobState]:
        return {j: job_state(j, "COMPLETED" if j in self.finished else "RUNNING", 0)
                for j in job_ids}

    def submit(self, script: Path, token: str) -> str:
        raise AssertionError("a steady poll submits nothing")

    def cancel(self, job_id: str, name: str, why: str | None = None) -> None:
        """The monitor's, as the controller leaves."""

    def find_by_token(self, token: str, name: str) -> str | None:
        return None

    def submit_call(self, fn: Any, args: Sequence[Any], folder: Path, job: Any) -> str:
        raise AssertionError("the monitor is running")


def make_run(root: Path, nodes: int, running: int, steps: int) -> None:
    """status_cost's run, as a running search leaves it: the running phases' jobs recorded
    (status.json, job.claim, their output), the finished ones' ended, a monitor beating."""
    build(root, nodes, steps, running, True, config={
        "search": {"concurrency": running}, "scheduler": "local"})
    store = RunStore.open(root)
    now = time.time()
    for node in store.load_tree():
        job = str(1000 + node.id)
        live = node.status is Status.RUNNING
        files = store.node_dir(node.id)

        def submitted(n: Any, job: str = job) -> None:
            n.submission.token, n.submission.job_id = f"tok{n.id}", job
            n.started_at = now - 3600
        store.update_node(node.id, submitted)
        files.claim_file.write_text(job + "\n")
        (files.path / f"slurm-{job}.out").write_text("training...\n")
        files.status_file.write_text(json.dumps({
            "state": "running" if live else "completed", "job_id": job, "started_at": now - 3600,
            **({} if live else {"finished_at": now - 60, "exit_code": 0})}))
    (root / "monitor").mkdir()
    (root / "monitor" / "monitor.json").write_text(json.dumps(
        {"job_id": MONITOR_JOB, "kind": "slurm", "submitted_at": now, "seen_running": now}))
    for path in root.rglob("*"):       # written an hour ago, as a running search's files
        os.utime(path, (now - 3600, now - 3600))
    (root / "monitor" / "heartbeat.json").write_text(json.dumps(
        {"time": now, "started": now, "job_id": MONITOR_JOB}))


def child(root: Path) -> None:
    """The controller, polling len(POLLS) times, each poll's end marked; the first running
    phase finishes in the third."""
    from llmzero_slurm.cli import start
    scheduler = Answering()
    start.make_scheduler = lambda *args, **kw: scheduler
    store = RunStore.open(root)
    ctl = start.build_controller(store, poll_s=0.01)
    first = min(str(n.submission.job_id) for n in store.load_tree() if n.status is Status.RUNNING)
    curves, polls = ctl.on_poll, iter(range(len(POLLS)))
    assert curves is not None

    def poll_done(tree: Any) -> None:
        curves(tree)
        n = next(polls)
        mark()
        if n + 1 == POLLS.index("one finished"):
            scheduler.finished.add(first)   # read by the next poll
        if n + 1 == len(POLLS):
            os.kill(os.getpid(), signal.SIGTERM)
    ctl.on_poll = poll_done
    mark()
    ctl.run()


def monitor_pass(root: Path) -> None:
    """One monitor pass (offline stopper) after one to read every log once, marked."""
    from llmzero_slurm.controller.monitor import Monitor
    store = RunStore.open(root)
    monitor = Monitor(store, Answering(), cut_off="benchmark: offline")
    mark()
    for _ in range(2):
        monitor.check_once()
        mark()


def status_once(root: Path) -> None:
    """One llmzero-status, marked (its imports before)."""
    from llmzero_slurm.cli import status
    mark()
    with contextlib.redirect_stdout(io.StringIO()):
        status.main([str(root)])
    mark()


def mark() -> None:
    """Where one part of a traced run ends and the next begins."""
    os.path.exists(MARK)


def traced(argv: list[str]) -> list[Counter[tuple[str, str]]]:
    """Run `argv` under strace; the calls between each two marks, (call, what it touched) ->
    count."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "trace"
        subprocess.run(["strace", "-f", "-qq", "-y", "-e", "trace=%file,%desc", "-o", str(out),
                        *argv], check=False, stdout=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONPATH": f"{PACKAGE}:{Path(__file__).parent}"})
        parts: list[Counter[tuple[str, str]]] = [Counter()]
        for line in out.read_text(errors="replace").splitlines():
            if MARK in line:
                parts.append(Counter())
                continue
            m = re.match(r"\d+\s+(\w+)\((.*)", line)
            if m is None or m.group(1) in ("futex", "poll", "select", "pselect6", "wait4"):
                continue
            call = "fstat" if "AT_EMPTY_PATH" in line else m.group(1)
            parts[-1][(call, kind(m.group(2)))] += 1
        return parts[1:-1]


_KINDS = [("lease", r"controller\.lease|/lease\.json"), ("tree.lock", r"tree\.lock"),
          ("node.json", r"/node\.json\b(?!\.bak)|\.node\.json\.\w+\.tmp"),
          ("node.json.bak", r"node\.json\.bak"), ("metrics.jsonl", r"metrics\.jsonl"),
          ("status.json", r"status\.json"), ("job output", r"slurm-\d+\.out"),
          ("job.claim", r"job\.claim"), ("ckpt/", r"/ckpt"), ("early_stop.json", r"early_stop"),
          ("monitor/", r"/monitor\b"), ("tensorboard/", r"/tensorboard"),
          ("report", r"/report|\.html|figures"), ("stop.json", r"stop(-refused)?\.json"),
          ("meta.json", r"meta\.json"), ("node folder", r"/nodes/\d{4}[>\"]"),
          ("nodes/", r"/nodes[>\"]"), ("run folder", r"/run[>\"]"),
          ("run, other", r"/run/"), ]


def kind(args: str) -> str:
    """Which of the run's files a call touched, from its first path or fd's path."""
    quoted = re.search(r'"([^"]+)"', args)
    fd = re.search(r"^\d+<([^>]*)>", args)
    path = quoted.group(1) if quoted else fd.group(1) if fd else ""
    if "/run" not in path:
        return "outside the run"
    for name, pattern in _KINDS:
        if re.search(pattern, f"{path}>"):
            return name
    return "run, other"


def show(title: str, calls: Counter[tuple[str, str]]) -> None:
    inside = Counter({k: v for k, v in calls.items() if k[1] != "outside the run"})
    by_call: Counter[str] = Counter()
    by_file: Counter[str] = Counter()
    for (call, what), n in inside.items():
        by_call[call] += n
        by_file[what] += n
    print(f"  {title:<14} {sum(inside.values()):6d} calls on the run's files"
          f" ({sum(calls.values()) - sum(inside.values())} outside it)")
    print("    by call: " + ", ".join(f"{c} {n}" for c, n in by_call.most_common()))
    print("    by file: " + ", ".join(f"{c} {n}" for c, n in by_file.most_common()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[30, 300])
    parser.add_argument("--running", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    me = [sys.executable, __file__]
    for nodes in args.nodes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "run"
            make_run(root, nodes, args.running, args.steps)
            print(f"{nodes} phases, {args.running} running:")
            for title, calls in zip(POLLS, traced([*me, "--child", str(root)])):
                show(f"poll {title}", calls)
            [status] = traced([*me, "--status", str(root)])
            show("llmzero-status", status)
            passes = traced([*me, "--monitor", str(root)])
            show("monitor pass", passes[-1])


PARTS = {"--child": child, "--monitor": monitor_pass, "--status": status_once}

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in PARTS:
        PARTS[sys.argv[1]](Path(sys.argv[2]))
    else:
        main()
