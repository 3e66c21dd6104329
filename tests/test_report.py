"""The report on a hand-built run directory: files, the best path's table, costs, defensive
reading of agent records, and strategy.yaml replayed by the replay method."""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.text import Text

from llmzero_slurm.plots import DPI, plt

from llmzero_slurm.config import parse_config
from llmzero_slurm.errors import StorageError, UsageError
from llmzero_slurm.methods import MethodContext, make_method
from llmzero_slurm.paths import ROOT
from llmzero_slurm.report import write_report
from llmzero_slurm.report.collect import collect
from llmzero_slurm.report.logs import MetricsLogs
from llmzero_slurm.report.canvas import STATUS_COLOURS
from llmzero_slurm.report.figures import (FIGURES, best_so_far_figure, best_so_far_line,
                                          hparam_figure, leader_test_by_compute,
                                          strategy_figure)
from llmzero_slurm.report.tree_figure import TREE
from llmzero_slurm.strategy_file import FORMAT, load_strategy
from llmzero_slurm.search.policy import Action, make_child
from llmzero_slurm.search.tree import Kind, Node, Results, Status, Tree
from llmzero_slurm.store.node_dir import NodeDir
from llmzero_slurm.store.run_store import RunStore
from metrics_files import write_metrics

RECIPE = {"lr": 1e-3, "kl_loss_coef": 0.04, "rollout_n": 8, "train_batch_size": 16,
          "ppo_mini_batch_size": 8, "lora_rank": 8, "lora_alpha": 16.0, "save_freq": 25,
          "test_freq": 10}
VAL, TEST = "val-core/addition/acc/mean@1", "test-core/addition/acc/mean@1"
# Test scores chosen to be unmistakable in any text they might leak into.
TEST_AT_BEST = {0: 0.4321, 1: 0.5678, 5: 0.6543}


def config(**search):
    return parse_config({"name": "rep", "backend": "cpu", "hparams": RECIPE,
                         "search": search or {"method": "llmzero"}})


def metrics(files: NodeDir, start: int, end: int, best_step: int, best: float,
            test: float | None) -> None:
    """verl file-logger lines: training metrics every step, validation (and test) every 10,
    and a phase from the base model validated before its first step."""
    rows = []
    for step in range(start + (start > 0), end + 1):
        data = {"critic/rewards/mean": 0.3 + step / 1000, "actor/entropy": 1.0 - step / 1000}
        if step % 10 == 0:
            data[VAL] = best if step == best_step else best - 0.05 - (step % 20) / 1000
            if test is not None:
                data[TEST] = test if step == best_step else 0.1
        rows.append((step, data))
    write_metrics(files.metrics_file, rows)


def record(agent: str, tokens: int, dollars: float, **result) -> dict:
    return {"agent": agent, "backend": "anthropic", "result": result, "answers": ["{}"],
            "usage": {"input_tokens": tokens, "output_tokens": tokens // 10,
                      "cache_write_tokens": 0, "cache_read_tokens": 5, "cost_usd": dollars}}


def add(store: RunStore, kind: Kind, parent: int | None, hparams: dict, status: Status,
        results: Results, resume: int | None = None, diagnosis: str = "", injected: bool = False,
        finished_at: float = 0.0) -> Node:
    """Record a finished phase as the controller would (make_child checks the resume point)."""
    tree = store.load_tree()

    def build(i: int) -> Node:
        node = make_child(tree, Action(kind, parent, injected), i, hparams, resume, diagnosis)
        node.status, node.results, node.finished_at = status, results, finished_at
        return node
    return store.add_node(build)


def scored(start: int, end: int, best_step: int, best: float, node_id: int | None,
           ckpts: list[int], hours: float) -> Results:
    test = TEST_AT_BEST.get(node_id) if node_id is not None else None
    return Results(best_val=best, best_val_step=best_step, test_at_best=test, last_step=end,
                   checkpoints=ckpts, gpu_hours=hours)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """0 scratch -> 1 evolve@50 -> 5 evolve@100 is the best path; 2 was stopped early;
    3 is an injected scratch that failed, 4 its failed debug child."""
    root = tmp_path_factory.mktemp("run") / "rep"
    store = RunStore.create(root, config())
    d = store.node_dir
    add(store, Kind.SCRATCH, None, RECIPE, Status.COMPLETED,
        scored(0, 60, 40, 0.45, 0, [25, 50, 60], 0.10), finished_at=1.0)
    metrics(d(0), 0, 60, 40, 0.45, TEST_AT_BEST[0])    # trained past the step its child took

    hp1 = {**RECIPE, "lr": 5e-4, "rollout_n": 12}
    add(store, Kind.EVOLVE, 0, hp1, Status.COMPLETED, scored(50, 100, 90, 0.60, 1, [75, 100], 0.20),
        resume=50, diagnosis="reward plateaued while KL stayed low: more rollouts, smaller steps",
        finished_at=3.0)
    metrics(d(1), 50, 100, 90, 0.60, TEST_AT_BEST[1])
    d(1).proposal_file.write_text(json.dumps(record("proposer", 1000, 0.25,
                                                          diagnosis="plateau")))

    add(store, Kind.EVOLVE, 0, {**RECIPE, "lr": 3e-3, "total_training_steps": 50}, Status.EARLY_STOPPED,
        scored(25, 40, 40, 0.30, None, [], 0.05), resume=25, finished_at=2.0)
    metrics(d(2), 25, 40, 40, 0.30, None)
    d(2).early_stop_file.write_text(json.dumps([
        record("stopper", 300, 0.01, action="CONTINUE", reason="too early to tell"),
        record("stopper", 300, 0.01, action="STOP", reason="validation far below the best strategy")]))

    add(store, Kind.SCRATCH, 1, {**RECIPE, "lr": 2e-2}, Status.FAILED, Results(gpu_hours=0.01),
        injected=True, finished_at=4.0)
    d(3).error_analysis_file.write_text('{"agent": "error_analyzer", "usage": {"inp')  # torn
    add(store, Kind.DEBUG, 3, {**RECIPE, "lr": 1e-2}, Status.FAILED, Results(gpu_hours=0.01),
        finished_at=5.0)
    write_metrics(d(4).metrics_file, [(1, {"actor/entropy": 1.0})], tail='{"step": 2, "da')

    hp5 = {**hp1, "kl_loss_coef": 0.01, "max_response_length": 12}
    add(store, Kind.EVOLVE, 1, hp5, Status.COMPLETED, scored(100, 150, 130, 0.70, 5, [125, 150], 0.20),
        resume=100, diagnosis="entropy collapsing: loosen the KL <tie> & lengthen responses",
        finished_at=6.0)
    metrics(d(5), 100, 150, 130, 0.70, TEST_AT_BEST[5])
    write_report(root)
    return root


def html(run: Path) -> str:
    return (run / "report" / "index.html").read_text()


def test_every_file_is_written(run):
    out = run / "report"
    for name in [*FIGURES, TREE, "index.html", "strategy.yaml"]:
        assert (out / name).is_file(), name
    for name in [*FIGURES, TREE]:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
    assert not list(out.rglob(".*tmp*"))
    assert len(list((out / "nodes").glob("node-*.png"))) == 6      # one curve grid per node


def test_the_page_is_self_contained(run):
    page = html(run)
    sources = re.findall(r'(?:src|href)="([^"#][^"]*)"', page)
    assert sorted(s for s in sources if s.endswith(".png") and "/" not in s) == sorted([*FIGURES, TREE])
    assert all((run / "report" / s).is_file() for s in sources)
    assert "http://" not in page and "https://" not in page
    anchors = set(re.findall(r'id="(node-\d+)"', page))
    assert anchors == {f"node-{i}" for i in range(6)}
    assert set(re.findall(r'href="#([^"]+)"', page)) <= anchors        # no dangling link


def test_every_node_on_the_tree_is_one_click_from_its_section(run):
    """Each node's clickable circle sits on that node's marker in the tree PNG (the pixel at
    its centre has the node's status colour) and links to the node's own section."""
    page = html(run)
    image = plt.imread(run / "report" / TREE)
    status = {n.id: n.status for n in RunStore.open(run).load_tree()}
    areas = re.findall(r'<area shape="circle" coords="(\d+),(\d+),(\d+)" href="#node-(\d+)"', page)
    assert sorted(int(a[3]) for a in areas) == list(range(6))
    for x, y, r, node in areas:
        assert 0 < int(x) < image.shape[1] and 0 < int(y) < image.shape[0] and int(r) >= 8
        colour = to_rgb(STATUS_COLOURS[status[int(node)]])
        assert abs(image[int(y), int(x), :3] - colour).max() < 0.05, node


def test_each_node_section_shows_its_curves_and_the_agents_reasoning(run):
    sections = dict(re.findall(r'<section id="node-(\d+)">(.*?)</section>', html(run), re.S))
    assert "plateau" in sections["1"] and "lr 0.001 &rarr; 0.0005" in sections["1"]
    assert "rollout_n 8 &rarr; 12" in sections["1"] and "Proposer" in sections["1"]
    assert "too early to tell" in sections["2"] and "validation far below" in sections["2"]
    assert re.search(r"<td>STOP</td>", sections["2"])
    for node, section in sections.items():
        curve = re.search(r'<img src="(nodes/node-\d+-[\w-]+\.png)"', section)
        assert curve and curve.group(1).startswith(f"nodes/node-{int(node):04d}-")
        assert 'loading="lazy"' in section     # hundreds of grids: fetched as they scroll in


def test_a_refresh_redraws_only_the_curves_that_changed(run, tmp_path):
    run = Path(shutil.copytree(run, tmp_path / "rep"))      # the module's run stays as built
    out = run / "report" / "nodes"
    before = {p.name for p in out.glob("*.png")}
    write_report(run)
    assert {p.name for p in out.glob("*.png")} == before                  # nothing changed
    d = RunStore.open(run).node_dir
    with open(d(2).metrics_file, "a") as fh:                            # off the best path
        fh.write(json.dumps({"step": 41, "data": {"actor/entropy": 0.5}}) + "\n")
    write_report(run)
    after = {p.name for p in out.glob("*.png")}
    assert {n[:9] for n in before ^ after} == {"node-0002"} and len(after) == 6
    with open(d(5).metrics_file, "a") as fh:                            # on it: every overlay
        fh.write(json.dumps({"step": 151, "data": {"actor/entropy": 0.5}}) + "\n")
    write_report(run)
    assert not {p.name for p in out.glob("*.png")} & after


def test_a_budgeted_refresh_draws_what_changed_first_and_shows_earlier_drawings_for_the_rest(
        run, tmp_path, monkeypatch):
    """Scale: a new best changes the overlay of every node's grid, and the controller's refresh
    redrew them all (minutes at hundreds of nodes, with no poll meanwhile). Under its draw
    budget it draws the node whose own curves changed first; the others keep their earlier
    drawing, said on the page, until a later refresh, the end of the search or llmzero-report
    draws them."""
    import llmzero_slurm.cli.start as start
    import llmzero_slurm.report.node_curves as node_curves
    run = Path(shutil.copytree(run, tmp_path / "rep"))
    out = run / "report" / "nodes"
    with open(RunStore.open(run).node_dir(5).metrics_file, "a") as fh:   # on the best path
        fh.write(json.dumps({"step": 151, "data": {"actor/entropy": 0.5}}) + "\n")
    clock = iter(range(100))                        # each look at the clock: one second later
    monkeypatch.setattr(node_curves, "monotonic", lambda: next(clock))
    monkeypatch.setattr(start, "REFRESH_DRAW_S", 1.5)
    before, logs = {p.name for p in out.glob("*.png")}, MetricsLogs()
    start._report(run, False, logs)                  # the controller, after a poll
    after = {p.name for p in out.glob("*.png")}
    assert [n[:9] for n in after - before] == ["node-0005"] and len(after) == 6
    page = html(run)
    sections = dict(re.findall(r'<section id="node-(\d+)">(.*?)</section>', page, re.S))
    for node, section in sections.items():
        src = re.search(r'<img src="(nodes/[^"]+)"', section)
        assert src and (run / "report" / src.group(1)).is_file()
        assert ("drawn at an earlier refresh" in section) is (node != "5"), node
    for png in out.glob("node-0002-*.png"):
        png.unlink()
    write_report(run, draw_budget_s=0)
    section = re.search(r'<section id="node-2">(.*?)</section>', html(run), re.S)
    assert section and "<img" not in section.group(1) and "not drawn yet" in section.group(1)
    start._report(run, True, logs)                   # the controller, at the search's end
    assert "drawn at an earlier refresh" not in html(run)
    assert len(list(out.glob("*.png"))) == 6 and not {p.name for p in out.glob("*.png")} & before


def test_llmzero_report_says_how_far_a_long_drawing_got(run, tmp_path, monkeypatch, capsys):
    """Scale: at 300 nodes llmzero-report drew curve grids for minutes and printed nothing
    until the end. It says how far it got and about how long is left, on stderr (here at
    every grid)."""
    import llmzero_slurm.report.node_curves as node_curves
    from llmzero_slurm.cli.report import main
    run = Path(shutil.copytree(run, tmp_path / "rep"))
    shutil.rmtree(run / "report" / "nodes")
    monkeypatch.setattr(node_curves, "SAY_EVERY_S", 0.0)
    assert main([str(run)]) == 0
    out, err = capsys.readouterr()
    assert "index.html" in out
    assert re.search(r"report: 5 of 6 node curve grids drawn, about 0:0\d left\n", err), err


def test_a_refresh_keeps_every_image_of_the_old_page_until_the_new_page_is_in_place(
        run, tmp_path, monkeypatch):
    """Review: a refresh deleted a node's old curve PNG when it drew the new one, before the
    new index.html was written: a reader opening the page meanwhile got a broken image. The
    old PNGs go only once the new page names the new ones."""
    import llmzero_slurm.report.build as build
    run = Path(shutil.copytree(run, tmp_path / "rep"))
    with open(RunStore.open(run).node_dir(2).metrics_file, "a") as fh:
        fh.write(json.dumps({"step": 41, "data": {"actor/entropy": 0.5}}) + "\n")
    page, real, missing = run / "report" / "index.html", build.render_html, []

    def reader_looks(*args, **kwargs):     # the page readers get while the new one is made
        shown = re.findall(r'src="([^"]+)"', page.read_text())
        missing.extend(src for src in shown if not (page.parent / src).exists())
        return real(*args, **kwargs)
    monkeypatch.setattr(build, "render_html", reader_looks)
    write_report(run)
    assert missing == []
    shown = set(re.findall(r'src="(nodes/[^"]+)"', page.read_text()))
    assert {f"nodes/{p.name}" for p in (page.parent / "nodes").glob("*.png")} == shown


def test_a_folder_of_the_users_own_is_written_into_only_when_new_empty_or_a_report(run,
                                                                                  tmp_path):
    """--output DIR replaced DIR's index.html and, for a run with no scored phase yet,
    deleted DIR/strategy.yaml: a strategy kept there from an earlier search was lost."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "strategy.yaml").write_text("phases: []  # the one that worked\n")
    with pytest.raises(UsageError, match=r"mine is not a report folder and not empty \(it "
                                         r"holds strategy.yaml\): give a new or empty folder"):
        write_report(run, mine)
    assert [p.name for p in mine.iterdir()] == ["strategy.yaml"]
    assert (mine / "strategy.yaml").read_text() == "phases: []  # the one that worked\n"
    fresh = tmp_path / "fresh"
    write_report(run, fresh)
    write_report(run, fresh)                         # its own report, refreshed
    assert (fresh / "index.html").is_file()


def test_an_output_that_is_a_file_is_refused_as_the_users_typing(run, tmp_path):
    """`llmzero-report RUN --output results.txt` (an existing file) said "cannot be made (File
    exists)" with exit 3, the code for damaged state: it is an argument naming a file."""
    mine = tmp_path / "results.txt"
    mine.write_text("kept\n")
    with pytest.raises(UsageError, match=r"results.txt is a file, not a folder: give a new or "
                                         r"empty folder"):
        write_report(run, mine)
    assert mine.read_text() == "kept\n"


def node_0_damaged(tmp_path) -> RunStore:
    """Scratch node 0 -> evolve node 1, node 0's node.json damaged."""
    store = RunStore.create(tmp_path / "run", config())
    add(store, Kind.SCRATCH, None, RECIPE, Status.COMPLETED,
        scored(0, 60, 40, 0.45, 0, [25, 50, 60], 0.1))
    add(store, Kind.EVOLVE, 0, {**RECIPE, "lr": 5e-4}, Status.COMPLETED,
        scored(50, 100, 90, 0.6, 1, [75, 100], 0.2), resume=50)
    store.node_path(0).write_text("{")
    return store


def test_a_strategy_through_an_unreadable_record_is_not_written(tmp_path):
    """With node 0's record damaged, its child's strategy went into strategy.yaml through a
    stand-in phase with no hyperparameters, its diagnosis the damaged file's path: a replay
    failed on it or trained the replay's own settings for that phase."""
    store = node_0_damaged(tmp_path)
    index = write_report(store.root)
    assert not (index.parent / "strategy.yaml").exists()
    assert ("node 0 is left out, its record unreadable: the best strategy runs through it, "
            f"so no strategy.yaml until llmzero-repair {store.root} 0 rebuilds it") \
        in index.read_text()
    store.rebuild_node(0)
    write_report(store.root)
    assert [p.node for p in load_strategy(index.parent / "strategy.yaml", "cpu")] == [0, 1]


def test_a_damaged_record_is_named_by_the_headline_and_its_settings_are_not_defaults(tmp_path):
    """With node 0's node.json damaged, the page's headline stated node 1's score as the run's
    best (node 0's own, maybe higher, unknown) and named the damage only in the notes at the
    bottom; node 1's row listed every setting as changed from "default" (the stand-in record
    has none)."""
    store = node_0_damaged(tmp_path)
    page = write_report(store.root).read_text()
    head = page.split("<h2>Best strategy</h2>")[1].split("<table>")[0]
    assert (f"Node 0's record is unreadable, so this best leaves it out: llmzero-repair "
            f"{store.root} 0 rebuilds it") in head, head
    assert "default &rarr;" not in page and "default →" not in page
    assert page.count("unknown: node 0's record is unreadable") == 2   # phase table, node 1


def test_an_agent_record_whose_result_is_no_object_is_shown_empty(run, tmp_path):
    """A hand-edited proposal.json with a text result crashed the page's template (jinja2's
    UndefinedError), so no report at all; its cost still counts."""
    run = Path(shutil.copytree(run, tmp_path / "edited"))
    files = RunStore.open(run).node_dir(1)
    files.proposal_file.write_text(json.dumps({**record("proposer", 100, 0.5), "result": "x"}))
    files.error_analysis_file.write_text(json.dumps({"agent": "error_analyzer", "result": [1]}))
    page = write_report(run).read_text()
    assert "0001/proposal.json: its result is not an object; shown empty" in page
    assert "0001/error_analysis.json: its result is not an object; shown empty" in page
    assert collect(run).agent_costs["proposer"].calls >= 1


def test_an_agent_record_whose_fallbacks_are_no_list_is_noted_not_fatal(run, tmp_path):
    """Review: a proposal.json whose "fallbacks" was a number crashed the page's template
    (TypeError: 'int' object is not iterable), though a bad record is to become a note. It
    is a note now, and the record is shown without fallbacks."""
    run = Path(shutil.copytree(run, tmp_path / "edited"))
    files = RunStore.open(run).node_dir(1)
    files.proposal_file.write_text(json.dumps({**record("proposer", 100, 0.5, diagnosis="x"),
                                               "fallbacks": 2}))
    page = write_report(run).read_text()
    assert "0001/proposal.json: its fallbacks are not a list; shown empty" in page
    assert "fell back" not in page


def test_temporary_files_of_a_killed_report_writer_are_swept(run, tmp_path):
    """A controller killed while it saved a figure left a zero-byte .<figure>.<id>.tmp in the
    report for good (every kill loop of the crash audit left one or two). The next report
    deletes those past a grace period; a live writer's fresh ones are left alone."""
    run = Path(shutil.copytree(run, tmp_path / "killed"))
    out = run / "report"
    write_report(run)
    old = [out / ".best_so_far.png.0a1b2c3d.tmp", out / "nodes" / ".node-0001-x.png.5e6f7a8b.tmp"]
    fresh = out / ".tree.png.9c8d7e6f.tmp"
    for temp in (*old, fresh):
        temp.write_bytes(b"")
    for temp in old:
        os.utime(temp, (time.time() - 3600, time.time() - 3600))
    write_report(run)
    assert not any(temp.exists() for temp in old) and fresh.exists()


def test_a_disk_that_fills_while_a_figure_is_saved_keeps_the_last_report(run, tmp_path,
                                                                         monkeypatch):
    """The controller goes on without a report it cannot write (it catches the package's
    errors): a full disk must surface as StorageError naming the figure, not a bare OSError,
    leave the figure shown before, and leave no half-written temporary file behind."""
    run = Path(shutil.copytree(run, tmp_path / "full"))
    out = run / "report"
    figure = out / "best_so_far.png"
    before = figure.read_bytes()
    real = Figure.savefig

    def fills_up(fig, fname, *args, **kwargs):
        if Path(fname).name.startswith(f".{figure.stem}"):
            Path(fname).write_bytes(before[:100])           # part written, then no space
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(fname))
        return real(fig, fname, *args, **kwargs)
    monkeypatch.setattr(Figure, "savefig", fills_up)
    with pytest.raises(StorageError, match=r"best_so_far\.png.*No space left"):
        write_report(run)
    assert figure.read_bytes() == before
    assert not list(out.rglob(".*tmp*"))


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """Pairs of visible, non-empty texts of a drawn figure whose boxes intersect."""
    renderer = fig.canvas.get_renderer()
    undrawn = set()                     # labels of ticks outside the limits are laid out, not drawn
    for ax in fig.axes:
        for labels, (low, high), index in ((ax.get_xticklabels(), sorted(ax.get_xlim()), 0),
                                           (ax.get_yticklabels(), sorted(ax.get_ylim()), 1)):
            undrawn |= {id(t) for t in labels if not low <= t.get_position()[index] <= high}
    texts = [t for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and id(t) not in undrawn]
    boxes = [(t.get_text()[:30], t.get_window_extent(renderer)) for t in texts]
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:]
            if box_a.overlaps(box_b) and box_a.intersection(box_a, box_b).width > 1
            and box_a.intersection(box_a, box_b).height > 1]


def test_held_settings_stay_in_their_panel_and_an_unmoved_panel_says_so(run):
    """With long lists of held settings on both sides (capacity and regularisation both partly
    moved on the best path), each list stays under its own panel; a path where no capacity
    setting moved shows that in words, not as an empty panel."""
    view = collect(run)
    held = {"max_prompt_length": 512, "ppo_micro_batch_size_per_gpu": 4,
            "log_prob_micro_batch_size_per_gpu": 16, "weight_decay": 0.01, "grad_clip": 1.0,
            "kl_loss_type": "low_var_kl", "use_kl_loss": True, "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.28, "temperature": 1.0, "entropy_coeff": 0.0}
    for phase in view.phases:
        phase.view.node.hparams.update(held)
    fig = hparam_figure(view)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    left, right = fig.axes
    for ax in (left, right):
        held = [t for t in ax.texts if t.get_text().startswith("held throughout")]
        assert len(held) == 1
        box = held[0].get_window_extent(renderer)
        assert ax.bbox.x0 - 1 <= box.x0 and box.x1 <= ax.bbox.x1 + 1   # not across the panels
    assert not overlapping_texts(fig)
    plt.close(fig)
    view = collect(run)
    for phase in view.phases:           # capacity held along the whole path
        phase.view.node.hparams.update(rollout_n=8, max_response_length=8)
    fig = hparam_figure(view)
    texts = [t.get_text() for t in fig.axes[0].texts]
    plt.close(fig)
    assert any(t.startswith("nothing changed along this strategy") and "rollout_n=8" in t
               for t in texts)


def test_a_one_phase_strategys_settings_stay_inside_their_panels(tmp_path):
    """A grid run's best strategy, one phase with the trainer's every setting: each panel
    said "nothing changed along this strategy" over its held settings in lines wider than
    the panel, running across its frame into the margin and the other panel."""
    from llmzero_slurm.backends import get_backend
    store = RunStore.create(tmp_path / "one", config())
    add(store, Kind.SCRATCH, None, {**get_backend("cpu").defaults(), **RECIPE}, Status.COMPLETED,
        scored(0, 30, 30, 0.6, None, [30], 0.1))
    fig = hparam_figure(collect(store.root))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        [said] = ax.texts
        assert said.get_text().startswith("nothing changed along this strategy")
        box = said.get_window_extent(renderer)
        assert ax.bbox.x0 <= box.x0 and box.x1 <= ax.bbox.x1, (said.get_text(), box, ax.bbox)
    plt.close(fig)


def test_a_changed_text_setting_is_shown_as_its_trail(tmp_path):
    """Review: a text setting that changed along the best path (kl_loss_type low_var_kl ->
    k3) was dropped from the settings figure, whose panel then said "nothing changed along
    this strategy". It is listed with its trail now, beside the lines of numeric ones."""
    store = RunStore.create(tmp_path / "r", config())
    hp0 = {**RECIPE, "kl_loss_type": "low_var_kl"}
    add(store, Kind.SCRATCH, None, hp0, Status.COMPLETED, scored(0, 60, 40, 0.45, 0, [25, 50], 0.1))
    add(store, Kind.EVOLVE, 0, {**hp0, "kl_loss_type": "k3"}, Status.COMPLETED,
        scored(50, 100, 90, 0.6, 1, [75, 100], 0.2), resume=50)
    view = collect(tmp_path / "r")
    trail = "kl_loss_type: low_var_kl → k3"
    fig = hparam_figure(view)
    [said] = [t.get_text() for t in fig.axes[1].texts]
    plt.close(fig)
    assert trail in said and "nothing changed" not in said
    view.phases[-1].view.node.hparams["kl_loss_coef"] = 0.01    # and a numeric one beside it
    fig = hparam_figure(view)
    shown = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    plt.close(fig)
    assert shown == ["kl_loss_coef: 0.04 → 0.01", trail]


def test_a_chain_hundreds_of_phases_deep_gets_a_tree_figure_of_bounded_size(tmp_path):
    """Review: the tree's layout recursed once per level, so a chain about 500 phases deep
    (a long run of evolve steps) raised RecursionError and no report was written; and the
    figure grew 0.9 inch a level, without the bound its width has. The layout is iterative
    now, and the height is bounded like the width."""
    from types import SimpleNamespace
    from llmzero_slurm.report.tree_figure import MAX_INCHES, tree_figure
    nodes = [Node(i, i - 1 if i else None, Kind.EVOLVE if i else Kind.SCRATCH, {},
                  status=Status.COMPLETED) for i in range(600)]
    areas = tree_figure(SimpleNamespace(tree=Tree(nodes), nodes={}, phases=[]), tmp_path / TREE)
    assert [a.node for a in areas] == list(range(600))
    assert areas[0].y < areas[-1].y                      # depth runs down the figure
    assert plt.imread(tmp_path / TREE).shape[0] <= MAX_INCHES * DPI


def test_a_wide_tree_is_drawn_wider_so_that_its_nodes_stay_apart(tmp_path):
    """Scale: the tree figure's width was bounded at 20 inches, so a search of 150 leaves drew
    its nodes on top of one another: labels unreadable and each click landing on a neighbour.
    It now widens (the page scrolls it) to a bound of its own, under a bound on its pixels."""
    from types import SimpleNamespace
    from llmzero_slurm.report.tree_figure import MAX_PIXELS, tree_figure
    nodes = [Node(0, None, Kind.SCRATCH, {}, status=Status.COMPLETED)]
    for i in range(1, 151):                     # 30 children of the root, 4 under each of them
        parent = 0 if i <= 30 else 1 + (i - 31) // 4
        nodes.append(Node(i, parent, Kind.EVOLVE, {}, status=Status.COMPLETED))
    areas = tree_figure(SimpleNamespace(tree=Tree(nodes), nodes={}, phases=[]), tmp_path / TREE)
    rows: dict[int, list[int]] = {}
    for a in areas:
        rows.setdefault(a.y, []).append(a.x)
    r = areas[0].r
    for xs in rows.values():
        xs.sort()
        assert all(b - a >= 2 * r for a, b in zip(xs, xs[1:])), "clickable circles overlap"
    height, width = plt.imread(tmp_path / TREE).shape[:2]
    assert width * height <= MAX_PIXELS


def test_the_best_strategy_table_follows_the_best_path(run):
    page = html(run)
    table = page.split("<h2>Best strategy</h2>")[1].split("<h2>")[0]
    rows = re.findall(r'<tr><td>(\d+)</td><td><a href="#node-\d+">node (\d+)</a></td>', table)
    assert rows == [("1", "0"), ("2", "1"), ("3", "5")]
    for span in ("0..50", "50..100", "100..150"):
        assert span in table
    assert "lr: 0.001 &rarr; 0.0005" in table and "rollout_n: 8 &rarr; 12" in table
    assert "kl_loss_coef: 0.04 &rarr; 0.01" in table
    assert "max_response_length: default &rarr; 12" in table          # unset before: the default
    assert "reward plateaued while KL stayed low" in table
    assert "loosen the KL &lt;tie&gt; &amp; lengthen" in table        # escaped, not raw HTML
    assert "0.6543" in table                        # test score at the best validation


def test_the_best_strategy_says_which_weights_were_saved(run):
    """The headline score is at step 130, where node 5 saved nothing (save_freq 25): the page
    named no checkpoint, so a user took the headline for weights they could load."""
    head = html(run).split("<h2>Best strategy</h2>")[1].split("<table>")[0]
    assert "Checkpoints of node 5: global steps 125, 150 (none at step 130, so no saved " \
           "weights score exactly this; checkpoints are saved every save_freq steps)." in head


@pytest.mark.parametrize("kept_step, named", [(130, True), (120, False)])
def test_the_best_strategy_names_the_adapter_kept_at_its_best_step(run, tmp_path, kept_step,
                                                                   named):
    """The cpu trainer keeps the adapter of each phase's best validation step: the page names it
    as the headline's weights, and only when it is from that very step (a stale one is not)."""
    run = Path(shutil.copytree(run, tmp_path / "rep"))
    files = RunStore.open(run).node_dir(5)
    files.best_adapter.mkdir()
    files.best_adapter_record.write_text(json.dumps({"step": kept_step, "val_score": 0.7}))
    write_report(run)
    head = html(run).split("<h2>Best strategy</h2>")[1].split("<table>")[0]
    assert ("The adapter of that step: <code>nodes/0005/best_adapter</code>" in head) is named
    assert ("(none at step 130, so no saved weights score exactly this" in head) is not named


def test_a_report_written_elsewhere_names_the_run_its_adapter_path_is_in(run, tmp_path):
    """A colleague's `llmzero-report RUN --output DIR` page said "The adapter of that step:
    nodes/0005/best_adapter" with no word of the run it is relative to: from DIR it names
    nothing, and the page names the run nowhere else."""
    run = Path(shutil.copytree(run, tmp_path / "rep"))
    files = RunStore.open(run).node_dir(5)
    files.best_adapter.mkdir()
    files.best_adapter_record.write_text(json.dumps({"step": 130, "val_score": 0.7}))
    head = write_report(run, tmp_path / "mine").read_text().split("<h2>Best strategy</h2>")[1]
    assert (f"The adapter of that step: <code>nodes/0005/best_adapter</code> in the run "
            f"directory <code>{run}</code>") in head.split("<table>")[0]


def test_every_node_and_its_story_is_listed(run):
    page = html(run)
    nodes = page.split("<h2>All phases</h2>")[1].split("<h2>")[0]
    assert len(re.findall(r'<tr><td><a href="#node-\d+">\d+', nodes)) == 6
    assert "(injected)" in nodes and "early_stopped" in nodes and "failed" in nodes
    # the stopper's line, as status and the controller say it (which stopper, why)
    assert "stopped early by the LLM stopper (anthropic): validation far below the best " \
        "strategy" in nodes
    notes = page.split("<h2>Notes</h2>")[1]
    assert "0003/error_analysis.json" in notes          # torn record: noted, not fatal
    assert "node 4" in notes and "torn last line" in notes


def test_costs_sum_device_hours_tokens_and_dollars(run):
    costs = html(run).split("<h2>Costs</h2>")[1].split("<h2>")[0]
    assert "0.570 device-hours" in costs
    proposer = re.search(r"<td>proposer</td>(.*?)</tr>", costs, re.S).group(1)
    assert re.findall(r'class="num">([\d.]+)<', proposer) == ["1", "1", "0", "1000", "100", "0",
                                                              "5", "0.2500"]
    stopper = re.search(r"<td>stopper</td>(.*?)</tr>", costs, re.S).group(1)
    assert re.findall(r'class="num">([\d.]+)<', stopper) == ["2", "2", "0", "600", "60", "0",
                                                             "10", "0.0200"]
    assert "0.2700" in costs


def test_costs_say_the_samples_trained_the_stoppers_saving_and_the_gain_over_the_base(run):
    """The figures benchmarks/search_quality.py reports of a search, for this run: node 2
    stopped 15 steps into a 50-step plan; the base is node 0's validation before step 1."""
    costs = html(run).split("<h2>Costs</h2>")[1].split("<h2>")[0]
    per_step, wide = 16 * 8, 16 * 12                    # rollout_n 12 from node 1 on
    trained = 60 * per_step + 50 * wide + 15 * per_step + 50 * wide
    saved = 35 * per_step
    assert (f"training samples: {trained:,} trained; early stopping saved {saved:,} of "
            f"{trained + saved:,} planned (13%, 1 phase)") in costs
    assert "gain: validation 0.400 -&gt; 0.700 (+0.300, +75% over the base)" in costs
    assert "gain: test 0.100 -&gt; 0.654 (+0.554, +554% over the base)" in costs


def test_an_answer_of_unknown_cost_is_said_beside_the_sums(tmp_path):
    """A record whose service gave no usage (tokens and dollars null) was summed as costing 0."""
    store = RunStore.create(tmp_path / "rep", config())
    add(store, Kind.SCRATCH, None, RECIPE, Status.COMPLETED, scored(0, 20, 20, 0.4, None, [], 0.1))
    unknown = {"input_tokens": None, "output_tokens": None, "cache_write_tokens": None,
               "cache_read_tokens": None, "cost_usd": None, "unknown": "no usage given"}
    store.node_dir(0).early_stop_file.write_text(json.dumps([
        record("stopper", 300, 0.01, action="CONTINUE"),
        {**record("stopper", 0, 0, action="CONTINUE"), "usage": unknown}]))
    write_report(store.root)
    costs = html(store.root).split("<h2>Costs</h2>")[1].split("<h2>")[0]
    stopper = re.search(r"<td>stopper</td>(.*?)</tr>", costs, re.S).group(1)
    assert "0.0100 + the unknown cost of 1 answer" in stopper
    assert re.search(r"agents in total.*0\.0100 \+ the unknown cost of 1 answer", costs, re.S)


def test_costs_count_decisions_and_the_llm_calls_they_took_apart(tmp_path):
    """Review: the "calls" column counted agent records: a stopper decision made by rule,
    with no LLM call, counted as one, and an answer repaired in a second round as one."""
    store = RunStore.create(tmp_path / "rep", config())
    add(store, Kind.SCRATCH, None, RECIPE, Status.COMPLETED, scored(0, 20, 20, 0.4, None, [], 0.1))
    files = store.node_dir(0)
    files.proposal_file.write_text(json.dumps({**record("proposer", 100, 0.5, diagnosis="x"),
                                               "answers": ["not json", '{"changes": {}}']}))
    files.early_stop_file.write_text(json.dumps([
        {**record("stopper", 300, 0.01, action="CONTINUE"), "answers": ["CONTINUE"]},
        {**record("stopper", 0, 0, action="CONTINUE"), "backend": "rule", "answers": []}]))
    write_report(store.root)
    costs = html(store.root).split("<h2>Costs</h2>")[1].split("<h2>")[0]
    assert "<th>decisions</th><th>LLM calls</th>" in costs
    proposer = re.search(r"<td>proposer</td>(.*?)</tr>", costs, re.S).group(1)
    assert re.findall(r'class="num">([\d.]+)<', proposer)[:2] == ["1", "2"]
    stopper = re.search(r"<td>stopper</td>(.*?)</tr>", costs, re.S).group(1)
    assert re.findall(r'class="num">([\d.]+)<', stopper)[:2] == ["2", "1"]


def test_costs_count_the_decisions_the_heuristic_made_in_the_llms_place(tmp_path):
    """A run whose key the service refused (401) on every call said 'LLM calls 0' and
    '0.0000' dollars, as if the LLM had been asked nothing: the heuristic's stand-ins are
    counted beside the calls."""
    store = RunStore.create(tmp_path / "rep", config())
    add(store, Kind.SCRATCH, None, RECIPE, Status.COMPLETED, scored(0, 20, 20, 0.4, None, [], 0.1))
    files = store.node_dir(0)
    down = ["LLM unavailable: Anthropic API: AuthenticationError: Error code: 401",
            "used the heuristic agent instead"]
    files.proposal_file.write_text(json.dumps({**record("proposer", 0, 0, diagnosis="x"),
                                               "fallbacks": down, "answers": []}))
    files.early_stop_file.write_text(json.dumps([
        {**record("stopper", 0, 0, action="STOP"), "fallbacks": down, "answers": []},
        {**record("stopper", 300, 0.01, action="CONTINUE"), "answers": ["CONTINUE"]},
        {**record("stopper", 0, 0, action="CONTINUE"), "backend": "rule", "answers": []}]))
    write_report(store.root)
    costs = html(store.root).split("<h2>Costs</h2>")[1].split("<h2>")[0]
    assert "<th>LLM calls</th><th>heuristic answered</th>" in costs
    for agent, counts in (("proposer", ["1", "0", "1"]), ("stopper", ["3", "1", "1"])):
        row = re.search(fr"<td>{agent}</td>(.*?)</tr>", costs, re.S).group(1)
        assert re.findall(r'class="num">([\d.]+)<', row)[:3] == counts
    assert re.search(r"agents in total</th><th[^>]*>4</th><th[^>]*>1</th><th[^>]*>2</th>",
                     costs)


def test_strategy_yaml_is_the_best_path_without_test_scores(run):
    text = (run / "report" / "strategy.yaml").read_text()
    doc = yaml.safe_load(text)
    assert doc["format"] == FORMAT and doc["best_node"] == 5 and doc["best_val"] == 0.70
    phases = doc["phases"]
    assert [p["node"] for p in phases] == [0, 1, 5]
    assert [(p["start_step"], p["steps"], p["trained_steps"], p["resume_offset"])
            for p in phases] == [(0, 50, 60, None), (50, 50, 50, 50), (100, 50, 50, 50)]
    assert phases[2]["hparams"]["max_response_length"] == 12
    assert "test_at_best" not in text
    assert not any(str(v) in text for v in TEST_AT_BEST.values())


def test_strategy_yaml_replays_as_the_same_chain(run, tmp_path):
    path = run / "report" / "strategy.yaml"
    cfg = config(method="replay", strategy_file=str(path))
    m = make_method("replay", MethodContext(cfg, lambda i: NodeDir(tmp_path), tmp_path))
    source = RunStore.open(run).load_tree()
    tree = Tree([])
    for i, node_id in enumerate([0, 1, 5]):
        plan = m.next_phase(tree)
        assert plan.hparams == {**source[node_id].hparams, "total_training_steps": 50}
        assert plan.resume_step == (None if i == 0 else 50 * i)
        node = make_child(tree, plan.action, i, plan.hparams, plan.resume_step)
        node.status = Status.COMPLETED
        node.results = Results(best_val=0.5, last_step=node.start_step + 50,
                               checkpoints=[node.start_step + 25, node.start_step + 50])
        tree = Tree([*tree, node])
    assert m.exhausted(tree) and [n.start_step for n in tree] == [0, 50, 100]
    assert len(load_strategy(path, "cpu")) == 3


def test_an_empty_run_gets_a_page_and_no_strategy(tmp_path):
    root = tmp_path / "empty"
    RunStore.create(root, config())
    (root / "report").mkdir()
    (root / "report" / "strategy.yaml").write_text("stale")
    index = write_report(root)
    assert "No phase has a validation score yet" in index.read_text()
    assert not (root / "report" / "strategy.yaml").exists()
    assert all((root / "report" / name).is_file() for name in FIGURES)


def test_reports_of_two_runs_of_one_experiment_are_told_apart_by_their_folders(tmp_path):
    """Walkthrough, two seeds side by side: both reports were titled and headed "rep" alone, two
    browser tabs that could not be told apart. A run in a folder of another name than its
    experiment's carries that folder's name in both."""
    for folder, shown in (("rep", "rep"), ("rep-seed2", "rep (rep-seed2)")):
        page = write_report(RunStore.create(tmp_path / folder, config()).root).read_text()
        assert f"<title>{shown}: llmzero-slurm report</title>" in page
        assert f"<h1>{shown}</h1>" in page


def test_the_report_is_utf8_whatever_the_locale(tmp_path):
    """Review: the page declares utf-8 but its files were written in the locale's encoding:
    under a C or Latin-1 locale (a batch job's, a minimal login shell's) an agent's '→'
    stopped llmzero-report with UnicodeEncodeError, or wrote bytes that are not UTF-8. Every
    file the project writes or reads of its own is UTF-8 now."""
    root = tmp_path / "r"
    store = RunStore.create(root, config())
    add(store, Kind.SCRATCH, None, RECIPE, Status.COMPLETED,
        scored(0, 20, 20, 0.4, None, [20], 0.1), diagnosis="entropy collapsed → raise lr")
    metrics(store.node_dir(0), 0, 20, 20, 0.4, None)
    done = subprocess.run([str(ROOT / "bin" / "llmzero-report"), str(root)], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "LLMZERO_PYTHON": sys.executable, "LC_ALL": "C",
                               "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"})
    assert done.returncode == 0, done.stderr
    assert "entropy collapsed → raise lr" in (root / "report" / "index.html").read_bytes().decode()


def test_binary_agent_records_are_noted_not_fatal(tmp_path):
    store = RunStore.create(tmp_path / "bin", config())
    add(store, Kind.SCRATCH, None, RECIPE, Status.COMPLETED, scored(0, 10, 10, 0.4, None, [10], 0.1))
    store.node_dir(0).proposal_file.write_bytes(b"\xff\xfe")
    store.node_dir(0).early_stop_file.write_bytes(b"\xff\xfe")
    notes = collect(store.root).notes
    assert any("0000/proposal.json" in n and "not UTF-8" in n for n in notes)
    assert any("0000/early_stop.json" in n and "not UTF-8" in n for n in notes)


def test_the_progress_figures_end_at_the_headline_best(tmp_path):
    """Two phases tie for the best validation and a pruned one (a replaced debug attempt)
    scored higher: the headline is the older of the two (best_node), but the test-vs-compute
    curve ended at the tie's first finisher's test score and the best-so-far line at the
    pruned node's validation score, so the figures contradicted the numbers above them."""
    store = RunStore.create(tmp_path / "ties", config())
    for test, finished, pruned, best in ((0.4321, 2.0, False, 0.7), (0.5678, 1.0, False, 0.7),
                                         (0.6543, 3.0, True, 0.9)):
        def build(i: int, test=test, finished=finished, pruned=pruned, best=best) -> Node:
            node = make_child(store.load_tree(), Action(Kind.SCRATCH, None), i, RECIPE)
            node.status, node.finished_at, node.pruned = Status.COMPLETED, finished, pruned
            node.results = Results(best_val=best, best_val_step=10, test_at_best=test,
                                   last_step=10, checkpoints=[10], gpu_hours=0.1)
            return node
        store.add_node(build)
    view = collect(store.root)
    assert view.best.id == 0 and view.best.results.test_at_best == 0.4321
    hours, tests = leader_test_by_compute(view)
    assert tests == [0.5678, 0.4321, 0.4321] and hours == pytest.approx([0.1, 0.2, 0.3])
    assert best_so_far_line(view) == ([1, 2, 3], [0.7, 0.7, 0.7])


def test_a_failed_phase_is_not_the_headline_best(tmp_path):
    """Review: a phase that validated at 0.9 and then hit its time limit was the headline, the
    end of strategy.yaml and the end of the progress figures' lines."""
    store = RunStore.create(tmp_path / "failed", config())
    for test, status, best in ((0.4, Status.COMPLETED, 0.7), (0.6, Status.FAILED, 0.9)):
        def build(i: int, test=test, status=status, best=best) -> Node:
            node = make_child(store.load_tree(), Action(Kind.SCRATCH, None), i, RECIPE)
            node.status, node.finished_at = status, float(i)
            node.results = Results(best_val=best, best_val_step=10, test_at_best=test,
                                   last_step=10, checkpoints=[10], gpu_hours=0.1)
            return node
        store.add_node(build)
    view = collect(store.root)
    assert view.best.id == 0
    assert leader_test_by_compute(view)[1] == [0.4, 0.4]
    assert best_so_far_line(view) == ([1, 2], [0.7, 0.7])


def test_the_best_so_far_dots_say_what_their_colours_mean(tmp_path):
    """Each phase was a dot coloured by its status, but the legend named the line alone: a
    reader could not tell an early-stopped phase from a completed one, nor why a failed
    phase's dot above the line did not raise it. The axis counted phases in fractions
    (1.2, 1.4, ...) on a run of two."""
    store = RunStore.create(tmp_path / "dots", config())
    for status, best in ((Status.COMPLETED, 0.7), (Status.FAILED, 0.9)):
        def build(i: int, status=status, best=best) -> Node:
            node = make_child(store.load_tree(), Action(Kind.SCRATCH, None), i, RECIPE)
            node.status, node.finished_at = status, float(i)
            node.results = Results(best_val=best, best_val_step=10, last_step=10, gpu_hours=0.1)
            return node
        store.add_node(build)
    fig = best_so_far_figure(collect(store.root))
    ax = fig.axes[0]
    shown = [t.get_text() for t in ax.get_legend().get_texts()]
    assert shown == ["best so far", "completed", "failed (not a candidate for the best)"], shown
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    plt.close(fig)


def test_the_best_strategy_figure_gives_its_test_score_where_no_curve_crosses_it(run):
    """The test score at the best step was written beside the star, over the curve that
    led up to it: the line ran through "test at best val: 0.699" on a one-phase run. It is
    in the legend now, beside the best validation score it belongs to."""
    fig = strategy_figure(collect(run))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == []
    shown = [t.get_text() for t in ax.get_legend().get_texts()]
    assert shown[-1] == "best validation 0.700 at step 130; test there 0.654", shown
    plt.close(fig)


def test_the_page_says_what_its_scores_and_its_base_are(run):
    """The page gave "best validation", "test score there" and a gain "over the base", but
    never which metric the scores are, which split selects the best, or what the base is: the
    reader writing it up had to read the README or the metrics files."""
    text = re.sub(r"<[^>]+>", "", html(run))
    assert ("The validation score is val-core/addition/acc/mean@1 on the validation split, "
            "which the search selects the best by;") in text, text
    assert "the test score is the same metric on the held-out test split" in text
    assert "The base is the base model's validation score" in text


def test_a_phases_length_is_not_a_change_of_its_strategy(tmp_path):
    """An injected scratch phase, its epochs computed from its steps (1 -> 3), was said to
    have "changed from its parent: ... total_epochs 1 -> 3", as if the proposer had chosen
    it; the phase's steps, computed the same way, were left out already."""
    store = RunStore.create(tmp_path / "len", config())
    add(store, Kind.SCRATCH, None, {**RECIPE, "total_epochs": 1}, Status.COMPLETED,
        scored(0, 30, 30, 0.5, None, [30], 0.1))
    add(store, Kind.EVOLVE, 0, {**RECIPE, "lr": 5e-4, "total_epochs": 3,
                                "total_training_steps": 90}, Status.COMPLETED,
        scored(30, 120, 120, 0.6, None, [120], 0.1), resume=30)
    view = collect(store.root)
    assert view.nodes[1].changes == {"lr": (1e-3, 5e-4)}
    assert view.phases[1].changes == {"lr": (1e-3, 5e-4)}


def test_a_phase_that_logged_nothing_says_so_in_its_curves(tmp_path):
    """A phase that failed in its setup logged no metric: its curve grid was one empty
    validation panel with axes from 0 to 1, which reads as a plot whose line is missing."""
    from llmzero_slurm.metrics import MetricsLog
    from llmzero_slurm.plots import overlay_figure
    fig = overlay_figure(MetricsLog(), None, labels=("node 0", "best strategy"))
    [ax] = [a for a in fig.axes if a.get_visible()]
    assert [t.get_text() for t in ax.texts] == ["no metrics logged"]
    assert list(ax.get_xticks()) == [] and list(ax.get_yticks()) == []
    plt.close(fig)


def test_the_best_strategy_figure_says_which_phase_was_stopped_early(tmp_path):
    """The best strategy's second phase was stopped early after 20 of its 60 steps, and its
    child went on from there: the figure named it "phase 2: node 1" like the completed ones,
    so its short span read as planned."""
    store = RunStore.create(tmp_path / "short", config())
    d = store.node_dir
    add(store, Kind.SCRATCH, None, RECIPE, Status.COMPLETED, scored(0, 30, 30, 0.5, None, [30], 0.1))
    metrics(d(0), 0, 30, 30, 0.5, None)
    add(store, Kind.EVOLVE, 0, RECIPE, Status.EARLY_STOPPED, scored(30, 50, 50, 0.55, None, [50], 0.1),
        resume=30)
    metrics(d(1), 30, 50, 50, 0.55, None)
    add(store, Kind.EVOLVE, 1, RECIPE, Status.COMPLETED, scored(50, 80, 80, 0.6, None, [80], 0.1),
        resume=50)
    metrics(d(2), 50, 80, 80, 0.6, None)
    fig = strategy_figure(collect(store.root))
    shown = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert shown[:3] == ["phase 1: node 0", "phase 2: node 1 (early_stopped)", "phase 3: node 2"]
    plt.close(fig)


def test_the_page_does_not_claim_it_alone_shows_test_scores(run):
    """The page said "Test-set scores appear only in this report", yet the run's TensorBoard
    export holds them on every validated step (test-core/...), as do the metrics files: a
    reader deciding where to look, or what to share, was told otherwise."""
    page = html(run)
    assert "only in this report" not in page
    assert "Test-set scores are for people (this report, TensorBoard, the metrics files): no " \
           "agent ever sees one." in page


@pytest.mark.parametrize("search, said", [
    ({"method": "grid"}, "no early stopping: grid runs every phase to its planned end"),
    ({"method": "llmzero", "early_stopping": False}, "no early stopping: search.early_stopping "
                                                      "is false"),
    ({"method": "llmzero"}, "early stopping saved none")])
def test_a_run_without_a_stopper_does_not_say_early_stopping_saved_none(tmp_path, search, said):
    """A grid run's status, last lines and report said "early stopping saved none", as if a
    stopper had watched its phases and let each one run: grid has none."""
    store = RunStore.create(tmp_path / "rep", config(**search))
    add(store, Kind.SCRATCH, None, RECIPE, Status.COMPLETED, scored(0, 30, 30, 0.5, None, [30], 0.1))
    first = collect(store.root).spent.lines()[0]
    assert first.endswith(f"; {said}"), first


def test_a_failed_phase_says_why_it_failed(tmp_path):
    """A grid run whose one phase failed in its setup: llmzero-status said "the last
    failure: node 0: llmzero: error: the script exited with code 1 during setup", but the
    report said only "failed", in its table and the node's section, and "No phase has a
    validation score yet" of a search that had ended: a reader could not learn why."""
    store = RunStore.create(tmp_path / "rep", config())
    node = add(store, Kind.SCRATCH, None, RECIPE, Status.FAILED, Results(gpu_hours=0.0))

    def submitted(n: Node) -> None:
        n.submission.job_id, n.submission.exit_code = "1", 1
    store.update_node(node.id, submitted)
    error = "llmzero: error: the script exited with code 1 during setup"
    (store.node_dir(node.id).path / "slurm-1.out").write_text(f"broken environment\n{error}\n")
    page = write_report(store.root).read_text()
    assert page.count(f"failed: {error}") == 2, page   # the table's row and the node's section
    assert "yet" not in page.split("<h2>Best strategy</h2>")[1].split("<img")[0]
    assert "none completed or was stopped early (the table of all phases says how each ended)" \
        in page     # a phase a person cancelled did not fail


def cancelled_unrecorded(tmp_path: Path) -> tuple[RunStore, Node]:
    """A completed root and its child, recorded running as job 2, whose job has ended
    cancelled (its status.json) since: what `llmzero-stop --cancel` leaves."""
    store = RunStore.create(tmp_path / "rep", config())
    add(store, Kind.SCRATCH, None, RECIPE, Status.COMPLETED,
        scored(0, 30, 20, 0.45, 0, [30], 0.10), finished_at=1.0)
    metrics(store.node_dir(0), 0, 30, 20, 0.45, TEST_AT_BEST[0])
    node = add(store, Kind.EVOLVE, 0, RECIPE, Status.RUNNING, Results(), resume=30)

    def submitted(n: Node) -> None:
        n.submission.job_id, n.submission.scheduler_state = "2", "RUNNING"
    store.update_node(node.id, submitted)
    store.node_dir(node.id).status_file.write_text(json.dumps(
        {"state": "cancelled", "job_id": "2", "started_at": 1.0, "finished_at": 2.0,
         "exit_code": 143, "reason": "signal (SIGTERM during run)"}))
    return store, node


def test_a_phase_whose_job_ended_since_the_controller_recorded_it_is_not_shown_running(tmp_path):
    """After `llmzero-stop --cancel` the report said the two cancelled phases were running
    (status column, job column "2 RUNNING"), while llmzero-status said their jobs had ended
    CANCELLED: the stopped controller cancels them without waiting to record their end."""
    store, node = cancelled_unrecorded(tmp_path)
    page = write_report(store.root).read_text()
    ended = "its job 2 ended cancelled, exit 143, since the controller last recorded it"
    assert page.count(ended) >= 2, page     # in the table and in the node's own section
    assert "2 RUNNING" not in page
    # Nor do its sums count it as running, or its plan as still to come, as status does not.
    metrics(store.node_dir(node.id), 30, 40, 40, 0.45, None)
    said = " ".join(collect(store.root).spent.lines())
    assert "so far in running phases" not in said and "running phases' plans" not in said, said
    # A cancel the stopper decided is an early stop there, as the controller will record it.
    store.node_dir(node.id).early_stop_file.write_text(json.dumps(
        [{"agent": "stopper", "result": {"action": "STOP", "reason": "dominated"}}]))
    assert "early stopping saved none" not in " ".join(collect(store.root).spent.lines())
    # A preempted job is requeued under its id by Slurm: it has not ended, it waits again.
    status = json.loads(store.node_dir(node.id).status_file.read_text())
    store.node_dir(node.id).status_file.write_text(json.dumps({**status, "state": "preempted"}))
    page = write_report(store.root).read_text()
    assert "ended preempted" not in page and "2 RUNNING" in page


def test_a_phase_whose_job_ended_unrecorded_has_the_status_llmzero_status_gives_it(tmp_path):
    """After `llmzero-stop --cancel`, llmzero-status listed a phase the stopper had decided
    to stop as early_stopped, and counted it so in the report's own Costs; the report's
    tables and tree still said "running" and drew it blue, beside "its job 3 ended
    cancelled"."""
    store, node = cancelled_unrecorded(tmp_path)
    store.node_dir(node.id).early_stop_file.write_text(json.dumps(
        [{"agent": "stopper", "result": {"action": "STOP", "reason": "dominated"}}]))
    page = write_report(store.root).read_text()
    shown = re.findall(r'class="status-(\w+)">(\w+)(?:</span>)? <span class="muted">\(its job 2 ended',
                       page)
    assert shown == [("early_stopped", "early_stopped")] * 2, shown   # table and section
    assert "running" not in re.sub(r"<[^>]+>", "", page.split("<h2>All phases</h2>")[1])
    image = plt.imread(store.root / "report" / TREE)
    [(x, y)] = re.findall(rf'coords="(\d+),(\d+),\d+" href="#node-{node.id}"', page)
    colour = to_rgb(STATUS_COLOURS[Status.EARLY_STOPPED])
    assert abs(image[int(y), int(x), :3] - colour).max() < 0.05


def test_status_does_not_read_usage_no_answer_reported_as_zero():
    """A vLLM server that reports no usage: llmzero-status read "agents: 2 LLM calls, 0
    tokens, $0.0000 + the unknown cost of 2 answers", as if the calls had been free."""
    from llmzero_slurm.cli.status import agents_line
    from llmzero_slurm.report.costs import AgentCost
    unknown = {"input_tokens": None, "output_tokens": None, "cache_write_tokens": None,
               "cache_read_tokens": None, "cost_usd": None, "unknown": "no usage given"}
    cost = AgentCost()
    for _ in range(2):
        cost.add({**record("stopper", 0, 0, action="CONTINUE"), "answers": ["x"],
                  "usage": unknown})
    assert agents_line({"stopper": cost}) == ("agents: 2 LLM calls, tokens and dollars "
                                              "unknown: the service reported no usage")
    cost.add({**record("stopper", 300, 0.01, action="CONTINUE"), "answers": ["x"]})
    assert agents_line({"stopper": cost}).startswith("agents: 3 LLM calls, 335 tokens, "
                                                     "$0.0100 + the unknown cost of 2 answers")


def test_the_controllers_refresh_opens_only_the_records_changed_since_the_last(run, tmp_path):
    """Review (a shared filesystem's metadata load): each refresh after a phase ended opened
    the run anew and read every node.json of it, hundreds in a long search. The controller's
    refreshes share one store: a record is opened again only once it changed."""
    import sys
    from llmzero_slurm.cli.start import build_controller
    run = Path(shutil.copytree(run, tmp_path / "rep"))
    then = time.time() - 3600
    for path in (run / "nodes").glob("*/node.json"):
        os.utime(path, (then, then))
    ctl = build_controller(RunStore.open(run))
    assert ctl.on_finish is not None
    opened: list[str] = []
    on = [True]
    sys.addaudithook(lambda event, args: opened.append(Path(str(args[0])).parent.name)
                     if on[0] and event == "open" and str(args[0]).endswith("node.json") else None)
    try:
        ctl.on_finish(run, False)
        assert sorted(opened) == ["0000", "0001", "0002", "0003", "0004", "0005"]
        RunStore.open(run).update_node(2, lambda n: setattr(n, "diagnosis", "edited"))
        opened.clear()
        ctl.on_finish(run, False)
        assert opened == ["0002"] and "edited" in html(run)
    finally:
        on[0] = False
