"""Reading metrics.jsonl while a job writes it, keeping test metrics away from agents, plots."""
from __future__ import annotations

import json

import numpy as np
from PIL import Image

from llmzero_slurm.metrics import best_val, stitch, strip_score_text, val_score_series
from llmzero_slurm.metrics_reader import read_metrics
from llmzero_slurm.metrics_text import summarize
from llmzero_slurm.plots import metric_plots, overlay_plot
from metrics_files import TEST, VAL
from metrics_files import write_metrics as write


def rows(n=30, start=0, val_slope=0.01):
    out = []
    for s in range(start + 1, start + n + 1):
        d = {"critic/rewards/mean": 0.1 + s * 0.01, "actor/entropy": 1.0 - s * 0.01,
             "actor/kl_loss": 0.001 * s, "timing_s/step": 0.1}
        if s % 5 == 0:
            d[VAL] = 0.2 + val_slope * s
            d[TEST] = 0.987654
        out.append((s, d))
    return out


def test_the_summary_table_keeps_every_validation_point(tmp_path):
    """With few validations the table fills with training steps, never in their place: the
    proposer picks a checkpoint by the scores it is shown (30 steps lost steps 10 and 25)."""
    log = read_metrics(write(tmp_path / "m.jsonl", rows(30)))
    table = summarize(log, rows=16).split("\n\n")[1].splitlines()[1:]
    scored = [int(line.split(" | ")[0]) for line in table if line.split(" | ")[1] != "-"]
    assert scored == [5, 10, 15, 20, 25, 30] and len(table) == 16
    peaked = [(s, {**d, VAL: 0.9}) if s == 215 else (s, d) for s, d in rows(400, val_slope=0)]
    table = summarize(read_metrics(write(tmp_path / "p.jsonl", peaked)), rows=16)
    assert "215" in [line.split(" | ")[0] for line in table.splitlines()]   # best of 80 kept

def test_torn_last_line_is_skipped_and_flagged(tmp_path):
    log = read_metrics(write(tmp_path / "m.jsonl", rows(10), '{"step": 11, "data": {"acto'))
    assert log.last_step == 10
    assert log.problems == ["m.jsonl:11: torn last line (still being written?)"]


def test_corrupt_middle_line_is_flagged_with_its_number(tmp_path):
    path = tmp_path / "m.jsonl"
    lines = [json.dumps({"step": s, "data": d}) for s, d in rows(4)]
    lines.insert(2, "{not json")
    lines.insert(3, json.dumps({"step": 9, "data": [1, 2]}))
    path.write_text("\n".join(lines) + "\n")
    log = read_metrics(path)
    assert [s for s, _ in log.get("actor/entropy")] == [1, 2, 3, 4]
    assert len(log.problems) == 2 and log.problems[0].startswith("m.jsonl:3: unreadable")


def test_lines_with_numbers_too_large_or_nesting_too_deep_are_flagged_not_raised(tmp_path):
    """Review: a step of 1e400, a 400-digit value or arrays nested 100,000 deep raised
    OverflowError or RecursionError out of the reader, which the controller does not catch:
    the TensorBoard export stopped on every poll. They are skipped and flagged now."""
    path = tmp_path / "m.jsonl"
    bad = ['{"step": 1e400, "data": {"x": 1}}', '{"step": 2, "data": {"x": ' + "9" * 400 + "}}",
           '{"step": 3, "data": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}"]
    good = [json.dumps({"step": s, "data": {"x": float(s)}}) for s in (4, 5)]
    path.write_text("\n".join([good[0], *bad, good[1]]) + "\n")
    log = read_metrics(path)
    assert log.get("x") == [(4, 4.0), (5, 5.0)]
    assert [p.split(": ")[0] for p in log.problems] == ["m.jsonl:2", "m.jsonl:3", "m.jsonl:4"]


def test_missing_file_is_empty_and_requeue_relog_keeps_last_value(tmp_path):
    assert read_metrics(tmp_path / "none.jsonl").series == {}
    path = write(tmp_path / "m.jsonl", [(1, {"x": 1.0}), (2, {"x": 2.0}), (2, {"x": 5.0})])
    assert read_metrics(path).get("x") == [(1, 1.0), (2, 5.0)]


def test_validation_and_test_are_split_and_test_never_summarised(tmp_path):
    log = read_metrics(write(tmp_path / "m.jsonl", rows(30)))
    assert VAL in log.without_test().series and TEST in log.series
    assert TEST not in log.without_test().series
    text = summarize(log)
    assert "test" not in text and "0.9876" not in text
    assert "validation score" in text and "actor/kl_loss" in text
    assert best_val(log) == (30, 0.5)


def test_strip_score_text_removes_every_validation_and_test_value():
    """verl validates test files as val_files, so its console prints a test source's score as
    `val-core/<test source>/...`: the error analyzer, which needs no score, is shown none."""
    text = ("step:5 - val-core/math500/acc/mean@1:0.987 - val-aux/a/reward/mean@1:0.41 - "
            "test-core/a/acc/mean@1:0.876 - actor/kl:0.1 - interval=900\n"
            "step 6: val-core/addition/acc/mean@1=0.765, test-aux/x/score/mean@1=0.654\n"
            "Initial validation metrics: {'val-core/openai/gsm8k/acc/mean@1': np.float64(0.543), "
            "'test-core/b/acc/mean@1': 0.432}\n"
            "error: data/val/x.parquet: row 7: too long")
    out = strip_score_text(text)
    for value in ("0.987", "0.41", "0.876", "0.765", "0.654", "0.543", "0.432"):
        assert value not in out, out
    assert "actor/kl:0.1" in out and "interval=900" in out
    assert "error: data/val/x.parquet: row 7: too long" in out      # a path is no metric


def test_val_score_averages_data_sources_and_prefers_accuracy(tmp_path):
    path = write(tmp_path / "m.jsonl", [(5, {"val-core/a/acc/mean@1": 0.2,
                                             "val-core/b/acc/mean@1": 0.4,
                                             "val-core/a/reward/mean@1": 9.0})])
    [(step, value)] = val_score_series(read_metrics(path))
    assert step == 5 and abs(value - 0.3) < 1e-9


def test_stitch_joins_phases_on_global_steps(tmp_path):
    root = read_metrics(write(tmp_path / "a.jsonl", rows(30)))
    child = read_metrics(write(tmp_path / "b.jsonl", rows(20, start=20, val_slope=0.02)))
    path = stitch([(root, 20), (child, None)])
    steps = [s for s, _ in val_score_series(path)]
    assert steps == [5, 10, 15, 20, 25, 30, 35, 40]
    assert dict(val_score_series(path))[25] == 0.2 + 0.02 * 25   # the child's, not the root's


def _colour_share(path, rgb):
    pixels = np.asarray(Image.open(path).convert("RGB")).reshape(-1, 3).astype(int)
    return (np.abs(pixels - np.array(rgb)).sum(axis=1) < 60).mean()


def test_plots_per_metric_and_overlay_colours(tmp_path):
    log = read_metrics(write(tmp_path / "m.jsonl", rows(30)))
    paths = metric_plots(log, tmp_path / "plots")
    names = [p.name for p in paths]
    assert names[0] == "validation_score.png" and "actor_kl_loss.png" in names
    assert not any("test" in n for n in names)
    assert Image.open(paths[0]).size == (480, 300)
    best = read_metrics(write(tmp_path / "b.jsonl", rows(40, val_slope=0.02)))
    over = overlay_plot(log, best, tmp_path / "over.png")
    assert _colour_share(over, (31, 119, 180)) > 0.001    # matplotlib tab:blue (current)
    assert _colour_share(over, (44, 160, 44)) > 0.001     # tab:green (best)
    alone = overlay_plot(log, None, tmp_path / "alone.png")
    assert _colour_share(alone, (44, 160, 44)) < 0.0001


def test_the_summary_ranges_skip_a_blow_ups_nan_and_show_it_last(tmp_path):
    """The CPU trainer now logs a blow-up as NaN, as verl's copy does: min() and max() of a
    series holding one answer by where the NaN stands, so the proposer was shown a range of
    nan, or the wrong one, for every metric that blew up once."""
    nan = float("nan")
    log = read_metrics(write(tmp_path / "m.jsonl", [
        (1, {"actor/grad_norm": nan, VAL: nan}), (2, {"actor/grad_norm": 2.0, VAL: 0.3}),
        (3, {"actor/grad_norm": 5.0, VAL: 0.5}), (4, {"actor/grad_norm": nan})]))
    summary, table = summarize(log, metrics=["actor/grad_norm"]).split("\n\n")
    assert "validation score | nan | 0.3 | 0.5 | 0.5" in summary.splitlines()
    assert "actor/grad_norm | nan | 2 | 5 | nan" in summary.splitlines()
    assert "3 | 0.5 | 5" in table.splitlines()       # the best validation's row is kept


def test_a_metric_near_the_float_maximum_is_plotted_without_it(tmp_path):
    """An overflowed grad norm (1e308, -1.7e308) raised ValueError out of matplotlib's tick
    layout, the span of the axis being no float: the monitor's pass over every phase ended
    there. Such values are left out of the drawing as inf and nan are; the rest is drawn."""
    huge = [1e308, -1e308, 1.7e308, -1.7e308, float("inf"), float("nan")]
    log = read_metrics(write(tmp_path / "m.jsonl", [
        (s, {"actor/grad_norm": huge[s % len(huge)] if s % 2 else 1.0, "actor/entropy": v, VAL: v})
        for s, v in ((s, 1e308 if s == 3 else 0.1 * s) for s in range(1, 13))]))
    over = overlay_plot(log, log, tmp_path / "over.png")
    assert _colour_share(over, (31, 119, 180)) > 0.001          # the finite points, drawn
    assert len(metric_plots(log, tmp_path / "plots", ["actor/grad_norm", "actor/entropy"])) == 2
