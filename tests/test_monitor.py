"""The monitor's pass over running phases, with the offline stopper and a real local job."""
from __future__ import annotations

import json

from llmzero_slurm.config import parse_config
from llmzero_slurm.controller.monitor import Monitor
from llmzero_slurm.schedulers import LocalScheduler
from llmzero_slurm.search.tree import Kind, Node, Results, Status, Submission
from llmzero_slurm.store.run_store import RunStore

from conftest import finish, wait_for
from metrics_files import val_rows, write_metrics


def write_val(path, points: dict[int, float]) -> None:
    write_metrics(path, val_rows(points), append=True)


def test_a_stopped_phase_is_never_judged_again_and_a_restarted_monitor_resends_the_cancel(
        tmp_path):
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "mon", "backend": "cpu", "scheduler": "local",
        "agents": {"backend": "heuristic", "stop_margin": 0.0}}))
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"total_training_steps": 40},
                                  status=Status.COMPLETED,
                                  results=Results(best_val=0.9, checkpoints=[40])))
    write_val(store.node_dir(0).metrics_file, {s: s / 40 * 0.9 for s in range(5, 45, 5)})

    script = tmp_path / "phase.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --comment=token=t1\n#SBATCH --time=00:05:00\n"
                      f"#SBATCH --output={tmp_path}/slurm-%j.out\nsleep 300\n")
    sched = LocalScheduler(tmp_path / "local-jobs")
    job = sched.submit(script, "t1")
    wait_for(lambda: sched.states([job])[job].raw == "RUNNING", 30, "the job to start")
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
