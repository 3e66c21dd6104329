"""The baseline search methods: what each plans, in which order, and when it waits or stops."""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
import yaml

from llmzero_slurm.config import ExperimentConfig, parse_config
from llmzero_slurm.errors import ConfigError
from llmzero_slurm.hparams import validate_hparams
from llmzero_slurm.methods import MethodContext, make_method
from llmzero_slurm.methods.base import PhasePlan, SearchMethod
from llmzero_slurm.methods.space import GRID_SPACES, GUIDEBOOK_SCHEDULES
from llmzero_slurm.search.policy import Action, make_child
from llmzero_slurm.search.tree import Kind, Results, Status, Tree
from llmzero_slurm.store.node_dir import NodeDir
from llm_loopback import LoopbackLLM
from metrics_files import val_rows, write_metrics

# A small practitioner recipe for the CPU trainer (its batch shape constrains the samplers).
RECIPE = {"lr": 1e-3, "kl_loss_coef": 0.04, "temperature": 1.0, "rollout_n": 8,
          "train_batch_size": 16, "ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 64,
          "lora_rank": 8, "lora_alpha": 16.0, "save_freq": 25, "max_response_length": 8}


def config(backend: str = "cpu", hparams: dict | None = None, **search) -> ExperimentConfig:
    return parse_config({"name": "t", "backend": backend,
                         "hparams": RECIPE if hparams is None else hparams, "search": search,
                         "slurm": {"gpus_per_node": 8 if backend == "verl" else 0}})


def method(tmp_path: Path, cfg: ExperimentConfig) -> SearchMethod:
    ctx = MethodContext(cfg, lambda i: NodeDir(tmp_path / f"{i:04d}"), tmp_path / "scratch")
    return make_method(cfg.search.method, ctx)


def create(tree: Tree, plan: PhasePlan) -> Tree:
    """What the controller does with a plan: record the child (make_child checks it)."""
    node = make_child(tree, plan.action, len(tree), plan.hparams, plan.resume_step, plan.diagnosis)
    return Tree([*tree, node])


def finish(tree: Tree, node_id: int, status: Status, checkpoints=(25, 50)) -> Tree:
    node = tree[node_id]
    start = node.start_step
    node.status = status
    node.results = Results(best_val=0.5, last_step=start + 50,
                           checkpoints=[start + c for c in checkpoints])
    return Tree(tree)


def drain(m: SearchMethod, tree: Tree | None = None) -> tuple[Tree, list[PhasePlan]]:
    """Create every phase the method offers without waiting for any job."""
    tree = tree if tree is not None else Tree([])
    plans = []
    while (plan := m.next_phase(tree)) is not None:
        plans.append(plan)
        tree = create(tree, plan)
    return tree, plans


# -- practitioner ---------------------------------------------------------------------------

def test_practitioner_is_one_static_run_of_the_recipe(tmp_path):
    m = method(tmp_path, config(method="practitioner"))
    assert not m.exhausted(Tree([]))
    tree, plans = drain(m)
    assert len(plans) == 1 and plans[0].action.kind is Kind.SCRATCH and plans[0].action.parent is None
    assert plans[0].hparams == validate_hparams(RECIPE, "cpu")
    assert m.exhausted(tree)
    assert m.next_phase(finish(tree, 0, Status.COMPLETED)) is None


# -- llmzero's debug children ---------------------------------------------------------------

def test_a_timed_out_phase_goes_on_from_its_own_last_checkpoint(tmp_path):
    """Issue 14.7: it was retried from the base model although it had saved step 25."""
    m = method(tmp_path, config(method="llmzero", hparams={**RECIPE, "total_training_steps": 50}))
    tree = finish(create(Tree([]), m.next_phase(Tree([]))), 0, Status.FAILED, checkpoints=(25,))
    tree[0].submission.scheduler_state = "TIMEOUT"
    write_metrics(NodeDir(tmp_path / "0000").metrics_file, val_rows({s: 0.4 for s in (10, 30)}))
    plan = m.next_phase(tree)
    assert plan is not None and plan.action.kind is Kind.DEBUG and plan.resume_step == 25
    # 25 steps were left and 30 ran before the limit (the analyzer plans 70 % of that: 21).
    assert plan.hparams["total_training_steps"] == 21
    assert "own checkpoint at step 25" in plan.diagnosis
    child = create(tree, plan)[1]
    assert child.resume is not None and (child.resume.node, child.start_step) == (0, 25)


def test_a_timed_out_phase_s_diagnosis_names_the_length_it_is_given(tmp_path):
    """Campaign walkthrough: a 240-step phase cut by its time limit at step 225 got a debug
    child of the 15 steps it had left, whose diagnosis (node.json, the log, the report) said
    'total_training_steps=157', the analyzer's figure before the cut to what was left."""
    m = method(tmp_path, config(method="llmzero", hparams={**RECIPE, "total_training_steps": 50}))
    tree = finish(create(Tree([]), m.next_phase(Tree([]))), 0, Status.FAILED, checkpoints=(45,))
    tree[0].submission.scheduler_state = "TIMEOUT"
    write_metrics(NodeDir(tmp_path / "0000").metrics_file, val_rows({s: 0.4 for s in (10, 48)}))
    plan = m.next_phase(tree)
    assert plan is not None and plan.resume_step == 45
    assert plan.hparams["total_training_steps"] == 5
    assert "total_training_steps=5;" in plan.diagnosis, plan.diagnosis


@pytest.mark.parametrize("state, code", [("NODE_FAIL", None), ("FAILED", 137)])
def test_a_phase_retried_unchanged_goes_on_from_its_own_last_checkpoint(tmp_path, state, code):
    """Walkthrough: a phase whose node died (or that was SIGKILLed) after saving step 25 was
    retried unchanged from its start: the same settings trained the same 25 steps again."""
    m = method(tmp_path, config(method="llmzero", hparams={**RECIPE, "total_training_steps": 50}))
    tree = finish(create(Tree([]), m.next_phase(Tree([]))), 0, Status.FAILED, checkpoints=(25,))
    tree[0].submission.scheduler_state, tree[0].submission.exit_code = state, code
    write_metrics(NodeDir(tmp_path / "0000").metrics_file, val_rows({s: 0.4 for s in (10, 30)}))
    plan = m.next_phase(tree)
    assert plan is not None and plan.action.kind is Kind.DEBUG and "retry unchanged" in plan.diagnosis
    assert plan.resume_step == 25 and plan.hparams["total_training_steps"] == 25, plan
    assert "own checkpoint at step 25" in plan.diagnosis


def test_an_llm_fix_of_a_resumed_phase_keeps_the_adapters_lora_settings(tmp_path, monkeypatch):
    """An OOM fix 'lora_rank: 4' for a phase that resumed a rank-8 adapter made a debug child
    the trainer refuses (exit 2), which ended the chain; it now goes back to the LLM."""
    monkeypatch.setenv("LLMZERO_TEST_LLM_KEY", "sk-loopback-0123456789abcdef")
    fix = '```json\n{"class": "oom", "action": "change", "changes": %s, "message": "m"}\n```'
    with LoopbackLLM() as llm:
        cfg = dataclasses.replace(config(method="llmzero", max_evolve_children=1),
                                  agents=dataclasses.replace(
            config().agents, backend="anthropic", base_url=llm.url, max_retries=0,
            api_key_env="LLMZERO_TEST_LLM_KEY"))
        m = method(tmp_path, cfg)
        root = finish(create(Tree([]), m.next_phase(Tree([]))), 0, Status.COMPLETED)
        evolve = make_child(root, Action(Kind.EVOLVE, 0), 1, root[0].hparams, 25, "evolve")
        tree = finish(Tree([*root, evolve]), 1, Status.FAILED, checkpoints=())
        tree[1].submission.scheduler_state = "OUT_OF_MEMORY"
        llm.reply(fix % '{"lora_rank": 4}', fix % '{"ppo_micro_batch_size_per_gpu": 32}')
        plan = m.next_phase(tree)
        assert plan is not None and plan.action.kind is Kind.DEBUG and plan.action.parent == 1
        assert (plan.hparams["lora_rank"], plan.hparams["ppo_micro_batch_size_per_gpu"]) == (8, 32)
        assert "'lora_rank' cannot change" in str(llm.requests[1]["body"]["messages"][-1])
        assert "LoRA settings" in llm.requests[0]["body"]["messages"][0]["content"][-1]["text"]

def test_the_llm_proposer_is_told_the_budget_left_and_how_each_sibling_did(tmp_path,
                                                                          monkeypatch):
    """The proposer planned a phase's length without knowing what the search had left, and
    saw the configurations already tried from its parent without how they did."""
    import json
    monkeypatch.setenv("LLMZERO_TEST_LLM_KEY", "sk-loopback-0123456789abcdef")
    answer = {"diagnosis": "d", "changes": {"lr": 2e-3}, "checkpoint_step": 50,
              "additional_steps": 30}
    with LoopbackLLM() as llm:
        cfg = dataclasses.replace(
            config(method="llmzero", hparams={**RECIPE, "total_training_steps": 50},
                   budget_iterations=6, budget_samples=400 * 16 * 8, budget_gpu_hours=2.0),
            agents=dataclasses.replace(config().agents, backend="anthropic", base_url=llm.url,
                                       max_retries=0, api_key_env="LLMZERO_TEST_LLM_KEY"))
        m = method(tmp_path, cfg)
        tree = finish(create(Tree([]), m.next_phase(Tree([]))), 0, Status.COMPLETED)
        tree[0].results.gpu_hours = 0.5
        write_metrics(NodeDir(tmp_path / "0000").metrics_file,
                      val_rows({s: 0.3 + s / 500 for s in (10, 20, 30, 40, 50)}))
        sibling = make_child(tree, Action(Kind.EVOLVE, 0), 1, {**tree[0].hparams, "lr": 5e-4},
                             25, "evolve")
        tree = finish(Tree([*tree, sibling]), 1, Status.EARLY_STOPPED)
        tree[1].results.best_val, tree[1].results.test_at_best = 0.3125, 0.987654
        tree[1].results.last_step = 40
        llm.reply(f"```json\n{json.dumps(answer)}\n```")
        plan = m.next_phase(tree)
        assert isinstance(plan, PhasePlan) and plan.action.parent == 0
        text = " ".join(llm.requests[0]["body"]["messages"][0]["content"][-1]["text"].split())
        assert ("Budget left for the whole search (this phase included): 4 of 6 phases; "
                "42,880 of 51,200 training samples; 1.50 of 2 device-hours. A training step "
                "of the configuration above takes 128 samples") in text
        assert ("from step 25, early_stopped at step 40, best validation score 0.3125"
                in text)
        assert "0.9876" not in json.dumps([r["body"] for r in llm.requests])   # test scores


def test_a_cancelled_child_leaves_its_configuration_free_for_the_next_proposal(tmp_path):
    """A phase a person cancelled (llmzero-stop --cancel) counted as a configuration tried, so
    on resume the proposer took another variant, and with both cancelled it replayed the
    parent's configuration: the cancelled proposal is what the resumed search should run."""
    m = method(tmp_path, config(method="llmzero", hparams={**RECIPE, "total_training_steps": 50}))
    tree = finish(create(Tree([]), m.next_phase(Tree([]))), 0, Status.COMPLETED)
    write_metrics(NodeDir(tmp_path / "0000").metrics_file,
                  val_rows({s: 0.3 + s / 500 for s in (10, 20, 30, 40, 50)}))
    first = m.next_phase(tree)
    assert isinstance(first, PhasePlan) and first.action.parent == 0
    tree = create(tree, first)
    tree[1].status = Status.CANCELLED
    again = m.next_phase(tree)
    assert isinstance(again, PhasePlan) and again.action.parent == 0
    assert again.hparams == first.hparams and again.resume_step == first.resume_step


def test_the_proposer_is_offered_only_the_checkpoints_still_on_disk(tmp_path):
    """A parent's checkpoint purged from scratch storage stayed on offer: the proposer chose
    it, and the child failed (now before its sbatch). Only whole checkpoints are offered."""
    m = method(tmp_path, config(method="llmzero", hparams={**RECIPE, "total_training_steps": 50}))
    tree = finish(create(Tree([]), m.next_phase(Tree([]))), 0, Status.COMPLETED)
    files = NodeDir(tmp_path / "0000")
    write_metrics(files.metrics_file, val_rows({s: 0.3 + s / 500 for s in (10, 20, 30, 40, 50)}))
    for step in (25, 50):
        (files.ckpt / f"global_step_{step}").mkdir(parents=True)
    plan = m.next_phase(tree)
    assert isinstance(plan, PhasePlan) and plan.resume_step == 50
    (files.ckpt / "global_step_50").rmdir()
    plan = m.next_phase(tree)
    assert isinstance(plan, PhasePlan) and plan.resume_step == 25
    (files.ckpt / "global_step_25").rmdir()
    plan = m.next_phase(tree)
    assert isinstance(plan, PhasePlan) and plan.resume_step is None
    assert plan.action.kind is Kind.SCRATCH
    assert tree[0].results.checkpoints == [25, 50]    # the record of what was saved stays


def budget_cut_root(tmp_path: Path, **search) -> tuple[SearchMethod, Tree]:
    """An llmzero search whose root (50 steps) the sample budget cut to 20."""
    import io
    from llmzero_slurm.controller.admission import Admission
    from llmzero_slurm.controller.progress import Progress
    from llmzero_slurm.search.budget import Budget
    m = method(tmp_path, config(method="llmzero", hparams={**RECIPE, "total_training_steps": 50},
                                **search))
    budget = Budget(iterations=10, samples=20 * 16 * 8, defaults=m.ctx.backend.defaults())
    plan = Admission(budget, Progress(io.StringIO())).admit(Tree([]), m.next_phase(Tree([])))
    assert plan is not None and plan.hparams["total_training_steps"] == 20
    return m, create(Tree([]), plan)


def test_the_children_of_a_phase_the_sample_budget_cut_plan_the_configured_length(tmp_path):
    """A child (an evolve, a debug fix) took its parent's steps as its own length, so one cut
    by the budget to 20 of its 50 steps passed the cut on to every phase below it."""
    m, tree = budget_cut_root(tmp_path)
    tree[0].status = Status.COMPLETED
    tree[0].results = Results(best_val=0.5, last_step=20, checkpoints=[10, 20])
    files = NodeDir(tmp_path / "0000")
    write_metrics(files.metrics_file, val_rows({10: 0.4, 20: 0.5}))
    for step in (10, 20):
        (files.ckpt / f"global_step_{step}").mkdir(parents=True)
    child = m.next_phase(tree)
    assert isinstance(child, PhasePlan) and child.action.kind is Kind.EVOLVE
    assert child.hparams["total_training_steps"] == 50
    tree[0].status = Status.FAILED
    tree[0].submission.scheduler_state = "OUT_OF_MEMORY"
    fix = m.next_phase(tree)
    assert isinstance(fix, PhasePlan) and fix.action.kind is Kind.DEBUG
    assert fix.hparams["total_training_steps"] == 50


def test_a_phase_the_budget_cut_below_search_space_gets_its_debug_fix(tmp_path):
    """Review: a phase the sample budget cut to 20 steps, below search.space's 30, ran out of
    memory and the controller exited with a traceback: the offline fix kept the failed phase's
    20 steps, which the fix check refused as outside the space. A fix may keep the failed
    phase's own length; its debug child plans the configured 50 steps."""
    m, tree = budget_cut_root(tmp_path, space={"total_training_steps": {"uniform": [30, 60]}})
    tree[0].status = Status.FAILED
    tree[0].results = Results(last_step=5, checkpoints=[])
    tree[0].submission.scheduler_state = "OUT_OF_MEMORY"
    fix = m.next_phase(tree)
    assert isinstance(fix, PhasePlan) and fix.action.kind is Kind.DEBUG
    assert fix.hparams["total_training_steps"] == 50
    assert fix.hparams["ppo_micro_batch_size_per_gpu"] == 32


# -- random ---------------------------------------------------------------------------------

def test_random_plans_budget_many_independent_roots(tmp_path):
    m = method(tmp_path, config(method="random", budget_iterations=6, seed=3))
    tree, plans = drain(m)       # nothing finished: independent trials never wait
    assert len(plans) == 6 and m.exhausted(tree)
    assert all(p.action.kind is Kind.SCRATCH and p.action.parent is None for p in plans)
    assert len({tuple(sorted(p.hparams.items())) for p in plans}) == 6
    for p in plans:
        assert 1e-4 <= p.hparams["lr"] <= 1e-2
        assert p.hparams["rollout_n"] in (4, 8, 12) and p.hparams["lora_rank"] in (4, 8, 16)
        assert p.hparams["total_training_steps"] in (100, 200)
        assert validate_hparams(p.hparams, "cpu") == p.hparams     # batch shape kept legal
        assert "random trial" in p.diagnosis and "lr=" in p.diagnosis


def test_random_is_a_function_of_seed_and_trial(tmp_path):
    def hparams(seed: int, budget: int) -> list[dict]:
        return [p.hparams for p in drain(method(tmp_path, config(
            method="random", budget_iterations=budget, seed=seed)))[1]]
    assert hparams(1, 4) == hparams(1, 4)
    assert hparams(1, 6)[:4] == hparams(1, 4)       # a bigger budget extends the same trials
    assert hparams(2, 4) != hparams(1, 4)


def test_random_verl_space_is_the_papers(tmp_path):
    recipe = {"lr": 5e-5, "kl_loss_coef": 1e-3, "train_batch_size": 128,
              "ppo_mini_batch_size": 32, "lora_rank": 64, "lora_alpha": 64.0}
    plans = drain(method(tmp_path, config("verl", recipe, method="random", budget_iterations=16)))[1]
    for p in plans:
        hp = p.hparams
        assert 1e-5 <= hp["lr"] <= 1e-4 and 1e-5 <= hp["kl_loss_coef"] <= 1e-3
        assert 0.6 <= hp["temperature"] <= 1.2 and 0.15 <= hp["clip_ratio_high"] <= 0.35
        assert hp["train_batch_size"] in (64, 128, 256) and hp["lora_rank"] in (16, 32, 64, 128)
        assert hp["rollout_n"] in (6, 8, 12) and hp["total_epochs"] in (3, 5)
        assert hp["train_batch_size"] % hp["ppo_mini_batch_size"] == 0
    # 16 log-uniform draws over a decade reach both halves of it
    assert min(p.hparams["lr"] for p in plans) < 3.2e-5 < max(p.hparams["lr"] for p in plans)


def test_random_space_from_the_config_replaces_the_default(tmp_path):
    space = {"lr": {"loguniform": [1e-3, 2e-3]}, "rollout_n": {"choice": [16]}, "temperature": 0.8}
    plans = drain(method(tmp_path, config(method="random", budget_iterations=5, space=space)))[1]
    for p in plans:
        assert 1e-3 <= p.hparams["lr"] <= 2e-3
        assert p.hparams["rollout_n"] == 16 and p.hparams["temperature"] == 0.8
        assert p.hparams["lora_rank"] == 8              # not in the space: the recipe's value


def test_random_draws_stay_inside_bounds_given_to_more_digits_than_it_keeps(tmp_path):
    """Draws are kept to three significant digits; rounded after the draw, 0.12345 in
    [0.1234, 0.1236] became 0.123, outside the range the user declared."""
    space = {"temperature": {"uniform": [0.1234, 0.1236]},
             "lr": {"loguniform": [1.2345e-3, 1.2349e-3]}}
    plans = drain(method(tmp_path, config(method="random", budget_iterations=8, space=space)))[1]
    for p in plans:
        assert 0.1234 <= p.hparams["temperature"] <= 0.1236
        assert 1.2345e-3 <= p.hparams["lr"] <= 1.2349e-3


@pytest.mark.parametrize("space, key", [
    ({"lrr": {"uniform": [0.1, 0.2]}}, "search.space.lrr"),
    ({"lr": {"uniform": [0.002, 0.001]}}, "search.space.lr.uniform"),
    ({"kl_loss_coef": {"loguniform": [0.0, 0.1]}}, "search.space.kl_loss_coef.loguniform"),
    ({"lr": {"normal": [0.0, 0.1]}}, "search.space.lr"),
    ({"rollout_n": {"choice": [8, "many"]}}, "search.space.rollout_n"),
    ({"rollout_n": {"choice": []}}, "search.space.rollout_n.choice"),
    ({"kl_loss_type": {"uniform": ["kl", "k3"]}}, "search.space.kl_loss_type.uniform"),
    ({"temperature": 99.0}, "search.space.temperature"),
])
def test_bad_random_space_names_the_key(tmp_path, space, key):
    with pytest.raises(ConfigError) as err:
        method(tmp_path, config(method="random", space=space))
    assert err.value.key == key


def test_a_space_that_breaks_the_recipe_is_refused_at_start(tmp_path):
    space = {"ppo_mini_batch_size": {"choice": [32]}}       # larger than train_batch_size 16
    with pytest.raises(ConfigError, match="random trial 0 is not a valid configuration") as err:
        method(tmp_path, config(method="random", space=space))
    assert err.value.key == "search.space"


def test_llmzero_reads_search_space_as_bounds_its_own_hparams_must_keep(tmp_path):
    """search.space was refused for llmzero, so a user could not keep the agents from, say,
    a rollout count their GPUs cannot hold. It is now the agents' bounds (tests in
    test_agents_*); the root runs the experiment's hparams, so they must lie inside."""
    space = {"lr": {"loguniform": [5e-4, 2e-3]}, "rollout_n": [4, 8]}
    root = method(tmp_path, config(method="llmzero", space=space)).next_phase(Tree([]))
    assert root.hparams["lr"] == RECIPE["lr"]
    with pytest.raises(ConfigError, match=r"does not hold the experiment's own hparams: rollout_n "
                                          r"8 is outside search.space \(rollout_n: one of \[12, 16\]\)"
                       ) as err:
        method(tmp_path, config(method="llmzero", space={"rollout_n": [12, 16]}))
    assert err.value.key == "search.space"
    with pytest.raises(ConfigError) as bad:
        method(tmp_path, config(method="llmzero", space={"lr": {"normal": [0.0, 0.1]}}))
    assert bad.value.key == "search.space.lr"


def test_llmzero_refuses_to_bound_the_epochs_it_derives_in_code(tmp_path):
    """Each phase's total_epochs is computed from its steps; bounded, a proposal was refused
    for a value the agents cannot set, and the offline proposer's last resort raised out of
    the controller. Its steps (total_training_steps) stay boundable."""
    hparams = {**RECIPE, "total_training_steps": 100, "total_epochs": 4}
    with pytest.raises(ConfigError, match="bound total_training_steps instead") as err:
        method(tmp_path, config(method="llmzero", hparams=hparams,
                                space={"total_epochs": {"uniform": [3, 5]}}))
    assert err.value.key == "search.space.total_epochs"
    method(tmp_path, config(method="llmzero", hparams=hparams,
                            space={"total_training_steps": {"uniform": [50, 200]}}))


def test_a_space_for_a_method_that_reads_none_is_refused():
    with pytest.raises(ConfigError) as err:
        config(method="practitioner", space={"lr": [1e-3]})
    assert err.value.key == "search.space"


# -- grid -----------------------------------------------------------------------------------

def test_grid_is_the_product_in_a_fixed_order(tmp_path):
    tree, plans = drain(method(tmp_path, config(method="grid")))
    points = [(p.hparams["lr"], p.hparams["lora_rank"]) for p in plans]
    assert points == [(lr, r) for lr in (3e-4, 1e-3, 3e-3, 1e-2) for r in (4, 8)]
    assert all(p.hparams["total_training_steps"] == 200 for p in plans)
    assert plans[2].diagnosis.startswith("grid point 3/8 of 8: lr=0.001, lora_rank=4")


def test_grid_stops_at_the_budget(tmp_path):
    m = method(tmp_path, config(method="grid", budget_iterations=3))
    tree, plans = drain(m)
    assert [p.hparams["lr"] for p in plans] == [3e-4, 3e-4, 1e-3] and m.exhausted(tree)


def test_grid_verl_default_is_the_papers():
    assert GRID_SPACES["verl"] == {"lr": [1e-5, 3e-5, 5e-5, 1e-4], "lora_rank": [64, 128],
                                   "total_epochs": 5, "max_response_length": 8192}


def test_grid_space_must_be_values_or_lists(tmp_path):
    with pytest.raises(ConfigError) as err:
        method(tmp_path, config(method="grid", space={"lr": {"choice": [1e-3]}}))
    assert err.value.key == "search.space.lr"
    with pytest.raises(ConfigError) as err:
        method(tmp_path, config(method="grid", space={"lr": []}))
    assert err.value.key == "search.space.lr"



def test_a_grid_listing_a_value_twice_is_refused(tmp_path):
    """A grid with lr: [1.0e-3, 0.001] ran the same configuration twice, spending a trial of the
    budget on a point it had already measured."""
    with pytest.raises(ConfigError) as err:
        method(tmp_path, config(method="grid", space={"lr": [1e-3, 0.001], "lora_rank": [4, 8]}))
    assert err.value.key == "search.space.lr" and "0.001 twice" in err.value.problem


@pytest.mark.parametrize("name", ["grid", "random", "practitioner"])
def test_a_sample_budget_short_of_the_trials_is_said(tmp_path, name):
    """--check said "grid, budget 4 phases ...: runs 4 of its 8 points" when budget_samples held
    one point, cut to 62 of its 200 steps, and none after it: a comparison at equal samples
    read the cut trial as the grid's, and a new run's start said nothing either. The note
    (--check's method line, a new run's start) says what runs in full, what is cut and what
    does not run."""
    space = {"grid": {"lr": [1e-3, 3e-3], "lora_rank": [4, 8], "total_training_steps": 200},
             "random": {"lr": {"choice": [1e-3]}, "total_training_steps": 200}}.get(name)
    per_trial = 200 * 16 * 8
    trials = 1 if name == "practitioner" else 4

    def notes(samples: int) -> list[str]:
        return method(tmp_path, config(method=name, hparams={**RECIPE, "total_training_steps": 200},
                                       budget_iterations=4, budget_samples=samples,
                                       **({"space": space} if space else {}))).notes()

    assert notes(trials * per_trial) == []
    short = per_trial - 1 if name == "practitioner" else per_trial + 100 * 128 + 5
    said = ("trial 1 is cut to 199 of its 200 steps" if name == "practitioner"
            else "1 runs in full, trial 2 is cut to 100 of its 200 steps, 2 do not run")
    assert notes(short) == [
        f"search.budget_samples ({short:,}) is short of the {trials} trials planned: {said}; "
        f"{trials * per_trial:,} runs them all in full"]
    if name == "grid":      # one trial short: in the singular
        assert "3 run in full, 1 does not run;" in notes(3 * per_trial)[0]


@pytest.mark.parametrize("name", ["llmzero", "grid", "practitioner", "guidebook"])
def test_a_search_seed_no_method_reads_is_said(name):
    """A second llmzero (or grid) run "with another seed" set search.seed: 7 and ran exactly the
    first run's phases: only random's draws read search.seed; the trainer seeds from
    hparams.seed. --check and a new run's start say so, as for llmzero's unread settings."""
    from llmzero_slurm.methods.registry import unread_note
    from llmzero_slurm.search.settings import SearchSettings
    assert unread_note(SearchSettings(method=name, seed=7)) == (
        f"{name} does not read search.seed=7: the random method's draws alone do (the trainer "
        "seeds from hparams' seed), so it changes nothing in this run")
    assert unread_note(SearchSettings(method="random", seed=7)) is None
    assert unread_note(SearchSettings(method=name)) is None


def test_each_methods_registry_entry_says_what_its_class_does(monkeypatch):
    """What a method reads is said in its registry entry (checking a config and llmzero-status
    import no method), so a new method is one entry: its class's early stopping and the notes
    of what it sets aside follow that entry, not a method's name written into the checks."""
    from llmzero_slurm.methods import method_class
    from llmzero_slurm.methods.registry import METHODS, Entry, no_stopper, unread_note
    from llmzero_slurm.search.settings import SearchSettings
    for name, entry in METHODS.items():
        assert method_class(name).early_stopping is entry.tree, name
    monkeypatch.setitem(METHODS, "uct2", Entry(METHODS["llmzero"].path, tree=True, seeded=True))
    assert no_stopper(SearchSettings(method="uct2")) is None
    assert unread_note(SearchSettings(method="uct2", seed=7, exploration_c=2.0)) is None
    assert unread_note(SearchSettings(method="grid", exploration_c=2.0)) == (
        "grid does not read search.exploration_c=2: llmzero and uct2's tree search and early "
        "stopper alone do, so they change nothing in this run")


def test_a_grid_list_given_to_random_says_how_random_reads_a_space(tmp_path):
    """One experiment.yaml switched from grid to random (to compare them) was refused with
    "search.space.lr: must be a number (got [0.001, 0.003])": a list is a grid's entry, and
    the message said nothing of random's own."""
    with pytest.raises(ConfigError) as err:
        method(tmp_path, config(method="random", space={"lr": [1e-3, 3e-3]}))
    assert err.value.key == "search.space.lr"
    assert err.value.problem == ("is a list, a grid's or guidebook's entry: random draws from "
                                 "{choice: [0.001, 0.003]}, {uniform: [low, high]} or "
                                 "{loguniform: [low, high]}, or takes one fixed value")

# -- guidebook (a chain) --------------------------------------------------------------------

def test_guidebook_chains_phases_from_each_last_checkpoint(tmp_path):
    m = method(tmp_path, config(method="guidebook"))
    schedule = GUIDEBOOK_SCHEDULES["cpu"]
    plan = m.next_phase(Tree([]))
    assert plan.action.kind is Kind.SCRATCH and plan.hparams["rollout_n"] == schedule["rollout_n"][0]
    tree = create(Tree([]), plan)
    for status in (Status.PROPOSED, Status.QUEUED, Status.RUNNING):
        tree[0].status = status
        assert m.next_phase(tree) is None and not m.exhausted(tree)   # waits for the phase
    tree = finish(tree, 0, Status.COMPLETED)
    plan = m.next_phase(tree)
    assert plan.action.kind is Kind.EVOLVE and plan.action.parent == 0 and plan.resume_step == 50
    assert plan.hparams["max_response_length"] == schedule["max_response_length"][1]
    assert plan.hparams["lr"] == RECIPE["lr"]                       # the rest stays the recipe
    tree = finish(create(tree, plan), 1, Status.EARLY_STOPPED)     # stopped early: still a parent
    plan = m.next_phase(tree)
    assert plan.action.parent == 1 and plan.resume_step == 100
    assert plan.diagnosis.startswith("guidebook phase 3/3")
    tree = create(tree, plan)
    assert m.exhausted(tree) and m.next_phase(finish(tree, 2, Status.COMPLETED)) is None
    assert tree[2].start_step == 100


@pytest.mark.parametrize("status, checkpoints", [
    (Status.FAILED, (25,)), (Status.CANCELLED, (25,)), (Status.COMPLETED, ())])
def test_a_chain_stops_when_a_phase_cannot_be_continued(tmp_path, status, checkpoints):
    m = method(tmp_path, config(method="guidebook"))
    tree = finish(create(Tree([]), m.next_phase(Tree([]))), 0, status, checkpoints)
    assert m.exhausted(tree) and m.next_phase(tree) is None


def test_guidebook_schedule_from_the_config(tmp_path):
    space = {"max_response_length": [4, 8], "rollout_n": [4, 16], "total_training_steps": 30}
    m = method(tmp_path, config(method="guidebook", space=space))
    assert [(p.hparams["max_response_length"], p.hparams["rollout_n"]) for p in m.phases] == \
        [(4, 4), (8, 16)]
    with pytest.raises(ConfigError, match="max_response_length: 2, rollout_n: 3"):
        method(tmp_path, config(method="guidebook", space={"max_response_length": [4, 8],
                                                           "rollout_n": [4, 8, 12]}))


def test_a_guidebook_the_budget_would_cut_short_is_refused(tmp_path):
    """budget_iterations: 2 passed --check with the cpu guidebook's 3 phases, and the search
    ended "2 of 2 phases created" after phase 2/3: another schedule than the guidebook, compared
    under its name. A replay cut short was refused already; so is a guidebook now."""
    with pytest.raises(ConfigError) as err:
        method(tmp_path, config(method="guidebook", budget_iterations=2))
    assert (err.value.key, err.value.problem) == (
        "search.budget_iterations", "is 2, and the guidebook method's default space "
        "(search.space replaces it) has 3 phases: the guidebook would stop after phase 2; "
        "raise it to 3")
    space = {"rollout_n": [4, 8], "total_training_steps": 30}
    with pytest.raises(ConfigError) as err:
        method(tmp_path, config(method="guidebook", space=space, budget_samples=30 * 16 * 4))
    assert (err.value.key, err.value.problem) == (
        "search.budget_samples", "is 1,920, and search.space trains 5,760 samples (phase 2 would "
        "be cut): raise it or leave it unset")
    assert len(method(tmp_path, config(method="guidebook", space=space, budget_iterations=2,
                                       budget_samples=5760)).phases) == 2


def test_guidebook_verl_default_is_table_13(tmp_path):
    recipe = {"lr": 5e-5, "train_batch_size": 128, "lora_rank": 64, "lora_alpha": 64.0}
    phases = method(tmp_path, config("verl", recipe, method="guidebook")).phases
    assert [(p.hparams["max_response_length"], p.hparams["rollout_n"],
             p.hparams["total_training_steps"]) for p in phases] == \
        [(4096, 6, 60), (6144, 8, 60), (8192, 12, 60)]


# -- replay ---------------------------------------------------------------------------------

def strategy_file(tmp_path: Path, phases: list, fmt: str = "llmzero-strategy/1") -> Path:
    path = tmp_path / "strategy.yaml"
    path.write_text(yaml.safe_dump({"format": fmt, "phases": phases}))
    return path


def test_replay_runs_the_strategys_chain(tmp_path):
    path = strategy_file(tmp_path, [
        {"node": 0, "steps": 40, "hparams": {**RECIPE, "lr": 2e-3}},
        {"node": 3, "steps": 30, "hparams": {**RECIPE, "lr": 5e-4, "rollout_n": 16}}])
    m = method(tmp_path, config(method="replay", strategy_file=str(path),
                                hparams={**RECIPE, "seed": 9}))
    tree = create(Tree([]), m.next_phase(Tree([])))
    assert tree[0].hparams["total_training_steps"] == 40 and tree[0].hparams["lr"] == 2e-3
    assert tree[0].hparams["seed"] == 9                 # missing keys come from this experiment
    tree = finish(tree, 0, Status.COMPLETED, checkpoints=(20, 40))
    plan = m.next_phase(tree)
    assert plan.action.kind is Kind.EVOLVE and plan.resume_step == 40
    assert plan.hparams["rollout_n"] == 16 and plan.hparams["total_training_steps"] == 30
    assert "source node 3" in plan.diagnosis
    assert m.exhausted(create(tree, plan))


@pytest.mark.parametrize("budget, message", [
    ({"budget_iterations": 2}, r"search.budget_iterations': is 2, and .*strategy.yaml has 3 "
                               r"phases: the replay would stop after phase 2"),
    ({"budget_samples": 100_000}, r"search.budget_samples': is 100,000, and .*strategy.yaml "
                                  r"trains 128,000 samples \(phase 3 would be cut\)")])
def test_a_replay_the_budget_would_cut_short_is_refused_at_start(tmp_path, budget, message):
    """Review: a replay whose strategy needs more phases or samples than the budget allows
    started, and its last phases were cut or never run: a schedule other than the strategy,
    reported as its replay."""
    path = strategy_file(tmp_path, [{"steps": 500, "hparams": {**RECIPE, "lr": 2e-3}},
                                    {"steps": 250, "hparams": {**RECIPE, "lr": 5e-4}},
                                    {"steps": 250, "hparams": {**RECIPE, "lr": 1e-4}}])
    with pytest.raises(ConfigError, match=message):
        method(tmp_path, config(method="replay", strategy_file=str(path), **budget))
    fits = method(tmp_path, config(method="replay", strategy_file=str(path),
                                   budget_iterations=3, budget_samples=128_000))
    assert [p.hparams["total_training_steps"] for p in fits.phases] == [500, 250, 250]


def test_a_resumed_replay_refuses_a_plan_that_changed_under_it(tmp_path):
    """Audit (upgrades): the plan of a static method is rebuilt at every start (from the frozen
    config, this release's defaults and, for replay, the strategy file), and node i is taken to
    be its phase i. A strategy file rewritten since (its source run resumed, its report made
    again) or another release's defaults made a resumed run go on, silently, with the phases
    of another schedule. It is refused, naming the node and what differs."""
    path = strategy_file(tmp_path, [{"steps": 40, "hparams": {**RECIPE, "lr": 2e-3}},
                                    {"steps": 30, "hparams": {**RECIPE, "lr": 5e-4}}])
    cfg = config(method="replay", strategy_file=str(path))
    tree = create(Tree([]), method(tmp_path, cfg).next_phase(Tree([])))
    tree = finish(tree, 0, Status.COMPLETED, checkpoints=(20, 40))
    assert method(tmp_path, cfg).next_phase(tree).hparams["lr"] == 5e-4   # resumed as it was
    strategy_file(tmp_path, [{"steps": 40, "hparams": {**RECIPE, "lr": 3e-3}},
                             {"steps": 30, "hparams": {**RECIPE, "lr": 1e-4}}])
    with pytest.raises(ConfigError, match=r"node 0 ran phase 1 of this replay plan as it was; "
                       r"this llmzero-slurm plans it otherwise \(lr: 0.002 -> 0.003\) from "
                       rf"{path} \(the strategy file may have changed\)"):
        method(tmp_path, cfg).next_phase(tree)


def test_a_resumed_plan_whose_phase_the_budget_cut_goes_on(tmp_path):
    """The sample budget cuts a planned phase's steps to what is left (admission.py); one cut
    and then stopped early gives samples back, so the method is asked again. A restarted
    controller must not take that cut for another schedule's phase."""
    path = strategy_file(tmp_path, [{"steps": 40, "hparams": {**RECIPE, "lr": 2e-3}},
                                    {"steps": 30, "hparams": {**RECIPE, "lr": 5e-4}}])
    cfg = config(method="replay", strategy_file=str(path))
    plan = method(tmp_path, cfg).next_phase(Tree([]))
    cut = dataclasses.replace(plan, hparams={**plan.hparams, "total_training_steps": 25})
    tree = finish(create(Tree([]), cut), 0, Status.EARLY_STOPPED, checkpoints=(10, 20))
    assert method(tmp_path, cfg).next_phase(tree).hparams["lr"] == 5e-4


def test_a_resumed_plan_goes_on_after_a_gap_in_the_node_ids(tmp_path):
    """A kill or a full disk inside node creation takes an id for good with no node behind it
    (run_store.add_node). Plan phases follow the nodes in creation order, not their ids: after
    ids 0, 1, 3 the next phase is the plan's fourth, and a restart accepts the run as it is."""
    cfg = config(method="random", budget_iterations=6, seed=3)
    tree = Tree([])
    for node_id in (0, 1, 3):
        plan = method(tmp_path, cfg).next_phase(tree)
        node = make_child(tree, plan.action, node_id, plan.hparams, plan.resume_step,
                          plan.diagnosis)
        tree = Tree([*tree, node])
    phases = method(tmp_path, cfg).phases
    assert [tree[i].hparams for i in (0, 1, 3)] == [p.hparams for p in phases[:3]]
    assert method(tmp_path, cfg).next_phase(tree).hparams == phases[3].hparams


def test_a_cancelled_trial_runs_again_as_a_new_node(tmp_path):
    """Review: trials were indexed and counted by len(tree), cancelled nodes included, while
    the budget does not count them: with 3 trials and node 1 cancelled the run ended after 2
    trials and trial 1's configuration never ran. A cancel is no verdict: it runs again, after
    the plan's own trials, and a restart still finds each node's trial (ids may have gaps)."""
    cfg = config(method="random", budget_iterations=3, seed=3)
    phases = method(tmp_path, cfg).phases
    tree = Tree([])

    def add(node_id: int) -> None:
        nonlocal tree
        plan = method(tmp_path, cfg).next_phase(tree)     # a fresh method: a restart each time
        tree = Tree([*tree, make_child(tree, plan.action, node_id, plan.hparams,
                                       plan.resume_step, plan.diagnosis)])

    for node_id in (0, 1, 3):
        add(node_id)
    tree = finish(tree, 1, Status.CANCELLED)
    assert not method(tmp_path, cfg).exhausted(tree)
    add(4)
    assert tree[4].hparams == phases[1].hparams
    tree = finish(tree, 0, Status.CANCELLED)          # cancelled after node 4 was created
    add(5)
    assert tree[5].hparams == phases[0].hparams
    assert method(tmp_path, cfg).exhausted(tree)
    assert method(tmp_path, cfg).next_phase(tree) is None



@pytest.mark.parametrize("name", ["grid", "random"])
def test_a_run_with_a_rerun_trial_goes_on_under_a_larger_budget(tmp_path, name):
    """Walkthrough: a 3-trial run whose trial 1 was cancelled and run again (node 3), then
    given budget_iterations: 5 in its experiment.yaml, was refused at resume: node 3 was read
    as trial 4 of the larger plan ("node 3 ran phase 4 of this ... plan as it was; this
    llmzero-slurm plans it otherwise"). A rerun stays its trial's; the new trials follow."""
    small, large = (config(method=name, budget_iterations=n, seed=3) for n in (3, 5))
    tree, _ = drain(method(tmp_path, small))
    tree = finish(tree, 1, Status.CANCELLED)
    tree, _ = drain(method(tmp_path, small), tree)
    phases = method(tmp_path, large).phases
    assert tree[3].hparams == phases[1].hparams
    tree, plans = drain(method(tmp_path, large), tree)
    assert [p.hparams for p in plans] == [phases[3].hparams, phases[4].hparams]

@pytest.mark.parametrize("phases, fmt, where", [
    ([{"steps": 10, "hparams": RECIPE}, {"hparams": RECIPE}], None, "phases[1].steps"),
    ([{"steps": 0, "hparams": RECIPE}], None, "phases[0].steps"),
    ([{"steps": 10, "hparams": {"lr": "fast"}}], None, "phases[0].hparams.lr"),
    ([{"steps": 10, "hparams": {"gpu_memory_utilization": 0.5}}], None,
     "phases[0].hparams.gpu_memory_utilization"),
    ([{"steps": 10, "hparams": [1, 2]}], None, "phases[0].hparams"),
    ([{"steps": 10, "hparams": RECIPE}, {"steps": 5, "hparams": {**RECIPE, "lora_rank": 4}}],
     None, "phases[1].hparams.lora_rank"),
    ([], None, "phases"),
    ([{"steps": 10, "hparams": RECIPE}], "v0", "format"),
])
def test_replay_refuses_a_malformed_strategy_naming_file_and_key(tmp_path, phases, fmt, where):
    path = strategy_file(tmp_path, phases, fmt or "llmzero-strategy/1")
    with pytest.raises(ConfigError) as err:
        method(tmp_path, config(method="replay", strategy_file=str(path)))
    assert err.value.key == "search.strategy_file"
    assert f"{path}: {where}:" in str(err.value)


@pytest.mark.parametrize("document, where, said", [
    ({"phases": [{"step": 10, "hparams": RECIPE}]}, "phases[0].step",
     "is not a key of a phase (did you mean steps?"),
    ({"phases": [{"steps": 10, "hparams": RECIPE, "knd": "scratch"}]}, "phases[0].knd",
     "is not a key of a phase (did you mean kind?"),
    ({"phase": [{"steps": 10, "hparams": RECIPE}]}, "phase",
     "is not a key of a strategy file (did you mean phases?"),
    ({"phases": [{"hparams": RECIPE}]}, "phases[0].steps", "is missing"),
    ({"format": None, "phases": [{"steps": 10, "hparams": RECIPE}]}, "format",
     "is missing: a strategy.yaml written by llmzero-report begins with format: "
     "llmzero-strategy/1"),
])
def test_a_misspelt_key_of_a_strategy_is_named(tmp_path, document, where, said):
    """A hand-edited strategy.yaml with `step: 60` was refused as "phases[0].steps: must be a
    positive integer (got None)", which names the key the file lacks, not the one it has, and
    a misspelt informational key (`knd:`) was dropped without a word."""
    path = tmp_path / "strategy.yaml"
    path.write_text(yaml.safe_dump({"format": "llmzero-strategy/1", **document}))
    with pytest.raises(ConfigError) as err:
        method(tmp_path, config(method="replay", strategy_file=str(path)))
    assert f"{path}: {where}: {said}" in str(err.value), str(err.value)


def test_a_key_given_twice_in_a_strategy_is_refused_by_line(tmp_path):
    """A hand edit that added `lr: 0.002` under a phase's `lr: 0.001` ran the lower one and
    said nothing (YAML keeps the last), as experiment.yaml no longer does."""
    path = tmp_path / "strategy.yaml"
    path.write_text("format: llmzero-strategy/1\nphases:\n- steps: 10\n  hparams:\n"
                    "    lr: 0.001\n    lr: 0.002\n")
    with pytest.raises(ConfigError, match=r"key .lr. is given twice, on lines 5 and 6") as err:
        method(tmp_path, config(method="replay", strategy_file=str(path)))
    assert err.value.key == "search.strategy_file" and str(path) in str(err.value)


def test_a_strategy_of_another_trainer_is_refused_by_name(tmp_path):
    """A strategy found with the cpu trainer (its lr, lengths and batch sizes that trainer's)
    was replayed on verl without a word: its `backend` was read by no one."""
    path = tmp_path / "strategy.yaml"
    path.write_text(yaml.safe_dump({"format": "llmzero-strategy/1", "backend": "cpu",
                                    "phases": [{"steps": 10, "hparams": {"lr": 1e-3}}]}))
    with pytest.raises(ConfigError, match=r"strategy.yaml: backend: is cpu, and this "
                       r"experiment's is verl"):
        method(tmp_path, config("verl", {**RECIPE, "lr": 1e-5, "lora_alpha": 16.0},
                                method="replay", strategy_file=str(path)))


def test_a_strategy_of_a_newer_release_is_named_as_such(tmp_path):
    """Audit (upgrades): a strategy.yaml from a colleague's newer release was refused as
    "must be 'llmzero-strategy/1' (got 'llmzero-strategy/2')", read as a malformed file."""
    path = strategy_file(tmp_path, [{"steps": 10, "hparams": RECIPE}], "llmzero-strategy/2")
    with pytest.raises(ConfigError, match=r"format: 'llmzero-strategy/2' is the format of a newer "
                       r"llmzero-slurm; this one \(.*\) reads 'llmzero-strategy/1': replay it "
                       r"with that release or a later one"):
        method(tmp_path, config(method="replay", strategy_file=str(path)))


def test_replay_refuses_a_missing_or_unparsable_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read .*nope.yaml"):
        method(tmp_path, config(method="replay", strategy_file=str(tmp_path / "nope.yaml")))
    # A resume reads it again: its source run's report removed, it said only "No such file".
    with pytest.raises(ConfigError, match=r"a replay reads its strategy file at every start, a "
                       r"resume's too: put it back, or set search.strategy_file to where it is "
                       r"now \(in the run's own experiment.yaml, for a run already made\)"):
        method(tmp_path, config(method="replay", strategy_file=str(tmp_path / "nope.yaml")))
    (tmp_path / "bad.yaml").write_text("phases: [unclosed")
    with pytest.raises(ConfigError, match="bad.yaml is not valid YAML"):
        method(tmp_path, config(method="replay", strategy_file=str(tmp_path / "bad.yaml")))
    (tmp_path / "binary.yaml").write_bytes(b"format: \xff\xfe\n")
    with pytest.raises(ConfigError, match="binary.yaml is not UTF-8 text") as err:
        method(tmp_path, config(method="replay", strategy_file=str(tmp_path / "binary.yaml")))
    assert err.value.exit_code == 2


def test_unknown_method_is_refused(tmp_path):
    ctx = MethodContext(config(), lambda i: NodeDir(tmp_path), tmp_path)
    with pytest.raises(ConfigError) as err:
        make_method("annealing", ctx)
    assert err.value.key == "search.method"


def test_sampled_floats_are_rounded_but_in_range(tmp_path):
    plans = drain(method(tmp_path, config(method="random", budget_iterations=8)))[1]
    for p in plans:
        lr = p.hparams["lr"]
        assert lr == float(f"{lr:.3g}") and math.isfinite(lr)


def test_llmzero_returns_a_plan_its_jobs_gpus_cannot_split_to_the_agent(tmp_path):
    """The vocabulary's batch rule (the micro-batch divides ppo_mini_batch_size x rollout_n)
    knows no GPUs; verl's divides each GPU's share. A proposal of rollout_n 12 on 8 GPUs was
    taken, then its script refused at render: the node failed, its budget spent, with no
    repair round for the agent that wrote it."""
    from llmzero_slurm.agents.answers import AnswerError, check_proposal
    from llmzero_slurm.backends.verl.schema import unavailable_reason
    if unavailable_reason():
        pytest.skip(f"verl schema unavailable: {unavailable_reason()}")
    recipe = {"lr": 5e-5, "train_batch_size": 128, "ppo_mini_batch_size": 16, "rollout_n": 8,
              "ppo_micro_batch_size_per_gpu": 16, "log_prob_micro_batch_size_per_gpu": 8,
              "lora_rank": 64, "lora_alpha": 64.0, "save_freq": 10, "test_freq": 10,
              "total_training_steps": 40}
    cfg = parse_config({"name": "t", "backend": "verl", "model_path": "Qwen/Qwen3-8B",
                        "hparams": recipe, "search": {"method": "llmzero"},
                        "task": {"train_files": ["/data/train.parquet"],
                                 "val_files": ["/data/val.parquet"],
                                 "test_files": ["/data/test.parquet"],
                                 "reward_path": "/data/reward.py"},
                        "slurm": {"gpus_per_node": 8}, "agents": {"backend": "heuristic"}})
    m = method(tmp_path, cfg)
    parent = m.proposer.trainer.effective_hparams(cfg.hparams)
    answer = {"diagnosis": "truncated answers: more rollouts", "changes": {"rollout_n": 12},
              "checkpoint_step": 40, "additional_steps": 40}
    with pytest.raises(AnswerError, match="ppo_micro_batch_size_per_gpu: is 16, but must divide "
                                          "the 24 responses each of the 8 GPUs"):
        check_proposal(answer, parent, [40], False, m.proposer.trainer, "anthropic",
                       m.proposer.bounds)
    answer["changes"] = {"rollout_n": 16}                   # 32 per GPU: taken
    assert check_proposal(answer, parent, [40], False, m.proposer.trainer, "anthropic",
                          m.proposer.bounds).hparams["rollout_n"] == 16


def test_a_reversed_range_in_search_space_says_what_was_given(tmp_path):
    """'must be [low, high] with low < high' left the user to find which numbers were read
    (1.0e-3 and 1.0e-5 written the wrong way round, or one of them missing)."""
    with pytest.raises(ConfigError, match=re.escape(
            "must be [low, high] with low < high (got [0.001, 1e-05])")):
        method(tmp_path, config(space={"lr": {"loguniform": [1.0e-3, 1.0e-5]}}))


@pytest.mark.parametrize("name, space", [
    ("llmzero", {}), ("practitioner", {}), ("grid", {"lr": [1e-3], "total_training_steps": 20})])
def test_a_sample_budget_below_one_step_of_the_first_phase_is_refused(tmp_path, name, space):
    """budget_samples: 10 passed --check; the start made a run directory, created no phase
    ('it needs 128 training samples a step and the budget has 10 left') and exited 7."""
    with pytest.raises(ConfigError) as err:
        method(tmp_path, config(method=name, budget_samples=10, space=space))
    assert err.value.key == "search.budget_samples"
    assert "is 10, less than one training step of the first phase (16 x 8 = 128 samples:" \
        in err.value.problem
    method(tmp_path, config(method=name, budget_samples=128, space=space))


@pytest.mark.parametrize("kind", ["uniform", "loguniform"])
def test_an_integer_range_draws_its_endpoints_as_often_as_its_inner_values(kind):
    """Walkthrough: an integer knob drawn from {uniform: [4, 12]} was the continuous draw
    rounded, so 4 and 12 (half an interval each) came up half as often as 5..11."""
    import random
    from collections import Counter
    from llmzero_slurm.methods.distribution import Distribution
    rng = random.Random(0)
    counts = Counter(Distribution(kind, (4, 12)).draw(rng, int) for _ in range(18000))
    assert sorted(counts) == list(range(4, 13))
    if kind == "uniform":     # each of the 9 values 1/9 of the draws (2000, noise about 42)
        assert all(1800 < n < 2200 for n in counts.values()), counts
    else:                     # each value its share of [log 4, log 13): the endpoints alike
        share = {v: math.log((v + 1) / v) / math.log(13 / 4) for v in range(4, 13)}
        assert all(abs(counts[v] / 18000 - share[v]) < 0.012 for v in counts), counts


def test_llmzero_without_early_stopping_runs_no_monitor(tmp_path):
    """Walkthrough: an ablation of the early stopper could not be set up: early_stop_interval_s
    0 or null is refused, and no other setting turned the monitor job off."""
    from llmzero_slurm.controller.cluster_check import endpoint_job
    assert method(tmp_path, config(method="llmzero")).early_stopping
    cfg = config(method="llmzero", early_stopping=False)
    assert not method(tmp_path, cfg).early_stopping
    assert "search.early_stopping is false" in str(endpoint_job(cfg))
