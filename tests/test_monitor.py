"""The monitor's pass over running phases, with the offline stopper and a real local job."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmzero_slurm.config import parse_config
from controller_doubles import ScriptedScheduler
from llmzero_slurm.controller.keeper import MonitorKeeper
from llmzero_slurm.controller.lease import Lease
from llmzero_slurm.controller.monitor import (HEARTBEAT_S, Heartbeat, Monitor, monitor_heartbeat,
                                               run_monitor)
from llmzero_slurm.errors import ConfigError
from llmzero_slurm.schedulers import LocalScheduler
from llmzero_slurm.schedulers.base import CallJob
from llmzero_slurm.search.tree import Kind, Node, Results, Resume, Status, Submission
from llmzero_slurm.stop_reason import stop_line
from llmzero_slurm.store.run_store import RunStore

from conftest import finish, wait_for
from metrics_files import val_rows, write_metrics


def write_val(path, points: dict[int, float]) -> None:
    write_metrics(path, val_rows(points), append=True)


def run_with_a_best_phase(tmp_path, scheduler: str, **agents) -> RunStore:
    """A run whose node 0 completed at 0.9, which a phase stuck at 0.2 cannot catch."""
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "mon", "backend": "cpu", "scheduler": scheduler,
        "agents": {"backend": "heuristic", "stop_margin": 0.0, **agents}}))
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"total_training_steps": 40},
                                  status=Status.COMPLETED,
                                  results=Results(best_val=0.9, checkpoints=[40])))
    write_val(store.node_dir(0).metrics_file, {s: s / 40 * 0.9 for s in range(5, 45, 5)})
    return store


def a_running_phase_job(tmp_path: Path) -> tuple[LocalScheduler, str]:
    """A local job named as node 1's phase would be, running (a sleep) until cancelled."""
    script = tmp_path / "phase.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=llmz-mon-0001-scratch\n"
                      "#SBATCH --comment=token=t1\n#SBATCH --time=00:05:00\n"
                      f"#SBATCH --output={tmp_path}/slurm-%j.out\nsleep 300\n")
    sched = LocalScheduler(tmp_path / "local-jobs")
    job = sched.submit(script, "t1")
    wait_for(lambda: sched.states([job])[job].raw == "RUNNING", 30, "the job to start")
    return sched, job


def test_a_stopped_phase_is_never_judged_again_and_a_restarted_monitor_resends_the_cancel(
        tmp_path):
    store = run_with_a_best_phase(tmp_path, "local")
    sched, job = a_running_phase_job(tmp_path)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"total_training_steps": 60},
                                  status=Status.RUNNING, submission=Submission("t1", job)))
    metrics = store.node_dir(1).metrics_file
    write_val(metrics, {5: 0.2, 10: 0.2, 15: 0.2, 20: 0.2})

    records = store.node_dir(1).early_stop_file
    assert Monitor(store, sched).check_once() == [1]
    assert [r["result"]["action"] for r in json.loads(records.read_text())] == ["STOP"]
    assert finish(sched, job).raw == "CANCELLED"

    # The controller has not yet seen the cancel, and a late validation point arrives that
    # a fresh judgement would call promising: STOP stays the last word, no new record.
    write_val(metrics, {25: 0.95})
    monitor = Monitor(store, sched)
    assert monitor.check_once() == [1]     # a restarted monitor makes sure the cancel went out
    assert monitor.check_once() == []      # and sends it once
    assert [r["result"]["action"] for r in json.loads(records.read_text())] == ["STOP"]


def test_a_stop_says_why_in_its_record_the_monitor_log_and_its_jobs_end(tmp_path, capsys):
    """Walkthrough "why was my phase cancelled?": the job ended a bare CANCELLED, as a person's
    cancel does, the monitor's log said nothing of its STOP, and the reason on record named
    neither the phase it could not beat, nor by how much, nor the margin. Now one line says
    when, which stopper and why, in the record, the monitor's log and the job's end."""
    store = run_with_a_best_phase(tmp_path, "local", stop_margin=0.05)
    sched, job = a_running_phase_job(tmp_path)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"total_training_steps": 60},
                                  status=Status.RUNNING, submission=Submission("t1", job)))
    write_val(store.node_dir(1).metrics_file, {5: 0.2, 10: 0.2, 15: 0.2, 20: 0.2})
    assert Monitor(store, sched).check_once() == [1]
    line = stop_line(store.node_dir(1))
    assert line == ("stopped early at step 20 by the heuristic stopper: the validation trend "
                    "reaches about 0.200 by step 35, 0.700 below the best 0.900 (node 0), "
                    "more than the margin 0.05")
    assert f"monitor: node 1: {line}; cancelling job {job}" in capsys.readouterr().err
    state = finish(sched, job)
    assert (state.raw, state.reason) == ("CANCELLED", f"llmzero: {line}")


def test_a_phase_cancelled_by_hand_has_no_stop_line_and_its_job_no_reason(tmp_path):
    store = run_with_a_best_phase(tmp_path, "local")
    sched, job = a_running_phase_job(tmp_path)
    sched.cancel(job, "llmz-mon-0001-scratch")          # llmzero-stop --cancel
    state = finish(sched, job)
    assert state.raw == "CANCELLED" and "llmzero" not in (state.reason or ""), state
    assert stop_line(store.node_dir(0)) is None


def test_the_bar_is_the_best_finished_strategy_not_a_failed_phase(tmp_path):
    """Review: node 2, node 1's sibling, validated at 0.9 and then hit its time limit. It was
    the best node, the monitor kept only the finished phases of its path, and the bar fell to
    the root's 0.5: a phase that could not reach node 1's 0.8 but could pass 0.5 ran on."""
    store = RunStore.create(tmp_path / "run", parse_config({"name": "mon", "backend": "cpu"}))
    for parent, status, score in ((None, Status.COMPLETED, 0.5), (0, Status.COMPLETED, 0.8),
                                  (0, Status.FAILED, 0.9)):
        store.add_node(lambda i, parent=parent, status=status, score=score: Node(
            i, parent, Kind.SCRATCH if parent is None else Kind.EVOLVE, {}, status=status,
            resume=None if parent is None else Resume(parent, 40),
            results=Results(best_val=score, checkpoints=[40, 80])))
    assert Monitor(store, ScriptedScheduler()).best_strategy(store.load_tree())[1] == 0.8


def test_a_cancel_slurm_refuses_leaves_the_monitor_judging(tmp_path, monkeypatch, capsys):
    """A colleague resumed the group's run while the owner's phases still ran: the stopper said
    STOP, scancel answered "Access/permission denied" (another user's job), and the
    SchedulerError ended the monitor job; each replacement died the same way, and no other
    phase was judged meanwhile. Now the refusal is told in the monitor's log, the other
    phases are still judged, and the cancel is tried again at the next pass."""
    from llmzero_slurm.schedulers import SlurmScheduler
    from slurm_shims import Shims
    shims = Shims(tmp_path / "bin")
    shims.fail("scancel", (1, 99), "scancel: error: Kill job error on job id 4242: "
                                   "Access/permission denied")
    monkeypatch.setenv("PATH", f"{shims.dir}:{os.environ['PATH']}")
    store = run_with_a_best_phase(tmp_path, "slurm")
    for job in ("4242", "4243"):     # two phases of the owner, both dominated
        node = store.add_node(lambda i, job=job: Node(
            i, None, Kind.SCRATCH, {"total_training_steps": 60}, status=Status.RUNNING,
            submission=Submission(f"t{job}", job)))
        write_val(store.node_dir(node.id).metrics_file, {5: 0.2, 10: 0.2, 15: 0.2, 20: 0.2})
    monitor = Monitor(store, SlurmScheduler(retries=0, retry_wait_s=0))
    assert monitor.check_once() == []
    said = capsys.readouterr().err
    assert "monitor: node 1: STOP decided, but its job was not cancelled: cancelling job 4242 " \
           "(llmz-mon-0001-scratch): scancel failed (exit 1): scancel: error: Kill job error on job id 4242: " \
           "Access/permission denied" in said and "monitor: node 2:" in said
    for node_id in (1, 2):           # both judged, their STOP on record
        records = json.loads(store.node_dir(node_id).early_stop_file.read_text())
        assert [r["result"]["action"] for r in records] == ["STOP"]
    assert monitor.check_once() == []                  # tried again, not judged again
    assert [c.argv for c in shims.calls("scancel")] == \
        ["--name=llmz-mon-0001-scratch 4242", "--name=llmz-mon-0002-scratch 4243"] * 2


def test_a_cancelled_monitor_job_stops_at_once_and_stops_beating(tmp_path):
    """Issue 14.6: submitit ignores SIGTERM, so a cancelled monitor kept writing heartbeats
    (and judging phases) until the KILL, and a restarted controller trusted it."""
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "mon", "backend": "cpu", "scheduler": "local",
        "agents": {"backend": "heuristic"}}))
    sched = LocalScheduler(tmp_path / "local-jobs")
    heartbeat = store.root / "monitor" / "heartbeat.json"
    job = sched.submit_call(run_monitor, (str(store.root), "local", 1.0, 600.0),
                            tmp_path / "monitor-job", CallJob("mon", 10))
    wait_for(heartbeat.exists, 60, "the monitor's first heartbeat")
    sched.cancel_call(job, "mon")
    wait_for(lambda: sched.call_state(job) is None, 10, "the monitor to exit after SIGTERM")
    last = heartbeat.read_text()
    time.sleep(HEARTBEAT_S + 1)
    assert heartbeat.read_text() == last


class MonitorOnlyScheduler(ScriptedScheduler):
    """Takes monitor submissions and lists none of them: a scheduler that lost track."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.jobs_asked: list = []

    def submit_call(self, fn, args, folder, job) -> str:
        self.calls.append(job.name)
        self.jobs_asked.append(job)
        return str(900 + len(self.calls))

    def cancel_call(self, job_id: str, name: str) -> None:
        self.cancelled.append(job_id)


def test_a_monitor_no_source_lists_is_judged_by_its_heartbeat(tmp_path):
    """Issue 14.6: a monitor that reported no state was assumed queued for ever."""
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "mon", "backend": "cpu", "scheduler": "local"}))
    sched = MonitorOnlyScheduler()
    keeper = MonitorKeeper(store, sched)
    keeper.ensure(True)
    keeper.ensure(True)                     # just submitted: its silence has not begun
    assert sched.calls == ["llmz-mon-monitor"] and sched.cancelled == []
    stale = time.time() - 3600
    os.utime(store.root / "monitor" / "monitor.json", (stale, stale))
    keeper.ensure(True)
    assert sched.cancelled == ["901"] and len(sched.calls) == 2


def test_a_monitor_that_waited_long_in_the_queue_is_not_taken_for_a_silent_one(tmp_path):
    """Its silence was counted from its submission: a monitor that waited longer than that in
    the queue (its partition is the phases' by default) was cancelled at the poll that first
    saw it running, before it could beat, and the one submitted after it queued again."""
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "mon", "backend": "cpu", "scheduler": "local"}))
    sched = MonitorOnlyScheduler()
    sched.call_state = lambda job_id: listed[0]
    listed = [Status.QUEUED]
    keeper = MonitorKeeper(store, sched)
    keeper.ensure(True)
    record = store.root / "monitor" / "monitor.json"
    stale = time.time() - 3600
    os.utime(record, (stale, stale))            # an hour in the queue
    keeper.ensure(True)
    listed[0] = Status.RUNNING
    keeper.ensure(True)                         # starts now: its silence begins here
    assert sched.cancelled == [] and len(sched.calls) == 1
    os.utime(record, (stale, stale))
    keeper.ensure(True)                         # an hour running without a heartbeat
    assert sched.cancelled == ["901"] and len(sched.calls) == 2


def test_a_monitor_waiting_on_a_slow_llm_is_not_taken_for_a_hung_one(tmp_path):
    """The monitor beats before each phase, not while its stopper waits on the LLM: an LLM
    that became slow held it silent for up to agents.timeout_s, and with a timeout raised for
    a slow server (or a short interval, as in the CPU example) the keeper cancelled it as hung
    in the middle of its call, again at every validation point, so nothing was ever judged."""
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "mon", "backend": "cpu", "scheduler": "local",
        "search": {"early_stop_interval_s": 60}, "agents": {"timeout_s": 600}}))
    sched = MonitorOnlyScheduler()
    keeper = MonitorKeeper(store, sched)
    keeper.ensure(True)
    keeper.ensure(True)                         # seen running
    monitor_dir = store.root / "monitor"
    Heartbeat(monitor_dir / "heartbeat.json", None)()

    def silent_for(seconds: float) -> None:
        then = time.time() - seconds
        for name in ("heartbeat.json", "monitor.json"):
            os.utime(monitor_dir / name, (then, then))

    silent_for(60 + 500)                        # an interval, then most of a call
    keeper.ensure(True)
    assert sched.cancelled == [] and len(sched.calls) == 1
    silent_for(60 + 600 + 600)                  # far past the longest call: hung
    keeper.ensure(True)
    assert sched.cancelled == ["901"] and len(sched.calls) == 2


class MonitorEndsAtOnceScheduler(MonitorOnlyScheduler):
    """Every monitor job has ended when asked: one that fails as it starts (a broken
    environment on the monitor's partition)."""

    def call_state(self, job_id: str) -> Status | None:
        return None


def test_a_monitor_that_dies_before_its_first_heartbeat_is_resubmitted_with_a_back_off(
        tmp_path, monkeypatch):
    """A monitor job that failed as it started was submitted again at every poll (every few
    seconds), each one failing the same way, and nothing told the user."""
    monkeypatch.setattr("llmzero_slurm.controller.keeper.START_RETRY_S", 0.5)
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "mon", "backend": "cpu", "scheduler": "local"}))
    sched = MonitorEndsAtOnceScheduler()
    keeper = MonitorKeeper(store, sched)
    assert keeper.ensure(True) is None and sched.calls == ["llmz-mon-monitor"]
    news = keeper.ensure(True)
    assert news is not None and "monitor job 901 ended before its first heartbeat" in news
    assert keeper.ensure(True) is None and len(sched.calls) == 1     # waits
    time.sleep(0.6)
    keeper.ensure(True)
    assert len(sched.calls) == 2                                     # then tries again
    assert "in 1 s" in keeper.ensure(True)                           # twice as long
    monitor_dir = store.root / "monitor"
    time.sleep(1.1)
    keeper.ensure(True)
    assert len(sched.calls) == 3
    (monitor_dir / "heartbeat.json").write_text("{}")                # this one ran, then ended
    assert keeper.ensure(True) is None and len(sched.calls) == 4     # replaced at once


def closed_port() -> int:
    """A local port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_llm_endpoint_without_a_route_is_found_out_in_seconds(monkeypatch):
    from llm_loopback import LoopbackLLM
    from llmzero_slurm.agents.llm import unreachable
    from llmzero_slurm.config import AgentConfig
    with LoopbackLLM() as service:
        assert unreachable(AgentConfig(base_url=service.url)) is None
    port = closed_port()
    started = time.monotonic()
    why = unreachable(AgentConfig(base_url=f"http://127.0.0.1:{port}"), timeout_s=2)
    assert why is not None and f"127.0.0.1:{port}" in why and time.monotonic() - started < 3
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    why = unreachable(AgentConfig())            # api.anthropic.com, through the site's proxy
    assert why is not None and f"through the proxy 127.0.0.1:{port}" in why


def test_a_monitor_started_while_its_llm_was_down_asks_it_once_it_answers(tmp_path):
    """The route was tried once, as the monitor started: one started during an outage (a
    replacement, or a search started before its server) judged with the offline stopper for
    its whole life, days under the local scheduler, though the server was back."""
    from llm_loopback import LoopbackLLM
    from llmzero_slurm.agents.llm import unreachable
    port = closed_port()
    store = run_with_a_best_phase(tmp_path, "local", backend="openai", timeout_s=10,
                                  max_retries=0, base_url=f"http://127.0.0.1:{port}/v1")
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"total_training_steps": 60},
                                  status=Status.RUNNING, submission=Submission("t1", "7")))
    metrics = store.node_dir(1).metrics_file
    write_val(metrics, {5: 0.3, 10: 0.5, 15: 0.7})      # climbing: the heuristic goes on
    monitor = Monitor(store, ScriptedScheduler(), unreachable(store.config.agents, timeout_s=2))
    assert monitor.cut_off and monitor.check_once() == []        # still down: offline
    records = store.node_dir(1).early_stop_file
    assert json.loads(records.read_text())[-1]["backend"] == "heuristic"
    with LoopbackLLM(port) as service:
        service.reply("REASON: still climbing.\nDECISION: CONTINUE")
        write_val(metrics, {20: 0.75})
        monitor.check_once()
        assert monitor.cut_off is None and len(service.requests) == 1
    assert json.loads(records.read_text())[-1]["backend"] == "openai"


def test_the_endpoint_checked_is_the_one_the_sdk_calls(monkeypatch):
    """The anthropic SDK calls $ANTHROPIC_BASE_URL (a site's gateway) when agents.base_url is
    unset; the probe checked api.anthropic.com, and a monitor that could reach its gateway
    judged offline for its whole life."""
    from llm_loopback import LoopbackLLM
    from llmzero_slurm.agents.llm import unreachable
    from llmzero_slurm.config import AgentConfig
    with LoopbackLLM() as service:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", service.url)
        assert unreachable(AgentConfig(), timeout_s=2) is None
    port = closed_port()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    why = unreachable(AgentConfig(), timeout_s=2)
    assert why is not None and f"127.0.0.1:{port}" in why


def test_a_monitor_cut_off_from_its_llm_judges_offline_and_says_so(tmp_path, monkeypatch):
    """Issue 16: on a compute node without a route out, every stopper call spent minutes on
    retries before falling back, and nothing told the user."""
    monkeypatch.setenv("LLMZERO_TEST_KEY", "sk-test-monitor-0001")
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "mon", "backend": "cpu", "scheduler": "local",
        "agents": {"backend": "anthropic", "api_key_env": "LLMZERO_TEST_KEY",
                   "base_url": f"http://127.0.0.1:{closed_port()}"}}))
    started = time.monotonic()
    assert run_monitor(str(store.root), "local", 1.0, 2.0) in ("lifetime reached",
                                                               "the controller is gone")
    assert time.monotonic() - started < 15
    beat = monitor_heartbeat(store)
    assert "did not answer" in beat["llm_unreachable"]
    assert Monitor(store, LocalScheduler(tmp_path / "jobs"), "down").stopper.llm is None
    from llmzero_slurm.paths import ROOT
    shown = subprocess.run([str(ROOT / "bin" / "llmzero-status"), str(store.root)],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "LLMZERO_PYTHON": sys.executable})
    assert "early stopper: the offline heuristics, in the monitor job on" in shown.stdout


def test_the_monitor_runs_in_its_own_partition(tmp_path):
    """Issue 16: the monitor went to the phases' (GPU) partition, often without a route out."""
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "mon", "backend": "cpu", "scheduler": "local",
        "slurm": {"partition": "gpu", "account": "proj"}, "monitor": {"partition": "cpu-net"}}))
    sched = MonitorOnlyScheduler()
    MonitorKeeper(store, sched).ensure(True)
    [job] = sched.jobs_asked
    assert (job.partition, job.account) == ("cpu-net", "proj")
    with pytest.raises(ConfigError, match="monitor.partition"):
        parse_config({"name": "x", "monitor": {"partition": "cpu\n#SBATCH --uid=0"}})


def judged_run(tmp_path: Path, agents: dict) -> RunStore:
    """A finished phase and a running one behind it: the stopper is asked about the second."""
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "mon", "backend": "cpu", "scheduler": "local",
        "search": {"early_stop_interval_s": 1}, "agents": agents}))
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"total_training_steps": 60},
                                  status=Status.COMPLETED,
                                  results=Results(best_val=0.9, checkpoints=[60])))
    write_val(store.node_dir(0).metrics_file, {s: s / 60 * 0.9 for s in range(5, 65, 5)})
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"total_training_steps": 60},
                                  status=Status.RUNNING, submission=Submission("t1", "77")))
    write_val(store.node_dir(1).metrics_file, {5: 0.3, 10: 0.45, 15: 0.6, 20: 0.7})
    return store


def test_the_monitor_job_gets_the_llm_key_without_it_being_in_any_job_environment(
        tmp_path, monkeypatch):
    """Issue 15.7: the monitor needs the key, but its job was submitted with the controller's
    environment (sbatch keeps it with the job, /proc/<pid>/environ shows it). Now the key
    reaches the monitor's LLM client through a private file, and no job environment has it."""
    from llm_loopback import LoopbackLLM
    canary = "sk-canary-monitor-7c1e4d"
    monkeypatch.setenv("SITE_LLM_KEY", canary)        # a custom agents.api_key_env
    with LoopbackLLM() as service:
        service.reply(*["REASON: still climbing.\nDECISION: CONTINUE"] * 20)
        store = judged_run(tmp_path, {"backend": "anthropic", "api_key_env": "SITE_LLM_KEY",
                                      "base_url": service.url})
        lease = Lease(store)
        lease.acquire()                  # the monitor runs while a controller holds the run
        sched = LocalScheduler(tmp_path / "local-jobs", secret_names=["SITE_LLM_KEY"])
        keeper = MonitorKeeper(store, sched)
        try:
            keeper.ensure(True)
            key_file = store.root / "monitor" / "llm-key.json"
            assert key_file.stat().st_mode & 0o777 == 0o600
            job = keeper._record()["job_id"]
            # its first decision recorded: a stop interrupts a call still in flight
            wait_for(store.node_dir(1).early_stop_file.exists, 90, "the monitor's first decision")
            headers = service.requests[0]["headers"]
            sent = headers.get("x-api-key") or headers["authorization"]
            assert sent.removeprefix("Bearer ") == canary    # the client got the key
            environ = (Path("/proc") / str(job) / "environ").read_bytes()
            assert b"SITE_LLM_KEY" not in environ and canary.encode() not in environ
            assert os.environ["SITE_LLM_KEY"] == canary    # the controller's own is kept
        finally:
            keeper.stop()
            lease.release()
        assert not key_file.exists()
        wait_for(lambda: sched.call_state(str(job)) is None, 30, "the monitor to stop")
    records = store.node_dir(1).early_stop_file.read_text()
    assert canary not in records and "anthropic" in records


def test_a_monitor_cancelled_while_its_llm_does_not_answer_stops_at_once(tmp_path, monkeypatch):
    """SIGTERM while the stopper waited on an LLM that did not answer was only noted: the
    monitor lived on until the call gave up (timeout_s x (max_retries + 1), ten minutes by
    default), after the search had ended, or beside the monitor that replaced it."""
    from llm_loopback import LoopbackLLM
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    with LoopbackLLM() as service:
        service.reply({"delay": 120, "text": "REASON: late.\nDECISION: CONTINUE"})
        store = judged_run(tmp_path, {"backend": "anthropic", "base_url": service.url,
                                      "timeout_s": 300, "max_retries": 0})
        lease = Lease(store)
        lease.acquire()
        sched = LocalScheduler(tmp_path / "local-jobs")
        keeper = MonitorKeeper(store, sched)
        try:
            keeper.ensure(True)
            job = str(keeper._record()["job_id"])
            wait_for(lambda: service.requests, 90, "the monitor's LLM call")
        finally:
            keeper.stop()
            lease.release()
        wait_for(lambda: sched.call_state(job) is None, 15, "the monitor to stop")


@pytest.mark.parametrize("backend, left", [("heuristic", False), ("auto", True), ("anthropic", True)])
def test_the_key_is_left_for_the_monitor_only_when_its_agents_may_use_it(
        tmp_path, monkeypatch, backend, left):
    """With offline agents the key sat in monitor/llm-key.json for nothing."""
    from llmzero_slurm.config import AgentConfig
    from llmzero_slurm.controller import llm_key
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-canary-5d2")
    llm_key.hand_over(tmp_path, AgentConfig(backend=backend))
    assert (tmp_path / llm_key.KEY_FILE).exists() == left
    assert llm_key.take(tmp_path, AgentConfig(backend=backend)) == \
        ("sk-ant-canary-5d2" if left else None)


def test_a_binary_heartbeat_reads_as_none_yet(tmp_path):
    store = RunStore.create(tmp_path / "run", parse_config({"name": "mon", "scheduler": "local"}))
    (store.root / "monitor").mkdir()
    (store.root / "monitor" / "heartbeat.json").write_bytes(b"\xff\xfe")
    assert monitor_heartbeat(store) == {}


class CancelRecorder(ScriptedScheduler):
    """Cancels any job it is asked to, and notes which, and why."""

    def cancel(self, job_id: str, name: str, why: str | None = None) -> None:
        self.cancelled.append(job_id)
        self.why = why


def test_an_llm_stoppers_reason_is_kept_and_carried_to_the_job(tmp_path, monkeypatch, capsys):
    """Walkthrough "why was my phase cancelled?" with the LLM stopper: its REASON, over lines
    of its own, is the phase's stop line, naming the LLM, and the job's cancel carries it."""
    from llm_loopback import LoopbackLLM
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    with LoopbackLLM() as service:
        service.reply("REASON: validation climbs 0.05 a step but ends near 0.75,\n"
                      "well below node 0's 0.900.\nDECISION: STOP")
        store = judged_run(tmp_path, {"backend": "anthropic", "base_url": service.url,
                                      "model": "claude-test"})
        sched = CancelRecorder()
        assert Monitor(store, sched).check_once() == [1]
    line = ("stopped early at step 20 by the LLM stopper (anthropic claude-test): validation "
            "climbs 0.05 a step but ends near 0.75, well below node 0's 0.900.")
    assert stop_line(store.node_dir(1)) == line
    assert sched.why == f"llmzero: {line}"
    assert f"monitor: node 1: {line}; cancelling job 77" in capsys.readouterr().err


def add_running(store: RunStore, job: str, points: dict[int, float]) -> Node:
    """A running phase of job `job` with these validation points."""
    node = store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"total_training_steps": 60},
                                         status=Status.RUNNING, submission=Submission("t", job)))
    write_val(store.node_dir(node.id).metrics_file, points)
    return node


@pytest.mark.parametrize("damage", ["torn", "disk full"])
def test_a_phase_whose_stop_record_cannot_be_kept_leaves_the_others_judged(
        tmp_path, monkeypatch, capsys, damage):
    """One phase's early_stop.json torn (or unreadable), or a full disk when its decision was
    written, raised StateError out of the pass: the monitor job died, and each replacement
    died the same way at its first pass, no phase being judged meanwhile. Now that phase is
    skipped, named with its file, and the pass goes on."""
    store = run_with_a_best_phase(tmp_path, "local")
    bad = add_running(store, "41", {5: 0.2, 10: 0.2, 15: 0.2, 20: 0.2})
    if damage == "torn":
        store.node_dir(bad.id).early_stop_file.write_text("{")
    else:                       # the first decision written, the bad phase's, meets a full disk
        monkeypatch.setattr("llmzero_slurm.faults._passed", {})
        monkeypatch.setenv("LLMZERO_FAULT", "enospc:early_stop.json")
    dominated = add_running(store, "42", {5: 0.2, 10: 0.2, 15: 0.2, 20: 0.2})
    sched = CancelRecorder()
    monitor = Monitor(store, sched)
    assert monitor.check_once() == [dominated.id]
    assert sched.cancelled == ["42"]
    said = capsys.readouterr().err
    assert f"monitor: node {bad.id}: not judged this pass: " \
           f"{store.node_dir(bad.id).early_stop_file}: " in said
    if damage == "disk full":   # space freed: the same points are judged at the next pass
        assert monitor.check_once() == [bad.id]


def test_the_monitor_beats_between_the_phases_of_a_long_pass(tmp_path, monkeypatch):
    """The heartbeat was written only around a pass: with a slow LLM and many running phases
    a pass outlasted the keeper's patience, and it cancelled the monitor as silent mid-pass."""
    from llmzero_slurm.agents.decisions import Decision
    from llmzero_slurm.agents.stopper import Stopper
    store = run_with_a_best_phase(tmp_path, "local")
    for job in ("41", "42", "43"):
        add_running(store, job, {5: 0.5, 10: 0.6})
    beats = []

    def slow(self, inp, out_dir):
        beats.append(monitor_heartbeat(store)["time"])
        time.sleep(0.05)
        return Decision("CONTINUE", "slow", inp.current.last_step)

    monkeypatch.setattr(Stopper, "decide", slow)
    monkeypatch.setattr("llmzero_slurm.controller.monitor.HEARTBEAT_S", 0.1)
    run_monitor(str(store.root), "local", 600.0, 1.0)     # one pass
    assert len(beats) == 3 and beats[0] < beats[1] < beats[2]


def test_a_phase_whose_judgement_fails_otherwise_leaves_the_others_judged(
        tmp_path, monkeypatch, capsys):
    """Only StateError and OSError were caught around a phase's judgement: any other (a
    ValueError out of matplotlib for an overflowed metric) ended the monitor job, and each
    replacement died the same way at its first pass. Now that phase is skipped, its error
    and where it came from in the monitor's log, and the pass goes on."""
    from llmzero_slurm.agents.stopper import Stopper
    store = run_with_a_best_phase(tmp_path, "local")
    bad = add_running(store, "41", {5: 0.2, 10: 0.2, 15: 0.2, 20: 0.2})
    dominated = add_running(store, "42", {5: 0.2, 10: 0.2, 15: 0.2, 20: 0.2})
    decide = Stopper.decide

    def failing(self, inp, out_dir):
        if out_dir == store.node_dir(bad.id).path:
            raise ValueError("arange: cannot compute length")
        return decide(self, inp, out_dir)

    monkeypatch.setattr(Stopper, "decide", failing)
    sched = CancelRecorder()
    assert Monitor(store, sched).check_once() == [dominated.id]
    assert sched.cancelled == ["42"]
    said = capsys.readouterr().err
    assert f"monitor: node {bad.id}: not judged this pass: ValueError: arange: cannot " \
           "compute length" in said and "in failing" in said       # the traceback


def test_a_pass_whose_tree_cannot_be_read_is_skipped_and_the_next_judges(
        tmp_path, monkeypatch, capsys):
    """The tree's folder listing failing for a moment (ESTALE on NFS) raised out of the pass:
    the monitor job ended, and no phase was judged until its replacement left the queue. Now
    the pass is skipped, said with the cause, and the next one judges as usual."""
    import errno
    store = run_with_a_best_phase(tmp_path, "local")
    dominated = add_running(store, "42", {5: 0.2, 10: 0.2, 15: 0.2, 20: 0.2})
    listing = RunStore.folder_ids
    fails = [OSError(errno.ESTALE, "Stale file handle", str(store.root / "nodes"))]

    def flaky(self):
        if fails:
            raise fails.pop()
        return listing(self)

    monkeypatch.setattr(RunStore, "folder_ids", flaky)
    sched = CancelRecorder()
    monitor = Monitor(store, sched)
    assert monitor.check_once() == []
    said = capsys.readouterr().err
    assert "monitor: pass skipped, the run's tree could not be read: " in said \
        and "Stale file handle" in said
    assert monitor.check_once() == [dominated.id] and sched.cancelled == ["42"]


RUN_MONITOR = ("import sys; from llmzero_slurm.controller.monitor import run_monitor; "
               "print(run_monitor(sys.argv[1], 'local', 0.5, 3.0))")


def test_a_monitor_whose_heartbeat_cannot_be_written_goes_on_and_says_so_once(tmp_path):
    """One failed write of heartbeat.json (EIO, ESTALE, a full disk) ended the monitor job.
    Now it is said once per kind of error, and the monitor goes on judging: one that truly
    stops beating is the keeper's silence check's to replace."""
    from full_disk import on_full_disk
    store = run_with_a_best_phase(tmp_path, "local")
    (store.root / "monitor").mkdir()
    ended = on_full_disk(store.root / "monitor", [sys.executable, "-c", RUN_MONITOR,
                                                  str(store.root)])
    assert ended.returncode == 0, ended.stderr[-2000:]
    assert ended.stdout.splitlines()[-1] == "lifetime reached"
    assert ended.stderr.count("monitor: heartbeat not written") == 1, ended.stderr
    assert "No space left on device" in ended.stderr


def test_a_monitor_that_ends_early_after_beating_is_resubmitted_with_a_back_off(
        tmp_path, monkeypatch):
    """The back-off held back only a monitor that ended before its first heartbeat: one that
    beat and then crashed (a bug in a pass) was replaced at every poll, each replacement
    crashing the same way, and nothing told the user."""
    monkeypatch.setattr("llmzero_slurm.controller.keeper.START_RETRY_S", 0.5)
    store = run_with_a_best_phase(tmp_path, "local")
    sched = MonitorEndsAtOnceScheduler()
    keeper = MonitorKeeper(store, sched)
    keeper.ensure(True)                          # job 901, whose body crashes after a beat

    def crash(self, alive=lambda: None):
        raise RuntimeError("a bug in the pass")

    monkeypatch.setattr(Monitor, "check_once", crash)
    with pytest.raises(RuntimeError):
        run_monitor(str(store.root), "local", 1.0, 600.0)
    news = keeper.ensure(True)
    assert news is not None and "the monitor job 901 ended after 0 s of its" in news \
        and "without saying why" in news and "submitting another in 0 s" in news
    assert len(sched.calls) == 1                 # waits
    time.sleep(0.6)
    keeper.ensure(True)
    assert len(sched.calls) == 2                 # then tries again


def test_a_monitor_cancelled_as_its_controller_left_is_replaced_at_once(tmp_path):
    """A monitor that ended by design (cancelled as the last controller stopped, at its
    lifetime, its controller gone) holds no replacement back: the next llmzero-start gets its
    monitor at its first poll."""
    store = run_with_a_best_phase(tmp_path, "local")
    lease = Lease(store)
    lease.acquire()
    sched = LocalScheduler(tmp_path / "local-jobs")
    try:
        keeper = MonitorKeeper(store, sched)
        keeper.ensure(True)
        job = str(keeper._record()["job_id"])
        wait_for(lambda: "started" in monitor_heartbeat(store), 60, "the monitor's first beat")
        keeper.stop()                            # the controller leaves
        wait_for(lambda: sched.call_state(job) is None, 15, "the monitor to end")
        assert monitor_heartbeat(store)["ended"] == "stopped by SIGTERM"
        following = MonitorKeeper(store, sched)  # the next controller's
        assert following.ensure(True) is None
        assert str(following._record()["job_id"]) != job
        following.stop()
    finally:
        lease.release()


def keeper_of_slurm_job_901(tmp_path, monkeypatch, listed_running: bool = False
                            ) -> tuple[MonitorKeeper, MonitorOnlyScheduler, Heartbeat]:
    """A keeper that has submitted monitor 901, and the heartbeat that job 901 writes; with
    `listed_running` the scheduler lists every job running (a stale poll, or a requeue)."""
    from llmzero_slurm.schedulers.base import job_state
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "mon", "backend": "cpu", "scheduler": "local"}))
    sched = MonitorOnlyScheduler()
    if listed_running:
        sched.states = lambda job_ids, *a, **k: {j: job_state(j, "RUNNING") for j in job_ids}
    keeper = MonitorKeeper(store, sched)
    keeper.ensure(True)                                      # job 901
    monkeypatch.delenv("SUBMITIT_LOCAL_JOB_ID", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "901")
    return keeper, sched, Heartbeat(store.root / "monitor" / "heartbeat.json", None)


def test_a_monitor_cancelled_by_hand_that_no_source_lists_is_replaced_at_once(
        tmp_path, monkeypatch):
    """A monitor a person scancelled on a cluster without accounting leaves squeue within
    seconds, and no source lists it ended: the keeper took it for one still running and
    replaced it only once its heartbeat had been silent for STALE_S plus an interval (17 min
    at the default interval), with no early stopping meanwhile. Its heartbeat said it ended."""
    keeper, sched, beat = keeper_of_slurm_job_901(tmp_path, monkeypatch)
    beat()
    keeper.ensure(True)
    assert len(sched.calls) == 1                             # alive and beating: kept
    beat(ended="stopped by SIGTERM")                         # scancel by hand
    assert keeper.ensure(True) is None
    assert len(sched.calls) == 2 and sched.cancelled == []
    keeper.ensure(True)                                      # 902 has not beaten yet: kept
    assert len(sched.calls) == 2


def test_a_requeued_monitor_running_again_is_not_taken_for_an_ended_one(tmp_path, monkeypatch):
    """A monitor requeued (node failure, scontrol requeue) writes 'ended' as its SIGTERM
    comes and runs again under the same job id: until its new run's first heartbeat, squeue
    lists it running, and a keeper that trusted the old 'ended' would start a second
    monitor beside it."""
    keeper, sched, beat = keeper_of_slurm_job_901(tmp_path, monkeypatch, listed_running=True)
    beat(ended="stopped by SIGTERM")
    keeper.ensure(True)
    keeper.ensure(True)
    assert len(sched.calls) == 1 and sched.cancelled == []


def test_a_monitor_said_ended_is_looked_up_now_not_in_the_last_poll(tmp_path, monkeypatch):
    """Slurm's states() answers from its last poll for up to a minute, and that poll still
    held the monitor scancelled since: asked there, its replacement waited for the next."""
    keeper, sched, beat = keeper_of_slurm_job_901(tmp_path, monkeypatch, listed_running=True)
    asked: list[str] = []
    sched.listed = lambda job_ids, name: asked.append(name) or {}
    beat(ended="stopped by SIGTERM")
    keeper.ensure(True)
    assert len(sched.calls) == 2 and asked == ["llmz-mon-monitor"]


def test_the_folders_of_monitors_long_ended_are_removed_when_another_is_submitted(tmp_path):
    """Each monitor job (one per slurm.time, the lifetime a phase may run) left its submitit
    folder and a link to its script in monitor/ for good: a run of weeks with 15-minute phase
    limits gathered thousands of them. The newest few are kept to read."""
    from llmzero_slurm.controller.keeper import KEPT_MONITOR_FOLDERS
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "mon", "backend": "cpu", "scheduler": "local"}))
    mon = store.root / "monitor"
    for n, job in enumerate(range(100, 110)):
        (mon / str(job)).mkdir(parents=True)
        (mon / str(job) / f"{job}_0_log.out").write_text("log\n")
        (mon / f".submission_file_{job}.sh").symlink_to(mon / str(job) / f"{job}_submission.sh")
        (mon / str(job) / f"{job}_submission.sh").write_text("#!/bin/bash\n")
        os.utime(mon / str(job), (1000 + n, 1000 + n))
    (mon / "notes").mkdir()                                  # not a job's: left alone
    MonitorKeeper(store, MonitorOnlyScheduler()).ensure(True)
    kept = sorted(p.name for p in mon.iterdir() if p.name.isdigit())
    assert kept == [str(j) for j in range(110 - KEPT_MONITOR_FOLDERS, 110)]
    links = sorted(p.name for p in mon.glob(".submission_file_*"))
    assert links == [f".submission_file_{j}.sh" for j in kept]
    assert (mon / "notes").is_dir() and (mon / "monitor.json").is_file()
