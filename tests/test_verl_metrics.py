"""Ingestion of verl's file-logger output into a node's metrics.jsonl."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from llmzero_slurm.backends.verl import metrics_copy as verl_metrics
from llmzero_slurm.backends.verl.metrics_copy import VerlMetricsIngest
from llmzero_slurm.metrics import MetricsLog, best_val
from llmzero_slurm.metrics_reader import read_metrics
from llmzero_slurm.metrics import test_score_at as held_out_score_at
from metrics_files import metrics_line

SCRIPT = verl_metrics.__file__


def verl_line(step: int, **data) -> str:
    return metrics_line(step, data)


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_steps_are_offset_and_test_sources_renamed(tmp_path):
    src, dst = tmp_path / "verl_metrics.jsonl", tmp_path / "metrics.jsonl"
    src.write_text(
        verl_line(0, **{"val-core/gsm8k_val/acc/mean@1": 0.41, "val-core/gsm8k_test/acc/mean@1": 0.39,
                        "val-aux/gsm8k_test/reward/mean@1": 0.5})
        + verl_line(1, **{"actor/entropy": 0.8, "critic/score/mean": 0.3, "timing_s/step": 12.5}))
    ingest = VerlMetricsIngest(src, dst, step_offset=40, test_sources=["gsm8k_test"])
    assert ingest.poll() == 2
    first, second = read(dst)
    assert first == {"step": 40, "data": {"val-core/gsm8k_val/acc/mean@1": 0.41,
                                          "test-core/gsm8k_test/acc/mean@1": 0.39,
                                          "test-aux/gsm8k_test/reward/mean@1": 0.5}}
    assert second == {"step": 41, "data": {"actor/entropy": 0.8, "critic/score/mean": 0.3,
                                           "timing_s/step": 12.5}}
    assert ingest.poll() == 0            # nothing new: nothing copied twice


def test_data_sources_with_slashes_and_prefix_lookalikes(tmp_path):
    src, dst = tmp_path / "v.jsonl", tmp_path / "m.jsonl"
    src.write_text(verl_line(3, **{"val-core/openai/gsm8k/acc/mean@1": 0.5,
                                   "val-core/openai/gsm8k_hard/acc/mean@1": 0.2}))
    VerlMetricsIngest(src, dst, 0, ["openai/gsm8k"]).poll()
    assert set(read(dst)[0]["data"]) == {"test-core/openai/gsm8k/acc/mean@1",
                                         "val-core/openai/gsm8k_hard/acc/mean@1"}


def test_torn_last_line_waits_and_bad_lines_are_reported(tmp_path, capsys):
    src, dst = tmp_path / "v.jsonl", tmp_path / "m.jsonl"
    torn = verl_line(2, **{"actor/kl_loss": 0.01})
    first = verl_line(1, **{"actor/kl_loss": 0.0})
    src.write_text(first + "not json\n" + torn[:10])
    ingest = VerlMetricsIngest(src, dst, 10)
    assert ingest.poll() == 1
    said = capsys.readouterr().err
    # the bad line is named by where it starts; the torn one waits, unreported
    assert f"byte {len(first.encode())}: not a verl file-logger line" in said, said
    assert said.count("not a verl file-logger line") == 1 and "b'not json" in said, said
    with open(src, "a") as fh:
        fh.write(torn[10:])
    assert ingest.poll() == 1
    assert "not a verl file-logger line" not in capsys.readouterr().err
    assert [r["step"] for r in read(dst)] == [11, 12]


def test_position_survives_a_restart_and_drain_clears_the_way(tmp_path):
    src, dst = tmp_path / "v.jsonl", tmp_path / "m.jsonl"
    src.write_text(verl_line(1, a=1) + verl_line(2, a=2))
    assert VerlMetricsIngest(src, dst, 0).poll() == 2
    with open(src, "a") as fh:          # the job was killed after verl wrote one more line
        fh.write(verl_line(3, a=3))
    again = VerlMetricsIngest(src, dst, 0)   # a requeued job starts a fresh copier
    assert again.drain() == 1
    assert not src.exists()
    src.write_text(verl_line(4, a=4))   # the resumed verl run writes a new file
    assert again.poll() == 1
    assert [r["step"] for r in read(dst)] == [1, 2, 3, 4]


def test_follow_copies_while_training_runs_then_stops(tmp_path):
    src, dst = tmp_path / "v.jsonl", tmp_path / "m.jsonl"
    trainer = subprocess.Popen([sys.executable, "-c", (
        "import json, sys, time\n"
        "with open(sys.argv[1], 'w') as fh:\n"
        "    for s in range(4):\n"
        "        fh.write(json.dumps({'step': s, 'data': {'x': s}}) + '\\n'); fh.flush()\n"
        "        time.sleep(0.3)\n"), str(src)])
    follower = subprocess.run(
        [sys.executable, SCRIPT, "follow", "--verl-file", str(src), "--metrics-file", str(dst),
         "--step-offset", "5", "--pid", str(trainer.pid), "--interval", "0.2"],
        capture_output=True, text=True, timeout=30)
    trainer.wait()
    assert follower.returncode == 0, follower.stderr
    assert [r["step"] for r in read(dst)] == [5, 6, 7, 8]


def test_follow_outlives_a_failing_copy(tmp_path, capsys):
    """One error of the shared filesystem (ESTALE, EIO) ended the follower for the rest of
    the phase: nothing verl logged afterwards reached the controller while it trained."""
    src, dst = tmp_path / "v.jsonl", tmp_path / "m.jsonl"
    src.write_text(verl_line(1, a=1))
    ingest = VerlMetricsIngest(src, dst, 0)
    real, calls = ingest.poll, []

    def flaky() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(116, "Stale file handle")
        return real()
    ingest.poll = flaky
    trainer = subprocess.Popen(["sleep", "0.5"])
    ingest.follow(trainer.pid, 0.1)
    trainer.wait()
    assert [r["step"] for r in read(dst)] == [1]
    assert "Stale file handle" in capsys.readouterr().err


def test_cli_refuses_bad_arguments(tmp_path):
    out = subprocess.run([sys.executable, SCRIPT, "follow", "--verl-file", "a",
                          "--metrics-file", "b"], capture_output=True, text=True)
    assert out.returncode == 2 and "--pid" in out.stderr
    out = subprocess.run([sys.executable, SCRIPT, "drain", "--verl-file", str(tmp_path / "none"),
                          "--metrics-file", str(tmp_path / "m"), "--step-offset", "-1"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "step-offset" in out.stderr


def test_scores_of_data_sources_with_slashes_count(tmp_path):
    """verl's own preprocessing names GSM8K rows `openai/gsm8k`, so its scores are logged as
    val-core/openai/gsm8k/...: they were not read as validation (or test) scores, and every
    verl phase of such a task ended with no score for the search to select on."""
    src, dst = tmp_path / "verl_metrics.jsonl", tmp_path / "metrics.jsonl"
    src.write_text(
        verl_line(10, **{"val-core/openai/gsm8k/reward/mean@1": 0.4,
                         "val-core/openai/gsm8k_test/reward/mean@1": 0.3})
        + verl_line(20, **{"val-core/openai/gsm8k/reward/mean@1": 0.6,
                           "val-core/openai/gsm8k_test/reward/mean@1": 0.5}))
    VerlMetricsIngest(src, dst, 0, ["openai/gsm8k_test"]).poll()
    log = read_metrics(dst)
    assert best_val(log.without_test()) == (20, 0.6)
    assert held_out_score_at(log, 20) == 0.5


def test_a_non_finite_verl_metric_reaches_the_agents_as_nan(tmp_path):
    """verl's file logger writes with orjson, which turns NaN and infinities into null; the
    metrics reader skips null, so a diverged phase's NaN losses vanished instead of showing
    the agents (and the stopper) a blow-up."""
    src, dst = tmp_path / "verl_metrics.jsonl", tmp_path / "metrics.jsonl"
    src.write_text(verl_line(4, **{"actor/grad_norm": 2.5, "actor/kl_loss": 0.01})
                   + verl_line(5, **{"actor/grad_norm": None, "actor/kl_loss": None}))
    VerlMetricsIngest(src, dst, 10).poll()
    log = read_metrics(dst)
    for name in ("actor/grad_norm", "actor/kl_loss"):
        (first, _), (step, value) = log.get(name)
        assert (first, step) == (14, 15) and math.isnan(value), name


def test_a_test_score_with_a_non_finite_data_source_is_no_score(tmp_path):
    """The test score at the best validation step averaged only the data sources that were
    finite there: with one source's accuracy NaN (verl writes null), the report's headline test
    score was the other source's alone, while a validation step with a NaN source has no score."""
    src, dst = tmp_path / "verl_metrics.jsonl", tmp_path / "metrics.jsonl"
    src.write_text(verl_line(20, **{"val-core/a_val/acc/mean@1": 0.5,
                                    "val-core/a_test/acc/mean@1": 0.9,
                                    "val-core/b_test/acc/mean@1": None}))
    VerlMetricsIngest(src, dst, 0, ["a_test", "b_test"]).poll()
    log = read_metrics(dst)
    assert math.isnan(log.get("test-core/b_test/acc/mean@1")[0][1])
    assert held_out_score_at(log, 20) is None
    assert held_out_score_at(log, 30) is None


def test_a_test_score_missing_for_one_data_source_is_no_score():
    """A source with no test accuracy logged at the step is not averaged away either."""
    log = MetricsLog({"test-core/a/acc/mean@1": [(10, 0.2), (20, 0.9)],
                      "test-core/b/acc/mean@1": [(10, 0.4)]})
    assert held_out_score_at(log, 10) == pytest.approx(0.3)
    assert held_out_score_at(log, 20) is None


def test_the_verl_copy_and_the_cpu_trainer_cut_a_requeued_log_alike(tmp_path):
    """One rule (rows_through) for both: a line nested past the parser's depth or with an
    infinite step is an unreadable line, kept, where drop_after raised RecursionError and
    OverflowError; a torn last line goes."""
    from llmzero_slurm.cputrain.metrics_log import MetricsLog as TrainerLog
    deep = b'{"step": 9, "data": ' + b"[" * 100_000 + b"\n"
    rows = (b'{"step": 1, "data": {}}\n' + deep + b'{"step": Infinity, "data": {}}\n'
            + b'{"step": 3, "data": {}}\n' + b'{"step": 1, "da')
    cut = b'{"step": 1, "data": {}}\n' + deep + b'{"step": Infinity, "data": {}}\n'
    verl, cpu = tmp_path / "verl.jsonl", tmp_path / "cpu.jsonl"
    verl.write_bytes(rows)
    cpu.write_bytes(rows)
    verl_metrics.drop_after(verl, 2)
    TrainerLog(cpu).truncate_after(2)
    assert verl.read_bytes() == cpu.read_bytes() == cut


def test_a_metrics_log_with_undecodable_bytes_is_cut_and_read_all_the_same(tmp_path):
    """Crash walkthrough: bytes that are not UTF-8 in a node's metrics.jsonl (a client crash
    on a shared filesystem) failed the requeue of its verl phase (drop_after) and every child
    of it (scores_at, reading the parent's scores) with UnicodeDecodeError. The unreadable
    line is now kept byte for byte, as any unreadable line, and the rest read."""
    path = tmp_path / "metrics.jsonl"
    garbage = b"\xab\xff junk\n"
    path.write_bytes(b'{"step": 1, "data": {"val-core/a/acc/mean@1": 0.5}}\n' + garbage
                     + b'{"step": 3, "data": {"a": 3}}\n')
    assert verl_metrics.scores_at(path, 1) == {"val-core/a/acc/mean@1": 0.5}
    verl_metrics.drop_after(path, 2)
    assert path.read_bytes() == b'{"step": 1, "data": {"val-core/a/acc/mean@1": 0.5}}\n' + garbage
