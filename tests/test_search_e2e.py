"""Whole searches on the embedded CPU trainer, driven by `llmzero-start` as a user runs it.

The root configuration does not fit the job's memory limit (a real allocation failure), so
the error analyzer must debug it; a high scratch ratio forces an injection within the budget;
the offline stopper, with no noise margin, cancels dominated phases through the scheduler.
"""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmzero_slurm.paths import ROOT
from llmzero_slurm.metrics import val_score_series
from llmzero_slurm.search.policy import best_node, best_path
from llmzero_slurm.search.tree import Kind, Status
from llmzero_slurm.store.run_store import RunStore

pytestmark = pytest.mark.slow

START = ROOT / "bin" / "llmzero-start"
FIGURES = ("strategy_curve.png", "best_so_far.png", "test_vs_compute.png", "tree.png",
           "hparams.png")


# Phases for tests about the controller, not about training: few rollouts, validation (val and
# test splits, 1,536 greedy answers) only at the start and the end.
SMALL_PHASES = {"total_training_steps": 10, "test_freq": 10, "rollout_n": 4,
                "ppo_micro_batch_size_per_gpu": 128, "log_prob_micro_batch_size_per_gpu": 128}


def e2e_config(tmp: Path, cache: Path, scheduler: str, budget: int = 7, **hparams) -> Path:
    config = {
        "name": f"e2e-{scheduler}",
        "backend": "cpu",
        "scheduler": scheduler,
        "task": {"builtin": "addition"},
        # 32 prompts x 16 rollouts in one micro-batch of 512 (~640 MB) exceeds the 590 MB limit;
        # halving the micro-batches (the analyzer's fix for an OOM, ~550 MB) fits.
        "hparams": {"train_batch_size": 32, "ppo_mini_batch_size": 32, "rollout_n": 16,
                    "ppo_micro_batch_size_per_gpu": 512, "log_prob_micro_batch_size_per_gpu": 512,
                    "total_training_steps": 30, "test_freq": 5, "save_freq": 10, **hparams},
        "trainer": {"max_memory_mb": 590, "cache_dir": str(cache)},
        "search": {"budget_iterations": budget, "concurrency": 2, "min_scratch_ratio": 0.7,
                   "early_stop_interval_s": 2, "poll_interval_s": 1},
        "slurm": {"cpus_per_task": 1, "time": "00:10:00"},
        "agents": {"backend": "heuristic", "stop_margin": 0.0},
    }
    path = tmp / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start(config: Path, run_dir: Path, fault: str | None = None,
          timeout: float = 900) -> subprocess.CompletedProcess:
    """Run llmzero-start; output goes through a file, since jobs and the monitor outlive a
    killed controller and would hold a pipe open."""
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    env["LLMZERO_PYTHON"] = sys.executable
    if fault:
        env["LLMZERO_FAULT"] = fault
    log = run_dir.parent / f"controller-{fault or 'clean'}.log"
    with open(log, "w") as out:
        proc = subprocess.run([str(START), str(config), "--run-dir", str(run_dir)], env=env,
                              stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, log.read_text(), "")


@pytest.fixture(scope="module")
def cache(base_cache) -> Path:
    return base_cache


def check_search(run_dir: Path, budget: int) -> None:
    store = RunStore.open(run_dir)
    tree = store.load_tree()
    nodes = list(tree)
    assert len(nodes) == budget and all(n.status.finished for n in nodes)

    root = tree[0]
    assert root.status is Status.FAILED and root.submission.exit_code == 3
    assert "out of memory" in "".join(p.read_text() for p in store.node_dir(0).log_files())
    fixes = [n for n in nodes if n.fixed_from == 0]
    assert len(fixes) == 1 and fixes[0].status in (Status.COMPLETED, Status.EARLY_STOPPED)
    fix = fixes[0]
    assert fix.parent is None and fix.kind is Kind.SCRATCH and root.terminal
    assert fix.hparams["ppo_micro_batch_size_per_gpu"] < root.hparams["ppo_micro_batch_size_per_gpu"]

    assert any(n.injected and n.kind is Kind.SCRATCH and n.resume is None for n in nodes)

    stopped = [n for n in nodes if n.status is Status.EARLY_STOPPED]
    assert stopped, "the stopper cancelled no phase"
    for node in stopped:
        assert node.submission.scheduler_state == "CANCELLED"
        records = json.loads(store.node_dir(node.id).early_stop_file.read_text())
        assert records[-1]["result"]["action"] == "STOP"
        assert node.results.checkpoints, "an early-stopped phase keeps its checkpoints"

    # Multi-phase strategies were built: evolve phases trained on from a parent's checkpoint.
    # Whether one of them beats its root in 30 steps is this run's luck (within one validation
    # standard error either way), so the best path is only asked to start at a scratch phase.
    assert any(n.kind is Kind.EVOLVE and n.resume is not None and n.results.best_val is not None
               and n.results.checkpoints for n in nodes)
    assert best_path(tree)[0].kind is Kind.SCRATCH

    report = run_dir / "report"
    html = (report / "index.html").read_text()
    for figure in FIGURES:
        assert (report / figure).stat().st_size > 1000 and figure in html
    assert "strategy.yaml" in {p.name for p in report.iterdir()}
    for node in nodes:  # every phase ran exactly once: one job output per node
        assert len(list(store.node_dir(node.id).log_files())) == 1, node.id


@pytest.mark.numeric
def test_search_with_local_processes(tmp_path, cache):
    config = e2e_config(tmp_path, cache, "local")
    done = start(config, tmp_path / "run")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "search finished" in done.stdout
    check_search(tmp_path / "run", 7)
    # Its last lines say what it spent and gained against the base its root measured at step 0.
    store = RunStore.open(tmp_path / "run")
    tree = store.load_tree()
    base = dict(val_score_series(store.node_dir(0).metrics()))[0]
    best = best_node(tree)
    assert f"gain: validation {base:.3f} -> {best.score:.3f} (" in done.stdout
    stopped = sum(n.status is Status.EARLY_STOPPED for n in tree)
    assert re.search(rf"training samples: [\d,]+ trained; early stopping saved [\d,]+ "
                     rf"of [\d,]+ planned \(\d+%, {stopped} phases?\)", done.stdout)


@pytest.mark.slurm
def test_search_on_slurm_with_the_monitor_job(tmp_path, cache):
    config = e2e_config(tmp_path, cache, "slurm")
    done = start(config, tmp_path / "run")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    check_search(tmp_path / "run", 7)
    monitor = json.loads((tmp_path / "run" / "monitor" / "monitor.json").read_text())
    assert monitor["kind"] == "slurm"
    names = subprocess.run(["sacct", "-c", "-n", "-X", "-o", "JobName%60", "-j", monitor["job_id"]],
                           capture_output=True, text=True).stdout
    assert "llmz-e2e-slurm-monitor" in names


def finished_once_each(store: RunStore, fault_outcome) -> None:
    """Every phase final and run by exactly one job of the local scheduler: none resubmitted."""
    tree = store.load_tree()
    assert all(n.status.finished for n in tree)
    table = json.loads((store.root / "local-jobs" / "jobs.json").read_text())["jobs"]
    tokens = [job["token"] for job in table.values()]
    assert len(tokens) == len(set(tokens)) == len(tree)
    fault_outcome(store, [Path(job["script"]).parent for job in table.values()])


@pytest.mark.fault("controller kill -9 inside node creation, before and after sbatch, while "
                   "ingesting (real local jobs)")
def test_controller_killed_at_every_step_of_a_phase_resumes_exactly_once(tmp_path, cache,
                                                                         fault_outcome):
    # Small phases: this test is about the controller, not about training.
    config = e2e_config(tmp_path, cache, "local", budget=5, **SMALL_PHASES)
    run_dir = tmp_path / "run"
    for fault in ("after_sbatch:2", "before_sbatch:1", "while_ingesting:1", "creating_node:1"):
        killed = start(config, run_dir, fault)
        assert killed.returncode == -9, (fault, killed.stdout[-2000:], killed.stderr[-2000:])
    done = start(config, run_dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    store = RunStore.open(run_dir)
    tree = store.load_tree()
    # The kill inside node creation took an id for good before its folder existed: a gap.
    ids = sorted(n.id for n in tree)
    assert len(ids) == 5 and ids[-1] == 5 and not any(
        store.node_dir(i).path.exists() for i in range(6) if i not in ids)
    for node in tree:
        assert len(list(store.node_dir(node.id).log_files())) == 1
    finished_once_each(store, fault_outcome)


@pytest.mark.fault("a full disk (ENOSPC) at the writes of the id counter, a node record, the lease, "
                   "the job table and a proposal, each followed by a restart (real local jobs)")
def test_a_full_disk_at_a_state_write_stops_cleanly_and_a_restart_loses_nothing(tmp_path, cache,
                                                                               fault_outcome):
    config = e2e_config(tmp_path, cache, "local", budget=4, **SMALL_PHASES)
    run_dir = tmp_path / "run"
    # The n-th write of that file in that controller's life: the first node's id, a status
    # change, the lease when first taken, a submission, an evolve phase's proposal.
    for fault in ("enospc:meta.json:2", "enospc:node.json:3", "enospc:controller.json:1",
                  "enospc:jobs.json:2", "enospc:proposal.json:1"):
        stopped = start(config, run_dir, fault)
        out = stopped.stdout
        assert stopped.returncode == 3, (fault, out[-3000:])
        assert "No space left on device" in out and "it still holds what it held before" in out
        assert "Traceback" not in out, (fault, out[-3000:])
        store = RunStore.open(run_dir)
        store.load_tree()
        assert not store.corrupt        # every record readable after the failed write
    assert "free space, then resume with llmzero-start" in out
    done = start(config, run_dir)
    assert done.returncode == 0, done.stdout[-3000:]
    store = RunStore.open(run_dir)
    assert len(store.load_tree()) == 4
    finished_once_each(store, fault_outcome)


def test_keeping_only_useful_checkpoints_prunes_finished_phases_and_children_still_resume(
        tmp_path, cache):
    """search.keep_checkpoints: useful, on a real local search whose controller is killed
    between recording a prune and removing the folders: the resumed controller finishes it."""
    config = e2e_config(tmp_path, cache, "local", budget=3, **{**SMALL_PHASES, "save_freq": 2,
                                                                "test_freq": 5})
    data = yaml.safe_load(config.read_text())
    data["search"].update(concurrency=1, min_scratch_ratio=0.0, early_stopping=False,
                          keep_checkpoints="useful")
    config.write_text(yaml.safe_dump(data))
    run_dir = tmp_path / "run"
    killed = start(config, run_dir, "while_pruning:1")
    assert killed.returncode == -9, killed.stdout[-3000:]
    store = RunStore.open(run_dir)
    root = store.load_tree()[0]
    assert root.status is Status.COMPLETED and root.removed_checkpoints is not None
    assert store.node_dir(0).checkpoints() == [2, 4, 6, 8, 10]   # recorded, not yet removed

    done = start(config, run_dir)
    assert done.returncode == 0, done.stdout[-3000:]
    tree = store.load_tree()
    assert len(tree) == 3 and all(n.status is Status.COMPLETED for n in tree)
    children = [n for n in tree if n.resume is not None]
    assert children, "no phase resumed from a checkpoint"
    for node in tree:
        files = store.node_dir(node.id)
        kept = node.results.checkpoints
        # The record lists what is on disk; what went is recorded with why.
        assert files.checkpoints() == kept, node.id
        removed = node.removed_checkpoints
        assert removed is not None and removed.steps and not set(removed.steps) & set(kept)
        assert len(kept) + len(removed.steps) == 5 and "keep_checkpoints" in removed.why
        assert node.results.last_step in kept
        best = node.results.best_val_step
        before = [s for s in kept + removed.steps if best is not None and s <= best]
        assert not before or max(before) in kept, node.id
        assert (files.path / "best_adapter").is_dir()
        record = json.loads(files.record.read_text())
        assert record["removed_checkpoints"]["steps"] == removed.steps
    for child in children:
        parent = tree[child.resume.node]
        assert child.resume.step in parent.results.checkpoints
        # The child trained on from its parent's step: its metrics start after it.
        steps = [s for s, _ in val_score_series(store.node_dir(child.id).metrics())]
        assert min(steps) >= child.resume.step and child.results.last_step == child.resume.step + 10
    assert "node 0: removed the checkpoints of steps 2, 4, 6, 8, recorded as removed by a " \
        "controller stopped before it removed them" in done.stdout
