"""experiment.yaml and hyperparameter checks name the offending key."""
import pytest

from llmzero_slurm.config import load_config, parse_config
from llmzero_slurm.errors import ConfigError
from llmzero_slurm.hparams import merge, validate_hparams
from llmzero_slurm.methods.space import grid_points
from llmzero_slurm.sbatch_options import cpu_job_directives, phase_directives


def refused(data: dict) -> str:
    """What parse_config says when it refuses `data`."""
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    return str(err.value)


def test_defaults_are_the_papers():
    cfg = parse_config({"name": "demo"})
    s = cfg.search
    assert (s.exploration_c, s.temperature, s.fail_penalty, s.early_penalty, s.fail_forgiven) == \
        (1.414, 0.3, 0.5, 0.3, 2)
    assert (s.max_evolve_children, s.max_debug_children, s.max_debug_depth) == (2, 3, 5)
    assert (s.min_scratch_ratio, s.early_stop_interval_s, s.budget_iterations) == (0.2, 900.0, 16)
    assert s.keep_checkpoints == "all"    # every checkpoint, as before the setting


@pytest.mark.parametrize("data, key", [
    ({"name": "x", "serach": {}}, "serach"),
    ({"name": "x", "search": {"temprature": 1}}, "search.temprature"),
    ({"name": "x", "search": {"concurrency": 0}}, "search.concurrency"),
    ({"name": "x", "slurm": {"nodes": "two"}}, "slurm.nodes"),
    ({"name": "x", "hparams": {"lr": "1e-5; rm -rf ~"}}, "hparams.lr"),
    ({"name": "x", "hparams": {"learning_rate": 1e-5}}, "hparams.learning_rate"),
    ({"name": "bad name!"}, "name"),
    ({"name": "x", "search": {"method": "replay"}}, "search.strategy_file"),
    ({"name": "x", "search": {"budget_gpu_hours": -1}}, "search.budget_gpu_hours"),
    ({"name": "x", "search": {"budget_gpu_hours": 0}}, "search.budget_gpu_hours"),
    ({"name": "x", "search": {"budget_wall_hours": 0}}, "search.budget_wall_hours"),
    ({"name": "x", "search": {"temperature": float("nan")}}, "search.temperature"),
    # f_T's e^{1/T} overflows below T = 0.0014: every selection raised OverflowError.
    ({"name": "x", "search": {"temperature": 0.001}}, "search.temperature"),
    ({"name": "x", "search": {"keep_checkpoints": "best"}}, "search.keep_checkpoints"),
    ({"name": "x", "agents": {"max_retries": -1}}, "agents.max_retries"),
    ({"name": "x", "agents": {"timeout_s": -1}}, "agents.timeout_s"),
    ({"name": "x", "agents": {"timeout_s": 0}}, "agents.timeout_s"),
    ({"name": "x", "agents": {"max_tokens": 0}}, "agents.max_tokens"),
    ({"name": "x", "agents": {"image_max_px": -5}}, "agents.image_max_px"),
    ({"name": "x", "agents": {"stop_margin": -0.1}}, "agents.stop_margin"),
    ({"name": "x", "agents": {"price_input_per_mtok": -3}}, "agents.price_input_per_mtok"),
    ({"name": "x", "agents": {"price_cache_read_per_mtok": -0.3}},
     "agents.price_cache_read_per_mtok"),
    ({"name": "x", "state": {"lock_timeout_s": -1}}, "state.lock_timeout_s"),
    ({"name": "x", "state": {"stale_after_s": 0}}, "state.stale_after_s"),
    ({"name": "x", "task": {"builtin": "addition", "train_files": ["t.parquet"]}},
     "task.train_files"),
    ({"name": "x", "task": {"builtin": "addition", "reward_path": "r.py"}}, "task.reward_path"),
    # The cpu trainer never passes it for a built-in task, which brings its own reward.
    ({"name": "x", "task": {"builtin": "addition", "reward_name": "score"}}, "task.reward_name"),
    ({"name": "x", "agents": {"api_key_env": ""}}, "agents.api_key_env"),
    # A typo was accepted; the run's first phase failed after its queue wait.
    ({"name": "x", "task": {"builtin": "additon"}}, "task.builtin"),
])
def test_bad_config_names_the_key(data, key):
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert err.value.key == key
    assert f"'{key}'" in str(err.value)


@pytest.mark.parametrize("written, section, time", [
    ("slurm: {time: 12:00:00}", "slurm", "12:00:00"),
    ("controller: {time: 30:00}", "controller", "30:00"),
    ("slurm: {time: 1440}", "slurm", "1440"),          # minutes, as sbatch reads a number
    ("controller: {time: 90}", "controller", "90")])
def test_a_slurm_time_means_what_sbatch_reads(tmp_path, written, section, time):
    """YAML 1.1 reads an unquoted 12:00:00 as the base-60 number 43200, and the config refused
    the number; time: 1440 (minutes, as sbatch takes it) was refused with advice to write
    "24:00", which Slurm reads as 24 minutes."""
    path = tmp_path / "exp.yaml"
    path.write_text(f"name: x\n{written}\n")
    cfg = load_config(path)
    directives = phase_directives(cfg.slurm) if section == "slurm" else \
        cpu_job_directives(section, cfg.controller, "controller.time", [])
    assert getattr(cfg, section).time == time and f"--time={time}" in directives


@pytest.mark.parametrize("time", [0, -60, True])
def test_a_slurm_time_that_is_no_positive_number_of_minutes_is_refused(time):
    assert refused({"name": "x", "slurm": {"time": time}}).startswith("config key 'slurm.time'")


def test_a_missing_name_is_named():
    """It was 'ExperimentConfig.__init__() missing 1 required positional argument'."""
    with pytest.raises(ConfigError) as err:
        parse_config({"backend": "cpu"})
    assert str(err.value) == "config key 'name': is required (a short experiment name used in " \
                             "job names)"
    assert refused({"name": "x", "search": {"concurrency": 0}}) == \
        "config key 'search.concurrency': must be > 0 (got 0)"


def test_every_problem_of_a_config_is_named_at_once(tmp_path):
    """Only the first problem was named: a file with three typos took three rounds of --check.
    They come in the file's order, counted; the error is still a ConfigError (exit 2) whose
    key and problem are the first's."""
    path = tmp_path / "exp.yaml"
    path.write_text("name: x\nsearch:\n  concurrency: 0\nslurm:\n  nodse: 1\n"
                    "agents:\n  backend: claude\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).splitlines() == [
        f"3 problems found in {path}:",
        "  config key 'search.concurrency': must be > 0 (got 0)",
        "  config key 'slurm.nodse': unknown key (known: account, constraint, cpus_per_task, "
        "exclusive, extra_directives, gpu_directive, gpu_type, gpus_per_node, mem, nodes, "
        "partition, qos, requeue, setup, setup_dir, time)",
        "  config key 'agents.backend': must be auto, anthropic, openai or heuristic"]
    assert (err.value.exit_code, err.value.key, err.value.problem) == \
        (2, "search.concurrency", "must be > 0 (got 0)")


@pytest.mark.parametrize("data, keys", [
    ({"hparams": {"lr": "fast", "rollout_n": 1}, "agents": {"max_tokens": 0, "timeout_s": 0}},
     ["hparams.lr", "hparams.rollout_n", "agents.max_tokens", "agents.timeout_s", "name"]),
    ({"name": 5, "task": {"warm_start": {"band": [0.5, 0.2], "stepz": 1}}},
     ["name", "task.warm_start.stepz", "task.warm_start.band"]),
    ({"name": "x", "state": 3, "slurm": {"gpu_directive": "gpu"}, "monitor": {"qos": "a b"}},
     ["state", "slurm.gpu_directive", "monitor.qos"]),
    ({"name": "x", "backend": "vrel", "scheduler": "pbs", "hparams": {"max_num_seqs": 4}},
     ["backend", "scheduler"]),
    ({"name": "x", "backend": 1, "model_path": "m", "slurm": {"gpus_per_node": "eight"}},
     ["backend", "slurm.gpus_per_node"]),
    ({"name": "x", "search": {"method": "replay", "strategy_file": 3}},
     ["search.strategy_file"]),
    ({"name": "x", "search": {"method": 5, "space": 3, "concurrency": 0}},
     ["search.method", "search.space", "search.concurrency"]),
    ({"name": "x", "hparams": {"train_batch_size": "8", "ppo_mini_batch_size": 3}},
     ["hparams.train_batch_size"]),
], ids=["hparams-and-agents", "name-and-warm-start", "sections", "names", "backend",
        "replay", "search", "batch-arithmetic"])
def test_independent_problems_come_together_and_dependent_ones_not_at_all(data, keys):
    """Each key's problem is named; a check that reads a refused key is left out, as it would
    see that key's default: `backend: 1` is not also 'model_path is read by verl only', a
    refused batch size is not also a batch that does not divide."""
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert [e.key for e in err.value.errors] == keys
    assert str(err.value).splitlines()[0] == \
        (f"{len(keys)} problems found in <memory>:" if len(keys) > 1 else str(err.value))


@pytest.mark.parametrize("section, data, keys", [
    ("agents", {"backend": "nope", "cache_ttl": "2h", "api_key_env": "1x", "max_tokens": 0},
     ["agents.backend", "agents.cache_ttl", "agents.api_key_env", "agents.max_tokens"]),
    ("state", {"lock": "none", "stale_after_s": 0}, ["state.lock", "state.stale_after_s"]),
    ("monitor", {"partition": "x y", "qos": "q;"}, ["monitor.partition", "monitor.qos"]),
    ("task", {"builtin": "addition", "train_files": ["a"], "reward_path": "r.py"},
     ["task.train_files", "task.reward_path"]),
    ("search", {"method": "replay", "concurrency": 0},
     ["search.concurrency", "search.strategy_file"]),
], ids=["agents", "state", "monitor", "task", "search"])
def test_every_problem_within_one_section_is_named_at_once(section, data, keys):
    """A section stopped at its first bad key: `agents:` with four typos took four rounds."""
    with pytest.raises(ConfigError) as err:
        parse_config({"name": "x", section: data})
    assert [e.key for e in err.value.errors] == keys


def test_job_placement_problems_are_named_as_the_file_is_read():
    """`slurm.time: abc` passed the config check and was named only by the phase-script check
    after it, a round later, and then alone."""
    with pytest.raises(ConfigError) as err:
        parse_config({"name": "x", "slurm": {"time": "abc", "nodes": 0,
                                             "extra_directives": ["--wrap=x", "--clusters=b"]},
                      "agents": {"backend": "x"}, "controller": {"mem": "lots", "qos": "a b"}})
    assert [e.key for e in err.value.errors] == [
        "slurm.nodes", "slurm.time", "slurm.extra_directives[0]", "slurm.extra_directives[1]",
        "agents.backend", "controller.qos", "controller.mem"]


def test_every_warm_start_problem_is_named_at_once():
    with pytest.raises(ConfigError) as err:
        parse_config({"name": "x", "task": {"warm_start": {"band": [0.7, 0.2], "max_steps": 0,
                                                            "steps": -1}}})
    assert [e.key for e in err.value.errors] == [
        "task.warm_start.band", "task.warm_start.max_steps", "task.warm_start.steps",
        "task.warm_start.steps"]


def test_a_verl_config_names_both_of_its_backend_problems():
    with pytest.raises(ConfigError) as err:
        parse_config({"name": "x", "backend": "verl", "model_path": "m",
                      "hparams": {"lora_rank": 8}, "task": {"warm_start": {"steps": 5}}})
    assert [e.key for e in err.value.errors] == ["task.warm_start", "slurm.gpus_per_node"]


def test_yaml_errors_name_the_file(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="exp.yaml is not valid YAML"):
        load_config(path)


@pytest.mark.parametrize("text, key, lines", [
    ("name: demo\nbackend: cpu\nname: other\n", "name", (1, 3)),
    ("name: demo\nsearch:\n  concurrency: 2\n  budget_iterations: 4\n  concurrency: 1\n",
     "concurrency", (3, 5)),
], ids=["top-level", "nested"])
def test_a_key_given_twice_is_refused_with_its_lines(tmp_path, text, key, lines):
    """YAML kept the last value silently."""
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"exp.yaml is not valid YAML: key '{key}' is given "
                                          f"twice, on lines {lines[0]} and {lines[1]}"):
        load_config(path)


def test_a_merge_key_may_still_override_what_it_merges(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("name: demo\ncontroller:\n  <<: {time: '02:00:00', cpus: 1}\n  cpus: 2\n")
    cfg = load_config(path)
    assert (cfg.controller.time, cfg.controller.cpus) == ("02:00:00", 2)


@pytest.mark.parametrize("data", [
    b"name: caf\xe9\n",                                 # Latin-1
    "name: demo\n".encode("utf-16"),                    # UTF-16 with its BOM
    b"\x00\x01\x80\xffname",                            # binary
], ids=["latin-1", "utf-16", "binary"])
def test_a_config_that_is_not_utf8_names_the_file(tmp_path, data):
    path = tmp_path / "exp.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError, match=r"exp\.yaml is not UTF-8 text"):
        load_config(path)


@pytest.mark.parametrize("values, key", [
    ({"rollout_n": 2.5}, "rollout_n"),
    ({"rollout_n": True}, "rollout_n"),
    ({"temperature": float("inf")}, "temperature"),
    ({"use_kl_loss": "yes"}, "use_kl_loss"),
    ({"target_modules": "$(curl x)"}, "target_modules"),
    ({"kl_loss_type": "fancy"}, "kl_loss_type"),
    ({"train_batch_size": 16, "ppo_mini_batch_size": 6}, "ppo_mini_batch_size"),
    ({"ppo_mini_batch_size": 4, "rollout_n": 3, "ppo_micro_batch_size_per_gpu": 8},
     "ppo_micro_batch_size_per_gpu"),
    ({"lora_rank": 8, "lora_alpha": 0}, "lora_alpha"),
])
def test_hyperparameter_errors(values, key):
    with pytest.raises(ConfigError) as err:
        validate_hparams(values)
    assert err.value.key == key


def test_backend_specific_keys_and_merge():
    with pytest.raises(ConfigError, match="not used by the cpu backend"):
        validate_hparams({"max_num_seqs": 8}, "cpu")
    assert merge({"lr": 1e-3, "rollout_n": 8}, {"lr": 5e-4}) == {"lr": 5e-4, "rollout_n": 8}
    assert validate_hparams({"total_epochs": 3.0}) == {"total_epochs": 3}


def test_the_cpu_trainer_refuses_lora_rank_0_when_the_config_is_read():
    """lora_rank: 0 passed --check with the cpu backend; every phase job then exited 2."""
    assert refused({"name": "x", "hparams": {"lora_rank": 0}}) == \
        "config key 'hparams.lora_rank': must be >= 1 with the cpu backend: it trains LoRA " \
        "adapters only (got 0)"
    with pytest.raises(ConfigError, match="search.space.lora_rank"):
        grid_points({"lora_rank": [0, 8]}, "cpu")



@pytest.mark.parametrize("hparams, problem", [
    ({}, "the verl backend needs it (e.g. lora_rank: 64 and lora_alpha: 64)"),
    ({"lora_rank": 0}, "must be >= 1 with the verl backend"),
], ids=["unset", "0"])
def test_verl_refuses_a_config_without_lora_when_it_is_read(hparams, problem):
    """A verl config without lora_rank (or with 0: verl then trains the whole model) was
    valid; --check failed at the evolve script with "needs the parent's lora_rank > 0" and no
    word of what to set, and every start was refused so. The search resumes its phases from
    LoRA adapters, so the config check says that, and what to set."""
    base = {"name": "x", "backend": "verl", "model_path": "m", "slurm": {"gpus_per_node": 8}}
    why = ": every phase after the first starts from its parent's LoRA adapter, and with " \
          "none verl trains the whole model and saves no adapter to start from"
    assert refused({**base, "hparams": hparams}).startswith(
        f"config key 'hparams.lora_rank': {problem}{why}")
    assert parse_config({**base, "hparams": {"lora_rank": 64}}).hparams == {"lora_rank": 64}


def test_verl_refuses_a_lora_rank_its_rollout_engine_refuses():
    """lora_rank: 768 passed every check (the vocabulary allows 1024); verl's vLLM rollout then
    refused any rank above 512 as each phase started, once the model was loaded on its GPUs."""
    base = {"name": "x", "backend": "verl", "model_path": "m", "slurm": {"gpus_per_node": 8}}
    assert refused({**base, "hparams": {"lora_rank": 768}}) == \
        "config key 'hparams.lora_rank': must be <= 512 with the verl backend: vLLM, verl's " \
        "rollout engine, serves no LoRA rank above 512, and verl fails such a phase as it " \
        "starts (got 768)"
    assert parse_config({**base, "hparams": {"lora_rank": 512}}).hparams == {"lora_rank": 512}
    assert validate_hparams({"lora_rank": 768}, "cpu") == {"lora_rank": 768}


def test_verl_needs_gpus_per_node():
    """backend: verl with slurm.gpus_per_node left at 0 passed --check; verl was then asked
    for trainer.n_gpus_per_node=0 in every phase."""
    assert refused({"name": "x", "backend": "verl", "model_path": "m",
                    "hparams": {"lora_rank": 8}}) == \
        "config key 'slurm.gpus_per_node': the verl backend trains on GPUs: give each phase " \
        "node's GPU count (e.g. 8), not 0"
    assert parse_config({"name": "x", "backend": "verl", "model_path": "m",
                         "hparams": {"lora_rank": 8},
                         "slurm": {"gpus_per_node": 1}}).slurm.gpus_per_node == 1


@pytest.mark.parametrize("url", ["localhost:8000", "api.example.com/v1", "ftp://host/v1",
                                 "http://", "https:///v1", "http://host name/v1"])
def test_base_url_must_be_an_http_url_with_a_host(url):
    """agents.base_url was taken as any string; the agents then failed every call and fell
    back to the heuristics."""
    assert refused({"name": "x", "agents": {"base_url": url}}) == \
        f"config key 'agents.base_url': must be an http:// or https:// URL with a host, e.g. " \
        f"http://127.0.0.1:8000/v1 (got {url!r})"


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "https://api.anthropic.com",
                                 "https://[::1]:8443"])
def test_base_url_takes_http_urls(url):
    assert parse_config({"name": "x", "agents": {"base_url": url}}).agents.base_url == url


@pytest.mark.parametrize("url", ["https://me:sekrit-pass-9@gateway.example/v1",
                                 "http://sekrit-pass-9@127.0.0.1:8000/v1"])
def test_base_url_holding_a_password_is_refused_without_repeating_it(url):
    """A password in agents.base_url (user:password@host) was taken: the URL is copied into
    the run's experiment.yaml, which the run's readers read, and printed in the agents' line
    of --check and of every start, where the key itself never is. The refusal says where a
    credential goes instead, and does not repeat it."""
    said = refused({"name": "x", "agents": {"base_url": url}})
    assert said.startswith("config key 'agents.base_url': must not hold a user name or "
                           "password"), said
    assert "$ANTHROPIC_API_KEY" in said and "sekrit" not in said


def test_an_integer_hyperparameter_written_with_a_point_is_refused():
    """rollout_n: 8.0 was silently taken as 8, though every other integer setting of the file
    refuses a float. A float knob given as an integer is fine."""
    assert refused({"name": "x", "hparams": {"rollout_n": 8.0}}) == \
        "config key 'hparams.rollout_n': must be an integer, without a decimal point (got 8.0)"
    with pytest.raises(ConfigError, match="search.space.rollout_n"):
        grid_points({"rollout_n": [8.0, 12]}, "cpu")
    assert parse_config({"name": "x", "hparams": {"grad_clip": 1}}).hparams == {"grad_clip": 1.0}
    assert validate_hparams({"rollout_n": 8.0}) == {"rollout_n": 8}   # an LLM's JSON number



def test_model_path_is_refused_with_the_cpu_backend():
    """It was silently ignored: the cpu trainer builds its own base model."""
    assert refused({"name": "x", "model_path": "Qwen/Qwen3-4B"}) == \
        "config key 'model_path': is read by the verl backend only; the cpu backend builds its " \
        "own base model (task.warm_start): remove it, or set backend: verl"


@pytest.mark.parametrize("line, key", [
    ("hparams: {lr: 1e-3}", "hparams.lr"),
    ("agents: {stop_margin: 2e-2}", "agents.stop_margin")])
def test_a_number_yaml_reads_as_text_says_how_to_write_it(tmp_path, line, key):
    """YAML 1.1 reads 1e-3 (no decimal point) as the string '1e-3'; "must be a number" left
    an ML user, who writes learning rates so, to guess why."""
    path = tmp_path / "exp.yaml"
    path.write_text(f"name: x\ntask: {{builtin: addition}}\n{line}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.key == key
    assert "YAML reads" in err.value.problem and "write it as " in err.value.problem


@pytest.mark.parametrize("given", ["./models/qwen3", "models/qwen3"])
def test_a_model_folder_relative_to_the_config_is_made_absolute(tmp_path, monkeypatch, given):
    """Data and reward paths were anchored at the config's folder, model_path was not: --check
    found the model from the shell's folder, the phase job (in its node folder) did not, and
    verl took it for a hub id. A hub id that is no such folder stays as it is."""
    (tmp_path / "exp" / "models" / "qwen3").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for model, expected in ((given, str(tmp_path / "exp" / "models" / "qwen3")),
                            ("Qwen/Qwen3-4B", "Qwen/Qwen3-4B")):
        path = tmp_path / "exp" / "experiment.yaml"
        path.write_text(f"name: demo\nbackend: verl\nmodel_path: {model}\n"
                        "hparams: {lora_rank: 8}\nslurm: {gpus_per_node: 1}\n")
        assert load_config(path).model_path == expected


def test_a_home_relative_path_is_the_users_home(tmp_path, monkeypatch):
    """~/data/x.parquet became <config folder>/~/data/x.parquet, and model_path ~/models/X was
    taken for a hub id."""
    home = tmp_path / "home"
    (home / "models" / "qwen3").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    path = tmp_path / "exp.yaml"
    path.write_text("name: demo\nbackend: verl\nmodel_path: ~/models/qwen3\n"
                    "hparams: {lora_rank: 8}\nslurm: {gpus_per_node: 1}\n"
                    "task: {train_files: [~/d/train.parquet], val_files: [~/d/val.parquet], "
                    "test_files: [~/d/test.parquet], reward_path: ~/d/reward.py}\n"
                    "search: {method: replay, strategy_file: ~/strategy.yaml}\n")
    cfg = load_config(path)
    assert [cfg.model_path, *cfg.task.train_files, *cfg.task.val_files, *cfg.task.test_files,
            cfg.task.reward_path, cfg.search.strategy_file] == [
        str(home / p) for p in ("models/qwen3", "d/train.parquet", "d/val.parquet",
                                "d/test.parquet", "d/reward.py", "strategy.yaml")]


VERL = {"name": "x", "backend": "verl", "slurm": {"gpus_per_node": 8}}
COUNTED = {"lora_rank": 8, "train_batch_size": 128, "rollout_n": 8, "total_training_steps": 50}


@pytest.mark.parametrize("method, unset, keys", [
    ("llmzero", {"train_batch_size"}, ["hparams.train_batch_size"]),
    ("llmzero", {"rollout_n"}, ["hparams.rollout_n"]),
    ("practitioner", {"total_training_steps"}, ["hparams.total_training_steps"]),
    # The default spaces measure phases in total_epochs; random's sets the batch shape.
    ("grid", {"total_training_steps"}, ["hparams.total_training_steps"]),
    ("random", {"train_batch_size", "rollout_n", "total_training_steps"},
     ["hparams.total_training_steps"]),
    ("grid", {"train_batch_size", "total_training_steps"},
     ["hparams.train_batch_size", "hparams.total_training_steps"]),
])
def test_a_sample_budget_refuses_phases_whose_samples_it_cannot_count(method, unset, keys):
    """verl's phases count samples only from what the experiment sets: without a batch shape
    each was charged 0 samples, and one measured in epochs was never cut to what was left, so
    search.budget_samples was never enforced."""
    hparams = {k: v for k, v in COUNTED.items() if k not in unset}
    data = {**VERL, "hparams": hparams, "search": {"method": method, "budget_samples": 10**6}}
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert [e.key for e in err.value.errors] == keys
    assert "search.budget_iterations" in err.value.problem
    data["search"].pop("budget_samples")
    assert parse_config(data)                       # a budget in phases needs none of them


def test_a_sample_budget_counts_verl_phases_given_their_batch_and_steps():
    for method in ("llmzero", "grid", "random"):
        assert parse_config({**VERL, "hparams": COUNTED,
                             "search": {"method": method, "budget_samples": 10**6}})
    assert parse_config({"name": "x", "search": {"budget_samples": 10**6}})  # the cpu defaults


def test_the_trainers_interpreter_and_cache_relative_to_the_config_are_made_absolute(
        tmp_path, monkeypatch):
    """Review: a relative trainer.python and trainer.cache_dir were kept as written, while the
    phase script cd's into its node folder first: every phase failed "the trainer's program
    (.venv/bin/python) is gone" though --check --on-cluster passed, and each phase would have
    had a cache of its own. Both are now anchored at the config's folder like the data paths;
    a bare command name (python3) is still looked up on the PATH."""
    (tmp_path / "exp").mkdir()
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "exp" / "experiment.yaml"
    for python, expected in ((".venv/bin/python", str(tmp_path / "exp" / ".venv/bin/python")),
                             ("python3", "python3")):
        path.write_text("name: demo\ntask: {builtin: addition}\n"
                        f"trainer: {{python: {python}, cache_dir: cache}}\n")
        cfg = load_config(path)
        assert cfg.trainer == {"python": expected, "cache_dir": str(tmp_path / "exp" / "cache")}


def test_slurm_time_and_memory_are_written_as_sbatch_reads_them():
    """Review: slurm.time ' 10' passed the check (which strips it) but was written raw, as
    `#SBATCH --time= 10`, which sbatch refuses; slurm.mem 16000 (a YAML integer, megabytes to
    sbatch) was refused as "must be a string", and 16g or 16GB, which sbatch takes, as no size.
    Each is now read once, as the config is parsed, into the spelling the script carries."""
    def lines(**slurm) -> list[str]:
        return phase_directives(parse_config({"name": "x", "slurm": slurm}).slurm)
    assert "--time=10" in lines(time=" 10") and "--time=1-00:00:00" in lines(time="1-00:00:00 ")
    controller = parse_config({"name": "x", "controller": {"time": " 2:00:00", "mem": 2000}})
    assert "--time=2:00:00" in cpu_job_directives("controller", controller.controller,
                                                  "controller.time", [])
    for given, written in ((16000, "16000"), ("16g", "16G"), ("16GB", "16G"), ("512mb", "512M"),
                           ("1T", "1T"), ("4000", "4000"), (" 8G ", "8G")):
        assert f"--mem={written}" in lines(mem=given)
    assert controller.controller.mem == "2000"
    for bad in ("16 GB", "16B", "16GiB", "-4G", "lots", True):
        assert refused({"name": "x", "slurm": {"mem": bad}}).startswith("config key 'slurm.mem'")


def test_no_evolve_children_is_refused_as_a_search_of_one_phase():
    """max_evolve_children: 0 passed --check, and an llmzero search of budget 10 ended after
    its first phase with 'the search has no branch left to grow': no phase may build on
    another, and no scratch is injected before the first evolve."""
    said = refused({"name": "x", "search": {"max_evolve_children": 0}})
    assert said.startswith("config key 'search.max_evolve_children': must be > 0 (got 0)")
    assert "first phase" in said
    parse_config({"name": "x", "search": {"max_debug_children": 0, "max_debug_depth": 0}})


def test_an_openai_compatible_server_is_not_priced_at_claudes_rates():
    """With the site's own vLLM server, status and the report priced every token at Claude
    Sonnet's list rates ($3 and $15 per Mtok), dollars nobody paid. Backend openai now prices
    at 0 unless agents.price_* are set (a paid gateway); the other backends keep the rates."""
    agents = {"backend": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "qwen"}
    cfg = parse_config({"name": "x", "agents": agents}).agents
    assert (cfg.price_input_per_mtok, cfg.price_output_per_mtok, cfg.price_cache_read_per_mtok,
            cfg.price_cache_write_per_mtok, cfg.price_cache_write_5m_per_mtok) == (0, 0, 0, 0, 0)
    cfg = parse_config({"name": "x", "agents": {**agents, "price_output_per_mtok": 0.6}}).agents
    assert (cfg.price_input_per_mtok, cfg.price_output_per_mtok) == (0, 0.6)
    assert parse_config({"name": "x", "agents": {"backend": "anthropic"}}).agents \
        .price_output_per_mtok == 15.0


def test_a_shell_variable_in_a_path_is_refused_naming_each(tmp_path):
    """Walkthrough: paths copied from a verl launch script kept its shell's `$HOME`: task files
    were looked for under <config folder>/$HOME/..., and model_path $HOME/models/X was taken
    for a hub id and passed to verl as written. `~` is the home a config may name."""
    path = tmp_path / "exp.yaml"
    path.write_text("name: demo\nbackend: verl\nmodel_path: $HOME/models/qwen3\n"
                    "hparams: {lora_rank: 8}\nslurm: {gpus_per_node: 1}\n"
                    "task: {train_files: ['${SCRATCH}/d/train.parquet'], val_files: [d/val.parquet], "
                    "test_files: [d/test.parquet], reward_path: d/reward.py}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    problems = {e.key: e.problem for e in err.value.errors}
    assert set(problems) == {"model_path", "task.train_files[0]"}, problems
    assert "$HOME" in problems["model_path"] and "~/" in problems["model_path"]
    assert "${SCRATCH}" in problems["task.train_files[0]"]
