"""The verl override mapping, checked against verl 0.9.1's own Hydra config (installed --no-deps)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmzero_slurm.backends.spec import PhaseSpec
from llmzero_slurm.backends.verl.grammar import hydra_value
from llmzero_slurm.backends.verl.keys import FOLLOWERS, HPARAM_KEYS, WHOLE_FLOATS
from llmzero_slurm.backends.verl.overrides import ParentAdapter, build_overrides
from llmzero_slurm.backends.verl.schema import check_overrides, compose, unavailable_reason
from llmzero_slurm.backends.verl.settings import VerlSettings
from llmzero_slurm.backends.verl.traps import check_traps
from llmzero_slurm.config import SlurmConfig, TaskConfig
from llmzero_slurm.errors import ConfigError
from llmzero_slurm.hparams import PARAMS, validate_hparams

pytestmark = pytest.mark.skipif(unavailable_reason() is not None,
                                reason=f"verl schema unavailable: {unavailable_reason()}")

# The paper's practitioner defaults (Table 12), with the cadences and micro-batch sizes verl
# needs set.
TABLE12 = validate_hparams({
    "lr": 5e-5, "kl_loss_coef": 0.001, "use_kl_loss": True, "temperature": 1.0,
    "clip_ratio_high": 0.28, "train_batch_size": 128, "ppo_mini_batch_size": 64,
    "lora_rank": 64, "lora_alpha": 64, "rollout_n": 8, "total_epochs": 1,
    "max_response_length": 6144, "grad_clip": 1.0, "weight_decay": 0.01,
    "norm_adv_by_std_in_grpo": False, "save_freq": 10, "test_freq": 10,
    "ppo_micro_batch_size_per_gpu": 4, "log_prob_micro_batch_size_per_gpu": 8}, "verl")


def phase(node_dir: str = "/shared/runs/gsm/nodes/0007", model_path: str = "Qwen/Qwen3-8B",
          nnodes: int = 1, gpus_per_node: int = 8, cpus_per_task: int = 64) -> PhaseSpec:
    task = TaskConfig(train_files=["/data/gsm8k/train.parquet"],
                      val_files=["/data/gsm8k/val.parquet"],
                      test_files=["/data/gsm8k/test.parquet"], reward_path="/data/gsm8k/reward.py")
    return PhaseSpec("gsm", 7, "scratch", Path(node_dir), "t", {}, "verl",
                     SlurmConfig(nodes=nnodes, gpus_per_node=gpus_per_node,
                                 cpus_per_task=cpus_per_task), task,
                     model_path=model_path)


ADAPTER = "/shared/runs/gsm/nodes/0003/export/global_step_40/lora_adapter"
PHASES = {
    "scratch": (phase(), TABLE12, None),
    "evolve": (phase(), {**TABLE12, "lr": 2e-5, "rollout_n": 16, "kl_loss_coef": 0.01},
               ParentAdapter(ADAPTER, 64)),
    "debug": (phase(), {**TABLE12, "gpu_memory_utilization": 0.4, "max_num_seqs": 64,
                        "ppo_micro_batch_size_per_gpu": 4, "log_prob_micro_batch_size_per_gpu": 8},
              ParentAdapter(ADAPTER, 64)),
    "multi-node": (phase(nnodes=4, gpus_per_node=8), {**TABLE12, "tensor_model_parallel_size": 2},
                   None),
}


@pytest.mark.parametrize("kind", PHASES)
def test_every_phase_kind_composes_and_resolves(kind):
    spec, hp, adapter = PHASES[kind]
    cfg = compose(build_overrides(spec, hp, VerlSettings(), adapter))
    actor = cfg.actor_rollout_ref.actor
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.algorithm.norm_adv_by_std_in_grpo is False
    assert actor.optim.lr == hp["lr"] and actor.optim.clip_grad == 1.0
    assert actor.clip_ratio_high == 0.28 and actor.use_kl_loss is True
    assert cfg.actor_rollout_ref.rollout.n == hp["rollout_n"]
    assert cfg.actor_rollout_ref.rollout.name == "vllm"
    assert cfg.data.val_files == ["/data/gsm8k/val.parquet", "/data/gsm8k/test.parquet"]
    assert cfg.reward.custom_reward_function.path == "/data/gsm8k/reward.py"
    assert cfg.trainer.default_local_dir == "/shared/runs/gsm/nodes/0007/ckpt"
    assert cfg.trainer.resume_mode == "auto"
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH == \
        "/shared/runs/gsm/nodes/0007/verl_metrics.jsonl"
    assert cfg.actor_rollout_ref.model.lora_rank == 64
    assert cfg.actor_rollout_ref.model.lora_alpha == 64
    assert cfg.trainer.nnodes == spec.slurm.nodes
    assert cfg.actor_rollout_ref.model.lora_adapter_path == (adapter.path if adapter else None)


def test_every_verl_hyperparameter_lands_on_its_key():
    """Each vocabulary name changes exactly the verl keys it maps to (distinct test values)."""
    values = {"lr": 3e-6, "weight_decay": 0.07, "grad_clip": 0.3, "kl_loss_coef": 0.02,
              "kl_loss_type": "k3", "use_kl_loss": True, "use_kl_in_reward": True,
              "kl_in_reward_coef": 0.05, "clip_ratio_low": 0.19, "clip_ratio_high": 0.31,
              "temperature": 0.9, "entropy_coeff": 0.001, "norm_adv_by_std_in_grpo": False,
              "rollout_n": 12, "max_response_length": 3000, "max_prompt_length": 700,
              "total_epochs": 3, "total_training_steps": 77, "save_freq": 11, "test_freq": 13,
              "seed": 1234, "train_batch_size": 96, "ppo_mini_batch_size": 48,
              "ppo_micro_batch_size_per_gpu": 6, "log_prob_micro_batch_size_per_gpu": 9,
              "lora_rank": 16, "lora_alpha": 24, "target_modules": "q_proj,v_proj",
              "gpu_memory_utilization": 0.55, "tensor_model_parallel_size": 4,
              "max_num_seqs": 99}
    assert set(values) == {n for n, p in PARAMS.items() if p.read_by("verl")} == set(HPARAM_KEYS)
    cfg = compose(build_overrides(phase(), validate_hparams(values, "verl"), VerlSettings()))
    from omegaconf import OmegaConf
    # total_epochs gives way to total_training_steps (see the test of a phase's steps below).
    wanted = {**values, "target_modules": ["q_proj", "v_proj"], "total_epochs": 77}
    for name, keys in HPARAM_KEYS.items():
        expected = wanted[name]
        for key in keys:
            got = OmegaConf.select(cfg, key)
            got = list(got) if name == "target_modules" else got
            assert got == expected, (name, key, got)


def test_hostile_paths_reach_verl_unchanged():
    odd = '/data/my "runs"/x=1,y [a]\\b\\"c/0007'
    model = "/m/Qwen3 8B\\"
    cfg = compose(build_overrides(phase(node_dir=odd, model_path=model), TABLE12, VerlSettings()))
    assert cfg.trainer.default_local_dir == odd + "/ckpt"
    assert cfg.actor_rollout_ref.model.path == model
    with pytest.raises(ConfigError, match=r"\$\{"):
        hydra_value("/data/${oc.env:HOME}")


def test_user_overrides_are_appended_and_checked():
    settings = VerlSettings.from_config({"rollout_engine": "sglang", "extra_loggers": ["wandb"],
                                         "overrides": ["actor_rollout_ref.model.use_shm=true",
                                                       "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"]})
    cfg = compose(build_overrides(phase(), TABLE12, settings))
    assert cfg.actor_rollout_ref.model.use_shm is True
    assert cfg.actor_rollout_ref.rollout.name == "sglang"
    assert list(cfg.trainer.logger) == ["console", "file", "wandb"]


def test_misspelt_key_is_named():
    settings = VerlSettings.from_config({"overrides": ["actor_rollout_ref.actor.optim.lrr=1e-5"]})
    with pytest.raises(ConfigError) as err:
        compose(build_overrides(phase(), TABLE12, settings))
    assert err.value.key == "actor_rollout_ref.actor.optim.lrr"


def test_every_misspelt_or_mistyped_override_is_named_in_one_check():
    """Walkthrough: Hydra stops at the first override it refuses, so --check named one
    misspelling per round; a user with three spent three rounds (verl's config composes in
    seconds each). Every override verl's config refuses is named at once; the one check
    raises them together, and a good override among them is not named."""
    from llmzero_slurm.backends.verl.schema import check_overrides
    from llmzero_slurm.errors import ConfigErrors
    bad = ["actor_rollout_ref.actor.optim.lrr=1e-5", "actor_rollout_ref.model.use_shm=true",
           "+actor_rollout_ref.model.use_remove_paddin=true",
           "actor_rollout_ref.actor.ppo_epochs=two"]
    settings = VerlSettings.from_config({"overrides": bad})
    with pytest.raises(ConfigErrors) as err:
        check_overrides(build_overrides(phase(), TABLE12, settings))
    assert [e.key for e in err.value.errors] == [
        "actor_rollout_ref.actor.optim.lrr", "actor_rollout_ref.model.use_remove_paddin",
        "actor_rollout_ref.actor.ppo_epochs"], str(err.value)
    assert str(err.value).startswith("3 problems found in verl 0.9.1's config:")


@pytest.mark.parametrize("override, message", [
    # Issue 15.2: both passed every check and failed (or were ignored) on the GPU node.
    ("+actor_rollout_ref.model.use_remove_paddin=true", "did you mean "
     "actor_rollout_ref.model.use_remove_padding"),
    ("actor_rollout_ref.model.use_remove_padding=ture", "is 'ture' (str), but verl's default "
     "True is a boolean; write true or false"),
    ("actor_rollout_ref.actor.ppo_epochs=two", "is 'two' (str), but verl's default 1 is a number"),
    # A misspelt key without `+` was named with Hydra's first line alone, whose advice is to
    # add a `+`; and a `+` misspelling was pointed at actor.grad_clip, a key nothing reads.
    ("actor_rollout_ref.rollout.layered_sumon=true", "Could not override "
     "'actor_rollout_ref.rollout.layered_sumon'; did you mean "
     "actor_rollout_ref.rollout.layered_summon?"),
    ("+actor_rollout_ref.actor.grad_clipp=1.0", "which refuses unknown fields); did you mean "
     "actor_rollout_ref.actor.optim.clip_grad (hparams.grad_clip)?"),
])
def test_a_new_key_in_a_dataclass_section_or_a_mistyped_value_is_refused(override, message):
    settings = VerlSettings.from_config({"overrides": [override]})
    with pytest.raises(ConfigError) as err:
        compose(build_overrides(phase(), TABLE12, settings))
    assert message in str(err.value)


@pytest.mark.parametrize("override, refused", [
    ("actor_rollout_ref.actor.ppo_epochs=1.5", True),
    ("actor_rollout_ref.actor.ppo_epochs=2.0", True),
    ("trainer.log_val_generations=2.0", False),           # a section verl keeps a dict
    ("actor_rollout_ref.rollout.top_p=0.9", False),       # floats verl's YAML writes as 1, 0
    ("actor_rollout_ref.rollout.over_sample_rate=0.1", False),
    ("actor_rollout_ref.rollout.val_kwargs.temperature=0.6", False),
])
def test_a_float_where_verls_dataclass_wants_an_int_is_refused(override, refused):
    """Review: the schema check let a float stand for any int default, but verl 0.9.1 reads a
    section with a `_target_` into its dataclass, whose int fields refuse a float (2.0 too) as
    the job starts, after its wait in the queue. Now a float is refused there; verl's float
    fields whose YAML default is a whole number (top_p: 1) still take one."""
    settings = VerlSettings.from_config({"overrides": [override]})
    overrides = build_overrides(phase(), TABLE12, settings)
    if not refused:
        compose(overrides)
        return
    with pytest.raises(ConfigError) as err:
        compose(overrides)
    assert err.value.key == override.partition("=")[0]
    assert "FSDPActorConfig declares it an int" in err.value.problem


def test_the_float_fields_said_to_have_whole_number_defaults_do_in_verls_config():
    from hydra import compose as hydra_compose, initialize_config_dir
    from omegaconf import OmegaConf

    from llmzero_slurm.backends.verl.schema import CONFIG_NAME, verl_config_dir

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        cfg = OmegaConf.to_container(hydra_compose(CONFIG_NAME))
    found: set[tuple[str, str]] = set()

    def walk(section: Any) -> None:
        for leaf, value in section.items():
            if isinstance(value, dict):
                walk(value)
            elif type(value) is int and leaf in WHOLE_FLOATS.get(section.get("_target_"), ()):
                found.add((section["_target_"], leaf))
    walk(cfg)
    assert found == {(target, leaf) for target, leaves in WHOLE_FLOATS.items()
                     for leaf in leaves}


@pytest.mark.parametrize("override, key", [
    ("custom_reward_function.path=/r.py", "custom_reward_function.path"),
    ("+custom_reward_function.name=score", "custom_reward_function.name"),
    ("reward_model.enable=true", "reward_model.enable"),
    ("actor_rollout_ref.actor.grad_clip=0.5", "actor_rollout_ref.actor.grad_clip"),
])
def test_trap_keys_are_refused_with_the_fix(override, key):
    with pytest.raises(ConfigError, match="reward.custom_reward_function|optim.clip_grad|"
                                          "reward.reward_model") as err:
        VerlSettings.from_config({"overrides": [override]})
    assert key in str(err.value)
    with pytest.raises(ConfigError) as err:   # and in any complete list, however it got there
        check_traps(["actor_rollout_ref.rollout.name=vllm", override])
    assert err.value.key == key


@pytest.mark.parametrize("override", ["actor_rollout_ref.actor.optim.lr=1e-4",
                                      "trainer.default_local_dir=/elsewhere",
                                      "data.val_files=[/x.parquet]"])
def test_raw_overrides_cannot_undo_what_the_search_sets(override):
    with pytest.raises(ConfigError, match="hparams|per phase"):
        VerlSettings.from_config({"overrides": [override]})


@pytest.mark.parametrize("override, reason", [
    ("actor_rollout_ref.actor.checkpoint.async_save=true", "latest_checkpointed_iteration.txt"),
    ("trainer.max_actor_ckpt_to_keep=1", "deletes older step folders"),
    ("+trainer.remove_previous_ckpt_in_save=true", "deletes older step folders"),
    ("trainer.del_local_ckpt_after_load=true", "deletes the step folder"),
    ("actor_rollout_ref.actor.checkpoint.save_contents=[optimizer]", "must include model"),
    ("actor_rollout_ref.actor.checkpoint.load_contents=['optimizer', 'extra']",
     "must include model"),
])
def test_raw_overrides_that_break_resuming_are_refused(override, reason):
    """Review: these composed and were accepted, yet each breaks what resuming relies on: with
    async_save verl 0.9.1 never writes its checkpoint tracker, so no step counted as saved and
    a requeue restarted at step 0; keeping fewer checkpoints, or deleting one once loaded,
    removed step folders children start from; contents without the model left no adapter to
    resume. Now each is refused with its reason before anything is written."""
    with pytest.raises(ConfigError) as err:
        VerlSettings.from_config({"overrides": [override]})
    assert err.value.key == f"trainer.overrides: {override.lstrip('+').partition('=')[0]}"
    assert reason in err.value.problem


def test_checkpoint_contents_that_keep_the_model_are_accepted():
    """So are verl's own defaults of the refused keys, written out as a copied config has them."""
    settings = VerlSettings.from_config({"overrides": [
        "actor_rollout_ref.actor.checkpoint.save_contents=['model', optimizer, extra, hf_model]",
        "actor_rollout_ref.actor.checkpoint.load_contents=[model,optimizer,extra]",
        "actor_rollout_ref.actor.checkpoint.async_save=false", "trainer.max_actor_ckpt_to_keep=null",
        "trainer.del_local_ckpt_after_load=False"]})
    checkpoint = compose(build_overrides(phase(), TABLE12, settings)).actor_rollout_ref.actor.checkpoint
    assert list(checkpoint.save_contents) == ["model", "optimizer", "extra", "hf_model"]


@pytest.mark.parametrize("override, source", [
    ("actor_rollout_ref.rollout.response_length=4096", "hparams.max_response_length"),
    ("actor_rollout_ref.rollout.prompt_length=1024", "hparams.max_prompt_length"),
    ("actor_rollout_ref.actor.rollout_n=8", "hparams.rollout_n"),
    ("actor_rollout_ref.ref.rollout_n=8", "hparams.rollout_n"),
    ("critic.ppo_mini_batch_size=64", "hparams.ppo_mini_batch_size"),
    ("actor_rollout_ref.rollout.n_gpus_per_node=8", "set per phase")])
def test_raw_overrides_cannot_freeze_what_follows_a_key_the_search_sets(override, source):
    """verl's default of these interpolates a managed key: overridden, they stayed put while
    the agents changed that key (a longer max_response_length cut every answer short)."""
    with pytest.raises(ConfigError) as err:
        VerlSettings.from_config({"overrides": [override]})
    assert err.value.key == f"trainer.overrides: {override.partition('=')[0]}"
    assert err.value.problem.startswith("follows ") and source in err.value.problem


def test_the_keys_said_to_follow_a_managed_key_do_in_verls_config():
    from hydra import compose as hydra_compose, initialize_config_dir
    from omegaconf import OmegaConf

    from llmzero_slurm.backends.verl.schema import CONFIG_NAME, verl_config_dir

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        cfg = hydra_compose(CONFIG_NAME)
    for key, followed in FOLLOWERS.items():
        section, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, section)
        assert OmegaConf.is_interpolation(node, leaf), key
        assert f"{{oc.select:{followed}," in str(node._get_node(leaf)._value()), key


def test_adapter_without_lora_rank_is_refused():
    with pytest.raises(ConfigError, match="lora_rank"):
        build_overrides(phase(), TABLE12, VerlSettings(), ParentAdapter(ADAPTER, 0))
    with pytest.raises(ConfigError, match="fixed along a strategy"):
        build_overrides(phase(), TABLE12, VerlSettings(), ParentAdapter(ADAPTER, 32))
    scratch = build_overrides(phase(), {**TABLE12, "lora_rank": 0}, VerlSettings())
    sneaked = scratch + [f"actor_rollout_ref.model.lora_adapter_path={ADAPTER}"]
    with pytest.raises(ConfigError, match="lora_rank > 0") as err:
        check_traps(sneaked)
    assert err.value.key == "actor_rollout_ref.model.lora_adapter_path"
    with pytest.raises(ConfigError, match="lora_rank > 0"):
        compose(sneaked)


def test_a_raw_override_loading_dummy_weights_under_lora_is_refused():
    """Review: `actor_rollout_ref.rollout.load_format=dummy` came after the safetensors the
    backend sets for LoRA and won: the rollout engine would generate from random weights, as
    verl syncs only the adapter to it. Without LoRA verl syncs every weight: allowed there."""
    settings = VerlSettings.from_config({"overrides": ["actor_rollout_ref.rollout.load_format=dummy"]})
    with pytest.raises(ConfigError, match="random weights") as err:
        build_overrides(phase(), TABLE12, settings)
    assert err.value.key == "actor_rollout_ref.rollout.load_format"
    build_overrides(phase(), {**TABLE12, "lora_rank": 0}, settings)


def test_mandatory_keys_are_checked():
    full = build_overrides(phase(), TABLE12, VerlSettings())
    no_engine = [o for o in full if not o.startswith("actor_rollout_ref.rollout.name=")]
    with pytest.raises(ConfigError) as err:
        compose(no_engine)
    assert err.value.key == "actor_rollout_ref.rollout.name"
    no_model = [o for o in full if not o.startswith("actor_rollout_ref.model.path=")]
    with pytest.raises(ConfigError) as err:
        compose(no_model)
    assert err.value.key == "actor_rollout_ref.model.path"


def test_bad_settings_are_named():
    with pytest.raises(ConfigError, match="trainer.rollout_engin"):
        VerlSettings.from_config({"rollout_engin": "vllm"})
    with pytest.raises(ConfigError, match="trainer.rollout_engine"):
        VerlSettings.from_config({"rollout_engine": "tgi"})
    with pytest.raises(ConfigError, match="not a Hydra override"):
        VerlSettings.from_config({"overrides": ["just words"]})


@pytest.mark.parametrize("logger, closest", [("wanbd", "; did you mean 'wandb'?"),
                                             ("tensorbord", "; did you mean 'tensorboard'?"),
                                             ("$(id)", " (verl 0.9.1 has ")])
def test_a_logger_verl_does_not_know_is_refused_with_the_closest(logger, closest):
    """verl asserts on an unknown logger name as fit() starts: every phase failed on the GPUs."""
    with pytest.raises(ConfigError) as err:
        VerlSettings.from_config({"extra_loggers": ["wandb", logger]})
    assert err.value.key == "trainer.extra_loggers[1]"
    assert err.value.problem.startswith(f"{logger!r} is not a verl logger{closest}")
    assert VerlSettings.from_config({"extra_loggers": ["tensorboard", "mlflow"]})


def test_login_node_without_hydra_skips_with_a_reason():
    code = ("import sys; sys.modules['hydra'] = None\n"
            "import importlib.util as u; real = u.find_spec\n"
            "u.find_spec = lambda n, *a: None if n == 'hydra' else real(n, *a)\n"
            "from llmzero_slurm.backends.verl.schema import check_overrides\n"
            "print(check_overrides(['x=1']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "not checked" in out.stdout and "hydra-core" in out.stdout
    assert check_overrides(build_overrides(phase(), TABLE12, VerlSettings())) is None


def test_hydra_installed_without_its_dependencies_skips_with_the_fix():
    """`pip install --no-deps verl==0.9.1 hydra-core`, as the README once said, leaves hydra
    without omegaconf: every start then failed with a bare ModuleNotFoundError."""
    code = ("import sys; sys.modules['omegaconf'] = None\n"
            "from llmzero_slurm.backends.verl.schema import check_overrides\n"
            "print(check_overrides(['x=1']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "not checked" in out.stdout and "omegaconf" in out.stdout
    assert "without --no-deps" in out.stdout


def test_ray_is_told_the_allocation_and_keeps_to_its_own_job():
    """Issue 16: on one node ray_init.num_cpus was left null (Ray claimed the whole node)."""
    one = compose(build_overrides(phase(), TABLE12, VerlSettings()))
    assert one.ray_kwargs.ray_init.num_cpus == 64
    assert one.ray_kwargs.ray_init.include_dashboard is False
    several = build_overrides(phase(nnodes=2), TABLE12, VerlSettings())
    assert not any(o.startswith(("ray_kwargs.ray_init.num_cpus", "+ray_kwargs.ray_init.include"))
                   for o in several)      # ray.init joins the job's cluster: no num_cpus then


def test_a_phase_trains_every_step_it_was_given_whatever_its_epochs():
    """verl 0.9.1's fit loop (trainer/ppo/v1/trainer_base.py) runs while `epoch < total_epochs
    and step <= total_training_steps`: a phase of 100 steps that kept its parent's
    total_epochs=1 stopped after one epoch of GSM8K (58 steps at batch 128), short of its last
    step, so its final steps were neither saved nor validated."""
    hp = {**TABLE12, "total_epochs": 1, "total_training_steps": 100, "save_freq": 30}
    cfg = compose(build_overrides(phase(), hp, VerlSettings()))
    for steps_per_epoch in (1, 58, 1000):      # an epoch holds at least one step
        trained = min(cfg.trainer.total_training_steps, cfg.trainer.total_epochs * steps_per_epoch)
        assert trained == 100, steps_per_epoch


def test_a_phase_that_would_never_save_or_validate_is_refused():
    """verl 0.9.1's save_freq and test_freq default to -1: a config that left them out passed
    --check, and every phase then trained without a checkpoint to resume from and ended with
    no validation score after its first (untrained) one."""
    bare = {k: v for k, v in TABLE12.items() if k not in ("save_freq", "test_freq")}
    with pytest.raises(ConfigError) as err:
        build_overrides(phase(), bare, VerlSettings())
    assert err.value.key == "hparams.save_freq"
    assert "save_freq must be set" in str(err.value) and "test_freq must be set" in str(err.value)
    with pytest.raises(ConfigError, match="test_freq must be set.*without a score"):
        build_overrides(phase(), {**bare, "save_freq": 10}, VerlSettings())


@pytest.mark.parametrize("changes, key, message", [
    # verl's validate_config refuses it as the job starts, after its wait in the queue.
    ({"train_batch_size": 100, "ppo_mini_batch_size": 50, "rollout_n": 5,
      "ppo_micro_batch_size_per_gpu": 2, "log_prob_micro_batch_size_per_gpu": 4},
     "hparams.train_batch_size", "500 responses a step must split evenly over the job's 8 GPUs"),
    # verl asserts these two only at the first actor update: after a validation pass and a
    # rollout on the job's GPUs.
    ({"train_batch_size": 12, "ppo_mini_batch_size": 3, "rollout_n": 2,
      "ppo_micro_batch_size_per_gpu": 2},
     "hparams.ppo_mini_batch_size", "6 responses an update must split evenly over 8 GPUs"),
    ({"ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_gpu": 4},
     "hparams.ppo_micro_batch_size_per_gpu", "must divide the 2 responses each of the 8 GPUs"),
    # ...and this one at the first log-probabilities, after a rollout (prepare_micro_batches).
    ({"log_prob_micro_batch_size_per_gpu": 256}, "hparams.log_prob_micro_batch_size_per_gpu",
     "is 256, but must divide the 128 responses each of the 8 GPUs"),
])
def test_batches_that_do_not_split_over_the_gpus_are_refused_before_submission(changes, key, message):
    hp = validate_hparams({**TABLE12, "ppo_micro_batch_size_per_gpu": 4, **changes}, "verl")
    with pytest.raises(ConfigError) as err:
        compose(build_overrides(phase(gpus_per_node=8), hp, VerlSettings()))
    assert err.value.key == key and message in str(err.value)
    one_gpu = {**hp, "tensor_model_parallel_size": 1}         # one GPU takes any batch
    compose(build_overrides(phase(gpus_per_node=1), one_gpu, VerlSettings()))


# verl 0.9.1's ResourcePoolManager (max_colocate_count=3) places one bundle of 3 CPUs and a GPU
# per GPU, and ray.get(placement_group.ready()) waits until Ray can give them all.
VERL_CPUS_PER_GPU = 3


@pytest.mark.parametrize("cpus, gpus", [(2, 8), (16, 8), (64, 8), (1, 2)])
def test_ray_has_the_cpus_verl_reserves_for_its_gpu_workers(cpus, gpus):
    """slurm.cpus_per_task (default 2) became Ray's CPU count: below 3 per GPU verl's placement
    group could never be placed, and the job held its GPUs, idle, until its time limit."""
    spec = phase(gpus_per_node=gpus, cpus_per_task=cpus)
    told = compose(build_overrides(spec, TABLE12, VerlSettings())).ray_kwargs.ray_init.num_cpus
    assert told > VERL_CPUS_PER_GPU * gpus and told >= cpus


def first_batch(cfg, rows: int = 7473) -> list[int]:
    """The first training prompts a verl run draws: verl 0.9.1's create_rl_sampler shuffles with
    a fresh torch.Generator, seeded with data.seed when it is set."""
    torch = pytest.importorskip("torch")
    generator = torch.Generator()
    if cfg.data.seed is not None:
        generator.manual_seed(cfg.data.seed)
    return torch.randperm(rows, generator=generator)[:cfg.data.train_batch_size].tolist()


@pytest.mark.parametrize("seed", [None, 7])
def test_a_resumed_phase_does_not_retrain_the_batches_its_strategy_began_with(seed):
    """verl shuffles the training set anew in every run, and without a seed a fresh generator
    always starts the same: each phase of a strategy trained again on the very batches its
    first phase began with. Siblings from one checkpoint still share an order (a fair match)."""
    hp = TABLE12 if seed is None else {**TABLE12, "seed": seed}

    def run(step: int) -> Any:
        spec = phase()
        return compose(build_overrides(PhaseSpec(**{**spec.__dict__, "resume_step": step}), hp,
                                       VerlSettings(), ParentAdapter(ADAPTER, 64) if step else None))
    scratch, child, sibling, grandchild = run(0), run(30), run(30), run(60)
    assert scratch.data.seed == seed
    assert first_batch(child) == first_batch(sibling)
    assert len({tuple(first_batch(c)) for c in (scratch, child, grandchild)}) == 3


def test_a_rollout_engine_that_does_not_tile_the_gpus_is_refused_before_submission():
    """verl asserts that a rollout replica's GPUs (tensor x data x pipeline parallel) divide
    the job's GPUs only when it builds the engine, after loading the actor on every GPU."""
    hp = {**TABLE12, "tensor_model_parallel_size": 3}
    with pytest.raises(ConfigError) as err:
        compose(build_overrides(phase(gpus_per_node=8), hp, VerlSettings()))
    assert err.value.key == "hparams.tensor_model_parallel_size"
    assert "3 GPUs of a rollout replica must divide the job's 8" in str(err.value)
    compose(build_overrides(phase(gpus_per_node=8), {**hp, "tensor_model_parallel_size": 4},
                            VerlSettings()))


@pytest.mark.parametrize("unset, key", [
    ("ppo_micro_batch_size_per_gpu", "hparams.ppo_micro_batch_size_per_gpu"),
    ("log_prob_micro_batch_size_per_gpu", "hparams.log_prob_micro_batch_size_per_gpu"),
])
def test_a_phase_without_micro_batch_sizes_is_refused_before_submission(unset, key):
    """verl 0.9.1 has no default micro-batch size: its validate_config refuses a phase
    without one as the job starts, after its wait in the queue (the paper's Table 12 gives
    none)."""
    hp = {k: v for k, v in TABLE12.items() if k != unset}
    with pytest.raises(ConfigError) as err:
        compose(build_overrides(phase(), hp, VerlSettings()))
    assert err.value.key == key and "no default" in str(err.value)


# The overrides of verl's examples/grpo_trainer/run_qwen2_5-3b_gsm8k_grpo_lora.sh, pasted into
# trainer.overrides as a verl user migrating a run would (the shell's quotes kept).
VERL_SCRIPT = """algorithm.adv_estimator=grpo trainer.val_before_train=False
data.train_files=$HOME/data/gsm8k/train.parquet data.val_files=$HOME/data/gsm8k/test.parquet
data.train_batch_size=16 data.max_prompt_length=512 data.max_response_length=1024
data.filter_overlong_prompts=True data.truncation='error'
actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct actor_rollout_ref.model.lora_rank=64
actor_rollout_ref.model.lora_alpha=32 actor_rollout_ref.actor.optim.lr=3e-6
actor_rollout_ref.model.use_remove_padding=True actor_rollout_ref.actor.ppo_mini_batch_size=16
actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=40 actor_rollout_ref.actor.use_kl_loss=True
actor_rollout_ref.actor.kl_loss_coef=0.001 actor_rollout_ref.actor.kl_loss_type=low_var_kl
actor_rollout_ref.actor.entropy_coeff=0 actor_rollout_ref.model.enable_gradient_checkpointing=True
actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=40
actor_rollout_ref.rollout.tensor_model_parallel_size=2 actor_rollout_ref.rollout.name=vllm
actor_rollout_ref.rollout.gpu_memory_utilization=0.6 actor_rollout_ref.rollout.n=5
actor_rollout_ref.rollout.load_format=safetensors actor_rollout_ref.rollout.layered_summon=True
actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=40
actor_rollout_ref.ref.fsdp_config.param_offload=True algorithm.use_kl_in_reward=False
trainer.critic_warmup=0 trainer.logger='["console","wandb"]'
trainer.project_name='verl_grpo_example_gsm8k' trainer.experiment_name='qwen2.5_3b_grpo_lora'
trainer.n_gpus_per_node=2 trainer.nnodes=1 trainer.save_freq=20 trainer.test_freq=5
trainer.total_epochs=15""".split()


def test_a_pasted_verl_script_is_refused_once_with_what_to_write_for_each_key():
    """Walkthrough: a verl user's launch script pasted into trainer.overrides was refused one
    key per try (32 tries for verl's own GRPO LoRA example), each saying only that the key
    "is set from hparams.lr" or "is set per phase by llmzero (see PHASE_KEYS in keys.py)".
    Now every refusal comes at once, each with the line to write instead, its value kept, so
    the script's hyperparameters become the search's first phase."""
    with pytest.raises(ConfigError) as err:
        VerlSettings.from_config({"overrides": VERL_SCRIPT})
    problems = {e.key.removeprefix("trainer.overrides: "): e.problem for e in err.value.errors}
    assert len(problems) == 32, sorted(problems)
    # Each key the shared vocabulary holds: its hparams line, the value as YAML reads it.
    assert "write `lr: 3.0e-06` under hparams:" in problems["actor_rollout_ref.actor.optim.lr"]
    # Which the agents may change per phase, which stay for the whole run: search.space says.
    assert "`max_prompt_length: 512` in search.space keeps it for the whole run" in \
        problems["data.max_prompt_length"]
    # A launch script's total_epochs is its whole run; here it is each phase's length (and
    # search.space refuses total_epochs for llmzero: it bounds total_training_steps).
    epochs = problems["trainer.total_epochs"]
    assert "each phase's length" in epochs and "search.budget_" in epochs, epochs
    assert "in search.space keeps" not in epochs
    assert "`max_response_length: 1024`" in problems["data.max_response_length"]
    assert "`use_kl_loss: true`" in problems["actor_rollout_ref.actor.use_kl_loss"]
    assert "`kl_loss_type: low_var_kl`" in problems["actor_rollout_ref.actor.kl_loss_type"]
    assert "`lora_alpha: 32`" in problems["actor_rollout_ref.model.lora_alpha"]
    assert "`use_kl_in_reward: false`" in problems["algorithm.use_kl_in_reward"]
    for key, problem in problems.items():
        if names := [name for name, keys in HPARAM_KEYS.items() if key in keys]:
            written = yaml.safe_load(problem.split("`")[1])
            assert list(written) == names[:1], (key, problem)
            validate_hparams(written, "verl", written=True)
        assert "PHASE_KEYS" not in problem, (key, problem)
    # Each key llmzero sets per phase: the config key that sets it, or that it is dropped.
    assert "task.train_files" in problems["data.train_files"]
    assert "task.val_files" in problems["data.val_files"]
    assert "model_path: Qwen/Qwen2.5-3B-Instruct" in problems["actor_rollout_ref.model.path"]
    assert "trainer.rollout_engine" in problems["actor_rollout_ref.rollout.name"]
    assert "extra_loggers: [wandb]" in problems["trainer.logger"]
    assert "slurm.gpus_per_node: 2" in problems["trainer.n_gpus_per_node"]
    assert "slurm.nodes: 1" in problems["trainer.nnodes"]
    assert "drop it" in problems["algorithm.adv_estimator"]
    assert "drop it" in problems["trainer.project_name"]
    assert str(err.value).startswith("32 problems found in trainer.overrides:")


@pytest.mark.parametrize("override", ["data.shuffle=False", "data.shuffle=false",
                                      "data.shuffle='False'"])
def test_a_training_set_read_in_order_is_refused(override):
    """Walkthrough: verl's GRPO LoRA example sets data.shuffle=False, which was accepted. Each
    phase is a new verl run and starts at its sampler's first batch: read in order, every phase
    of a strategy trained again on the rows its first phase began with (the seed per resume
    step that varies the order needs the shuffle)."""
    with pytest.raises(ConfigError) as err:
        VerlSettings.from_config({"overrides": [override]})
    assert err.value.key == "trainer.overrides: data.shuffle"
    assert "first phase" in err.value.problem and "drop it" in err.value.problem
    kept = VerlSettings.from_config({"overrides": ["data.shuffle=true"]})
    assert compose(build_overrides(phase(), TABLE12, kept)).data.shuffle is True


@pytest.mark.parametrize("override, variable", [
    ("trainer.validation_data_dir=$HOME/val_dumps", "$HOME"),
    ("data.custom_cls.path=${SCRATCH}/my_dataset.py", "${SCRATCH}"),
    ('trainer.rollout_data_dir="$WORK/rollouts"', "$WORK")])
def test_a_shell_variable_left_in_an_override_is_refused(override, variable):
    """Walkthrough: `$HOME/...` from a launch script, which the shell expanded there, reached
    verl as written (the phase script quotes every override): verl would read a folder named
    '$HOME' on the GPU node, after the queue wait. verl's own interpolations stay accepted."""
    with pytest.raises(ConfigError) as err:
        VerlSettings.from_config({"overrides": [override]})
    assert variable in err.value.problem and "${oc.env:" in err.value.problem
    VerlSettings.from_config({"overrides": [
        "trainer.validation_data_dir=${oc.env:HOME}/val_dumps",
        "actor_rollout_ref.rollout.max_num_batched_tokens=${data.max_prompt_length}"]})


@pytest.mark.parametrize("value", ["False", "True"])
def test_validation_before_training_is_left_to_the_search(value):
    """Walkthrough: verl's GRPO LoRA example sets trainer.val_before_train=False, which was
    accepted: every scratch phase then skipped the base model's validation, so llmzero-status
    and the report had no base to state the search's gain over. True, appended after the
    backend's false, made an evolve phase validate again the weights its parent validated."""
    with pytest.raises(ConfigError) as err:
        VerlSettings.from_config({"overrides": [f"trainer.val_before_train={value}"]})
    assert err.value.key == "trainer.overrides: trainer.val_before_train"
    assert "base model" in err.value.problem and "drop it" in err.value.problem


@pytest.mark.parametrize("override, hint", [
    ("+data.filter_overlong_prompts=True", "without the leading +"),
    ("actor_rollout_ref.model.override_config.attn_implementation=eager",
     "+actor_rollout_ref.model.override_config.attn_implementation=eager")])
def test_a_plus_where_verl_has_the_key_or_none_where_it_lacks_it_says_which(override, hint):
    """Walkthrough: Hydra's `+` appends a key verl's config lacks and refuses one it has; the
    refusal kept only Hydra's first line ("Could not override '...'"), losing what to write."""
    settings = VerlSettings.from_config({"overrides": [override]})
    with pytest.raises(ConfigError) as err:
        compose(build_overrides(phase(), TABLE12, settings))
    assert err.value.key == override.lstrip("+").partition("=")[0]
    assert hint in err.value.problem


@pytest.mark.parametrize("override", [
    """actor_rollout_ref.actor.checkpoint.save_contents='["model","optimizer","extra"]'""",
    """+actor_rollout_ref.model.override_config='{"attn_implementation": "eager"}'"""])
def test_a_list_in_the_shells_quotes_is_refused_as_the_string_hydra_reads(override):
    """Walkthrough: verl's scripts quote list values for the shell ('["console","wandb"]');
    pasted into trainer.overrides the quotes reach Hydra, which reads one string. The list of
    checkpoint contents was refused for lacking `model`, which it has."""
    with pytest.raises(ConfigError) as err:
        VerlSettings.from_config({"overrides": [override]})
    assert "one string" in err.value.problem and "model:" not in err.value.problem
    unquoted = override.replace("='", "=").rstrip("'")
    VerlSettings.from_config({"overrides": [unquoted]})


@pytest.mark.parametrize("override", ["data.truncation=error \\", "data.truncation=error\\",
                                      "trainer.critic_warmup=0 $@"])
def test_a_launch_scripts_line_continuation_is_refused(override):
    """Walkthrough: lines copied from a launch script keep its ` \\` continuation (or its last
    line's `$@`); `data.truncation=error \\` composed, and verl would have read the truncation
    mode 'error \\' on the GPU node."""
    with pytest.raises(ConfigError) as err:
        VerlSettings.from_config({"overrides": [override]})
    assert err.value.key == f"trainer.overrides: {override.partition('=')[0]}"
    assert "take it off" in err.value.problem
