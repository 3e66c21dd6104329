"""The offline agent: rules on real CPU-trainer runs (tests/data/cpu_grpo, see record.py there)
and on constructed series for the rules those three runs do not exercise."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llmzero_slurm.agents.offline import error_analyzer as offline_analyzer
from llmzero_slurm.agents.offline import proposer as offline_proposer
from llmzero_slurm.agents.offline import stopper as offline_stopper
from llmzero_slurm.agents.offline.signals import Signals, diagnose
from llmzero_slurm.agents.answers import NothingUntried, Proposal, knobs
from llmzero_slurm.agents.error_analyzer import TAIL_CHARS, TAIL_LINES, ErrorAnalyzer, log_tail
from llmzero_slurm.agents.proposer import Proposer, ProposerInput
from llmzero_slurm.agents.stopper import Stopper, StopperInput
from llmzero_slurm.backends import get_backend
from llmzero_slurm.config import AgentConfig
from llmzero_slurm.errors import StateError
from llmzero_slurm.methods.space import parse_bounds
from llmzero_slurm.metrics import MetricsLog, best_val, val_score_series
from llmzero_slurm.metrics_reader import read_metrics
from llmzero_slurm.search.tree import Kind, Node, Results, Resume

DATA = Path(__file__).parent / "data" / "cpu_grpo"
BASE = {"lr": 1e-3, "kl_loss_coef": 0.04, "use_kl_loss": True, "temperature": 1.0,
        "grad_clip": 1.0, "rollout_n": 8, "max_response_length": 8, "train_batch_size": 16,
        "ppo_mini_batch_size": 16, "ppo_micro_batch_size_per_gpu": 16}
OFFLINE = AgentConfig(backend="heuristic")
CPU = get_backend("cpu")


def recorded(name: str) -> tuple[Node, MetricsLog]:
    run = json.loads((DATA / name / "run.json").read_text())
    node = Node(1, None, Kind.SCRATCH, {**BASE, **run["hparams"]},
                results=Results(checkpoints=run["checkpoints"]))
    return node, read_metrics(DATA / name / "metrics.jsonl")


def child(p: Proposal) -> Node:
    """The phase `p` proposed from the recorded one (node 1), as already tried."""
    return Node(2, 1, Kind.EVOLVE, p.hparams,
                None if p.checkpoint is None else Resume(1, p.checkpoint))


def propose(name: str, tmp_path: Path, **kw):
    node, log = recorded(name)
    return node, log, Proposer(OFFLINE, CPU, None).propose(
        ProposerInput(node, log, 0.6, **kw), tmp_path)


def test_collapsed_run_lowers_lr_raises_kl_and_never_resumes_after_the_peak(tmp_path):
    node, log, p = propose("collapse", tmp_path)
    assert p.diagnosis.startswith("collapse")
    assert p.hparams["lr"] < node.hparams["lr"]
    assert p.hparams["kl_loss_coef"] > node.hparams["kl_loss_coef"]
    peak = best_val(log)[0]
    # This run was best before its first step, so no checkpoint of it is worth resuming.
    assert (p.checkpoint is None) == (peak < min(node.results.checkpoints))
    assert p.checkpoint is None or p.checkpoint <= peak
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert record["backend"] == "heuristic" and record["result"]["changes"] == p.changes


def test_truncating_run_raises_max_response_length(tmp_path):
    node, _, p = propose("truncating", tmp_path)
    assert p.diagnosis.startswith("truncation")
    assert p.hparams["max_response_length"] > node.hparams["max_response_length"]


def test_healthy_run_goes_on_with_smaller_steps_and_capacity_never_shrinks(tmp_path):
    """Rule 7 said 'continue unchanged', an answer the answer check refuses: every healthy
    phase silently took the first alternative under the healthy diagnosis."""
    node, _, p = propose("healthy", tmp_path)
    assert p.diagnosis == "healthy: validation is still improving at the end of the phase."
    assert p.changes == {"lr": node.hparams["lr"] * 0.5,
                         "kl_loss_coef": node.hparams["kl_loss_coef"] * 1.5}
    assert p.checkpoint == max(node.results.checkpoints)
    _, _, second = propose("healthy", tmp_path / "b", siblings=[child(p)])
    assert "was run by a sibling or is refused, so a bolder variant instead" in second.diagnosis
    assert second.hparams["lr"] > node.hparams["lr"]
    for key in ("rollout_n", "max_response_length"):
        assert p.hparams[key] >= node.hparams[key]


def test_siblings_are_not_repeated_and_scratch_hides_checkpoints(tmp_path):
    node, log, first = propose("collapse", tmp_path / "a")
    _, _, second = propose("collapse", tmp_path / "b", siblings=[child(first)])
    assert second.hparams != first.hparams
    _, _, scratch = propose("collapse", tmp_path / "c", scratch_only=True)
    assert scratch.checkpoint is None and scratch.additional_steps == log.last_step
    _, _, fresh = propose("healthy", tmp_path / "d", scratch_only=True)
    assert fresh.checkpoint is None and fresh.changes      # not a replay of the parent


def test_stopper_stops_dominated_run_and_continues_steeper_one(tmp_path):
    _, healthy = recorded("healthy")
    _, collapse = recorded("collapse")
    best = best_val(healthy)[1]
    stopper = Stopper(OFFLINE, None)
    dominated = stopper.decide(StopperInput(collapse, 0, collapse.last_step + 40, healthy, best), tmp_path)
    assert dominated.action == "STOP" and dominated.source == "heuristic"
    # At its planned end a phase is finishing anyway: cancelling it would save nothing.
    finished = stopper.decide(StopperInput(collapse, 0, collapse.last_step, healthy, best), tmp_path)
    assert finished.action == "CONTINUE" and "planned end" in finished.reason
    # Nor one validation interval before it: the STOP would land after those steps had run.
    (*_, (before, _), (last, _)) = val_score_series(collapse)
    ending = stopper.decide(StopperInput(collapse, 0, last + (last - before), healthy, best), tmp_path)
    assert ending.action == "CONTINUE" and "planned end" in ending.reason
    still = stopper.decide(StopperInput(collapse, 0, last + (last - before) + 1, healthy, best), tmp_path)
    assert still.action == "STOP"
    # The healthy run seen midway is behind the best score but still climbing: continue, on
    # the strength of where its slope leads by the planned end.
    midway = healthy.until(healthy.last_step // 2)
    assert best_val(midway)[1] < best
    steeper = stopper.decide(StopperInput(midway, 0, healthy.last_step, healthy, best), tmp_path)
    assert steeper.action == "CONTINUE"
    assert float(re.search(r"may reach ([0-9.]+)", steeper.reason).group(1)) > best
    early = stopper.decide(StopperInput(collapse.until(9), 0, collapse.last_step, healthy, best), tmp_path)
    assert early.action == "CONTINUE" and "9 steps" in early.reason
    records = json.loads((tmp_path / "early_stop.json").read_text())
    assert ([r["result"]["action"] for r in records]
            == ["STOP", "CONTINUE", "CONTINUE", "STOP", "CONTINUE", "CONTINUE"])


def series(n=40, **curves):
    """A log whose metrics follow the given functions of the step."""
    return MetricsLog({name: [(s, float(f(s))) for s in range(1, n + 1)]
                       for name, f in curves.items()})


@pytest.mark.parametrize("curves, rule", [
    (dict(rewards=lambda s: 0.5, kl=lambda s: 0.001 if s < 20 else 0.05), "kl_spike"),
    (dict(rewards=lambda s: 0.3, entropy=lambda s: 1.0 if s < 20 else 0.1), "entropy_collapse"),
    (dict(rewards=lambda s: 0.3, grad=lambda s: 1.0 if s < 20 else 0.1,
          val=lambda s: 0.4), "vanishing"),
    (dict(rewards=lambda s: 0.3, grad=lambda s: 10.0 if s % 7 == 0 else 0.1,
          val=lambda s: 0.4), "noisy"),
    (dict(rewards=lambda s: 0.3, val=lambda s: 0.2 + 0.01 * s), "healthy"),
    (dict(rewards=lambda s: 0.3, val=lambda s: 0.4), "plateau"),
    (dict(rewards=lambda s: 0.3, clip=lambda s: 0.08, val=lambda s: 0.2 + 0.01 * s),
     "truncation"),   # one answer in twelve cut off is worth the room
    (dict(rewards=lambda s: 0.3, grad=lambda s: 0.5 if s < 30 else float("nan"),
          val=lambda s: 0.2 + 0.01 * s), "collapse"),
])
def test_rules_on_constructed_series(curves, rule):
    names = {"rewards": "critic/rewards/mean", "kl": "actor/kl_loss", "entropy": "actor/entropy",
             "grad": "actor/grad_norm", "val": "val-core/x/acc/mean@1",
             "clip": "response_length/clip_ratio"}
    log = series(**{names[k]: f for k, f in curves.items()})
    if "val" in curves:
        log.series[names["val"]] = [p for p in log.series[names["val"]] if p[0] % 5 == 0]
    assert diagnose(Signals.of(log))[0] == rule
    p = offline_proposer.propose(BASE, log, [20, 40], 40, CPU)
    assert p.hparams["rollout_n"] >= BASE["rollout_n"]


def test_a_plateau_sharpens_in_several_knobs_and_siblings_differ_in_several():
    flat = series(**{"critic/rewards/mean": lambda s: 0.3})
    flat.series["val-core/x/acc/mean@1"] = [(s, 0.4) for s in range(5, 41, 5)]
    first = offline_proposer.propose(BASE, flat, [20, 40], 40, CPU)
    assert first.diagnosis.startswith("plateau")
    assert first.changes == {"temperature": 0.7, "kl_loss_coef": 0.02}
    colder = offline_proposer.propose({**BASE, "temperature": 0.4}, flat, [20, 40], 40, CPU)
    assert colder.hparams["temperature"] == 0.3          # never below the sharpest useful
    # 0.7 - 0.3 in binary floating point is 0.39999999999999997, which a search on `expand`
    # wrote into its tree and phase scripts; moves land on the vocabulary's rounded values.
    from_07 = offline_proposer.propose({**BASE, "temperature": 0.7}, flat, [20, 40], 40, CPU)
    assert repr(from_07.hparams["temperature"]) == "0.4"
    siblings = [first]
    for _ in range(2):
        siblings.append(offline_proposer.propose(BASE, flat, [20, 40], 40, CPU,
                                                 taken=[(p.checkpoint, p.hparams)
                                                        for p in siblings]))
    for i, a in enumerate(siblings):
        for b in siblings[i + 1:]:
            differing = {k for k in a.hparams.keys() | b.hparams.keys()
                         if a.hparams.get(k) != b.hparams.get(k)}
            assert len(differing) >= 2, (a.changes, b.changes)


def test_a_sibling_the_budget_cut_short_is_still_taken():
    """A sibling's hparams hold its length as the sample budget cut it (and its epochs), so
    the whole-configuration comparison saw no repeat and proposed its knobs again."""
    flat = series(**{"critic/rewards/mean": lambda s: 0.3})
    flat.series["val-core/x/acc/mean@1"] = [(s, 0.4) for s in range(5, 41, 5)]
    first = offline_proposer.propose(BASE, flat, [20, 40], 40, CPU)
    cut = {**first.hparams, "total_training_steps": 7, "total_epochs": 3}
    second = offline_proposer.propose(BASE, flat, [20, 40], 40, CPU,
                                      taken=[(first.checkpoint, cut)])
    assert second.checkpoint == first.checkpoint and second.changes != first.changes
    assert "variant" in second.diagnosis


def test_regularisation_moves_both_ways_and_capacity_only_grows():
    def first(**curves):
        names = {"rewards": "critic/rewards/mean", "kl": "actor/kl_loss",
                 "entropy": "actor/entropy", "val": "val-core/x/acc/mean@1"}
        log = series(**{names[k]: f for k, f in curves.items()})
        return offline_proposer.propose(BASE, log, [20, 40], 40, CPU).hparams
    spiked = first(rewards=lambda s: 0.5, kl=lambda s: 0.001 if s < 20 else 0.05)
    collapsed = first(rewards=lambda s: 0.3, entropy=lambda s: 1.0 if s < 20 else 0.1)
    assert spiked["kl_loss_coef"] > BASE["kl_loss_coef"]          # tighter anchor
    assert collapsed["kl_loss_coef"] < BASE["kl_loss_coef"]       # looser anchor
    assert collapsed["temperature"] > BASE["temperature"]
    for hp in (spiked, collapsed):
        assert hp["rollout_n"] >= BASE["rollout_n"]
        assert hp["max_response_length"] >= BASE["max_response_length"]


SLURM_TIMEOUT = "slurmstepd: error: *** JOB 41 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO " \
                "TIME LIMIT ***"


@pytest.mark.parametrize("state, tail, failure, action", [
    ("OUT_OF_MEMORY", "slurmstepd: error: Detected 1 oom_kill event in StepId=41.0", "oom",
     "change"),
    ("FAILED", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom",
     "change"),
    ("TIMEOUT", SLURM_TIMEOUT, "timeout", "change"),
    ("NODE_FAIL", "", "node_fault", "retry"),
    ("FAILED", "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp",
     "node_fault", "retry"),
    ("FAILED", "Traceback (most recent call last):\n  File \"reward.py\", line 3\n"
               "KeyError: 'ground_truth'", "user_code", "give_up"),
    # a full disk while saving: retried (the search goes on once space is freed), not taken
    # for a bug in the task's code because the save raised with a traceback
    ("FAILED", "Traceback (most recent call last):\n  File \"checkpoint.py\", line 30\n"
               "OSError: [Errno 28] No space left on device", "node_fault", "retry"),
    # the run's own folder refused a write (made read-only under the run, a read-only
    # remount): retried once write access is back, not a bug in the task's code that ends
    # the chain with "start a new run"
    ("FAILED", "Traceback (most recent call last):\n  File \"checkpoint.py\", line 54\n"
               "PermissionError: [Errno 1] Operation not permitted: "
               "'/scratch/runs/x/nodes/0002/.best_adapter.31453.tmp'\n"
               "llmzero: could not write /scratch/runs/x/nodes/0002/status.json (state failed); "
               "the last record is kept", "node_fault", "retry"),
    ("FAILED", "Traceback (most recent call last):\n  File \"checkpoint.py\", line 30\n"
               "OSError: [Errno 30] Read-only file system: '/scratch/ckpt/step_20'",
               "node_fault", "retry"),
    # the task's own file unreadable: retrying unchanged fails the same way
    ("FAILED", "Traceback (most recent call last):\n  File \"reward.py\", line 3\n"
               "PermissionError: [Errno 13] Permission denied: '/home/u/answers.json'",
               "user_code", "give_up"),
    ("FAILED", "something odd happened", "unknown", "retry"),
    # a slurm.setup line failed before training: retrying unchanged fails the same way
    ("FAILED", "bash: line 3: module: command not found\n"
               "llmzero: error: the script exited with code 127 during setup", "setup", "give_up"),
])
def test_error_analyzer_classes(tmp_path, state, tail, failure, action):
    hp = {**BASE, "ppo_micro_batch_size_per_gpu": 8, "total_training_steps": 100}
    fix = ErrorAnalyzer(OFFLINE, CPU, None).analyze(state, 1, tail, hp, tmp_path)
    assert (fix.failure, fix.action) == (failure, action)
    if failure == "oom":
        assert fix.hparams["ppo_micro_batch_size_per_gpu"] == 4
    if failure == "timeout":
        assert fix.hparams["total_training_steps"] == 60
    if failure == "user_code":
        assert tail.splitlines()[-1] in fix.message      # the job's own error line
    if failure == "setup":
        assert "slurm.setup" in fix.message and "code 127 during setup" in fix.message
    assert json.loads((tmp_path / "error_analysis.json").read_text())["result"]["failure"] \
        == failure


@pytest.mark.parametrize("micro, halved", [(3, 1), (9, 3)])
def test_an_oom_fix_halves_the_micro_batch_to_a_size_that_divides_the_mini_batch(
        tmp_path, micro, halved):
    """ceil(micro / 2) need not divide ppo_mini_batch_size * rollout_n (9 here: 3 -> 2,
    9 -> 5), and the offline analyzer, which must not fail, raised "must divide"."""
    hp = {**BASE, "train_batch_size": 3, "ppo_mini_batch_size": 3, "rollout_n": 3,
          "ppo_micro_batch_size_per_gpu": micro}
    fix = ErrorAnalyzer(OFFLINE, CPU, None).analyze("OUT_OF_MEMORY", 137, "", hp, tmp_path)
    assert (fix.failure, fix.action) == ("oom", "change")
    assert fix.hparams["ppo_micro_batch_size_per_gpu"] == halved


def test_oom_at_smallest_batch_gives_up_with_advice(tmp_path):
    hp = {**BASE, "ppo_micro_batch_size_per_gpu": 1, "log_prob_micro_batch_size_per_gpu": 1}
    fix = ErrorAnalyzer(OFFLINE, CPU, None).analyze("OUT_OF_MEMORY", 137, "", hp, tmp_path)
    assert fix.action == "give_up" and "smallest batches" in fix.message


def test_log_tail_is_bounded_and_has_no_test_metrics():
    text = "\n".join(f"step:{i} - test-core/a/acc/mean@1:0.9{i}" for i in range(500))
    tail = log_tail(text)
    assert len(tail.splitlines()) == 80 and "test-core" not in tail


def test_log_tail_strips_scores_before_it_cuts_and_keeps_whole_lines():
    """The cut to TAIL_CHARS came first: landing inside `val-core/...` it left a name the
    stripping did not know, and its score went to the LLM; the cut line's start went too."""
    score = "val-core/addition/acc/mean@1:0.987654"
    kept = score[len("val-c"):]                      # what a cut after "val-c" leaves
    text = f"step:1 - {score}\n" + "x" * (TAIL_CHARS - len(kept) - 1)
    assert "0.9876" not in log_tail(text)
    long_lines = "\n".join(f"{i:03d}" + "a" * 197 for i in range(TAIL_LINES))
    tail = log_tail(long_lines)
    assert len(tail) <= TAIL_CHARS and tail.endswith("a" * 197)
    assert all(len(line) == 200 for line in tail.splitlines())   # no partial first line


def test_corrupt_decision_log_is_reported_not_overwritten(tmp_path):
    _, healthy = recorded("healthy")
    (tmp_path / "early_stop.json").write_text("[{broken")
    with pytest.raises(StateError, match="early_stop.json: corrupt JSON"):
        Stopper(OFFLINE, None).decide(StopperInput(healthy, 0, 120, healthy, 0.5), tmp_path)
    assert (tmp_path / "early_stop.json").read_text() == "[{broken"


def test_a_timed_out_phase_is_replanned_to_fit_what_it_managed(tmp_path):
    log = "step 41: ...\nslurmstepd: *** JOB 7 ON vm CANCELLED AT 2026-11-22 DUE TO TIME LIMIT ***\n"
    hp = {"total_training_steps": 400, "lr": 1e-3}
    fix = ErrorAnalyzer(AgentConfig(backend="heuristic"), CPU, None).analyze(
        "TIMEOUT", 0, log, hp, tmp_path, steps_done=120)
    assert (fix.failure, fix.action) == ("timeout", "change")
    assert fix.hparams["total_training_steps"] == 84
    unknown = offline_analyzer.analyze("TIMEOUT", 0, log, hp, CPU)
    assert unknown.hparams["total_training_steps"] == 240


def test_the_stopper_judges_the_trend_not_one_lucky_checkpoint():
    flat = [(105, 0.40), (110, 0.44), (115, 0.39), (120, 0.41), (125, 0.40)]
    stop = offline_stopper.decide(flat, 0.45, 25, 160, margin=0.02)
    assert stop.action == "STOP" and "0.45" in stop.reason
    rising = [(105, 0.30), (110, 0.33), (115, 0.35), (120, 0.38), (125, 0.40)]
    assert offline_stopper.decide(rising, 0.45, 25, 160, margin=0.02).action == "CONTINUE"
    assert offline_stopper.decide(flat, 0.45, 25, 160, margin=0.1).action == "CONTINUE"
    # A gentle climb over three points is not projected 45 steps ahead: only as far as it spans.
    short = [(105, 0.36), (110, 0.37), (115, 0.38)]
    gentle = offline_stopper.decide(short, 0.45, 15, 160, margin=0.02)
    assert gentle.action == "STOP" and "by step 125" in gentle.reason


def test_a_job_that_refused_its_input_ends_its_chain_with_the_error_line(tmp_path):
    """Issue 15: exit 2 (prompts longer than max_prompt_length) was "unrecognised failure" and
    retried unchanged until every phase had failed."""
    tail = ("loading data\nerror: data/train.parquet: row 7: the prompt is 61 tokens, "
            "max_prompt_length is 32\n")
    fix = ErrorAnalyzer(OFFLINE, CPU, None).analyze("FAILED", 2, tail, BASE, tmp_path)
    assert (fix.failure, fix.action) == ("user_code", "give_up")
    assert "refused its input (exit 2): error: data/train.parquet: row 7" in fix.message


@pytest.mark.parametrize("state, code, line", [
    ("FAILED", 1, "safetensors._safetensors_rust.SafetensorError: Error while deserializing "
                  "header: HeaderTooLarge"),
    ("FAILED", 2, "cpu_grpo: error: the CPU trainer trains LoRA adapters only (lora_rank 0)"),
    # The warm start's advice (374 characters) was cut at 300, mid-sentence: "... 0 for ; ..."
    ("FAILED", 2, "cpu_grpo: error: warm start: held-out training accuracy reached only 0.658 "
                  "in 200 supervised steps, below the target band's low end 0.95: raise "
                  "task.warm_start.max_steps (--warm-start-max-steps), lower task.warm_start.band "
                  "(--warm-start-band), or set task.warm_start.steps (--warm-start-steps; 0 for "
                  "none)")])
def test_the_message_quotes_the_jobs_own_error_line(tmp_path, state, code, line):
    """A dotted exception class and a program-named error line were "see the job log"."""
    tail = (f"Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n{line}\n"
            "srun: error: vm: task 0: Exited with exit code 1\n")
    fix = ErrorAnalyzer(OFFLINE, CPU, None).analyze(state, code, tail, BASE, tmp_path)
    assert (fix.failure, fix.action) == ("user_code", "give_up")
    assert line in fix.message and "start a new run" in fix.message


def test_an_error_line_too_long_to_quote_says_it_was_cut(tmp_path):
    line = "cpu_grpo: error: " + "x" * 3000
    fix = ErrorAnalyzer(OFFLINE, CPU, None).analyze("FAILED", 2, line + "\n", BASE, tmp_path)
    assert line[:900] in fix.message and "x\u2026 (cut; the whole line is in the job log); " \
        "this chain is not retried" in fix.message


BOUNDS = parse_bounds({"lr": {"loguniform": [5e-4, 1.5e-3]}, "rollout_n": [8, 12],
                       "temperature": {"uniform": [0.8, 1.2]}, "kl_loss_coef": 0.04,
                       "total_training_steps": {"uniform": [20, 30]}}, "cpu")


@pytest.mark.parametrize("rule, curves", [
    ("vanishing", dict(grad=lambda s: 1.0 if s < 20 else 0.1, val=lambda s: 0.4)),  # lr x2, n x2
    ("plateau", dict(val=lambda s: 0.4)),                               # temperature -0.3
    ("healthy", dict(val=lambda s: 0.2 + 0.01 * s)),                    # lr x0.5, KL x1.5
])
def test_the_offline_proposer_moves_each_knob_only_as_far_as_search_space_allows(rule, curves):
    """A user who bounds the search (a GPU's memory caps rollout_n, a known-good lr range)
    gets no phase outside it: the rule's change is cut at the bound, a knob fixed by the
    space stays, and the phase's length keeps to its range too."""
    names = {"grad": "actor/grad_norm", "val": "val-core/x/acc/mean@1"}
    log = series(**{"critic/rewards/mean": lambda s: 0.3, **{names[k]: f for k, f in curves.items()}})
    log.series[names["val"]] = [p for p in log.series[names["val"]] if p[0] % 5 == 0]
    assert diagnose(Signals.of(log))[0] == rule
    taken: list[tuple[int | None, dict]] = []
    for _ in range(3):                                  # the rule's change, then alternatives
        p = offline_proposer.propose(BASE, log, [20, 40], 40, CPU, taken=taken, bounds=BOUNDS)
        assert BOUNDS.problem(p.hparams) is None, p.hparams
        taken.append((p.checkpoint, p.hparams))
    first = offline_proposer.propose(BASE, log, [20, 40], 40, CPU, bounds=BOUNDS)
    assert first.hparams["total_training_steps"] == 30 and first.hparams["kl_loss_coef"] == 0.04
    if rule == "vanishing":
        assert (first.hparams["lr"], first.hparams["rollout_n"]) == (1.5e-3, 12)
    if rule == "plateau":
        assert first.hparams["temperature"] == 0.8


def test_the_offline_error_analyzer_keeps_to_search_space(tmp_path):
    """An OOM fix halves the micro batches the user's bound lets it halve; a time-limit fix
    keeps the phase length in its range."""
    hp = {**BASE, "ppo_micro_batch_size_per_gpu": 8, "total_training_steps": 30}
    bounds = parse_bounds({"ppo_micro_batch_size_per_gpu": [8, 16],
                           "total_training_steps": {"uniform": [20, 30]}}, "cpu")
    analyzer = ErrorAnalyzer(OFFLINE, CPU, None, bounds)
    oom = analyzer.analyze("OUT_OF_MEMORY", 137, "", hp, tmp_path / "oom")
    assert oom.action == "change" and oom.hparams["ppo_micro_batch_size_per_gpu"] == 8
    assert "ppo_micro_batch_size_per_gpu" not in oom.changes and oom.changes
    late = analyzer.analyze("TIMEOUT", 0, "DUE TO TIME LIMIT", hp, tmp_path / "t", steps_done=10)
    assert late.action == "change" and late.hparams["total_training_steps"] == 20


@pytest.mark.parametrize("state, steps, space, done, reason", [
    # The clamp to search.space undoes the halving's arithmetic: 16 -> 8 -> 12, which does
    # not divide 8 x 16 samples.
    ("OUT_OF_MEMORY", None, {"rollout_n": [6, 8], "ppo_micro_batch_size_per_gpu": [12, 16]},
     None, "must divide ppo_mini_batch_size * rollout_n (128) (got 12)"),
    # A phase the budget cut to 7 steps, below the space, cannot be shortened within it.
    ("TIMEOUT", 7, {"total_training_steps": {"uniform": [20, 30]}}, 5,
     "'total_training_steps' must be between 1 and 7, got 20"),
])
def test_the_offline_error_analyzer_gives_up_with_the_reason_when_its_fix_is_refused(
        tmp_path, state, steps, space, done, reason):
    """Review: the offline analyzer, the fallback that must never fail, raised AnswerError when
    the fix it built broke a check (a bound clamp breaking the batch arithmetic, a time-limit
    fix no length within search.space allows): the controller exited with a traceback and
    wrote no error_analysis.json. Such a fix now gives up, its message saying why."""
    hp = {**BASE, "total_training_steps": steps} if steps else BASE
    analyzer = ErrorAnalyzer(OFFLINE, CPU, None, parse_bounds(space, "cpu"))
    fix = analyzer.analyze(state, 137, "", hp, tmp_path, steps_done=done)
    assert fix.action == "give_up" and reason in fix.message
    record = json.loads((tmp_path / "error_analysis.json").read_text())
    assert record["result"]["action"] == "give_up" and reason in record["result"]["message"]


@pytest.mark.parametrize("scratch_only", [True, False])
def test_the_offline_proposer_never_repeats_a_configuration_tried_from_its_parent(scratch_only):
    """Review: once the rule's change and its alternatives were taken, the last resort ran
    the parent's configuration from scratch without looking at the siblings, so every later
    injection at that parent (nodes 13, 19, 25, 31, 37 of one search) trained the same
    configuration. Each proposal now differs from the parent and from every sibling, the
    last resort by its seed; where search.space fixes the seed, there is no proposal (review:
    the parent's configuration again, a phase spent learning nothing) but NothingUntried."""
    node, log = recorded("healthy")
    parent = CPU.effective_hparams(node.hparams)
    taken: list[tuple[int | None, dict]] = []
    for _ in range(7):
        p = offline_proposer.propose(parent, log, node.results.checkpoints, 120, CPU,
                                     scratch_only, taken)
        assert knobs(p.hparams) not in [knobs(h) for h in (parent, *(h for _, h in taken))], \
            p.diagnosis
        taken.append((p.checkpoint, p.hparams))
    fixed_seed = parse_bounds({"seed": parent["seed"]}, "cpu")
    with pytest.raises(NothingUntried, match="no untried proposal is left within search.space"):
        offline_proposer.propose(parent, log, node.results.checkpoints, 120, CPU, scratch_only,
                                 taken[:3], fixed_seed)
    # Review (of that fix): the reseed counted up from the parent's seed, so with seeds 0 to 3
    # allowed and the parent at 3 it was clamped back to 3, a repeat while 0 to 2 were free.
    bounded = parse_bounds({"seed": {"uniform": [0, 3]}}, "cpu")
    at_top, taken, reseeds = {**parent, "seed": 3}, [], []
    while len(reseeds) < 3 and len(taken) < 8:
        p = offline_proposer.propose(at_top, log, node.results.checkpoints, 120, CPU,
                                     scratch_only, taken, bounded)
        taken.append((p.checkpoint, p.hparams))
        reseeds += [p.hparams["seed"]] if "reseeded" in p.diagnosis else []
    assert sorted(reseeds) == [0, 1, 2]
