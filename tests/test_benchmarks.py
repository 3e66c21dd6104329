"""The benchmarks' bookkeeping on small synthetic results files and runs: which rows count as
on file, how they are tabulated and paired, how several processes add to one file, and how
the stopper's recorded decisions are replayed. No search or training runs here."""
from __future__ import annotations

import copy
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from llmzero_slurm.config import parse_config
from llmzero_slurm.paths import ROOT
from llmzero_slurm.search.tree import Kind, Node, Results, Status
from llmzero_slurm.store.run_store import RunStore

from metrics_files import TEST, VAL, val_rows, write_metrics
from treebuild import N, T

BENCHMARKS = ROOT / "benchmarks"


def bench(name: str) -> ModuleType:
    """A benchmark script as a module (they import common.py as a sibling)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


@pytest.fixture(autouse=True)
def native(monkeypatch):
    """Every test starts on the native path (make test runs some tests under MKL_CBWR)."""
    for name in ("MKL_CBWR", "ATEN_CPU_CAPABILITY"):
        monkeypatch.delenv(name, raising=False)


def row(method: str = "llmzero", seed: int = 0, test: float = 0.8, samples: int = 100,
        planned: int = 100, task: str = "expand", **extra: Any) -> dict[str, Any]:
    return {"task": task, "method": method, "seed": seed, "test": test, "val": test,
            "base_test": 0.5, "samples": samples, "planned": planned, "phases": 4,
            "early": int(samples < planned), "wall_s": 1, "curve": [[samples, test]], **extra}


def main(module: ModuleType, monkeypatch, capsys, *argv: str) -> str:
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *argv])
    module.main()
    return capsys.readouterr().out


def quality(monkeypatch, capsys, results: Path, *argv: str) -> str:
    return main(bench("search_quality"), monkeypatch, capsys, "--results", str(results),
                "--tasks", "expand", *argv)


def test_rows_of_another_numeric_path_are_neither_on_file_nor_tabulated(tmp_path, monkeypatch,
                                                                        capsys):
    """Review: under MKL_CBWR=COMPATIBLE the native rows counted as on file, and the native
    table was printed as if measured on that path."""
    sq = bench("search_quality")
    results = tmp_path / "results.json"
    results.write_text(json.dumps([row(m, s) for m in ("llmzero", "grid") for s in (0, 1)]))
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    ran = []

    def search(task, method, seed, *_):
        ran.append((method, seed))
        return row(method, seed, test=0.625, commit="abc1234", dirty=True, MKL_CBWR="COMPATIBLE")

    monkeypatch.setattr(sq, "run", search)
    out = quality(monkeypatch, capsys, results, "--seeds", "0", "1", "--methods", "llmzero",
                  "grid")
    assert sorted(ran) == [("grid", 0), ("grid", 1), ("llmzero", 0), ("llmzero", 1)]
    assert "0 searches on file (numeric path MKL_CBWR=COMPATIBLE (rows left out: 4 on native))" \
        in out
    assert "0.625 +- 0.000" in out and "0.800" not in out
    assert "numeric path MKL_CBWR=COMPATIBLE" in out.split("expand: test score")[1]
    assert "measured at: abc1234+dirty" in out
    assert len(json.loads(results.read_text())) == 8


def test_a_row_records_the_commit_whether_the_checkout_was_dirty_and_the_numeric_path(
        tmp_path, monkeypatch):
    """A change to the results being written is not a dirty checkout; any other is."""
    common = bench("common")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    for name in ("code.py", "benchmarks/results/r.json"):
        (tmp_path / name).write_text("1\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    monkeypatch.setattr(common, "ROOT", tmp_path)
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    (tmp_path / "benchmarks" / "results" / "r.json").write_text("2\n")
    assert common.provenance() == {"commit": head, "dirty": False, "MKL_CBWR": "COMPATIBLE"}
    (tmp_path / "code.py").write_text("2\n")
    assert common.provenance()["dirty"] is True


def test_the_saving_is_a_mean_over_seeds_and_the_pooled_figure_is_labelled(tmp_path, monkeypatch,
                                                                           capsys):
    """Pooled (1 - sum trained / sum planned) is never below the mean over seeds, and has no
    standard error; the target is judged on the mean."""
    results = tmp_path / "results.json"
    results.write_text(json.dumps([row(seed=0, samples=50, planned=100),
                                   row(seed=1, samples=90, planned=300)]))
    out = quality(monkeypatch, capsys, results, "--report-only", "--seeds", "0", "1")
    assert "saved, mean +- SE  pooled" in out
    assert re.search(r"60\.0% \+- 10\.0%\s+65\.0%", out), out


def test_the_report_keeps_to_the_seeds_asked_for(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps([row(seed=s, test=0.5 + s / 8) for s in (0, 1, 2)]))
    out = quality(monkeypatch, capsys, results, "--report-only", "--seeds", "0", "1")
    assert re.search(r"^llmzero\s+2\s+0\.562 ", out, re.M), out


def test_llmzero_is_paired_with_another_files_grid_on_the_seeds_both_have(tmp_path, monkeypatch,
                                                                          capsys):
    results, baseline = tmp_path / "results.json", tmp_path / "baseline.json"
    results.write_text(json.dumps([row(seed=s, test=0.75, test_freq=5, commit="1111111")
                                   for s in (0, 1, 2)]))
    baseline.write_text(json.dumps([row("grid", s, test=0.5 + s / 16, test_freq=5)
                                    for s in (1, 2, 3)]))
    out = quality(monkeypatch, capsys, results, "--report-only", "--test-freq", "5",
                  "--baseline", str(baseline))
    assert f"llmzero - grid of {baseline}, paired over 2 seeds: +0.156 +- 0.031" in out
    assert f"llmzero rows measured at: 1111111; {baseline}'s grid rows at: not recorded" in out


@pytest.mark.parametrize("theirs, named", [
    ({"test_freq": 10}, "searches that validated every [10] steps, not 5"),
    ({"test_freq": 5, "MKL_CBWR": "COMPATIBLE"}, "rows left out: 1 on MKL_CBWR=COMPATIBLE")])
def test_a_baseline_with_other_settings_or_another_numeric_path_is_refused(
        tmp_path, monkeypatch, capsys, theirs, named):
    results, baseline = tmp_path / "results.json", tmp_path / "baseline.json"
    results.write_text(json.dumps([row(seed=s, test_freq=5) for s in (0, 1)]))
    baseline.write_text(json.dumps([row("grid", 0, **theirs)]))
    with pytest.raises(SystemExit) as refused:
        quality(monkeypatch, capsys, results, "--report-only", "--test-freq", "5",
                "--baseline", str(baseline))
    assert named in str(refused.value)


def test_a_kept_search_with_another_stopper_margin_is_not_resumed_as_this_one(tmp_path):
    sq = bench("search_quality")
    config = sq.search_config("addition", "llmzero", 0, tmp_path, 50)
    other = copy.deepcopy(config)
    other["agents"]["stop_margin"] = 0.01
    kept = sq.compared(parse_config(config))
    assert sq.compared(parse_config(other)) != kept and "backend" in kept


def test_a_searchs_wall_time_is_the_runs_own_from_creation_to_its_last_phase(tmp_path):
    """Not the last sitting's clock: a kept search resumed (or finished) in a later sitting
    took the time that sitting took."""
    store = RunStore.create(tmp_path / "run", parse_config({"name": "w", "scheduler": "local"}))
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"total_training_steps": 10},
                                  status=Status.COMPLETED, finished_at=store.created_at + 123,
                                  results=Results(0.6, 10, 0.45, 10, [10])))
    write_metrics(store.node_dir(0).metrics_file, [(0, {VAL: 0.5, TEST: 0.4}), (10, {VAL: 0.6})])
    measured = bench("search_quality").measure(store.root, "addition")
    assert (measured["wall_s"], measured["test"], measured["base_test"]) == (123, 0.45, 0.4)


ADD_ROWS = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from common import add_row, row_key
for seed in range(int(sys.argv[3]), int(sys.argv[3]) + 30):
    add_row(Path(sys.argv[2]), {"config": "c", "seed": seed},
            lambda r: row_key(r, ("config", "seed")), {"design": "d"})
"""


def test_processes_adding_rows_to_one_results_file_lose_none(tmp_path):
    """Review: each process read the file once and rewrote its own list after every run, so
    two benchmarks on one file dropped each other's rows."""
    results = tmp_path / "results.json"
    writers = [subprocess.Popen([sys.executable, "-c", ADD_ROWS, str(BENCHMARKS), str(results),
                                 str(start)]) for start in (0, 100, 200)]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0]
    data = json.loads(results.read_text())
    assert data["design"] == "d"
    assert sorted(r["seed"] for r in data["runs"]) == [*range(30), *range(100, 130),
                                                       *range(200, 230)]
    common = bench("common")
    again = common.add_row(results, {"config": "c", "seed": 0, "test": 1.0},
                           lambda r: common.row_key(r, ("config", "seed")), {"design": "d"})
    assert len(again) == 90 and [r for r in again if r["seed"] == 0] == [
        {"config": "c", "seed": 0, "test": 1.0}]


def test_a_tie_for_the_best_static_is_paired_with_each_and_the_weakest_comparison_decides(
        capsys):
    sv = bench("strategy_validity")
    design = sv.Design(name="t", task="expand", steps=10, common={}, seeds=(0, 1, 2),
                       grid=[[{"lr": 1e-3}, {"lr": 5e-4}]], schedules={"schedule s": [(10, {})]})
    tests = {"static lr=0.001": [0.75] * 3, "static lr=0.0005": [0.5, 0.75, 1.0],
             "schedule s": [0.875] * 3}
    assert list(tests) == list(sv.configurations(design))
    runs = [{"config": c, "seed": s, "test": t} for c, ts in tests.items() for s, t in enumerate(ts)]
    sv.report(design, runs, [0, 1, 2], "numeric path native")
    verdict = capsys.readouterr().out.splitlines()[-1]
    assert verdict.startswith("schedule s - best static (static lr=0.0005; tied for the best mean "
                              "with static lr=0.001), paired over 3 seeds: +0.125 +- 0.144")
    assert verdict.endswith("MISSED)")


def test_the_fault_matrix_is_not_met_when_a_scenario_was_skipped_or_did_not_report():
    missed = bench("fault_matrix").missed
    ok = {"scenario": "s", "jobs_per_node": 1, "lost": 0, "stuck": 0, "crashes": 0}
    assert missed([ok, ok], ["a", "b"], [], 0) == []
    assert "1 of 2 fault scenarios skipped" in missed([ok], ["a", "b"], ["b"], 0)[0]
    assert missed([ok], ["a", "b"], [], 0) == ["1 scenarios reported their figures, 2 listed"]


def test_the_stoppers_bar_is_the_best_strategy_score_not_a_failed_phases():
    """The monitor's bar counts completed and early-stopped phases only."""
    tree = T(N(0, None, score=0.5, finished_at=10.0),
             N(1, None, Status.FAILED, score=0.9, finished_at=20.0))
    assert bench("stopper_margins").best_then(tree, 30.0) == 0.5


def kept_search(root: Path, name: str, recorded: dict[int, str]) -> RunStore:
    """A kept llmzero search: node 0 completed at 0.8; node 1, planned for 100 steps, stays at
    0.3, so the offline stopper at 0.02 says STOP at its third validation point (step 30);
    the monitor recorded `recorded` ({step: action}) and the phase was early-stopped."""
    store = RunStore.create(root / name, parse_config({
        "name": "sm", "scheduler": "local", "agents": {"backend": "heuristic",
                                                       "stop_margin": 0.02}}))
    t0 = store.created_at
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"total_training_steps": 50},
                                  status=Status.COMPLETED, finished_at=t0 + 10,
                                  results=Results(0.8, 50, 0.8, 50, [50])))
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"total_training_steps": 100},
                                  status=Status.EARLY_STOPPED, finished_at=t0 + 100,
                                  results=Results(0.3, 10, 0.3, max(recorded) + 1, [])))
    write_metrics(store.node_dir(1).metrics_file, val_rows({s: 0.3 for s in recorded}))
    store.node_dir(1).early_stop_file.write_text(json.dumps([
        {"created_at": t0 + 20 + step, "result": {"action": action, "step": step,
                                                  "val_step": step}}
        for step, action in recorded.items()]))
    return store


def test_the_replay_at_the_searchs_own_margin_must_match_every_recorded_decision(tmp_path):
    """Review: only whether a phase was stopped at all was compared, so a replay that stops
    a phase earlier than the monitor did passed as reproducing it."""
    sm = bench("stopper_margins")
    store = kept_search(tmp_path, "late", {10: "CONTINUE", 20: "CONTINUE", 30: "CONTINUE",
                                           40: "STOP"})
    assert sm.phases(store, "addition", 0, [0.02])[1] == [(1, 30)]
    store = kept_search(tmp_path, "same", {10: "CONTINUE", 20: "CONTINUE", 30: "STOP"})
    assert sm.phases(store, "addition", 0, [0.02])[1] == []


def test_only_the_searches_of_this_numeric_path_are_replayed(tmp_path, monkeypatch, capsys):
    """Review: a folder with a numeric path in its name (TASK-llmzero-SEED-VAR=VALUE) crashed
    the folder-name parse; its search is another measurement, not replayed with the native."""
    decisions = {10: "CONTINUE", 20: "CONTINUE", 30: "STOP"}
    kept_search(tmp_path, "addition-llmzero-3", decisions)
    kept_search(tmp_path, "addition-llmzero-3-MKL_CBWR=COMPATIBLE", decisions)
    results = tmp_path / "margins.json"
    out = main(bench("stopper_margins"), monkeypatch, capsys, "--dir", str(tmp_path),
               "--results", str(results), "--margins", "0.02", "0")
    assert "addition-llmzero-3-MKL_CBWR=COMPATIBLE: not a search on the native numeric path" in out
    assert {(r["task"], r["seed"], r["node"]) for r in json.loads(results.read_text())} == {
        ("addition", 3, 0), ("addition", 3, 1)}


def test_strategy_validity_report_only_tabulates_what_is_on_file_and_trains_nothing(
        tmp_path, monkeypatch, capsys):
    """Review: the script had no way to re-print a committed file's table but a rerun, which
    trains every run the file lacks (hours) before it tabulates."""
    sv = bench("strategy_validity")
    results = tmp_path / "sv.json"
    results.write_text(json.dumps([{"config": "static lr=0.0005", "seed": s, "test": 0.8 + s / 100}
                                   for s in (0, 1)]))
    monkeypatch.setattr(sv, "run_chain", lambda *a: pytest.fail("--report-only trained"))
    out = main(sv, monkeypatch, capsys, "--design", "expand-deep", "--results", str(results),
               "--seeds", "0", "1", "--report-only")
    assert out.startswith("2 runs on file (numeric path native), 0 to run")
    assert re.search(r"^  static lr=0\.0005 +0\.805 \+- 0\.005  \(2 seeds\)$", out, re.M), out


SV_PATHS = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2"}, "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"}}


@pytest.mark.parametrize("txt", sorted((BENCHMARKS / "results").glob("strategy_validity_*.txt")),
                         ids=lambda p: p.stem)
def test_each_committed_strategy_validity_file_re_tabulates_as_its_report(txt, monkeypatch,
                                                                          capsys):
    """Every committed report (.txt) is re-printed from its raw file with --report-only on the
    numeric path the report names, with no run to train. Review: the rows of the avx2 and
    MKL_CBWR=COMPATIBLE files carried no path, so on their own path none counted as on file."""
    design, _, path = txt.stem.removeprefix("strategy_validity_").partition(".")
    for name, value in SV_PATHS.get(path, {}).items():
        monkeypatch.setenv(name, value)
    results = txt.with_suffix(".json")
    seeds = sorted({r["seed"] for r in bench("common").read_rows(results)})
    out = main(bench("strategy_validity"), monkeypatch, capsys, "--design", design, "--results",
               str(results), "--seeds", *map(str, seeds), "--report-only")
    rows = len(bench("common").read_rows(results))
    assert out.startswith(f"{rows} runs on file (numeric path "), out
    assert "rows left out" not in out.splitlines()[0]
    table = [line for line in txt.read_text().splitlines() if line.startswith("  ")]
    assert table and table == [line for line in out.splitlines() if line.startswith("  ")]
