"""What the report reads of the metrics logs: only the series it draws, and on a refresh only
the logs that changed (and the best path's), so a search of hundreds of long phases is
reported in bounded memory, in seconds, from inside the controller."""
from __future__ import annotations

import shutil
from pathlib import Path

from llmzero_slurm.metrics_reader import MetricsReader
from llmzero_slurm.report import write_report
from llmzero_slurm.report.collect import collect
from llmzero_slurm.report.logs import MetricsLogs, drawn
from llmzero_slurm.store.run_store import RunStore
from metrics_files import write_metrics
from test_report import TEST, VAL, run  # noqa: F401  (the fixture: a run of six phases)


def test_a_reader_keeps_only_the_named_series_and_still_flags_every_bad_line(tmp_path):
    path = write_metrics(tmp_path / "metrics.jsonl", [(1, {"a": 1.0, "b": 2.0}), (2, {"b": 3.0})],
                         tail='{"step": 3, "data": {"b": 1' + "0" * 400 + '}}\n{"step": 4')
    log = MetricsReader(path, keep=lambda name: name == "a").read()
    assert log.series == {"a": [(1, 1.0)]}
    assert [p.split(": ", 1)[1] for p in log.problems] == [
        "unreadable line: int too large to convert to float", "torn last line (still being written?)"]


def test_the_report_holds_only_the_series_it_draws(run):  # noqa: F811
    view = collect(run)
    for phase in view.phases:
        assert set(phase.log.series) == {"critic/rewards/mean", "actor/entropy", VAL}
    assert view.best_curves is not None and TEST not in view.best_curves.series
    assert not drawn("actor/pg_loss") and drawn("actor/grad_norm")
    assert not hasattr(next(iter(view.nodes.values())), "log")


def test_a_refresh_reads_only_the_logs_that_changed_and_the_best_paths(run, tmp_path,  # noqa: F811
                                                                       monkeypatch):
    run = Path(shutil.copytree(run, tmp_path / "rep"))
    logs = MetricsLogs()
    write_report(run, logs=logs)
    page = (run / "report" / "index.html").read_text()
    read: list[str] = []
    original = MetricsReader.read

    def counted(self: MetricsReader):
        read.append(self.path.parent.name)
        return original(self)

    monkeypatch.setattr(MetricsReader, "read", counted)
    write_report(run, logs=logs)
    assert sorted(read) == ["0000", "0001", "0005"]               # the best path's, drawn behind
    notes = page.split("<h2>Notes</h2>")[1]
    assert (run / "report" / "index.html").read_text().split("<h2>Notes</h2>")[1] == notes
    read.clear()
    write_metrics(RunStore.open(run).node_dir(2).metrics_file, [(41, {"actor/entropy": 0.5})],
                  append=True)
    write_report(run, logs=logs)
    assert set(read) == {"0000", "0001", "0002", "0005"}
