"""Answer validation: what an LLM writes can only reach a script through these checks."""
from __future__ import annotations

import pytest

from llmzero_slurm.backends import get_backend
from llmzero_slurm.agents.knowledge import hparam_guide
from llmzero_slurm.agents.answers import AnswerError, check_fix, check_proposal, extract_json
from llmzero_slurm.agents.decisions import parse_decision
from llmzero_slurm.methods.space import parse_bounds

CPU = get_backend("cpu")
PARENT = {"lr": 1e-3, "kl_loss_coef": 0.04, "train_batch_size": 16, "ppo_mini_batch_size": 16,
          "ppo_micro_batch_size_per_gpu": 16, "rollout_n": 8, "max_response_length": 8,
          "lora_rank": 8, "lora_alpha": 16.0, "total_training_steps": 100, "total_epochs": 4}


def proposal(changes, step=50, additional=60, scratch=False, taken=()):
    data = {"diagnosis": "d", "changes": changes, "checkpoint_step": step,
            "additional_steps": additional}
    return check_proposal(data, PARENT, [25, 50, 75, 100], scratch, CPU, "test", taken=taken)


def test_extract_json_prefers_last_fenced_block():
    text = 'thinking {"a": 1}\n```json\n{"a": 2}\n```\nmore ```json\n{"a": 3}\n```'
    assert extract_json(text) == {"a": 3}
    assert extract_json('reason... {"x": {"y": 1}} done') == {"x": {"y": 1}}
    with pytest.raises(AnswerError, match="not valid JSON"):
        extract_json('```json\n{"a": 1,}\n```')
    with pytest.raises(AnswerError, match="no JSON object"):
        extract_json("I think lr should go down")
    with pytest.raises(AnswerError, match="nested too deeply"):     # not a RecursionError
        extract_json('{"a": ' * 1500 + "1" + "}" * 1500)
    # Not a bare ValueError (Python's limit on an integer's digits), which skipped the
    # repair round as though the checker had failed rather than the answer.
    with pytest.raises(AnswerError, match="number of 5000 digits"):
        extract_json('{"additional_steps": ' + "1" * 5000 + "}")


def test_epochs_follow_the_batch_size_in_code():
    p = proposal({"train_batch_size": 32, "ppo_mini_batch_size": 16}, additional=60)
    # parent: 25 steps/epoch at batch 16 -> 12.5 at batch 32 -> 60 steps need 5 epochs
    assert p.hparams["total_training_steps"] == 60 and p.hparams["total_epochs"] == 5
    assert p.changes == {"train_batch_size": 32, "ppo_mini_batch_size": 16}


@pytest.mark.parametrize("changes, needle", [
    ({"learning_rate": 1e-4}, "'learning_rate': is not a known hyperparameter"),
    ({"lr": 5.0}, "'lr': must be <= 0.1"),
    ({"rollout_n": "eight"}, "'rollout_n': must be an integer"),
    ({"lr": "1e-3; rm -rf /"}, "'lr': must be a number"),
    ({"target_modules": "$(reboot)"}, "'target_modules': must be 1-64 characters"),
    ({"lr; touch pwned": 1e-4}, "is not a known hyperparameter"),
    ({"ppo_mini_batch_size": 5}, "'ppo_mini_batch_size': must divide train_batch_size"),
    ({"total_epochs": 9}, "do not set 'total_epochs'"),
    ({"max_response_length": 4}, "'max_response_length' may not shrink"),
    ({"lora_rank": 16}, "'lora_rank' cannot change when resuming"),
])
def test_bad_changes_are_named(changes, needle):
    with pytest.raises(AnswerError) as err:
        proposal(changes)
    assert needle in str(err.value)


@pytest.mark.parametrize("value", ["all-linear\n", "q_proj\n"])
def test_a_text_value_ending_in_a_newline_is_refused_with_the_answer(value):
    """A text hyperparameter was matched with `^...$`, whose `$` also matches before a final
    newline: an LLM's "all-linear\n" passed the answer's checks, and the phase it planned
    failed as its script was rendered, a phase of the budget spent on no training, where the
    answer should have gone back to the LLM to mend."""
    with pytest.raises(AnswerError, match="'target_modules': must be 1-64 characters"):
        proposal({"target_modules": value, "lr": 2e-3}, step=None)


def test_checkpoint_rules():
    with pytest.raises(AnswerError, match=r"60 is not a saved step; choose one of \[25, 50"):
        proposal({}, step=60)
    with pytest.raises(AnswerError, match="must train from scratch"):
        proposal({}, step=50, scratch=True)
    scratch = proposal({"lora_rank": 16, "max_response_length": 4}, step=None)
    assert scratch.checkpoint is None and scratch.hparams["lora_rank"] == 16
    with pytest.raises(AnswerError, match="'additional_steps' must be an integer"):
        proposal({}, additional="many")


def test_changes_that_keep_the_parents_values_must_say_no_change():
    """Only an empty `changes` needed "no_change": true; {"lr": 0.001} on a parent at 0.001
    repeated the parent unannounced."""
    with pytest.raises(AnswerError, match="set \"no_change\": true"):
        proposal({"lr": 1e-3, "rollout_n": 8})
    data = {"diagnosis": "d", "changes": {"lr": 1e-3}, "checkpoint_step": 50,
            "additional_steps": 60, "no_change": True}
    assert check_proposal(data, PARENT, [50], False, CPU, "test").hparams["lr"] == 1e-3
    assert proposal({"lr": 1e-3}, step=None).checkpoint is None     # a fresh start is no repeat


def test_a_proposal_repeating_a_configuration_already_tried_is_refused():
    """Review: the check was given no siblings, so an LLM answer repeating one, or a forced
    fresh start answering "changes": {} (its parent's configuration, which the prompt
    forbids), was accepted without a repair round and trained again. Either is refused now,
    whatever length it plans; another configuration passes."""
    sibling = (50, proposal({"lr": 5e-4}).hparams)
    with pytest.raises(AnswerError, match="repeats a configuration already tried"):
        proposal({"lr": 5e-4}, additional=90, taken=[sibling])
    assert proposal({"lr": 4e-4}, taken=[sibling]).hparams["lr"] == 4e-4
    # Review (of that fix): where a child starts is part of what was tried: the same change
    # from another checkpoint, or from the base model, is a new experiment.
    assert proposal({"lr": 5e-4}, step=100, taken=[sibling]).checkpoint == 100
    assert proposal({"lr": 5e-4}, step=None, taken=[sibling]).checkpoint is None
    with pytest.raises(AnswerError, match="must not repeat the configuration above"):
        proposal({}, step=None, scratch=True)
    assert proposal({"lr": 4e-4}, step=None, scratch=True).checkpoint is None


def test_fix_validation():
    fix = check_fix({"class": "oom", "action": "change",
                     "changes": {"ppo_micro_batch_size_per_gpu": 8}}, PARENT, CPU, "t")
    assert fix.hparams["ppo_micro_batch_size_per_gpu"] == 8
    for data, needle in [({"class": "cosmic", "action": "retry"}, "'class' must be one of"),
                         ({"class": "oom", "action": "change", "changes": {}}, "non-empty"),
                         ({"class": "oom", "action": "give_up"}, "'message' must tell"),
                         ({"class": "oom", "action": "change",
                           "changes": {"ppo_micro_batch_size_per_gpu": 16}}, "repeat the failed"),
                         ({"class": "oom", "action": "change",
                           "changes": {"ppo_micro_batch_size_per_gpu": 3}}, "must divide")]:
        with pytest.raises(AnswerError, match=needle):
            check_fix(data, PARENT, CPU, "t")


@pytest.mark.parametrize("steps, needle", [
    (None, "'total_training_steps' must be an integer"),      # unbounded: past the sample budget
    (500, "'total_training_steps' must be between 1 and 100"),  # longer than the failed plan
    ("80", "'total_training_steps' must be an integer"),
])
def test_a_fix_may_only_shorten_the_failed_phase(steps, needle):
    """A fix's schedule was merged unchecked: a null or huge step count, or total_epochs,
    gave the debug child a phase no proposal may plan."""
    def fix(changes):
        return check_fix({"class": "timeout", "action": "change", "changes": changes}, PARENT,
                         CPU, "t")
    with pytest.raises(AnswerError, match=needle):
        fix({"total_training_steps": steps})
    with pytest.raises(AnswerError, match="do not set 'total_epochs'"):
        fix({"total_epochs": 9})
    shorter = fix({"total_training_steps": 60})
    # the parent's 25 steps an epoch: 60 steps need 3 epochs, derived as a proposal's are
    assert (shorter.hparams["total_training_steps"], shorter.hparams["total_epochs"]) == (60, 3)
    assert shorter.changes == {"total_training_steps": 60}


def test_a_fix_may_keep_the_length_a_budget_cut_put_below_search_space():
    """Review: a phase the sample budget cut below search.space's lower bound could get no
    fix: keeping its steps was "outside search.space" and more steps "longer than the failed
    phase", so even the offline analyzer raised and the controller exited. A fix may keep the
    failed phase's own length; a length it shortens to keeps to the space."""
    bounds = parse_bounds({"total_training_steps": {"uniform": [120, 200]}}, "cpu")

    def fix(changes):
        return check_fix({"class": "oom", "action": "change", "changes": changes}, PARENT, CPU,
                         "t", bounds=bounds)
    assert fix({"ppo_micro_batch_size_per_gpu": 8}).hparams["total_training_steps"] == 100
    with pytest.raises(AnswerError, match="total_training_steps 60 is outside search.space"):
        fix({"total_training_steps": 60})


def test_decision_parsing():
    d = parse_decision("REASON: flat and far below.\nDECISION: **STOP**", 40, "x")
    assert d.action == "STOP" and d.reason == "flat and far below." and d.step == 40
    assert parse_decision("I would stop this run.", 40, "x") is None


@pytest.mark.parametrize("text, action, reason", [
    ("REASON: flat.\n**DECISION**: STOP", "STOP", "flat."),
    ("**REASON:** flat.\n**DECISION:** STOP", "STOP", "flat."),
    ("**Reason**: still climbing.\nDecision: continue.", "CONTINUE", "still climbing."),
    ("REASON: far below. DECISION: STOP\n\nHope this helps.", "STOP", "far below."),
    ("REASON: unsure.\nDECISION: STOP is not warranted; CONTINUE", None, None),
    ("REASON: unsure.\nDECISION: CONTINUE or STOP", None, None),
    ("DECISION: STOP\nREASON: the key decision: whether it can catch up", "STOP",
     "the key decision: whether it can catch up"),
])
def test_a_decision_is_one_word_whatever_markdown_its_labels_wear(text, action, reason):
    """A bold label (**DECISION**: STOP) read as no decision, and a decision line that went on
    past its word was read by its first word ("STOP is not warranted; CONTINUE" stopped the
    phase). Labels are read through their markdown, and a decision is one allowed word."""
    decision = parse_decision(text, 40, "x")
    if action is None:
        assert decision is None
    else:
        assert (decision.action, decision.reason) == (action, reason)


@pytest.mark.parametrize("backend, shown", [("verl", "lora_rank (int in [1, 512])"),
                                            ("cpu", "lora_rank (int in [1, 1024])")])
def test_the_agents_guide_shows_the_range_the_trainer_takes(backend, shown):
    """The guide an agent answers from gave lora_rank 0-1024 whatever the trainer, so an answer
    inside it (verl at 0 or 1024) came back refused and cost a repair round."""
    guide = hparam_guide(get_backend(backend))
    assert shown in guide
