"""TensorBoard event files: one run per node on global steps, the best strategy as its own run,
appended as phases report (issue 16). Read back with tensorboardX's own Event protobuf."""
from __future__ import annotations

import struct
from pathlib import Path

from llmzero_slurm.metrics_reader import read_metrics
from llmzero_slurm.report.tensorboard import export_tensorboard
from metrics_files import VAL, write_metrics
from treebuild import N, S, T

TB_VAL = VAL.replace("@", "_")    # TensorBoard tags take [A-Za-z0-9_./-]: verl's "@1" reads "_1"


def events(run: Path) -> list:
    """Every event in a TensorBoard run's event files (TFRecord framing)."""
    from tensorboardX.proto import event_pb2
    out = []
    for path in sorted(run.glob("events.out.tfevents.*")):
        data, i = path.read_bytes(), 0
        while i < len(data):
            (length,) = struct.unpack("<Q", data[i:i + 8])
            out.append(event_pb2.Event.FromString(data[i + 12:i + 12 + length]))
            i += 12 + length + 4
    return out


def scalars(run: Path) -> list[tuple[int, str, float]]:
    """Every (step, tag, value) in a TensorBoard run."""
    return sorted((event.step, v.tag, round(v.simple_value, 4))
                  for event in events(run) for v in event.summary.value)


def test_each_step_is_one_event_holding_its_every_scalar(tmp_path):
    """An event a scalar cost 150 us each: a first export of 300 phases x 1,000 steps x 40
    metrics took half an hour."""
    log = write_metrics(tmp_path / "run" / "nodes" / "0000" / "metrics.jsonl",
                        [(s, {VAL: 0.5, "actor/entropy": 0.9, "actor/kl_loss": 0.1}) for s in (1, 2)])
    out = export_tensorboard(tmp_path / "run", T(N(0, None, score=0.5)), lambda i: read_metrics(log))
    assert [(e.step, len(e.summary.value)) for e in events(out / "node-0000") if e.summary.value] \
        == [(1, 3), (2, 3)]


def test_nodes_and_the_best_strategy_read_as_curves_on_global_steps(tmp_path):
    root = tmp_path / "run"
    files = {i: root / "nodes" / f"{i:04d}" / "metrics.jsonl" for i in (0, 1)}
    write_metrics(files[0], [(0, {VAL: 0.3}), (10, {VAL: 0.5, "actor/entropy": 0.9}),
                             (20, {VAL: 0.4})])
    write_metrics(files[1], [(10, {VAL: 0.5}), (15, {"actor/entropy": 0.7})])
    tree = T(N(0, None, score=0.5), N(1, 0, S.RUNNING))     # node 1 resumed at step 10

    def metrics_of(i: int):
        return read_metrics(files[i])
    out = export_tensorboard(root, tree, metrics_of)
    assert scalars(out / "node-0000") == [(0, TB_VAL, 0.3), (10, "actor/entropy", 0.9),
                                          (10, TB_VAL, 0.5), (20, TB_VAL, 0.4)]
    assert scalars(out / "node-0001") == [(10, TB_VAL, 0.5), (15, "actor/entropy", 0.7)]
    # node 1 reports on: only its new points are appended, nothing is written twice
    write_metrics(files[1], [(20, {VAL: 0.7})], append=True)
    tree = T(N(0, None, score=0.5), N(1, 0, score=0.7))
    export_tensorboard(root, tree, metrics_of)
    assert scalars(out / "node-0001") == [(10, TB_VAL, 0.5), (15, "actor/entropy", 0.7),
                                          (20, TB_VAL, 0.7)]
    assert len(scalars(out / "node-0000")) == 4
    # the best strategy: node 0 up to step 10, then node 1, as one run
    assert scalars(out / "best-strategy") == [(0, TB_VAL, 0.3), (10, "actor/entropy", 0.9),
                                              (10, TB_VAL, 0.5), (15, "actor/entropy", 0.7),
                                              (20, TB_VAL, 0.7)]


def test_a_requeued_phase_that_rewrote_its_metrics_is_shown_as_rewritten(tmp_path):
    """A requeued phase truncates metrics.jsonl to the checkpoint it resumes and logs the later
    steps again, with other values where its sampling is not reproducible (verl): its TensorBoard
    run was only appended past the last step written, so it kept the first run's values (a
    validation peak the report no longer has) beside the report's."""
    root = tmp_path / "run"
    metrics = root / "nodes" / "0000" / "metrics.jsonl"
    write_metrics(metrics, [(10, {VAL: 0.5}), (20, {VAL: 0.9}), (25, {"actor/entropy": 0.8})])
    tree = T(N(0, None, S.RUNNING))
    out = export_tensorboard(root, tree, lambda i: read_metrics(metrics))
    assert (20, TB_VAL, 0.9) in scalars(out / "node-0000")
    write_metrics(metrics, [(10, {VAL: 0.5}), (20, {VAL: 0.6}), (25, {"actor/entropy": 0.7}),
                            (30, {VAL: 0.7})])       # the rerun from the checkpoint at 10
    tree = T(N(0, None, score=0.7))
    export_tensorboard(root, tree, lambda i: read_metrics(metrics))
    expected = [(10, TB_VAL, 0.5), (20, TB_VAL, 0.6), (25, "actor/entropy", 0.7), (30, TB_VAL, 0.7)]
    assert scalars(out / "node-0000") == expected
    assert scalars(out / "best-strategy") == expected
    export_tensorboard(root, tree, lambda i: read_metrics(metrics))    # nothing new: untouched
    assert scalars(out / "node-0000") == expected


def test_an_export_record_of_the_wrong_shape_starts_the_runs_afresh(tmp_path):
    """A parseable exported.json of another shape ([], {"nodes": []}) raised AttributeError in
    the controller's poll, which only catches the package's errors, so the controller died at
    every restart; and a record lost made the next export write every point a second time."""
    root = tmp_path / "run"
    metrics = root / "nodes" / "0000" / "metrics.jsonl"
    write_metrics(metrics, [(10, {VAL: 0.5}), (20, {VAL: 0.6})])
    tree = T(N(0, None, score=0.6))
    out = export_tensorboard(root, tree, lambda i: read_metrics(metrics))
    expected = scalars(out / "node-0000")
    for damaged in ("[]", '{"nodes": []}', '{"nodes": {"0": null}}', "{"):
        (out / "exported.json").write_text(damaged)
        export_tensorboard(root, tree, lambda i: read_metrics(metrics))
        assert scalars(out / "node-0000") == expected, damaged


def test_a_poll_reads_only_the_logs_that_changed_since_the_last_export(tmp_path):
    """The controller exports every poll, and each export parsed every node's whole log: on
    a search of 300 phases x 1,000 steps, minutes and over a GB each poll. A node whose
    metrics file is as last exported is not read again (but for the best path's)."""
    from llmzero_slurm.store.node_dir import NodeDir
    root = tmp_path / "run"
    files = [NodeDir(root / "nodes" / f"{i:04d}") for i in range(3)]
    for i, f in enumerate(files):
        write_metrics(f.metrics_file, [(10, {VAL: 0.1 * (i + 1)})])
    tree = T(N(0, None, score=0.1), N(1, None, score=0.2), N(2, None, S.RUNNING))
    read: list[int] = []

    def metrics_of(i: int):
        read.append(i)
        return read_metrics(files[i].metrics_file)

    def export() -> Path:
        read.clear()
        return export_tensorboard(root, tree, metrics_of, lambda i: files[i].metrics_stamp())

    export()
    assert read == [0, 1, 2]                    # every node
    out = export()
    assert read == []                           # nothing new
    write_metrics(files[2].metrics_file, [(20, {VAL: 0.5})], append=True)
    export()
    assert read == [2, 1] and (20, TB_VAL, 0.5) in scalars(out / "node-0002")


def test_a_poll_with_nothing_new_reads_no_log_and_rewrites_nothing(tmp_path):
    """Review (a shared filesystem's metadata load): with no metrics file changed, each poll
    still read the best path's whole logs and rewrote exported.json (a temporary file, its
    fsync, a rename). Nothing is read or written then; a changed log on the best path, or
    another best path, is exported as before."""
    from llmzero_slurm.store.node_dir import NodeDir
    root = tmp_path / "run"
    files = [NodeDir(root / "nodes" / f"{i:04d}") for i in range(3)]
    for i, f in enumerate(files):
        write_metrics(f.metrics_file, [(10, {VAL: 0.1 * (i + 1)})])
    tree = T(N(0, None, score=0.1), N(1, 0, score=0.2), N(2, None, S.RUNNING))
    read: list[int] = []

    def export(tree=tree) -> Path:
        read.clear()
        return export_tensorboard(root, tree, lambda i: read.append(i) or read_metrics(files[i].metrics_file),
                                  lambda i: files[i].metrics_stamp())

    state = export() / "exported.json"
    before = state.stat()
    export()
    assert read == [] and state.stat().st_ino == before.st_ino
    write_metrics(files[1].metrics_file, [(20, {VAL: 0.6})], append=True)
    export()
    assert read == [1, 0] and (20, TB_VAL, 0.6) in scalars(state.parent / "best-strategy")
    export(T(N(0, None, score=0.1), N(1, 0, score=0.2), N(2, None, score=0.9)))
    assert read == [2] and (10, TB_VAL, 0.3) in scalars(state.parent / "best-strategy")


def test_an_export_leaves_torch_unloaded_where_it_is_installed(tmp_path):
    """tensorboardX's package imports torch whenever it is installed, as it is in the .venv a
    cpu run's phases share with the controller: every controller on a login node then held
    torch, ~200 MB more RSS and ~4 s of CPU to start, to write a few scalars."""
    import importlib.util
    import subprocess
    import sys
    import pytest
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch not installed: nothing to keep out")
    log = write_metrics(tmp_path / "run" / "nodes" / "0000" / "metrics.jsonl", [(1, {VAL: 0.5})])
    code = ("import sys; sys.path.append('tests'); from pathlib import Path; "
            "from llmzero_slurm.metrics_reader import read_metrics; "
            "from llmzero_slurm.report.tensorboard import export_tensorboard; "
            "from treebuild import N, T; "
            f"export_tensorboard(Path({str(tmp_path / 'run')!r}), T(N(0, None, score=0.5)), "
            f"lambda i: read_metrics(Path({str(log)!r}))); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent.parent)
    assert out.stdout.strip() == "False"
    assert scalars(tmp_path / "run" / "tensorboard" / "node-0000") == [(1, TB_VAL, 0.5)]


def test_a_long_phase_keeps_a_bounded_number_of_event_files(tmp_path):
    """Each export that found new points added an event file to the node's run: a phase of a
    thousand steps polled every 30 s left about a thousand files in its folder, and a search
    of hundreds of phases hundreds of thousands of inodes on a quota'd filesystem."""
    log_file = tmp_path / "run" / "nodes" / "0000" / "metrics.jsonl"
    write_metrics(log_file, [(0, {VAL: 0.0})])
    tree = T(N(0, None, S.RUNNING))
    for step in range(1, 60):
        write_metrics(log_file, [(step, {VAL: step / 100})], append=True)
        out = export_tensorboard(tmp_path / "run", tree, lambda i: read_metrics(log_file))
    run = out / "node-0000"
    assert len(list(run.glob("events.out.tfevents.*"))) <= 16
    assert scalars(run) == [(s, TB_VAL, round(s / 100, 4)) for s in range(60)]
