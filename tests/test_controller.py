"""The controller loop against a scripted scheduler and method: submit, reconcile, finish,
stop, reparent and resume, in milliseconds per scenario (no jobs, no subprocesses)."""
from __future__ import annotations

import io
import json
import re
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from controller_doubles import Job, ScriptedMethod, ScriptedScheduler
from llmzero_slurm.config import parse_config
from llmzero_slurm.errors import SchedulerError, StateError, StorageError
from llmzero_slurm.job_names import node_job_name, phase_job_name
from llmzero_slurm.controller.controller import Controller
from llmzero_slurm.controller.outcome import NOTHING_COMPLETED
from llmzero_slurm.controller.lease import Lease
from llmzero_slurm.controller.stop_request import read_stop_request, request_stop
from llmzero_slurm.methods.base import MethodContext, PhasePlan
from llmzero_slurm.report.tensorboard import export_tensorboard
from llmzero_slurm.search.policy import Action
from llmzero_slurm.search.tree import Kind, Node, Results, Resume, Status, Submission, Tree
from llmzero_slurm.store.atomic import read_json
from llmzero_slurm.store.node_dir import NodeDir
from llmzero_slurm.store.run_store import RunStore
from llmzero_slurm.stop_reason import ended_why
from conftest import slurm_clients, wait_for
from metrics_files import val_rows, write_metrics

HP = {"lr": 1e-3, "total_training_steps": 20, "save_freq": 10}


def trained(points: dict[int, float], checkpoints: tuple[int, ...] = (10, 20)):
    """What a phase leaves behind: validation points and checkpoint folders."""
    def job(files: NodeDir) -> None:
        write_metrics(files.metrics_file, val_rows(points), append=True)
        for step in checkpoints:
            (files.ckpt / f"global_step_{step}").mkdir(parents=True, exist_ok=True)
    return job


def decided_stop(files: NodeDir) -> None:
    """The monitor's record of a STOP, written before it cancels the job."""
    files.early_stop_file.write_text(json.dumps([{"backend": "heuristic", "result": {
        "action": "STOP", "reason": "x", "step": 10}}]))


def scratch(tree: Tree) -> PhasePlan:
    return PhasePlan(Action(Kind.SCRATCH, None), dict(HP), diagnosis="root")


def evolve(parent: int, step: int):
    def plan(tree: Tree) -> PhasePlan | None:
        if tree[parent].status.pending:
            return None                      # wait for the parent's checkpoints
        return PhasePlan(Action(Kind.EVOLVE, parent), {**HP, "lr": 5e-4}, step, "evolve")
    return plan


def debug(failed: int):
    def plan(tree: Tree) -> PhasePlan | None:
        if tree[failed].status.pending:
            return None
        return PhasePlan(Action(Kind.DEBUG, failed), {**HP, "lr": 1e-4}, diagnosis="fix")
    return plan


def new_run(tmp_path: Path, **search) -> RunStore:
    return RunStore.create(tmp_path / "run", parse_config({
        "name": "ctl", "backend": "cpu", "scheduler": "local", "task": {"builtin": "addition"},
        "search": search}))


def controller(tmp_path: Path, scheduler: ScriptedScheduler, plans, store: RunStore | None = None
               ) -> tuple[Controller, io.StringIO]:
    store = store or new_run(tmp_path, budget_iterations=len(plans))
    ctx = MethodContext(store.config, store.node_dir, store.proposals_dir)
    out = io.StringIO()
    return Controller(store, scheduler, ScriptedMethod(ctx, plans), poll_s=0.001, out=out), out


def running_phases(store: RunStore, sched: ScriptedScheduler, count: int) -> None:
    """`count` phases running under jobs the scheduler knows (each poll: RUNNING)."""
    for _ in range(count):
        node = store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP), status=Status.RUNNING,
                                             submission=Submission(f"tok{i}", str(100 + i))))
        sched.jobs[str(100 + node.id)] = Job(f"tok{node.id}", store.node_dir(node.id), ["RUNNING"],
                                             node_job_name(store.config.name, node))


def test_a_poll_that_writes_nothing_reads_each_record_once(tmp_path, monkeypatch):
    """Review (a shared filesystem's metadata load): a poll read the whole tree three times
    (before and after its submissions, and again for the debug fixes) though it wrote nothing
    between: each read opens every node.json of the run. It is read again only after a write."""
    store = new_run(tmp_path, concurrency=2)
    sched = ScriptedScheduler()
    running_phases(store, sched, 2)
    ctl, _ = controller(tmp_path, sched, [scratch, scratch], store)
    reads: list[int] = []
    read_node = store.read_node
    monkeypatch.setattr(store, "read_node", lambda i, *a, **kw: reads.append(i) or read_node(i, *a, **kw))
    tree = ctl.reconcile()
    assert sorted(reads) == [0, 1] and [n.status for n in tree] == [Status.RUNNING] * 2
    sched.jobs["101"].script = ["COMPLETED"]     # a write: the tree after it is read again
    reads.clear()
    tree = ctl.reconcile()
    assert sorted(reads) == [0, 0, 1, 1, 1] and tree[1].status is Status.COMPLETED


def test_submits_watches_ingests_and_evolves_from_a_checkpoint(tmp_path):
    sched = ScriptedScheduler([
        ["PENDING", "RUNNING", trained({10: 0.3, 20: 0.5}), "COMPLETED"],
        ["RUNNING", trained({30: 0.6, 40: 0.55}, (30, 40)), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch, evolve(0, 20)])
    started = time.monotonic()
    assert ctl.run() == 0
    assert time.monotonic() - started < 5
    tree = ctl.store.load_tree()
    root, child = tree[0], tree[1]
    assert (root.status, root.results.best_val, root.results.best_val_step) == \
        (Status.COMPLETED, 0.5, 20)
    assert root.results.checkpoints == [10, 20] and root.results.last_step == 20
    assert child.resume is not None and (child.resume.node, child.resume.step) == (0, 20)
    assert child.results.best_val == 0.6 and child.results.checkpoints == [30, 40]
    assert [job.token for job in sched.jobs.values()] == \
        [n.submission.token for n in (root, child)]
    assert [n.submission.job_id for n in (root, child)] == ["100", "101"]
    assert ctl.store.node_dir(0).script.is_file()
    log = out.getvalue()
    assert "node 0: submitted as job 100" in log and "node 1: completed" in log


def test_the_curves_show_the_final_tree_when_the_last_phase_ends_the_search(tmp_path):
    """The poll that ingests the last phase also ends the search: TensorBoard must get that
    phase's last points and the best strategy it makes, not the tree of the poll before."""
    from test_tensorboard import TB_VAL, scalars
    sched = ScriptedScheduler([
        ["RUNNING", trained({10: 0.3, 20: 0.5}), "COMPLETED"],
        ["RUNNING", trained({30: 0.6}, (30,)), "RUNNING", trained({40: 0.7}, (40,)),
         "COMPLETED"]])
    ctl, _ = controller(tmp_path, sched, [scratch, evolve(0, 20)])
    store = ctl.store
    ctl.on_poll = lambda tree: export_tensorboard(store.root, tree,
                                                  lambda i: store.node_dir(i).metrics())
    assert ctl.run() == 0
    exported = read_json(store.root / "tensorboard" / "exported.json")
    assert exported["nodes"] == {"0": 20, "1": 40}
    assert [best[:2] for best in exported["best"]] == [[0, 20], [1, 40]]
    best = [(step, value) for step, tag, value in scalars(store.root / "tensorboard" /
                                                          "best-strategy") if tag == TB_VAL]
    assert best == [(10, 0.3), (20, 0.5), (30, 0.6), (40, 0.7)]


@pytest.mark.parametrize("error", [
    IsADirectoryError(21, "Is a directory", "metrics.jsonl"),
    UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
    KeyError(42)])
def test_a_report_that_cannot_be_written_never_stops_the_search(tmp_path, error):
    def broken(run_dir: Path, complete: bool) -> Path:
        raise error
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.3}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    ctl.on_finish = broken
    assert ctl.run() == 0
    assert ctl.store.load_tree()[0].status is Status.COMPLETED
    assert ctl.refresh_report() is None            # the last refresh, as llmzero-start asks
    assert out.getvalue().count(f"report not updated: {type(error).__name__}") == 2


def test_a_cancel_after_a_recorded_stop_is_an_early_stop(tmp_path):
    """Walkthrough "why was my phase cancelled?": the line read "node 0: early_stopped
    (CANCELLED), ..." and node.json said nothing of why; both now carry the stopper's line."""
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.2}), decided_stop, "CANCELLED"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    assert ctl.run() == 0
    node = ctl.store.load_tree()[0]
    assert node.status is Status.EARLY_STOPPED
    line = "stopped early at step 10 by the heuristic stopper: x"
    assert node.submission.reason == line
    assert f"node 0: early_stopped (CANCELLED, exit 1), best val 0.200 at step 10; {line}\n" in \
        out.getvalue(), out.getvalue()


def test_a_cancel_without_a_recorded_stop_is_said_to_be_no_stoppers(tmp_path):
    """Walkthrough: a phase scancelled by hand read "node 0: cancelled (CANCELLED, exit 1), ..."
    as the stopper's cancels had; the line now says no STOP was on record."""
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.2}), "CANCELLED"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    ctl.run()
    assert ("node 0: cancelled (CANCELLED, exit 1), best val 0.200 at step 10; cancelled, not "
            "by the stopper (no STOP on record): by a person (scancel, llmzero-stop --cancel) "
            "or the batch system\n") in out.getvalue(), out.getvalue()


def test_a_stop_request_cancels_the_phases_and_one_still_queued_ends_cancelled(tmp_path):
    """Review: `llmzero-stop --cancel` scancelled a phase still queued and recorded nothing.
    A job cancelled while pending writes neither job.claim nor status.json, and on a cluster
    without accounting a later llmzero-start, past MinJobAge, found it nowhere and failed it
    as LOST: a failure against the budget and the parent's Q, sent to the error analyzer. Now
    it ends CANCELLED (no verdict) at the stop; a running phase's trap says how it ended."""
    store = new_run(tmp_path, budget_iterations=2, concurrency=2)
    sched = ScriptedScheduler([["PENDING", lambda files: request_stop(store, cancel=True),
                                "PENDING"], ["RUNNING"]])
    ctl, out = controller(tmp_path, sched, [scratch, scratch], store=store)
    assert ctl.run() == 0
    assert sorted(sched.cancelled) == ["100", "101"]
    assert read_stop_request(store) is None
    assert "cancelled 2 running phase(s)" in out.getvalue()
    queued, running = store.load_tree()
    assert (queued.status, queued.submission.job_id, queued.submission.reason) == \
        (Status.CANCELLED, "100", "cancelled by llmzero-stop before it started")
    assert queued.finished_at is not None and running.status is Status.RUNNING


def test_a_cancelled_phase_whose_end_cannot_be_recorded_leaves_the_stop_whole(tmp_path,
                                                                              monkeypatch):
    """Review of the change above: the CANCELLED record of a phase cancelled while queued
    could fail (a full disk, the lock's timeout) and its error escaped the stop: the stop
    request stayed and the controller crashed. The failure is now said, and the stop done."""
    import copy
    store = new_run(tmp_path, budget_iterations=2, concurrency=2)
    update = RunStore.update_node

    def full_disk(self, node_id, change):
        trial = copy.deepcopy(self.read_node(node_id))
        change(trial)
        if (trial.submission.reason or "").startswith("cancelled by"):
            raise StateError(self.node_dir(node_id).path / "node.json", "No space left on device")
        return update(self, node_id, change)
    monkeypatch.setattr(RunStore, "update_node", full_disk)
    sched = ScriptedScheduler([["PENDING", lambda files: request_stop(store, cancel=True),
                                "PENDING"], ["RUNNING"]])
    ctl, out = controller(tmp_path, sched, [scratch, scratch], store=store)
    assert ctl.run() == 0
    assert sorted(sched.cancelled) == ["100", "101"] and read_stop_request(store) is None
    assert "node 0: job 100 is cancelled, but its end could not be recorded" in out.getvalue()


def test_llmzero_stop_names_the_cancels_a_live_controller_was_refused(tmp_path, capsys):
    """Review: `llmzero-stop --cancel` against a live controller exited 0 when scancel refused
    a phase (another member's, in a run a group shares): the refusal went to the controller's
    log alone. llmzero-stop now names it as error:, exit 5, as it does with no controller."""
    import threading
    from llmzero_slurm.cli import stop
    store = new_run(tmp_path, budget_iterations=1)
    sched = ScriptedScheduler()
    denied = "cancelling job 100 (x): scancel failed (exit 1): Access/permission denied"

    def refuse(job_id: str, name: str) -> None:
        raise SchedulerError(denied)
    sched.cancel = refuse
    ctl, _ = controller(tmp_path, sched, [scratch], store=store)
    codes = []

    def stopper() -> None:
        try:
            wait_for(lambda: sched.jobs, 30, "the phase's submission")
            codes.append(stop.main([str(store.root), "--cancel", "--wait", "30"]))
        finally:
            request_stop(store, cancel=False)     # a failed stop leaves no controller running
    asking = threading.Thread(target=stopper)
    asking.start()
    assert ctl.run() == 0
    asking.join(60)
    assert codes == [5]
    said = capsys.readouterr()
    assert "controller stopped\n" in said.out and said.err == f"error: {denied}\n"


def test_a_stop_request_without_cancel_leaves_phases_running_under_cancel_on_stop(tmp_path):
    """Review: --cancel-on-stop (documented for SIGINT/SIGTERM) also cancelled the running
    phases at an `llmzero-stop` without --cancel, which told the user it leaves them."""
    store = new_run(tmp_path, budget_iterations=2)
    sched = ScriptedScheduler([["RUNNING", lambda files: request_stop(store, cancel=False),
                                "RUNNING"]])
    ctl, _ = controller(tmp_path, sched, [scratch], store=store)
    assert ctl.run(cancel_on_stop=True) == 0
    assert sched.cancelled == []


def test_a_cancel_that_cannot_look_a_job_up_still_cancels_the_others(tmp_path):
    """A phase whose sbatch answer was never recorded is looked up by its token first: with
    squeue down that look-up raised out of cancel_phases, and `llmzero-stop --cancel`
    cancelled no phase at all, the running ones whose job ids are on record included."""
    from llmzero_slurm.controller.stop_request import cancel_phases
    store = new_run(tmp_path, budget_iterations=2)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP)))
    sched = ScriptedScheduler()
    ctl, _ = controller(tmp_path, sched, [scratch] * 2, store=store)
    ctl.reconcile()                                  # node 0 runs as job 100
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP), status=Status.SUBMITTING,
                                  submission=Submission(token="tok-lost")))

    def squeue_down(token: str, name: str) -> str | None:
        raise SchedulerError("squeue: slurm_load_jobs error: Unable to contact slurm controller")
    sched.find_by_token = squeue_down
    cancelled, refused = cancel_phases(store, store.load_tree(), sched)
    assert cancelled == ["100"] and sched.cancelled == ["100"]
    assert [str(e) for e in refused] == ["node 1: its job could not be looked up: squeue: "
                                         "slurm_load_jobs error: Unable to contact slurm "
                                         "controller"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_an_agent_waits_on_its_llm_stops_at_once_and_creates_nothing(
        tmp_path, signum):
    """A Ctrl-C while the proposer waited on an LLM that did not answer (timeout_s x
    (max_retries + 1): ten minutes by default) was only noted: the controller went on to create
    and submit that phase, asked the LLM for the next one, and exited minutes later."""
    def unanswered(tree: Tree) -> PhasePlan | None:
        if tree[0].status.pending:
            return None
        os.kill(os.getpid(), signum)   # the user, while the agent waits
        time.sleep(30)                 # the LLM call
        return evolve(0, 10)(tree)
    store = new_run(tmp_path, budget_iterations=3, concurrency=2)
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch, unanswered, unanswered], store=store)
    began = time.monotonic()
    assert ctl.run() == 128 + signum
    assert time.monotonic() - began < 10, out.getvalue()
    assert len(ctl.store.load_tree()) == 1 and len(sched.jobs) == 1, out.getvalue()
    assert "search finished" not in out.getvalue()


def sending(*signums: int):
    """An on_poll that sends the i-th signal as the i-th poll ends."""
    polls = []

    def send(tree: Tree) -> None:
        polls.append(tree)
        os.kill(os.getpid(), signums[min(len(polls), len(signums)) - 1])
    return send


def test_ctrl_c_while_slurm_does_not_answer_stops_within_seconds(tmp_path):
    """Review: after a Ctrl-C the controller waited out the Slurm client's retries, polled
    again, and retried the monitor's cancel as it left: exit 130 a minute after the Ctrl-C.
    For the controller job, Slurm's SIGKILL comes 30 s after its SIGTERM, and its lease was
    never released. The stop now ends every retry, the loop asks Slurm nothing new, and the
    lease is released; a second Ctrl-C interrupts whatever is left at once."""
    import threading
    from llmzero_slurm.controller.keeper import MonitorKeeper
    from llmzero_slurm.schedulers import SlurmScheduler
    calls = []

    def slurmctld_down(argv):
        calls.append(argv[0])
        return subprocess.CompletedProcess(argv, 1, "", "slurm_load_jobs error: Unable to "
                                           "contact slurm controller (connect failure)")
    store = new_run(tmp_path)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP), status=Status.RUNNING,
                                  submission=Submission("tok", "4242")))
    (store.root / "monitor").mkdir()
    (store.root / "monitor" / "monitor.json").write_text(json.dumps({"job_id": "4243"}))
    sched = SlurmScheduler(runner=slurmctld_down)
    ctx = MethodContext(store.config, store.node_dir, store.proposals_dir)
    ctl = Controller(store, sched, ScriptedMethod(ctx, []), poll_s=30, out=io.StringIO(),
                     monitor=MonitorKeeper(store, sched))
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    began = time.monotonic()
    assert ctl.run() == 130
    assert time.monotonic() - began < 5, calls
    assert calls == ["squeue", "squeue"]    # the poll, and the monitor's state as it left
    assert not (store.root / Lease.FILE).exists()


def test_a_stop_signal_ends_the_squeue_under_way_and_keeps_the_phases_states(tmp_path,
                                                                           monkeypatch):
    """Review: a SIGTERM that came while squeue waited on a slow slurmctld was acted on only
    once squeue answered, up to its 120 s timeout. The squeue under way is ended at once; the
    poll had no answer, so every phase keeps the state on record, for the next start."""
    import threading
    from llmzero_slurm.schedulers import SlurmScheduler
    slurm_clients(tmp_path, monkeypatch, squeue="sleep 30")
    store = new_run(tmp_path)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP), status=Status.RUNNING,
                                  submission=Submission("tok", "4242")))
    ctx = MethodContext(store.config, store.node_dir, store.proposals_dir)
    out = io.StringIO()
    ctl = Controller(store, SlurmScheduler(min_poll_s=0), ScriptedMethod(ctx, []), poll_s=30,
                     out=out)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    began = time.monotonic()
    assert ctl.run() == 143
    assert time.monotonic() - began < 10, out.getvalue()    # squeue alone would take 30 s
    assert ("could not poll the scheduler, states kept as they were: polling jobs: squeue was "
            "ended unanswered: stopping") in out.getvalue()
    [node] = store.load_tree()
    assert (node.status, node.submission.job_id) == (Status.RUNNING, "4242")


def test_a_signal_sends_nothing_more_to_the_scheduler(tmp_path, monkeypatch):
    """Review: a signal that came while the controller slept was acted on only after the
    next reconcile, which sent the nodes waiting for their sbatch (a back-off over, a
    submission to confirm) as jobs the stopped run then left behind. Once a signal came,
    nothing is submitted; the node waits for the next start to confirm it."""
    monkeypatch.setattr("llmzero_slurm.controller.submission.SUBMIT_BACKOFF_S", 0.0)
    limit = SchedulerError("sbatch: error: QOSMaxSubmitJobPerUserLimit", retryable=True)
    sched = RefusingScheduler([limit], [])
    ctl, out = controller(tmp_path, sched, [scratch])
    ctl.on_poll = sending(signal.SIGTERM)
    assert ctl.run() == 143
    assert sched.jobs == {}, out.getvalue()
    assert ctl.store.load_tree()[0].status is Status.SUBMITTING


def test_a_second_ctrl_c_interrupts_at_once(tmp_path):
    """A person who pressed Ctrl-C twice wants out now: the second one is a
    KeyboardInterrupt wherever the controller is (exit 130), and the lease is still given
    back."""
    def stuck(tree: Tree) -> None:
        time.sleep(30)              # a cancel, an sbatch, a report that does not return
    sched = ScriptedScheduler([["RUNNING"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    ctl.on_poll = lambda tree: (os.kill(os.getpid(), signal.SIGINT),
                                os.kill(os.getpid(), signal.SIGINT), stuck(tree))
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        ctl.run()
    assert time.monotonic() - began < 5
    assert not (ctl.store.root / Lease.FILE).exists()


def test_a_closed_terminal_stops_the_controller_as_ctrl_c_does_unless_nohup(tmp_path):
    """Review: SIGHUP was no stop signal, so a controller in the foreground of an SSH session
    that closed died of it without giving its lease back or cancelling its monitor. It now
    stops as for Ctrl-C (exit 128 + SIGHUP). Started under nohup (SIGHUP ignored) it was asked
    to outlive its terminal, and does."""
    previous = signal.signal(signal.SIGHUP, lambda *_: None)    # no death of pytest on a failure
    try:
        ctl, out = controller(tmp_path, ScriptedScheduler([["RUNNING"]]), [scratch])
        ctl.on_poll = sending(signal.SIGHUP, signal.SIGTERM)
        assert ctl.run() == 128 + signal.SIGHUP, out.getvalue()
        assert not (ctl.store.root / Lease.FILE).exists()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)             # nohup llmzero-start ...
        again, _ = controller(tmp_path, ScriptedScheduler(), [scratch], store=ctl.store)
        again.on_poll = sending(signal.SIGHUP, signal.SIGTERM)
        assert again.run() == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_stop_request_abandons_an_llm_call_in_flight(tmp_path, monkeypatch):
    """llmzero-stop while the proposer waited on an LLM that did not answer: the controller
    read the request only once the call ended (up to agents.timeout_s, two minutes by
    default), as long as llmzero-stop waits by default. The call is now abandoned within about
    a second, and the search stops as asked, creating no phase."""
    import threading
    from llm_loopback import LoopbackLLM
    from llmzero_slurm.agents.llm import LLMUnavailable, Prompt, choose_backend
    from llmzero_slurm.config import AgentConfig
    monkeypatch.setenv("LLMZERO_TEST_LLM_KEY", "sk-loopback-0123456789")
    store = new_run(tmp_path, budget_iterations=3, concurrency=2)
    said = []
    with LoopbackLLM() as service:
        service.reply({"delay": 20, "text": "too late"})
        llm = choose_backend(AgentConfig(backend="anthropic", base_url=service.url,
                                         api_key_env="LLMZERO_TEST_LLM_KEY", max_retries=0))

        def asks_the_llm(tree: Tree) -> PhasePlan | None:
            if tree[0].status.pending:
                return None
            try:
                llm.complete(Prompt("Propose.", "What next?"))
            except LLMUnavailable as exc:
                said.append(str(exc))
            return evolve(0, 10)(tree)

        def the_user() -> None:
            while not service.requests:
                time.sleep(0.05)
            request_stop(store, cancel=False)
        threading.Thread(target=the_user, daemon=True).start()
        sched = ScriptedScheduler([["RUNNING", trained({10: 0.4}), "COMPLETED"]])
        ctl, out = controller(tmp_path, sched, [scratch, asks_the_llm, asks_the_llm], store=store)
        began = time.monotonic()
        assert ctl.run() == 0
        assert time.monotonic() - began < 10, out.getvalue()
    assert said == ["Anthropic API: the call was abandoned: llmzero-stop asked the controller "
                    "to stop"]
    assert len(ctl.store.load_tree()) == 1 and len(sched.jobs) == 1, out.getvalue()
    assert "stopped; 0 phase(s) keep running" in out.getvalue()
    assert read_stop_request(store) is None


def test_a_stop_request_made_while_an_agent_answers_creates_no_phase(tmp_path):
    """llmzero-stop while the proposer waited on a slow LLM: the controller created and
    submitted the phase it was answered, then asked for the next one, and read the request only
    after that; the stop command gave up waiting meanwhile (exit 1)."""
    store = new_run(tmp_path, budget_iterations=3, concurrency=2)

    def slow_answer(tree: Tree) -> PhasePlan | None:
        if tree[0].status.pending:
            return None
        request_stop(store, cancel=False)   # the user, while the agent waits
        return evolve(0, 10)(tree)
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch, slow_answer, slow_answer], store=store)
    assert ctl.run() == 0
    assert len(ctl.store.load_tree()) == 1 and len(sched.jobs) == 1, out.getvalue()
    assert "search finished" not in out.getvalue() and read_stop_request(store) is None


def test_a_stop_request_its_controller_never_read_does_not_stop_the_next_one(tmp_path):
    """Audit D3: a request left by a controller that was paused, then killed before it read
    it, stopped the next controller started on the run and cancelled its phases."""
    store = new_run(tmp_path, budget_iterations=1)
    gone = Lease(store)
    gone.acquire()
    request_stop(store, cancel=True)     # aimed at a paused controller, which never reads it
    gone.release()                       # and is gone (its lease expired)
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch], store=store)
    assert ctl.run() == 0
    assert sched.cancelled == [] and ctl.store.load_tree()[0].status is Status.COMPLETED
    assert "an earlier stop request for a controller that is gone was cleared" in out.getvalue()
    assert read_stop_request(store) is None


def test_an_analysis_that_ends_a_debug_chain_is_filed_with_the_failed_node(tmp_path):
    """When the error analyzer gave up, its record (what it saw and answered, its cost) stayed
    in proposals/<id>/, beside no node, and the report counted none of it."""
    from llmzero_slurm.methods.base import GiveUp
    from llmzero_slurm.report import write_report
    from llmzero_slurm.report.collect import collect
    record = {"agent": "error_analyzer", "backend": "heuristic", "usage": {"input_tokens": 7},
              "result": {"failure": "user_code", "action": "give_up", "message": "a person"}}

    def give_up_then_scratch(tree: Tree) -> PhasePlan | GiveUp | None:
        if tree[0].status.pending:
            return None
        if tree[0].terminal:
            return scratch(tree)
        records = ctl.store.proposals_dir / "a1b2"
        records.mkdir(parents=True)
        (records / "error_analysis.json").write_text(json.dumps(record))
        return GiveUp(0, "a person must fix the reward", records)

    sched = ScriptedScheduler([["RUNNING", "FAILED"],
                               ["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch, give_up_then_scratch])
    assert ctl.run() == 0
    failed = ctl.store.load_tree()[0]
    assert failed.terminal and failed.gave_up_because is not None
    filed = ctl.store.node_dir(0).give_up / "error_analysis.json"
    assert json.loads(filed.read_text()) == record
    assert list((ctl.store.proposals_dir).iterdir()) == []
    view = collect(ctl.store.root)
    assert view.nodes[0].give_up_analysis == record and view.nodes[0].error_analysis is None
    assert view.agent_costs["error_analyzer"].tokens["input_tokens"] == 7
    page = write_report(ctl.store.root).read_text()
    assert "<b>Error analyzer, ending its debug chain</b> (heuristic): user_code, give_up: " \
        "a person</p>" in page


def test_a_successful_fix_moves_beside_the_failure_it_fixes(tmp_path):
    sched = ScriptedScheduler([
        ["RUNNING", trained({10: 0.3, 20: 0.4}), "COMPLETED"],
        ["RUNNING", "FAILED"],
        ["RUNNING", trained({30: 0.5, 40: 0.6}, (30, 40)), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch, evolve(0, 20), debug(1)])
    assert ctl.run() == 0
    tree = ctl.store.load_tree()
    failed, fix = tree[1], tree[2]
    assert failed.status is Status.FAILED and failed.terminal
    assert (fix.parent, fix.kind, fix.fixed_from) == (0, Kind.EVOLVE, 1)
    assert fix.resume is not None and fix.resume.step == 20
    assert "node 2: fixes node 1" in out.getvalue()


@pytest.mark.fault("killed between intent and sbatch, and between sbatch and the job id")
def test_a_resumed_run_scores_the_phases_an_earlier_release_left_unscored(tmp_path):
    """An earlier release did not read val-core/openai/gsm8k/... (verl's own name for GSM8K
    rows holds a slash) as a score: its phases were recorded unscored, and a run resumed with
    the release that reads them still passed over them; only new phases were scored."""
    store = new_run(tmp_path, budget_iterations=2)
    store.add_node(lambda j: Node(j, None, Kind.SCRATCH, dict(HP), status=Status.COMPLETED,
                                  results=Results(last_step=20, checkpoints=[10, 20]),
                                  submission=Submission("tok0", "99")))
    write_metrics(store.node_dir(0).metrics_file,
                  [*val_rows({10: 0.3, 20: 0.5}, "val-core/openai/gsm8k/acc/mean@1"),
                   (20, {"test-core/openai/gsm8k_test/acc/mean@1": 0.4})])
    sched = ScriptedScheduler([["RUNNING", trained({30: 0.6}, (30,)), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch, evolve(0, 20)], store=store)
    assert ctl.run() == 0
    root = ctl.store.load_tree()[0]
    assert (root.results.best_val, root.results.best_val_step, root.results.test_at_best) == \
        (0.5, 20, 0.4)
    assert (root.results.last_step, root.results.checkpoints) == (20, [10, 20])
    assert "node 0: scored from its metrics.jsonl (best val 0.500 at step 20)" in out.getvalue()


def test_a_restarted_controller_finds_submitted_jobs_and_submits_the_rest(tmp_path, fault_outcome):
    """Killed between recording intent and sbatch, or between sbatch and the job id."""
    store = new_run(tmp_path, budget_iterations=3, concurrency=3)
    for status, token in [(Status.SUBMITTING, "tok-sent"), (Status.SUBMITTING, "tok-lost"),
                          (Status.PROPOSED, None)]:
        store.add_node(lambda j, s=status, t=token: Node(j, None, Kind.SCRATCH, dict(HP), status=s,
                                                          submission=Submission(t)))
    sched = ScriptedScheduler()
    # The first node's sbatch went through before the crash: the scheduler knows its token.
    script = store.node_dir(0).path / "phase.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --job-name={phase_job_name(store.config.name, 0, 'scratch')}"
                      "\n#SBATCH --comment=llmz:node=0000,token=tok-sent\n")
    sched.scripts = [["RUNNING", trained({10: 0.4}), "COMPLETED"]] * 3
    assert sched.submit(script, "tok-sent") == "100"
    ctl, _ = controller(tmp_path, sched, [scratch] * 3, store=store)
    assert ctl.run() == 0
    tree = ctl.store.load_tree()
    assert [n.submission.job_id for n in tree] == ["100", "101", "102"]
    assert len(sched.jobs) == 3                       # nothing submitted twice
    assert tree[0].submission.token == "tok-sent"     # found by its token, not resubmitted
    assert all(n.status is Status.COMPLETED for n in tree)
    fault_outcome(ctl.store, sched.job_dirs())


def test_a_sample_budget_cuts_the_last_phase_to_what_is_left_and_ends_the_search(tmp_path):
    per_phase = HP["total_training_steps"] * 32 * 8     # the CPU trainer's batch shape
    store = new_run(tmp_path, budget_iterations=10, budget_samples=per_phase + 10 * 32 * 8)
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.3, 20: 0.5}), "COMPLETED"],
                               ["RUNNING", trained({10: 0.4}, (10,)), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch] * 3, store)
    assert ctl.run() == 0
    tree = ctl.store.load_tree()
    assert [n.hparams["total_training_steps"] for n in tree] == [20, 10]
    assert "cut to 10 of its 20 steps" in tree[1].diagnosis
    assert "training samples used or committed" in out.getvalue()


def test_a_proposal_the_sample_budget_has_no_room_for_is_asked_for_once(tmp_path):
    """With samples left but less than a step's worth, the controller asked the method (an
    LLM call) again at every poll while a phase ran, and left each answer in proposals/,
    where the report counted none of its cost."""
    from llmzero_slurm.report import write_report
    from llmzero_slurm.report.collect import collect
    per_phase = HP["total_training_steps"] * 32 * 8     # the CPU trainer's batch shape
    store = new_run(tmp_path, budget_iterations=10, budget_samples=per_phase + 100,
                    concurrency=2)
    asked: list[int] = []

    def proposal(tree: Tree) -> PhasePlan:
        asked.append(len(tree))
        records = store.proposals_dir / f"p{len(asked)}"
        records.mkdir(parents=True)
        (records / "proposal.json").write_text(json.dumps(
            {"agent": "proposer", "backend": "heuristic", "usage": {"input_tokens": 5}}))
        return PhasePlan(Action(Kind.EVOLVE, 0), dict(HP), 10, "evolve", records)

    sched = ScriptedScheduler([["RUNNING"] * 30 + [trained({10: 0.3, 20: 0.5}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch, proposal, proposal], store)
    assert ctl.run() == 0
    assert len(ctl.store.load_tree()) == 1 and asked == [1]
    said = out.getvalue()
    assert "needs 256 training samples a step and the budget has 100 left" in said
    assert "less than a step of training samples is left" in said
    view = collect(store.root)
    assert view.agent_costs["proposer"].tokens["input_tokens"] == 5
    assert any("1 agent answer made no phase" in note for note in view.notes)
    assert "made no phase" in write_report(store.root).read_text()


def finished_cleanly(files: NodeDir) -> None:
    """The job's own end record: every step done, exit 0 (job ids start at 100)."""
    files.status_file.write_text(json.dumps({"state": "completed", "job_id": "100",
                                             "exit_code": 0}))


@pytest.mark.fault("Slurm TIMEOUT for a job that finished every step")
def test_a_phase_that_completed_right_at_its_time_limit_counts_as_completed(tmp_path, fault_outcome):
    """Issue 14.7: Slurm said TIMEOUT, status.json said completed, and it was recorded failed."""
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.3, 20: 0.5}), finished_cleanly,
                                "TIMEOUT"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    assert ctl.run() == 0
    root = ctl.store.load_tree()[0]
    assert root.status is Status.COMPLETED and root.results.best_val == 0.5
    assert root.submission.scheduler_state == "TIMEOUT" and "time limit" in root.submission.reason
    fault_outcome(ctl.store, sched.job_dirs())


def test_a_timeout_after_the_last_planned_step_was_saved_counts_as_completed(tmp_path):
    """Audit (report): the time limit struck as the job wound down after saving its last
    planned step, before it recorded its end. It was recorded failed, and its debug child,
    'continuing' from that checkpoint with no step left, trained past the plan."""
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.3, 20: 0.5}, (10, 20)), "TIMEOUT"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    assert ctl.run() == 0
    [root] = ctl.store.load_tree()
    assert root.status is Status.COMPLETED and root.submission.scheduler_state == "TIMEOUT"
    assert "saved its last planned step (20)" in root.submission.reason
    # and its line says why a TIMEOUT is a completion ("completed (TIMEOUT)" read as a slip)
    assert ("node 0: completed (TIMEOUT: saved its last planned step (20) before the time "
            "limit struck)") in out.getvalue(), out.getvalue()


def test_a_timeout_without_a_clean_end_record_stays_a_failure(tmp_path):
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.3}, (10,)), "TIMEOUT"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    assert ctl.run() == NOTHING_COMPLETED        # issue 15: it said 0 with nothing to show
    assert ctl.store.load_tree()[0].status is Status.FAILED
    assert "no phase completed" in out.getvalue()


# -- one node's trouble stays its own (issue 14.5) ------------------------------------------

class RefusingScheduler(ScriptedScheduler):
    """Refuses the first submissions with the given errors, then takes jobs as scripted. An
    unsure error (a timed-out sbatch) takes the job and loses its answer."""

    def __init__(self, refusals: list[SchedulerError | None], scripts: list):
        super().__init__(scripts)
        self.refusals = refusals

    def submit(self, script: Path, token: str) -> str:
        if self.refusals and (refusal := self.refusals.pop(0)) is not None:   # None: taken
            if refusal.unsure:
                super().submit(script, token)
            raise refusal
        return super().submit(script, token)


@pytest.mark.fault("sbatch refuses a node for good")
def test_a_permanent_sbatch_refusal_fails_that_node_and_the_search_goes_on(tmp_path, fault_outcome):
    sched = RefusingScheduler([SchedulerError("sbatch: error: invalid partition specified")],
                              [["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch, scratch])
    assert ctl.run() == 0
    first, second = ctl.store.load_tree()
    assert first.status is Status.FAILED and first.terminal
    assert "invalid partition" in (first.submission.reason or "")
    assert second.status is Status.COMPLETED
    assert "node 0: failed before submission" in out.getvalue()
    fault_outcome(ctl.store, sched.job_dirs())


@pytest.mark.fault("sbatch refuses every phase for good (an unknown partition)")
def test_refusals_in_a_row_stop_the_search_instead_of_spending_its_budget(tmp_path, fault_outcome):
    """Review: a refusal of every phase (an unknown partition, a run-wide setting) failed
    each node the method planned, in one poll, until the budget was spent. Refusals that no
    wait cures, REFUSALS_IN_A_ROW of them with no job taken between, close the search to new
    phases: it ends once its running phases have, says why, and exits as a batch-system
    error, to be resumed once the cause is mended. A job taken starts the count again."""
    from llmzero_slurm.controller.admission import REFUSALS_IN_A_ROW
    bad = SchedulerError("sbatch: error: invalid partition specified")
    sched = RefusingScheduler([bad, None, *[bad] * 10],
                              [["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch] * 12)
    assert ctl.run() == SchedulerError.exit_code
    tree = ctl.store.load_tree()
    assert [n.status for n in tree] == [Status.FAILED, Status.COMPLETED,
                                        *[Status.FAILED] * REFUSALS_IN_A_ROW], out.getvalue()
    assert (f"search stopped: the scheduler refused the last {REFUSALS_IN_A_ROW} phases, each "
            "for good (the last: sbatch: error: invalid partition specified)") in out.getvalue()
    fault_outcome(ctl.store, sched.job_dirs())


def test_a_job_found_by_its_token_is_a_job_taken_between_refusals(tmp_path, monkeypatch):
    """A submission whose sbatch answer was lost (a timed-out client), its job then found by
    its token, did not start the count of refusals in a row again: two refusals before it and
    one after closed the search (exit 5) although the scheduler had taken a phase between. A
    job found so is a job taken, and said as one."""
    monkeypatch.setattr("llmzero_slurm.controller.submission.SUBMIT_BACKOFF_S", 0.0)
    bad = SchedulerError("sbatch: error: invalid partition specified")
    lost = SchedulerError("submitting: sbatch: socket timed out; it may still have gone through",
                          unsure=True)
    sched = RefusingScheduler([bad, bad, lost, bad, bad],
                              [["RUNNING", trained({10: 0.4}), "COMPLETED"]] * 2)
    ctl, out = controller(tmp_path, sched, [scratch] * 6)
    assert ctl.run() == 0, out.getvalue()
    assert [n.status for n in ctl.store.load_tree()] == [
        Status.FAILED, Status.FAILED, Status.COMPLETED, Status.FAILED, Status.FAILED,
        Status.COMPLETED]
    assert "node 2: submitted as job 100 (found after its sbatch answer was lost)" in out.getvalue()


def test_a_search_with_nothing_completed_names_the_failure_not_the_plan(tmp_path):
    """It printed the proposer's diagnosis of the plan ("root") as the last failure."""
    sched = RefusingScheduler([SchedulerError("sbatch: error: invalid partition specified")], [])
    ctl, out = controller(tmp_path, sched, [scratch])
    assert ctl.run() == NOTHING_COMPLETED
    assert ("the last failure: the scheduler refused it: sbatch: error: invalid partition "
            "specified") in out.getvalue()


def test_the_progress_summary_counts_every_phase_it_says_there_are():
    """'3 phases: 1 completed, 1 failed' left the pruned one (a damaged record, or a debug
    chain a fix replaced) out of the counts, so they did not add up."""
    from llmzero_slurm.controller.progress import tree_summary
    tree = Tree([Node(0, None, Kind.SCRATCH, dict(HP), status=Status.COMPLETED,
                      results=Results(best_val=0.5)),
                 Node(1, 0, Kind.EVOLVE, dict(HP), status=Status.FAILED),
                 Node(2, 1, Kind.DEBUG, dict(HP), status=Status.FAILED, pruned=True)])
    assert tree_summary(tree).startswith("3 phases: 1 completed, 1 failed, 1 pruned |")


def test_the_progress_summary_of_one_phase_reads_as_english():
    """Walkthrough: a run of one phase read "1 phases: 1 completed | best val 0.500 (node 0: 0)"."""
    from llmzero_slurm.controller.progress import tree_summary
    tree = Tree([Node(0, None, Kind.SCRATCH, dict(HP), status=Status.COMPLETED,
                      results=Results(best_val=0.5))])
    assert tree_summary(tree) == "1 phase: 1 completed | best val 0.500 (node 0)"


def refused_its_input(files: NodeDir) -> None:
    """A trainer that refuses its data: its error line in the job's log, exit 2."""
    (files.path / "slurm-100.out").write_text(
        "llmzero: job 100 (restart 0) on n1\n"
        "cpu_grpo: error: data/test.parquet: row 0: column 'prompt' holds text\n")
    files.status_file.write_text(json.dumps({"state": "failed", "job_id": "100", "exit_code": 2,
                                             "reason": "the trainer exited with code 2"}))


def test_a_search_whose_budget_ends_on_a_failed_job_names_the_jobs_error(tmp_path):
    """The budget ended with the failure, so no error analyzer ever read the log: exit 7
    printed no failure at all, and the user had to find the job's output themselves."""
    sched = ScriptedScheduler([["RUNNING", refused_its_input, "FAILED"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    assert ctl.run() == NOTHING_COMPLETED
    assert ("the last failure: node 0: cpu_grpo: error: data/test.parquet: row 0: column "
            "'prompt' holds text") in out.getvalue()


def test_the_line_of_a_failed_phase_gives_its_jobs_error(tmp_path):
    """Own-data walkthrough: a phase that failed read "node 0: failed (FAILED, exit 2), no
    validation score", and the search went on to other phases: why it failed was in its job's
    output alone, for the user to find."""
    sched = ScriptedScheduler([["RUNNING", refused_its_input, "FAILED"],
                               ["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch, scratch])
    assert ctl.run() == 0
    assert ("node 0: failed (FAILED, exit 1), no validation score; cpu_grpo: error: "
            "data/test.parquet: row 0: column 'prompt' holds text\n") in out.getvalue(), \
        out.getvalue()
    assert "node 1: completed (COMPLETED), best val 0.400 at step 10\n" in out.getvalue()


class SlurmReasons(ScriptedScheduler):
    """As squeue shows an ended job: a failed one with Slurm's Reason, NonZeroExitCode."""

    def states(self, job_ids, node_dirs=None, names=None):
        return {job_id: (replace(state, reason="NonZeroExitCode") if state.raw == "FAILED"
                         else state)
                for job_id, state in super().states(job_ids, node_dirs, names).items()}


def failed_in_setup(files: NodeDir) -> None:
    """A `module load` in slurm.setup that the node lacks: no error line, its end recorded."""
    (files.path / "slurm-100.out").write_text(
        "llmzero: job 100 (restart 0) on n1\nslurm_script: line 338: module: command not found\n")
    files.status_file.write_text(json.dumps({
        "state": "failed", "job_id": "100", "exit_code": 127,
        "reason": "the script exited with code 127 during setup"}))


@pytest.mark.parametrize("job, said", [
    (refused_its_input, "node 0: cpu_grpo: error: data/test.parquet: row 0: column 'prompt' "
                        "holds text"),
    (failed_in_setup, "node 0: the script exited with code 127 during setup")])
def test_a_search_that_failed_on_slurm_names_the_jobs_own_error_not_slurms_reason(
        tmp_path, job, said):
    """Walkthrough on the Slurm cluster: a search whose phases failed in their setup lines
    ended with "the last failure: NonZeroExitCode", squeue's Reason for every failed job,
    which shadowed the job's own error line and its status.json."""
    ctl, out = controller(tmp_path, SlurmReasons([["RUNNING", job, "FAILED"]]), [scratch])
    assert ctl.run() == NOTHING_COMPLETED
    assert f"the last failure: {said}\n" in out.getvalue(), out.getvalue()


@pytest.mark.fault("submit limit (QOSMaxSubmitJobPerUserLimit) twice")
def test_a_submit_limit_backs_off_and_submits_the_same_node_later(tmp_path, monkeypatch, fault_outcome):
    monkeypatch.setattr("llmzero_slurm.controller.submission.SUBMIT_BACKOFF_S", 0.05)
    limit = SchedulerError("sbatch: error: QOSMaxSubmitJobPerUserLimit", retryable=True)
    sched = RefusingScheduler([limit, limit], [["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    assert ctl.run() == 0
    [node] = ctl.store.load_tree()
    assert node.status is Status.COMPLETED and len(sched.jobs) == 1
    assert node.submission.attempts == 3
    assert out.getvalue().count("node 0: not submitted yet") == 2
    fault_outcome(ctl.store, sched.job_dirs())


@pytest.mark.fault("a phase script that cannot be rendered")
def test_a_script_that_cannot_be_rendered_fails_its_node_only(tmp_path, fault_outcome):
    bad = lambda tree: PhasePlan(Action(Kind.SCRATCH, None), {**HP, "lr": "fast"})  # noqa: E731
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [bad, scratch])
    assert ctl.run() == 0
    first, second = ctl.store.load_tree()
    assert first.status is Status.FAILED and "could not be rendered" in first.submission.reason
    assert "lr" in first.submission.reason and second.status is Status.COMPLETED
    fault_outcome(ctl.store, sched.job_dirs())


class DownScheduler(ScriptedScheduler):
    """squeue and sacct down for the first polls."""

    def __init__(self, down_polls: int, scripts: list):
        super().__init__(scripts)
        self.down = down_polls

    def states(self, job_ids, node_dirs=None, names=None):
        if self.down:
            self.down -= 1
            raise SchedulerError("polling jobs: squeue kept failing with a transient error",
                                 retryable=True)
        return super().states(job_ids, node_dirs, names)


@pytest.mark.fault("squeue and sacct down for three polls")
def test_a_scheduler_that_cannot_be_polled_is_waited_out(tmp_path, fault_outcome):
    sched = DownScheduler(3, [["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    assert ctl.run() == 0
    assert ctl.store.load_tree()[0].status is Status.COMPLETED
    assert out.getvalue().count("could not poll the scheduler") == 3
    fault_outcome(ctl.store, sched.job_dirs())


@pytest.mark.fault("a corrupt node.json")
def test_a_corrupt_node_record_is_left_out_and_no_phase_starts_until_it_is_rebuilt(
        tmp_path, fault_outcome):
    """Review: under a budget of phases alone the search went on past an unreadable record;
    with it the root, llmzero started a fresh root and orphaned the tree it could not see."""
    store = new_run(tmp_path, budget_iterations=3)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP), status=Status.COMPLETED))
    store.node_path(0).write_text('{"schema_version": 1, "id": 0, "kind": "scr')
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch, scratch], store=store)
    assert ctl.run() == 3          # corrupt state: the search did not end, it cannot go on
    tree = ctl.store.load_tree()
    assert len(tree) == 1 and tree[0].pruned and tree[0].status is Status.FAILED
    assert store.node_path(0).read_text().endswith('"scr')      # the bytes are kept
    said = out.getvalue()
    assert said.count(f"node 0: left out of the search (llmzero-repair {store.root} 0 rebuilds "
                      "it; until then no phase is created") == 1
    assert (f"the search ended with node 0 left out: a job of its own that still runs was not "
            f"watched; llmzero-repair {store.root}, then llmzero-start {store.root}") in said
    assert store.rebuild_node(0).status is Status.COMPLETED      # from the copy beside it
    assert not store.load_tree()[0].pruned and not store.corrupt
    ctl, out = controller(tmp_path, sched, [scratch, scratch], store=store)
    assert ctl.run() == 0 and ctl.store.load_tree()[1].status is Status.COMPLETED
    fault_outcome(ctl.store, sched.job_dirs())


def test_a_damaged_record_stops_a_sample_budget_from_starting_phases_until_it_is_rebuilt(tmp_path):
    """A damaged node.json was charged nothing, so the controller started phases with the
    samples that phase had used as if they were left."""
    per_phase = HP["total_training_steps"] * 32 * 8     # the CPU trainer's batch shape
    store = new_run(tmp_path, budget_iterations=10, budget_samples=per_phase + 10 * 32 * 8)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP), status=Status.COMPLETED,
                                  results=Results(best_val=0.4, last_step=20)))
    store.node_path(0).write_text('{"schema_version": 1, "id": 0, "kind": "scr')
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.5}), "COMPLETED"]] * 3)
    ctl, out = controller(tmp_path, sched, [scratch] * 3, store=store)
    assert ctl.run() == 3          # corrupt state: the search did not end, it cannot go on
    assert len(ctl.store.load_tree()) == 1
    said = out.getvalue()
    assert (f"node 0: left out of the search (llmzero-repair {store.root} 0 rebuilds it; until "
            "then no phase is created: what it used of the budget is unknown)") in said
    assert "search stopped: node 0's record cannot be read, so what it used of the budget" in said
    assert f"llmzero-repair {store.root}, then llmzero-start {store.root}" in said
    store.rebuild_node(0)
    ctl, out = controller(tmp_path, ScriptedScheduler([["RUNNING", trained({10: 0.5}), "COMPLETED"]]),
                          [scratch] * 3, store=store)
    assert ctl.run() == 0 and [n.hparams["total_training_steps"] for n in
                               ctl.store.load_tree()] == [20, 10]


def test_a_record_gone_but_for_its_copy_stops_the_search_until_it_is_rebuilt(tmp_path):
    """A node.json deleted (a slip of rm, a partial copy of the run) with its node.json.bak
    still there left the node out of the tree: the budget did not count it, and llmzero
    started a fresh root beside the tree it could not see."""
    store = new_run(tmp_path, budget_iterations=3)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP), status=Status.COMPLETED,
                                  results=DONE))
    store.node_path(0).unlink()
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch, scratch], store=store)
    assert ctl.run() == 3 and not sched.jobs
    assert (f"node 0: left out of the search (llmzero-repair {store.root} 0 rebuilds it; until "
            "then no phase is created") in out.getvalue()
    assert store.rebuild_node(0).status is Status.COMPLETED
    assert [n.id for n in store.load_tree()] == [0] and not store.corrupt


def test_a_running_phase_counts_against_the_device_hour_budget_while_it_runs(tmp_path):
    """Device-hours were charged when a phase ended: with two phases at a time, the budget
    let new phases start while the running ones had long spent it, and llmzero-status showed
    'device-hours 0.00' through a 10-hour phase."""
    def two_hours_on_two_gpus(files: NodeDir) -> None:
        files.status_file.write_text(json.dumps({"state": "running", "job_id": "100",
                                                 "started_at": time.time() - 7200,
                                                 "gpus": "0,1"}))
    store = new_run(tmp_path, budget_iterations=3, budget_gpu_hours=1)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP)))
    sched = ScriptedScheduler([[two_hours_on_two_gpus, "RUNNING"]])
    ctl, out = controller(tmp_path, sched, [scratch] * 3, store=store)
    tree = ctl.reconcile()                           # submitted, seen running
    assert tree[0].status is Status.RUNNING and 3.9 < tree[0].results.gpu_hours < 4.1
    assert "device-hours used" in ctl.admission.closed(tree)


# -- submissions that were not confirmed (issue 14.3) ---------------------------------------

def test_an_unconfirmed_submission_is_not_sent_again_before_it_could_register(tmp_path,
                                                                             monkeypatch):
    store = new_run(tmp_path, budget_iterations=1)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP), status=Status.SUBMITTING,
                                  submission=Submission("tok-slow"), submitted_at=time.time()))
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    monkeypatch.setattr(ScriptedScheduler, "settle_s", 3600.0)
    ctl, _ = controller(tmp_path, sched, [scratch], store=store)
    ctl.reconcile()
    assert sched.jobs == {} and ctl.store.load_tree()[0].status is Status.SUBMITTING
    # The job slurmctld registered late claims the node: it is adopted, not duplicated.
    store.node_dir(0).claim_file.write_text("7\n")
    ctl.reconcile()
    node = ctl.store.load_tree()[0]
    assert (node.status, node.submission.job_id) == (Status.QUEUED, "7") and sched.jobs == {}
    monkeypatch.setattr(ScriptedScheduler, "settle_s", 0.0)
    store.node_dir(0).claim_file.unlink()
    store.update_node(0, lambda n: setattr(n, "status", Status.SUBMITTING))
    ctl.reconcile()
    assert list(sched.jobs) == ["100"]            # settled and still absent: sent again


def test_a_duplicate_job_ending_at_the_claim_hands_the_node_to_the_first(tmp_path):
    def first_job_claims(files: NodeDir) -> None:
        files.claim_file.write_text("99\n")
    store = new_run(tmp_path, budget_iterations=1)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP)))
    sched = ScriptedScheduler([["PENDING", first_job_claims, "FAILED"]])
    ctl, out = controller(tmp_path, sched, [scratch], store=store)
    ctl.reconcile()                              # submits job 100
    ctl.reconcile()
    ctl.reconcile()                              # 100 failed at the claim of 99
    node = ctl.store.load_tree()[0]
    assert (node.status, node.submission.job_id) == (Status.QUEUED, "99")
    assert "job 100 was a duplicate; watching job 99" in out.getvalue()


DONE = Results(best_val=0.5, last_step=20, checkpoints=[10, 20])


def failed_evolve_run(tmp_path: Path, budget_iterations: int) -> RunStore:
    """A completed root (0) and its evolve child (1), which failed: a debug chain's start."""
    store = new_run(tmp_path, budget_iterations=budget_iterations)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP), status=Status.COMPLETED,
                                  results=DONE))
    for step in DONE.checkpoints:     # the folders its record lists, which a child resumes
        (store.node_dir(0).ckpt / f"global_step_{step}").mkdir(parents=True)
    store.add_node(lambda i: Node(i, 0, Kind.EVOLVE, dict(HP), Resume(0, 20),
                                  status=Status.FAILED))
    return store


@pytest.mark.fault("killed between a debug fix's end and its reparent")
def test_a_fix_recorded_but_not_moved_before_a_crash_is_moved_at_restart(tmp_path, fault_outcome):
    """Issue 14.8: killed between recording a debug fix's end and reparenting it, the move was
    lost for good."""
    store = failed_evolve_run(tmp_path, budget_iterations=3)
    store.add_node(lambda i: Node(i, 1, Kind.DEBUG, dict(HP), Resume(0, 20),
                                  status=Status.COMPLETED, results=DONE))
    ctl, out = controller(tmp_path, ScriptedScheduler(), [scratch] * 3, store=store)
    tree = ctl.reconcile()
    assert (tree[2].parent, tree[2].kind, tree[2].fixed_from) == (0, Kind.EVOLVE, 1)
    assert "node 2: fixes node 1" in out.getvalue()
    fault_outcome(ctl.store, [])      # nothing is submitted: the nodes ran before the crash


def test_a_fix_whose_failure_cannot_be_read_waits_for_repair_and_never_overwrites_it(tmp_path):
    """Review: when the failed node's record could not be read, its quarantined stand-in (no
    parent, no hparams) became the origin of the fix's move: the stand-in was written over the
    damaged record and its copy, the fix became a parentless scratch node, and llmzero-repair
    found nothing to rebuild. Now the fix waits, the store refuses to write a stand-in, and
    once the record is rebuilt from its copy the fix moves beside it."""
    store = failed_evolve_run(tmp_path, budget_iterations=3)
    store.add_node(lambda i: Node(i, 1, Kind.DEBUG, dict(HP), Resume(0, 20),
                                  status=Status.COMPLETED, results=DONE))
    store.node_path(1).write_text('{"schema_version": 1, "id": 1, ')    # a torn record
    ctl, out = controller(tmp_path, ScriptedScheduler(), [scratch] * 3, store=store)
    tree = ctl.reconcile()
    assert (tree[2].parent, tree[2].kind, tree[2].fixed_from) == (1, Kind.DEBUG, None)
    assert "fixes node 1" not in out.getvalue()
    with pytest.raises(StateError, match=r"0001/node.json: .*cannot be read.*llmzero-repair"):
        store.write_nodes([tree[2], tree[1]])
    assert read_json(store.node_path(2))["kind"] == "debug"      # nothing of the batch written
    assert store.rebuild_node(1).kind is Kind.EVOLVE
    tree = ctl.reconcile()
    assert (tree[2].parent, tree[2].kind, tree[2].fixed_from) == (0, Kind.EVOLVE, 1)
    assert tree[1].terminal and tree[1].hparams == HP


def second_fix_running_as_the_first_ones_fix_succeeds(tmp_path: Path):
    """Node 1 failed; its first fix (2) failed too, its second (3) runs, and the fix of the
    first fix (4) has just completed: the move is due."""
    store = failed_evolve_run(tmp_path, budget_iterations=5)
    store.add_node(lambda i: Node(i, 1, Kind.DEBUG, dict(HP), Resume(0, 20),
                                  status=Status.FAILED))
    store.add_node(lambda i: Node(i, 1, Kind.DEBUG, dict(HP), Resume(0, 20)))
    sched = ScriptedScheduler()
    ctl, out = controller(tmp_path, sched, [scratch] * 5, store=store)
    ctl.reconcile()                                  # node 3 is submitted and runs
    assert ctl.store.load_tree()[3].status is Status.RUNNING
    store.add_node(lambda i: Node(i, 2, Kind.DEBUG, dict(HP), Resume(0, 20),
                                  status=Status.COMPLETED, results=DONE))
    return store, sched, ctl, out


def test_a_fix_cancels_the_debug_sibling_it_prunes_while_that_one_still_runs(tmp_path):
    """With two phases at a time, node 1's second fix (3) runs while the fix of its first
    fix (4) succeeds: the move pruned node 3 and left its job running, spending the budget
    on a phase the search no longer counts."""
    store, sched, ctl, out = second_fix_running_as_the_first_ones_fix_succeeds(tmp_path)
    tree = ctl.reconcile()
    assert tree[4].fixed_from == 1 and tree[3].pruned and tree[2].pruned
    assert sched.cancelled == [tree[3].submission.job_id]
    assert "node 3: pruned while running; job 100 cancelled" in out.getvalue()
    assert ctl.reconcile()[3].status is Status.CANCELLED


def test_a_phase_the_controller_cancels_as_pruned_still_counts_against_the_phase_budget(tmp_path):
    """Review: the budget leaves out cancelled phases (a person's cancel gives no verdict),
    so node 3, which ran until a fix made it redundant, freed its phase: every such move
    gave the run one phase more than budget_iterations."""
    store, sched, ctl, out = second_fix_running_as_the_first_ones_fix_succeeds(tmp_path)
    ctl.reconcile()
    tree = ctl.reconcile()
    assert tree[3].status is Status.CANCELLED and tree[3].pruned
    assert ctl.admission.budget.limit_reached(tree) == "5 of 5 phases created"


def test_a_pruned_phase_never_submitted_is_not_sent_to_the_scheduler(tmp_path):
    """Review: a debug attempt left `submitting` by a submit limit, then pruned when another
    fix of the chain succeeded, was still sent to sbatch at the next poll: its job took a
    slot and the allocation until the next poll cancelled it. Now it is withdrawn, unsent."""
    store = failed_evolve_run(tmp_path, budget_iterations=4)
    store.add_node(lambda i: Node(i, 1, Kind.DEBUG, dict(HP), Resume(0, 20),
                                  status=Status.SUBMITTING, pruned=True, submitted_at=0.0))
    store.add_node(lambda i: Node(i, 1, Kind.DEBUG, dict(HP), Resume(0, 20), pruned=True))
    store.update_node(2, lambda n: setattr(n.submission, "token", "demo-0002-abc"))
    sched = ScriptedScheduler()
    ctl, out = controller(tmp_path, sched, [scratch] * 4, store=store)
    tree = ctl.reconcile()
    assert sched.jobs == {} and sched.cancelled == []
    assert [tree[i].status for i in (2, 3)] == [Status.CANCELLED, Status.CANCELLED]
    assert "node 2: pruned before it was submitted; not sent" in out.getvalue()


def test_a_submit_back_off_asks_the_method_for_no_plan_it_would_throw_away(tmp_path, monkeypatch):
    """Review: with two phases at a time, every poll during a submit limit's back-off asked
    the method for the next phase (an LLM call, minutes) and threw the plan away."""
    monkeypatch.setattr("llmzero_slurm.controller.submission.SUBMIT_BACKOFF_S", 0.3)
    limit = SchedulerError("sbatch: error: QOSMaxSubmitJobPerUserLimit", retryable=True)
    done = ["RUNNING", trained({10: 0.4}), "COMPLETED"]
    asked = []

    def counted(tree: Tree) -> PhasePlan:
        asked.append(len(tree))
        return scratch(tree)
    store = new_run(tmp_path, budget_iterations=3, concurrency=2)
    sched = RefusingScheduler([limit], [done, done, done])
    ctl, out = controller(tmp_path, sched, [counted] * 3, store=store)
    assert ctl.run() == 0
    assert len(asked) == len(ctl.store.load_tree()) == 3


def test_a_move_cut_short_by_a_full_disk_is_finished_at_the_next_poll(tmp_path, monkeypatch):
    """The fix's record was written first: once it named the failure it fixes, no later poll
    planned the move again, so a disk full before the other records left the failure open to
    more fixes and the redundant attempt unpruned and running."""
    store, sched, ctl, out = second_fix_running_as_the_first_ones_fix_succeeds(tmp_path)
    real, writes = RunStore.write_node, []

    def full_after_one_record(self, node, new=False):
        if len(writes) == 1:
            raise StorageError(self.node_path(node.id), "no space left on the device")
        writes.append(node.id)
        real(self, node, new)
    monkeypatch.setattr(RunStore, "write_node", full_after_one_record)
    with pytest.raises(StorageError):
        ctl.reconcile()
    monkeypatch.undo()
    tree = ctl.reconcile()
    assert tree[4].fixed_from == 1 and tree[1].terminal and tree[2].pruned and tree[3].pruned
    assert sched.cancelled == [tree[3].submission.job_id]


def test_on_slurm_the_controller_polls_every_30_s_unless_configured(tmp_path, monkeypatch):
    """Issue 14: sites ask login-node tools not to poll slurmctld more often."""
    from llmzero_slurm.cli.start import build_controller
    from llmzero_slurm.schedulers import SlurmScheduler
    monkeypatch.setattr(SlurmScheduler, "reachable", staticmethod(lambda timeout_s=15.0: True))

    def poll_s(name: str, **search) -> float:
        store = RunStore.create(tmp_path / name, parse_config({
            "name": "p", "backend": "cpu", "scheduler": "slurm",
            "task": {"builtin": "addition"}, "search": {"method": "practitioner", **search}}))
        return build_controller(store).poll_s
    assert poll_s("default") == 30.0
    assert poll_s("configured", poll_interval_s=5) == 5.0


def test_a_configured_poll_interval_is_how_often_slurm_is_asked(tmp_path, monkeypatch):
    """poll_interval_s: 5 (the Slurm example) paced the loop only: the scheduler kept serving
    its cached squeue answer while backing off to 60 s, so a phase's end was seen up to a
    minute late and the next phase started that much later."""
    from types import SimpleNamespace

    from llmzero_slurm.cli.start import build_controller
    from llmzero_slurm.schedulers import SlurmScheduler
    monkeypatch.setattr(SlurmScheduler, "reachable", staticmethod(lambda timeout_s=15.0: True))
    clock = [1000.0]
    monkeypatch.setattr("llmzero_slurm.schedulers.slurm.time",
                        SimpleNamespace(monotonic=lambda: clock[0], sleep=lambda s: None))
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "p", "backend": "cpu", "scheduler": "slurm", "task": {"builtin": "addition"},
        "search": {"method": "practitioner", "poll_interval_s": 5}}))
    sched = build_controller(store).scheduler
    calls: list[str] = []

    def squeue(argv):
        calls.append(argv[0])
        return subprocess.CompletedProcess(argv, 0, "41|RUNNING|None|0|llmz:node=0,token=t\n", "")
    sched.run = squeue
    for _ in range(8):                      # the job runs on unchanged: no back-off past 5 s
        sched.states(["41"])
        clock[0] += 5.0
    assert len(calls) == 8


def test_agent_text_cannot_drive_the_terminal(tmp_path):
    """Issue 15.8: a diagnosis with escape sequences reached the terminal raw."""
    hostile = "\x1b[2J\x1b]0;owned\x07lower lr\n[12:00:00] node 9: forged line"
    plan = lambda tree: PhasePlan(Action(Kind.SCRATCH, None), dict(HP), diagnosis=hostile)  # noqa: E731
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [plan])
    assert ctl.run() == 0
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b[2J" in text and "lower lr\\n[12:00:00] node 9: forged line" in text
    assert not any(line.startswith("[12:00:00] node 9") for line in text.splitlines())


class MonitorFailsOnce(ScriptedScheduler):
    """Its first monitor submission fails as sbatch does when slurmctld times out."""

    def __init__(self, scripts: list):
        super().__init__(scripts)
        self.monitor_calls = 0

    def submit_call(self, fn, args, folder, job) -> str:
        self.monitor_calls += 1
        if self.monitor_calls == 1:
            raise SchedulerError("submitting the monitor job: sbatch: error: Batch job "
                                 "submission failed: Socket timed out", retryable=True)
        return "900"

    def call_state(self, job_id: str) -> Status | None:
        return Status.RUNNING

    def cancel_call(self, job_id: str, name: str) -> None:
        self.cancelled.append(job_id)


@pytest.mark.fault("the monitor job's submission fails once")
def test_a_failed_monitor_submission_is_retried_and_the_search_goes_on(tmp_path, fault_outcome):
    """Issue 14.5: a transient error submitting the monitor crashed the controller (exit 1)."""
    from llmzero_slurm.controller.keeper import MonitorKeeper
    sched = MonitorFailsOnce([["RUNNING", "RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    ctl.monitor = MonitorKeeper(ctl.store, sched)
    ctl.method.early_stopping = True
    assert ctl.run() == 0
    assert sched.monitor_calls == 2 and "monitor job not submitted" in out.getvalue()
    assert sched.cancelled == ["900"]          # the controller's monitor leaves with it
    fault_outcome(ctl.store, sched.job_dirs())


class MonitorUnpolledOnce(MonitorFailsOnce):
    """Submits its monitor, then once cannot say how that job is, as when slurmctld is down."""

    def submit_call(self, fn, args, folder, job) -> str:
        self.monitor_calls += 1
        return "900"

    def call_state(self, job_id: str) -> Status | None:
        self.monitor_calls += 1
        if self.monitor_calls == 2:
            raise SchedulerError("polling jobs: squeue kept failing with a transient error after "
                                 "6 attempts: Unable to contact slurm controller", retryable=True)
        return Status.RUNNING


def test_a_monitor_job_whose_state_is_not_known_is_not_said_unsubmitted(tmp_path):
    """Campaign walkthrough: while slurmctld was down the controller said 'monitor job not
    submitted', though the monitor job ran on and no sbatch was tried: only its state could
    not be asked."""
    from llmzero_slurm.controller.keeper import MonitorKeeper
    sched = MonitorUnpolledOnce([["RUNNING", "RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    ctl.monitor = MonitorKeeper(ctl.store, sched)
    ctl.method.early_stopping = True
    assert ctl.run() == 0
    assert "monitor job not submitted" not in out.getvalue(), out.getvalue()
    assert ("the monitor job 900 was not checked, checked again at the next poll: polling jobs: "
            "squeue kept failing") in out.getvalue(), out.getvalue()


@pytest.mark.parametrize("damage", [b'{"cancel": true, "tok', b"\xff\xfe\x00garbage"],
                         ids=["truncated", "not-utf8"])
def test_a_damaged_stop_request_is_set_aside_and_the_run_goes_on(tmp_path, damage):
    """Audit: a torn or non-UTF-8 stop.json made every later start exit 3 until a person
    removed it. A request names the controller it is for; a damaged one names nobody."""
    store = new_run(tmp_path, budget_iterations=1)
    (store.root / "stop.json").write_bytes(damage)
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.4}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch], store=store)
    assert ctl.run() == 0, out.getvalue()
    assert ctl.store.load_tree()[0].status is Status.COMPLETED and sched.cancelled == []
    [kept] = store.root.glob("stop.json.damaged-*")
    assert kept.read_bytes() == damage and not (store.root / "stop.json").exists()
    [line] = [ln for ln in out.getvalue().splitlines() if "stop.json" in ln]
    assert "cannot be read" in line and f"moved to {kept}" in line


@pytest.mark.fault("a full disk or file quota at a mkdir (not an atomic write)")
def test_a_full_disk_at_a_folder_the_controller_makes_stops_it_naming_the_folder(
        tmp_path, monkeypatch, capsys, fault_outcome):
    """A quota counts files, so making a node's folder can fail: the controller stops as at
    any state write (exit 3 naming the folder, how to resume; no traceback) and a restart
    with space creates the node."""
    import errno
    from llmzero_slurm.cli.common import run_main
    real = Path.mkdir

    def full(self: Path, *args, **kwargs):
        if self.parent.name == "nodes":
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), str(self))
        return real(self, *args, **kwargs)
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.3}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    monkeypatch.setattr(Path, "mkdir", full)
    with pytest.raises(SystemExit) as ended:
        run_main(lambda argv: ctl.run())
    assert ended.value.code == 3
    folder = ctl.store.nodes_dir / "0000"
    assert f"error: {folder}: could not be written (Disk quota exceeded)" in capsys.readouterr().err
    assert "free space, then resume with llmzero-start" in out.getvalue()
    monkeypatch.undo()
    ctl, out = controller(tmp_path, sched, [scratch], store=RunStore.open(ctl.store.root))
    assert ctl.run() == 0 and [n.status for n in ctl.store.load_tree()] == [Status.COMPLETED]
    fault_outcome(ctl.store, sched.job_dirs())


def test_a_node_folder_that_refuses_writes_is_not_called_a_full_disk(tmp_path, monkeypatch):
    """A node folder made read-only (chmod by a colleague, an immutable flag) under a running
    search stopped the controller with 'Operation not permitted' and the advice to free
    space, which cures nothing: the advice now names write access."""
    import errno
    from llmzero_slurm.store import atomic
    real = atomic._new_temp

    def refused(path: Path, mode: int) -> Path:
        if path.name == "node.json.bak":
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(path))
        return real(path, mode)
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.3}), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch])
    monkeypatch.setattr(atomic, "_new_temp", refused)
    with pytest.raises(StorageError, match=r"Operation not permitted"):
        ctl.run()
    said = out.getvalue()
    assert "free space" not in said
    assert "make it writable for you again (its permissions, ACL or immutable flag), then " \
        "resume with llmzero-start" in said


def test_a_parent_with_nothing_untried_left_takes_no_more_children(tmp_path):
    """Review: where search.space pins the seed and every knob the offline rules move, no
    proposal was left that a sibling had not taken or the space allowed, and the proposer fell
    back to the parent's configuration again from scratch: each of the budget's phases trained
    the root's configuration once more. The parent is now closed, saying why, no phase is
    submitted for the repeat, and the search ends as exhausted, the log saying why."""
    from llmzero_slurm.agents.answers import knobs
    from llmzero_slurm.cli.status import render_tree
    from llmzero_slurm.methods import make_method
    from llmzero_slurm.search.policy import is_terminal
    hparams = {**HP, "seed": 1, "kl_loss_coef": 0.04, "temperature": 1.0}
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "ctl", "backend": "cpu", "scheduler": "local", "task": {"builtin": "addition"},
        "hparams": hparams, "agents": {"backend": "heuristic"},
        "search": {"method": "llmzero", "budget_iterations": 4,
                   "space": {k: hparams[k] for k in ("seed", "lr", "kl_loss_coef", "temperature")}}}))
    ctx = MethodContext(store.config, store.node_dir, store.proposals_dir)
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.3, 20: 0.5}), "COMPLETED"]] * 4)
    out = io.StringIO()
    ctl = Controller(store, sched, make_method("llmzero", ctx), poll_s=0.001, out=out)
    assert ctl.run() == 0
    tree = store.load_tree()
    trained_knobs = [json.dumps(knobs(ctx.backend.effective_hparams(n.hparams)), sort_keys=True)
                     for n in tree]
    assert len(sched.jobs) == len(set(trained_knobs)) == len(trained_knobs) == 1, out.getvalue()
    closed = read_json(store.node_path(0))["closed"]
    assert closed.startswith("no untried proposal is left within search.space (healthy: ")
    record = read_json(store.node_dir(0).closed / "proposal.json")
    assert record["result"] == {"nothing_untried": closed} and not list(store.proposals_dir.iterdir())
    said = out.getvalue()
    assert f"node 0: takes no more children: {closed}" in said
    assert ("search finished: the search has no branch left to grow (nothing untried was left "
            "to propose from node 0)") in said
    rows = render_tree(tree, {}, is_terminal(tree, store.config.search), {})
    assert rows[1].endswith(" TC") and "C closed (nothing untried left to propose from it)" in rows[-1]



def purged(folder: Path, plan):
    """`plan`, once the parent's checkpoint `folder` is gone (a scratch purge, a user's rm)."""
    def after_the_purge(tree: Tree) -> PhasePlan | None:
        if not tree[0].status.pending and folder.is_dir():
            folder.rmdir()
        return plan(tree)
    return after_the_purge


@pytest.mark.fault("the parent's checkpoint deleted before a child is submitted")
def test_a_child_whose_parent_checkpoint_is_gone_fails_before_sbatch(tmp_path, fault_outcome):
    """A checkpoint purged from scratch storage (or removed by hand) while the search went
    on was only found by the child's job: after its queue wait and its allocation. The
    controller now fails that child before sbatch, naming the node, the step and the folder,
    and the search goes on."""
    gone = tmp_path / "run" / "nodes" / "0000" / "ckpt" / "global_step_20"
    sched = ScriptedScheduler([["RUNNING", trained({10: 0.3, 20: 0.5}), "COMPLETED"],
                               ["RUNNING", trained({20: 0.6}, (20,)), "COMPLETED"],
                               ["RUNNING", trained({20: 0.6}, (20,)), "COMPLETED"]])
    ctl, out = controller(tmp_path, sched, [scratch, purged(gone, evolve(0, 20)), evolve(0, 10)])
    assert ctl.run() == 0
    root, lost, kept = ctl.store.load_tree()
    assert len(sched.jobs) == 2 and lost.submission.job_id is None
    assert lost.status is Status.FAILED and lost.terminal
    assert lost.submission.reason == ("the checkpoint of node 0 at step 20 that it resumes from "
                                      "is gone from nodes/0000/ckpt")
    assert "node 1: failed before submission: the checkpoint of node 0" in out.getvalue()
    assert root.results.checkpoints == [10, 20]    # the record of what was saved stays
    assert kept.status is Status.COMPLETED
    fault_outcome(ctl.store, sched.job_dirs())


def test_an_unchanged_picture_is_said_again_with_each_phases_wait_at_growing_intervals(tmp_path):
    """A phase training for minutes (the first run's warm start) or queued for hours left the
    controller silent after '1 phase: 1 running': no sign it was alive, nor how far the phase
    got. The status line comes again with each waiting phase's wait, Slurm's reason and its
    step, at intervals that double up to a cap, so a day-long log stays a few lines an hour."""
    from llmzero_slurm.controller.progress import Progress, waiting_phases
    from llmzero_slurm.schedulers.base import job_state
    store = new_run(tmp_path)
    now = time.time()
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {**HP, "total_training_steps": 60},
                                  status=Status.RUNNING, started_at=now - 150))
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, dict(HP), status=Status.QUEUED,
                                  submitted_at=now - 65))
    write_metrics(store.node_dir(0).metrics_file, val_rows({0: 0.1, 20: 0.3}))
    tree = store.load_tree()
    states = {1: job_state("7", "PENDING", reason="QOSMaxJobsPerUserLimit")}
    out = io.StringIO()
    progress = Progress(out, repeat_first_s=0.2, repeat_max_s=0.4)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        progress.show(tree, lambda: waiting_phases(store, tree, states))
        time.sleep(0.01)
    lines = [line.partition("] ")[2] for line in out.getvalue().splitlines()]
    assert lines[0] == "2 phases: 1 queued, 1 running"
    again = lines[1:]
    assert again and all(line.startswith("still 2 phases") for line in again)
    assert again[0] == ("still 2 phases: 1 queued, 1 running | node 0 running 2:30, step 20 of "
                        "60; node 1 queued 1:05 (QOSMaxJobsPerUserLimit)")
    assert 2 <= len(again) <= 6      # at 0.2, 0.6, 1.0... s: not once per call


def test_the_repeated_line_says_about_how_long_a_phase_has_left_at_its_pace(tmp_path):
    """Steps alone left the user to work out the end. Once a phase's step moved between two
    lines, the time it has left at that pace is said; not before (a warm start or a model load
    is no training pace)."""
    from llmzero_slurm.controller.progress import Progress, waiting_phases
    store = new_run(tmp_path)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {**HP, "total_training_steps": 60},
                                  status=Status.RUNNING, started_at=time.time()))
    write_metrics(store.node_dir(0).metrics_file, val_rows({10: 0.1}))
    tree = store.load_tree()
    out = io.StringIO()
    progress = Progress(out, repeat_first_s=0.3, repeat_max_s=0.3)

    def lines() -> list[str]:
        return [line.partition("] ")[2] for line in out.getvalue().splitlines()]
    while len(lines()) < 2:
        progress.show(tree, lambda: waiting_phases(store, tree, {}))
        time.sleep(0.01)
    write_metrics(store.node_dir(0).metrics_file, val_rows({20: 0.2}), append=True)
    while len(lines()) < 3:
        progress.show(tree, lambda: waiting_phases(store, tree, {}))
        time.sleep(0.01)
    first, then = lines()[1:]
    assert first.endswith(", step 10 of 60"), first      # no pace yet
    assert re.search(r", step 20 of 60, about 0:0\d left$", then), then


def test_a_phase_the_controller_cancels_as_pruned_is_not_said_to_be_a_persons_cancel(tmp_path):
    """Review: a debug fix pruned while it ran ended CANCELLED with no STOP on record, and
    the controller's line, status and the report said a person or the batch system cancelled
    it, though the controller had, as the fix of its failed phase's other fix succeeded."""
    store, sched, ctl, out = second_fix_running_as_the_first_ones_fix_succeeds(tmp_path)
    ctl.reconcile()
    tree = ctl.reconcile()
    assert tree[3].status is Status.CANCELLED
    ended = next(line for line in out.getvalue().splitlines() if "node 3: cancelled (" in line)
    assert "by a person" not in ended and "pruned by the controller" in ended, ended
    said = ended_why(tree, store.node_dir, {})
    assert said[3].startswith("cancelled: pruned by the controller"), said
    # The job says so too (Slurm's comment, the local job's end reason), as an early stop's does.
    assert sched.cancelled_why[tree[3].submission.job_id] == f"llmzero: {said[3]}"
