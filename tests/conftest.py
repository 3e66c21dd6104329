"""Shared fixtures: the local Slurm cluster, and a tiny real trainer for phase-script tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pytest

from llmzero_slurm.backends.base import TrainerBackend
from llmzero_slurm.paths import ROOT

CLUSTER_SCRIPT = ROOT / "bin" / "llmzero-local-slurm"


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """Start (or reuse) the local cluster once per session; return its SLURM_CONF path."""
    try:
        proc = subprocess.run([str(CLUSTER_SCRIPT), "start"], capture_output=True, text=True,
                              timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"the local Slurm cluster could not be started: {exc}")
    if proc.returncode != 0:
        pytest.skip("the local Slurm cluster could not be started "
                    f"(bin/llmzero-local-slurm start: {proc.stderr.strip()[-500:]})")
    env = subprocess.run([str(CLUSTER_SCRIPT), "env"], capture_output=True, text=True, check=True)
    return env.stdout.strip().split("=", 1)[1]


@pytest.fixture
def slurm_env(slurm_cluster: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """SLURM_CONF for one slurm-marked test only, so other tests never see the cluster
    (scheduler 'auto' would otherwise pick Slurm depending on test order)."""
    monkeypatch.setenv("SLURM_CONF", slurm_cluster)
    return slurm_cluster


@dataclass
class FaultOutcome:
    """How a fault scenario ended, the figures of benchmarks/fault_matrix.py."""

    scenario: str
    jobs_per_node: int      # the most jobs any node ran (1: exactly once; 0: none submitted)
    lost: int               # node ids taken whose record is neither readable nor kept
    stuck: int              # nodes left queued, running or mid-submission at the end
    crashes: int            # the controller ending other than by design


@pytest.fixture
def fault_outcome(request: pytest.FixtureRequest) -> Callable[..., FaultOutcome]:
    """Judge a fault scenario's end against the targets (1 job per node, 0 lost, 0 stuck, 0
    crashes) and, when LLMZERO_FAULT_REPORT names a file, append the figures to it."""
    def judge(store: Any, jobs: Iterable[Path], crashes: int = 0) -> FaultOutcome:
        marker = request.node.get_closest_marker("fault")
        scenario = marker.args[0] if marker else request.node.name
        tree = store.load_tree()
        counts = Counter(Path(j).name for j in jobs)
        folders = [p.name for p in store.nodes_dir.iterdir() if p.name.isdigit()]
        lost = sum(1 for f in folders if not (store.nodes_dir / f / "node.json").exists())
        stuck = sum(1 for n in tree if n.status.pending and not n.pruned)
        outcome = FaultOutcome(scenario, max(counts.values(), default=0), lost, stuck, crashes)
        if os.environ.get("LLMZERO_FAULT_REPORT"):
            with open(os.environ["LLMZERO_FAULT_REPORT"], "a") as fh:
                fh.write(json.dumps(asdict(outcome)) + "\n")
        assert outcome.jobs_per_node <= 1 and (outcome.lost, outcome.stuck, outcome.crashes) == \
            (0, 0, 0), outcome
        return outcome
    return judge


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slurm") and "slurm_env" not in item.fixturenames:
            item.fixturenames.insert(0, "slurm_env")


# A tiny real trainer: the same output contract as the CPU trainer (metrics.jsonl lines,
# ckpt/global_step_N folders, resume from its own latest checkpoint), seconds instead of minutes.
TINY_TRAINER = r'''
import json, os, pathlib, sys, time
args = sys.argv[1:]
def opt(name, default):
    return args[args.index(name) + 1] if name in args else default
out = pathlib.Path(opt("--output-dir", "."))
hp = dict(a.split("=", 1) for a in args if "=" in a and not a.startswith("--"))
steps, save, seed = int(hp.get("total_training_steps", 3)), int(hp.get("save_freq", 1)), int(hp.get("seed", 0))
step_s, fail_at = float(opt("--step-s", "0")), int(opt("--fail-at", "0"))
done = sorted(int(p.name.rsplit("_", 1)[1]) for p in out.glob("ckpt/global_step_*"))
start = done[-1] if done else 0
metrics = out / "metrics.jsonl"
kept = [l for l in (metrics.read_text().splitlines() if metrics.exists() else [])
        if json.loads(l)["step"] <= start]
metrics.write_text("".join(l + "\n" for l in kept))
print(f"tiny trainer: start at step {start}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
for step in range(start + 1, steps + 1):
    time.sleep(step_s)
    if step == fail_at:
        print(f"tiny trainer: failing at step {step}", file=sys.stderr)
        sys.exit(3)
    score = ((seed * 7919 + step * 104729) % 1000) / 1000
    with metrics.open("a") as fh:
        fh.write(json.dumps({"step": step, "data": {"val-core/tiny/acc/mean@1": score}}) + "\n")
    if step % save == 0:
        (out / "ckpt" / f"global_step_{step}").mkdir(parents=True, exist_ok=True)
print("tiny trainer: done", flush=True)
'''


class TinyBackend(TrainerBackend):
    """A second real backend: the base template's machinery around a few-second program."""

    name = "cpu"
    template = "phase/cpu.sbatch.j2"
    trainer_keys = {"python": str, "program": str, "step_s": float, "fail_at": int}

    def command(self, spec: Any) -> list[str]:
        argv = [self.python(spec.trainer), spec.trainer["program"], "--output-dir", str(spec.node_dir),
                "--step-s", str(spec.trainer.get("step_s", 0.0)),
                "--fail-at", str(spec.trainer.get("fail_at", 0))]
        return argv + [f"{k}={v}" for k, v in sorted(spec.hparams.items())]


@pytest.fixture(scope="session")
def base_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One base-model cache for every test that runs the real CPU trainer: the calibrated warm
    start takes one to three minutes, so the suite builds it once (cold, as a fresh clone does).
    `make test` runs the suite as two processes on one numeric path; they share one cache
    through LLMZERO_TEST_BASE_CACHE, and the warm start's own lock makes one of them build it."""
    shared = os.environ.get("LLMZERO_TEST_BASE_CACHE")
    if shared:
        Path(shared).mkdir(parents=True, exist_ok=True)
        return Path(shared)
    return tmp_path_factory.mktemp("base-model-cache")


@pytest.fixture(scope="session")
def tiny_program(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tiny") / "tiny_trainer.py"
    path.write_text(TINY_TRAINER)
    return str(path)


def files_of(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every entry under `folder` with its bytes (files) and mtime: what "untouched" means."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"",
                                         p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    """Poll until `predicate()` is truthy; fail the test naming what never happened."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


@contextmanager
def flock_held(path: Path) -> Iterator[subprocess.Popen]:
    """`path` flocked by another process, as another command holds a run's lock, until the
    block ends."""
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                               "f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
                               "print('held', flush=True); time.sleep(600)", str(path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def finish(sched: Any, job_id: str, timeout: float = 60) -> Any:
    """Poll a scheduler until the job reaches a final state; return that JobState."""
    return wait_for(lambda: (s := sched.states([job_id]).get(job_id)) and s.final and s,
                    timeout, f"job {job_id} to finish")


def status_json(script: Path) -> dict:
    """The status.json the phase wrote beside its script."""
    return json.loads((script.parent / "status.json").read_text())


def tiny_phase(store: Any, program: str, total: int, step_s: float = 0.5) -> tuple[Any, Path]:
    """A node of `store` running `program` as the tiny trainer (`total` steps): the node, its
    script. As a controller killed after the submit leaves it: `submitting`, its token
    recorded, no job id."""
    from llmzero_slurm.config import SlurmConfig
    from llmzero_slurm.render import PhaseSpec, write_phase_script
    from llmzero_slurm.search.tree import Kind, Node, Status, Submission
    node = store.add_node(lambda i: Node(
        i, None, Kind.SCRATCH, {"total_training_steps": total}, status=Status.SUBMITTING,
        submission=Submission(f"tok-{i}")))
    script = write_phase_script(PhaseSpec(
        store.config.name, node.id, "scratch", store.node_dir(node.id).path, f"tok-{node.id}",
        node.hparams, slurm=SlurmConfig(time="00:05:00"),
        trainer={"program": program, "step_s": step_s}), TinyBackend())
    return node, script


def local_phases(store: Any, program: str, steps: Iterable[int]) -> list[str]:
    """A tiny_phase for each entry of `steps`, each submitted through the run's local
    scheduler: the job ids."""
    from llmzero_slurm.schedulers import LocalScheduler
    sched, jobs = LocalScheduler(store.root / "local-jobs"), []
    for total in steps:
        node, script = tiny_phase(store, program, total)
        jobs.append(sched.submit(script, node.submission.token))
    return jobs


def verl_task_files(folder: Path) -> dict[str, Path]:
    """The addition task's splits as a verl run needs them: its splits share one data_source,
    so the test rows get their own (addition_test), which keeps their scores out of
    validation. The shipped verl example lists its test sources; the tests list this one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from llmzero_slurm.tasks.dataset import materialize
    files = materialize("addition", folder)
    table = pq.read_table(files["test"])
    at = table.schema.get_field_index("data_source")
    files["test"] = folder / "test-own-source.parquet"
    pq.write_table(table.set_column(at, "data_source", pa.array(["addition_test"] * len(table))),
                   files["test"])
    return files


def slurm_clients(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **scripts: str) -> None:
    """Stand-ins for Slurm's clients, first on PATH: each keyword a client, its value the body
    of its shell script; `scontrol ping` says a controller is up unless given otherwise."""
    scripts.setdefault("scontrol", 'echo "Slurmctld(primary) at stand-in is UP"')
    shims = tmp_path / "bin"
    shims.mkdir(exist_ok=True)
    for client, body in scripts.items():
        (shims / client).write_text(f"#!/bin/sh\n{body}\n")
        (shims / client).chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
