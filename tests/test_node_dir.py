"""A node directory's files, read through their one owner: bounded, incremental, defensive."""
from __future__ import annotations

import json
import os

import pytest

from llmzero_slurm.metrics_reader import MetricsReader
from llmzero_slurm.store.node_dir import NodeDir
from metrics_files import VAL, val_rows, write_metrics


def test_log_tail_reads_only_the_end_of_the_newest_log(tmp_path):
    files = NodeDir(tmp_path)
    assert files.log_tail() == ""
    (tmp_path / "slurm-1.out").write_text("old attempt\n")
    newest = tmp_path / "slurm-2.out"
    with newest.open("w") as fh:
        for i in range(200_000):          # ~3 MB of output
            fh.write(f"step {i} fine\n")
        fh.write("torch.OutOfMemoryError: CUDA out of memory\n")
    tail = files.log_tail(max_bytes=4096)
    assert len(tail) <= 4096 and tail.endswith("CUDA out of memory\n")
    assert tail.startswith("step ")       # a partial first line is dropped


def test_metrics_reader_pays_only_for_new_lines_and_notices_a_rewrite(tmp_path):
    path = write_metrics(tmp_path / "metrics.jsonl", val_rows({1: 0.1, 2: 0.2}))
    reader = MetricsReader(path)
    assert reader.read().get(VAL) == [(1, 0.1), (2, 0.2)]
    write_metrics(path, val_rows({3: 0.3}), tail='{"step": 4, "da', append=True)
    log = reader.read()
    assert log.get(VAL) == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert log.problems == ["metrics.jsonl:4: torn last line (still being written?)"]
    with path.open("a") as fh:
        fh.write('ta": {"%s": 0.4}}\n' % VAL)   # the writer finishes the line
    assert reader.read().get(VAL)[-1] == (4, 0.4) and reader.read().problems == []
    write_metrics(path, val_rows({1: 0.5, 2: 0.6, 3: 0.7, 4: 0.8, 5: 0.9}))   # a requeue rewrote it
    assert reader.read().get(VAL) == [(1, 0.5), (2, 0.6), (3, 0.7), (4, 0.8), (5, 0.9)]


def test_status_and_stop_records_are_read_defensively(tmp_path):
    files = NodeDir(tmp_path)
    assert files.status() is None and not files.stop_decided()
    files.status_file.write_text(json.dumps({
        "state": "completed", "job_id": "12", "started_at": 100.0, "finished_at": 3700.0,
        "gpus": "0,1", "exit_code": 0}))
    status = files.status()
    assert status is not None and status.job_id == "12" and not status.by_hand
    assert status.device_hours(nodes=2) == 4.0
    files.status_file.write_text('{"state": "runn')        # torn: as if missing
    assert files.status() is None
    files.early_stop_file.write_text(json.dumps([{"result": {"action": "CONTINUE"}},
                                                 {"result": {"action": "STOP"}}]))
    assert files.stop_decided()
    files.early_stop_file.write_text("[")
    assert not files.stop_decided()


def test_checkpoints_are_global_steps(tmp_path):
    files = NodeDir(tmp_path)
    assert files.checkpoints() == []
    for name in ("global_step_10", "global_step_5", "global_step_x"):
        (files.ckpt / name).mkdir(parents=True)
    (files.ckpt / "global_step_20").write_text("not a folder")
    assert files.checkpoints() == [5, 10] and files.checkpoints(step_offset=30) == [35, 40]


def test_binary_job_files_read_as_missing(tmp_path):
    """Files a job or a person writes are tolerated when unreadable, binary ones too."""
    files = NodeDir(tmp_path)
    for path in (files.status_file, files.claim_file, files.early_stop_file):
        path.write_bytes(b"\xff\xfe")
    assert files.status() is None and files.claimed_by() is None and not files.stop_decided()


def test_a_metrics_file_that_cannot_be_opened_is_an_empty_log_that_says_so(tmp_path):
    """A folder in place of metrics.jsonl crashed the report and the controller."""
    files = NodeDir(tmp_path)
    files.metrics_file.mkdir()
    log = files.metrics()
    assert log.series == {} and log.problems == ["metrics.jsonl: cannot be read (Is a directory)"]


def test_the_kept_best_adapter_is_read_defensively(tmp_path):
    """best.json is the job's file: a torn or odd one means no usable best adapter, so the
    report falls back to the checkpoint list instead of failing."""
    files = NodeDir(tmp_path)
    assert files.best_adapter_step() is None
    files.best_adapter.mkdir()
    for text in ('{"step": 40, "val_', '[40, 0.5]', '{"step": true, "val_score": 0.5}',
                 '{"step": 40, "val_score": "0.5"}'):
        files.best_adapter_record.write_text(text)
        assert files.best_adapter_step() is None, text
    files.best_adapter_record.write_text(json.dumps({"step": 40, "val_score": 1}))
    assert files.best_adapter_step() == (40, 1.0)


def test_a_run_that_died_without_its_end_record_is_charged_until_its_last_write(tmp_path):
    """A requeued phase whose last run was killed outright (no finished_at) was charged no
    device-hours at all, its earlier runs' included: the report's cost and budget_gpu_hours
    counted hours of training as free."""
    from llmzero_slurm.backends import get_backend
    from llmzero_slurm.controller.ingest import collect_results
    from llmzero_slurm.search.tree import Kind, Node
    files = NodeDir(tmp_path)
    files.status_file.write_text(json.dumps({
        "state": "running", "job_id": "12", "restart_count": 1, "started_at": 10000.0,
        "earlier_s": 7200.0, "gpus": "0,1"}))
    write_metrics(files.metrics_file, val_rows({1: 0.5}))
    os.utime(files.status_file, (10000.0, 10000.0))
    os.utime(files.metrics_file, (13600.0, 13600.0))      # its last step, an hour in
    results = collect_results(Node(0, None, Kind.SCRATCH, {}), files, get_backend("cpu"))
    assert results.gpu_hours == pytest.approx((7200 + 3600) / 3600 * 2)


def test_the_base_score_is_read_from_each_logs_head_alone(tmp_path, monkeypatch):
    """llmzero-status parsed every scratch phase's whole metrics log for a validation at
    step 0 (verl's val_before_train), all of them where none validated there: 4.5 s a call at
    1,000 phases of 500 steps. Only the lines up to the first trained step are read now."""
    from llmzero_slurm.config import parse_config
    from llmzero_slurm.search.tree import Status
    from llmzero_slurm.spent import spent
    from llmzero_slurm.store.run_store import RunStore
    from treebuild import N
    store = RunStore.create(tmp_path / "run", parse_config({"name": "heads"}))
    for _ in range(3):
        store.add_node(lambda j: N(j, None, Status.COMPLETED, 0.5))
    rows = [(s, {VAL: s / 100, "actor/entropy": 1.0}) for s in range(1, 50)]
    write_metrics(store.node_dir(0).metrics_file, rows, tail="not json\n")   # never validated
    write_metrics(store.node_dir(1).metrics_file, [(0, {VAL: 0.3}), (0, {VAL: 0.25}), *rows],
                  tail="not json\n")
    write_metrics(store.node_dir(2).metrics_file, [(0, {VAL: 0.9})])
    log = store.node_dir(1).metrics_start()
    assert log.get(VAL) == [(0, 0.25)] and log.problems == []   # the bad line is never reached
    monkeypatch.setattr(MetricsReader, "read", lambda self: pytest.fail(f"read {self.path}"))
    assert spent(store, store.load_tree()).base_val == 0.25


def test_a_running_phases_last_step_is_read_from_its_logs_end(tmp_path, monkeypatch):
    """llmzero-status parsed each running phase's whole metrics log to learn its last step: a
    thousand verl lines of ~40 metrics each, every call. Only the end is read now, and a torn,
    bad or number-less last line, an empty, missing or unopenable file read as before."""
    from llmzero_slurm.config import parse_config
    from llmzero_slurm.search.tree import Status
    from llmzero_slurm.spent import spent
    from llmzero_slurm.store.run_store import RunStore
    from treebuild import N
    store = RunStore.create(tmp_path / "run", parse_config({"name": "tails"}))
    for _ in range(8):
        store.add_node(lambda j: N(j, None, Status.RUNNING))
    rows = [(s, {VAL: s / 1000, "actor/entropy": 1.0}) for s in range(1, 1001)]
    files = [store.node_dir(i).metrics_file for i in range(8)]
    write_metrics(files[0], rows)
    write_metrics(files[1], rows, tail='{"step": 1001, "data": {"actor/ent')     # torn
    write_metrics(files[2], rows, tail='not json\n{"step": 1002, "data": {}}\n\n')
    write_metrics(files[3], [], tail='{"step": 5, "data": {"a": 1}}')          # unterminated
    write_metrics(files[4], [])                                                # empty
    write_metrics(files[5], [], tail="garbage\n" * 50)                         # damaged
    files[6].mkdir()                                                           # unopenable
    expected = {0: 1000, 1: 1000, 2: 1000, 3: 5}                               # 7: missing
    assert {i: store.node_dir(i).metrics().last_step for i in range(8)} == {
        **{i: None for i in range(8)}, **expected}                             # as read whole
    parsed = []
    original = MetricsReader._parse
    monkeypatch.setattr(MetricsReader, "_parse",
                        lambda self, line, *a: parsed.append(line) or original(self, line, *a))
    monkeypatch.setattr(MetricsReader, "read", lambda self: pytest.fail(f"read {self.path}"))
    assert spent(store, store.load_tree()).logged == expected
    assert len(parsed) < 150        # the heads and ends; the damaged file's lines twice
