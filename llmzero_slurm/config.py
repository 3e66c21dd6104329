"""The experiment configuration (experiment.yaml): typed sections, checked on load.

Each section is a dataclass whose field defaults are the documented defaults; unknown keys
are refused with the list of known ones, so a typo never silently falls back to a default.
Every problem of a file is reported at once, so a user fixes them all in one round.

Long: the sections and their checks are one file format; split up, a reader would have to visit
several files to learn what one experiment.yaml may say.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping, get_args, get_type_hints
from urllib.parse import urlsplit

import yaml

from .errors import ConfigError, ConfigProblems, YamlSyntaxError
from .job_settings import ControllerJobConfig, MonitorConfig, SlurmConfig
from .sbatch_options import (cpu_job_directives, memory_size, phase_directives,
                             placement_directives)
from .hparams import VERL_NEEDS_LORA, not_a_number, validate_hparams
from .schedulers.job_env import VARIABLE_NAME, check_setup_lines
from .search.settings import SearchSettings, check_ranges
from .tasks import TASKS

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")


@dataclass
class WarmStartConfig:
    """How the cpu backend makes its base model from the training split (verl starts from
    `model_path`). Unset: the built-in task's band, or 0.55-0.70 for files."""

    band: list[float] | None = None   # [low, high]: train until held-out accuracy is in it
    max_steps: int | None = None      # give up (a data error) when the band is not reached
    steps: int | None = None          # instead of a band: exactly N steps; 0 = no warm start
    # `warm_start: none` reads as "no warm start" to a person, as a string to YAML
    NOT_A_MAPPING: ClassVar[str] = "; for no warm start write warm_start: {steps: 0}"

    def check(self, where: str) -> None:
        problems, band = ConfigProblems(), self.band
        if band is not None and not (
                len(band) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                       for v in band) and 0 < band[0] < band[1] <= 1):
            problems.add(f"{where}.band", f"must be [low, high] with 0 < low < high <= 1 "
                                          f"(got {band!r})")
        if self.max_steps is not None and self.max_steps < 1:
            problems.add(f"{where}.max_steps", "must be at least 1")
        if self.steps is not None and self.steps < 0:
            problems.add(f"{where}.steps", "must be 0 (no warm start) or more")
        if self.steps is not None and (band is not None or self.max_steps is not None):
            problems.add(f"{where}.steps", "a fixed step count excludes band and max_steps")
        problems.raise_all()


@dataclass
class TaskConfig:
    """The dataset and reward. `builtin` names an embedded CPU task; otherwise give files."""

    builtin: str | None = None
    train_files: list[str] = field(default_factory=list)
    val_files: list[str] = field(default_factory=list)
    test_files: list[str] = field(default_factory=list)
    reward_path: str | None = None
    reward_name: str = "compute_score"
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    # What a task of one's own must give: the search selects on validation, the report
    # scores the test split.
    FILES: ClassVar[tuple[str, ...]] = ("train_files", "val_files", "test_files", "reward_path")

    def data_files(self) -> list[tuple[str, str]]:
        """(config key, path) of each dataset file the task names, so a message names both."""
        return [(f"task.{key}", path) for key in ("train_files", "val_files", "test_files")
                for path in getattr(self, key)]

    def check(self, where: str) -> None:
        """A builtin task brings its own data and reward: files given beside it would be
        ignored without a word. A name no task has would fail only the run's first phase.
        Files given without one must be all of FILES: refused as the file is read, not by
        --check's data check after it called the config valid."""
        problems, default = ConfigProblems(), TaskConfig()
        if self.builtin is not None and self.builtin not in TASKS:
            problems.add(f"{where}.builtin", f"unknown task {self.builtin!r} (known: {', '.join(TASKS)})")
        for name in ("train_files", "val_files", "test_files", "reward_path", "reward_name"):
            if self.builtin and getattr(self, name) != getattr(default, name):
                problems.add(f"{where}.{name}", f"is not used with {where}.builtin: give a "
                                                "builtin task or your own files, not both")
        missing = [name for name in self.FILES if not getattr(self, name)]
        if self.builtin is None and len(missing) < len(self.FILES):
            for name in missing:
                problems.add(f"{where}.{name}", f"is missing: your own task needs "
                             f"{', '.join(self.FILES)} (or give {where}.builtin)")
        problems.raise_all()

    def require(self, where: str = "task") -> None:
        """No task at all parses (most of the suite's configs need none), but nothing can run
        it: --check's config line and a start refuse it, before the checks that read it."""
        if self.builtin is None and not any(getattr(self, name) for name in self.FILES):
            raise ConfigError(where, f"is missing: give {where}.builtin, or your own task's "
                                     f"{', '.join(self.FILES)}")


# agents.backend's values, the one list of them: choose_backend (agents/llm.py) builds each LLM
# backend, "heuristic" is none, and "auto" is Anthropic when its key is set, else none.
LLM_BACKENDS = ("auto", "anthropic", "openai", "heuristic")
LLM_BACKENDS_SAID = f"must be {', '.join(LLM_BACKENDS[:-1])} or {LLM_BACKENDS[-1]}"


@dataclass
class AgentConfig:
    """Which LLM backend the agents use; the API key is read from the environment only."""

    backend: str = "auto"          # one of LLM_BACKENDS
    model: str = "claude-sonnet-4-6"   # the paper's backbone (4-5 reaches end of life 2026-11-30)
    base_url: str | None = None
    api_key_env: str | None = None     # None: the backend's own variable (key_env)
    max_tokens: int = 2048
    # openai: room for a reasoning model's thinking, added to each call's own answer limit
    # (the stopper's is 300, and max_tokens only lowers it).
    thinking_tokens: int = 0
    timeout_s: float = 120.0       # the most one call may take, retries included
    max_retries: int = 4
    image_max_px: int = 768
    # The offline stopper's allowance for validation noise: STOP only when the projected
    # score falls this far short of the best (a binomial std of the validation set is apt).
    stop_margin: float = 0.05
    images: bool = True            # openai: false for text-only models
    # 1h: the stopper asks every 15 min, so a 5 min cache would expire between calls.
    cache_ttl: str = "1h"          # 5m | 1h
    price_input_per_mtok: float = 3.0
    price_output_per_mtok: float = 15.0
    # Cache writes: each reply says how many tokens it wrote for 1 hour and for 5 minutes.
    price_cache_write_per_mtok: float = 6.0      # 1-hour writes
    price_cache_write_5m_per_mtok: float = 3.75
    price_cache_read_per_mtok: float = 0.30

    @property
    def key_env(self) -> str:
        """The variable holding the key. One default for every backend sent the Anthropic key
        of the user's shell to an OpenAI-compatible server (often plain http://)."""
        if self.api_key_env is not None:
            return self.api_key_env
        return "OPENAI_API_KEY" if self.backend == "openai" else "ANTHROPIC_API_KEY"

    def check(self, where: str) -> None:
        """A negative max_retries makes the SDK fail every call; zero tokens, timeouts or
        image sizes can never answer; a negative price would make the cost figures lie."""
        problems = ConfigProblems()
        if self.backend not in LLM_BACKENDS:
            problems.add(f"{where}.backend", LLM_BACKENDS_SAID)
        if self.cache_ttl not in ("5m", "1h"):
            problems.add(f"{where}.cache_ttl", "must be '5m' or '1h'")
        if self.base_url is not None and "@" in urlsplit(self.base_url).netloc:
            # Not repeated: the URL is copied into the run's experiment.yaml and printed in
            # the agents' line, where the key (read from the environment) never is.
            problems.add(f"{where}.base_url", "must not hold a user name or password "
                         "(user:password@host): the URL is copied into the run's "
                         "experiment.yaml and shown in its output; give the service's key in "
                         f"${self.key_env} (agents.api_key_env names another variable)")
        elif self.base_url is not None and not _http_url(self.base_url):
            problems.add(f"{where}.base_url", "must be an http:// or https:// URL with a host, "
                         f"e.g. http://127.0.0.1:8000/v1 (got {self.base_url!r:.80})")
        if not VARIABLE_NAME.match(self.key_env):
            problems.add(f"{where}.api_key_env", "must name an environment variable (letters, "
                                                 "digits, '_'), e.g. ANTHROPIC_API_KEY")
        with problems.collect():
            check_ranges(where, self, positive=("max_tokens", "timeout_s", "image_max_px"),
                         non_negative=("max_retries", "stop_margin", "thinking_tokens",
                                       "price_input_per_mtok",
                                       "price_output_per_mtok", "price_cache_write_per_mtok",
                                       "price_cache_write_5m_per_mtok",
                                       "price_cache_read_per_mtok"))
        problems.raise_all()


def _http_url(url: str) -> bool:
    """What the SDKs can send to: 'localhost:8000' parses as a URL of scheme 'localhost'."""
    parts = urlsplit(url)
    try:
        parts.port   # noqa: B018 - raises on a port that is no number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not re.search(r"\s", url)


@dataclass
class StateConfig:
    """How the run directory is locked; `soft` suits filesystems without working flock."""

    lock: str = "flock"            # flock | soft
    lock_timeout_s: float = 120.0
    stale_after_s: float = 30.0

    def check(self, where: str) -> None:
        """A lock that is stale at once would be taken from a live holder."""
        problems = ConfigProblems()
        if self.lock not in ("flock", "soft"):
            problems.add(f"{where}.lock", "must be 'flock' or 'soft'")
        with problems.collect():
            check_ranges(where, self, positive=("stale_after_s",),
                         non_negative=("lock_timeout_s",))
        problems.raise_all()


@dataclass
class ExperimentConfig:
    name: str = ""                 # required: parse_config refuses a file without one
    backend: str = "cpu"           # cpu | verl
    scheduler: str = "auto"        # auto | slurm | local
    model_path: str | None = None  # verl: HF model directory or hub id cached on the cluster
    task: TaskConfig = field(default_factory=TaskConfig)
    hparams: dict[str, Any] = field(default_factory=dict)
    search: SearchSettings = field(default_factory=SearchSettings)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    controller: ControllerJobConfig = field(default_factory=ControllerJobConfig)
    agents: AgentConfig = field(default_factory=AgentConfig)
    state: StateConfig = field(default_factory=StateConfig)
    trainer: dict[str, Any] = field(default_factory=dict)   # backend-specific extras
    source: str = ""               # where it was loaded from, for messages

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("source")
        return data

    def by_key(self) -> dict[str, Any]:
        """Every setting under its dotted key, as messages name it (`search.budget_samples`)."""
        def flat(data: Any, where: str) -> dict[str, Any]:
            if not isinstance(data, dict) or not data:
                return {where: data}
            return {k: v for key, value in data.items()
                    for k, v in flat(value, f"{where}.{key}" if where else str(key)).items()}
        return flat(self.to_dict(), "")


def _build(cls: type, data: Any, where: str, problems: ConfigProblems) -> Any:
    """Instantiate a config dataclass from a mapping, naming the path of any bad key; a bad
    key is kept in `problems` and left at its default, so the other keys are still checked."""
    if not isinstance(data, Mapping):
        raise ConfigError(where or "<top>", f"must be a mapping, got {type(data).__name__}"
                                            + getattr(cls, "NOT_A_MAPPING", ""))
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.name != "source"}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        with problems.collect():
            if key not in names:
                raise ConfigError(path, f"unknown key (known: {', '.join(sorted(names))})")
            hint = hints[key]
            if isinstance(hint, type) and dataclasses.is_dataclass(hint):
                kwargs[key] = _build(hint, value, path, problems)
            else:
                kwargs[key] = _coerce(hint, value, path)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(where or "<top>", str(exc)) from None


def _coerce(hint: Any, value: Any, path: str) -> Any:
    text = str(hint)
    if value is None:
        if "None" in text:
            return None
        raise ConfigError(path, "must not be empty")
    options = [a for a in get_args(hint) if a is not type(None)] if "None" in text else []
    if len(options) == 1:   # X | None with a value: check it as an X
        hint = options[0]
        text = str(hint)
    if hint is bool or text == "bool":
        if not isinstance(value, bool):
            raise ConfigError(path, "must be true or false")
    elif hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, "must be an integer")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, not_a_number(value))
        value = float(value)
        if not math.isfinite(value):   # .nan passes every range check, .inf most
            raise ConfigError(path, f"must be a finite number (got {value})")
    elif text.startswith("list[float]"):
        if not isinstance(value, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise ConfigError(path, "must be a list of numbers")
        value = [float(v) for v in value]
        if not all(math.isfinite(v) for v in value):
            raise ConfigError(path, f"must be a list of finite numbers (got {value})")
    elif text.startswith("list"):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(path, "must be a list of strings")
    elif text.startswith("dict"):
        if not isinstance(value, Mapping):
            raise ConfigError(path, "must be a mapping")
        value = dict(value)
    elif path.endswith(".time") and isinstance(value, (int, str)) and not isinstance(value, bool):
        # A Slurm time limit: a plain number is minutes, as sbatch reads it; an #SBATCH line
        # takes no space around it.
        value = str(value).strip()
    elif path.endswith(".mem"):
        value = memory_size(value)
    elif "str" in text and not isinstance(value, str):
        raise ConfigError(path, "must be a string")
    return value


def parse_config(data: Any, source: str = "<memory>",
                 refused: list[ConfigError] | None = None) -> ExperimentConfig:
    """Build and check a configuration from already-parsed YAML. Every problem is raised at
    once, in the file's order of sections; a check is left out when a key it reads was
    refused (it would see that key's default, and could report a problem that is none).

    With `refused` (a run's frozen copy, which the release that started the run accepted), a
    file whose every key, name and `state:` value this release takes is returned even when a
    check refuses another value: those problems go into `refused`, so a later release's
    stricter check leaves the run readable (status, report, stop) instead of locking its user
    out of it."""
    problems = ConfigProblems()
    if isinstance(data, Mapping) and "name" not in data:
        problems.errors.append(ConfigError("name", "is required (a short experiment name used "
                                                   "in job names)"))
    cfg = _build(ExperimentConfig, data, "", problems)
    _price_a_site_server_at_zero(cfg.agents, data)
    check = problems.check
    _check_names(cfg, problems)
    check(lambda: cfg.state.check("state"))
    readable = not problems.errors   # what opening a run (its lock) and its commands need
    check(lambda: phase_directives(cfg.slurm))
    check(lambda: cfg.agents.check("agents"))
    _check_hparams(cfg, problems)
    check(lambda: cfg.task.check("task"))
    _check_paths_expand_nothing(cfg, problems)
    check(lambda: cfg.task.warm_start.check("task.warm_start"))
    check(lambda: placement_directives("monitor", cfg.monitor.partition, cfg.monitor.account,
                                       cfg.monitor.qos))
    check(lambda: cpu_job_directives("controller", cfg.controller, "controller.time", []))
    check(lambda: _check_for_backend(cfg), "backend", "slurm.gpus_per_node")
    # Which credentials the trainer keeps is its backend's to say: each phase's render
    # checks the lines again knowing that.
    check(lambda: check_setup_lines(cfg.slurm.setup, [cfg.agents.key_env], None),
          "agents", "slurm.setup")
    check(cfg.search.check, "search.strategy_file")
    if refused is not None and readable:
        refused += problems.errors
    else:
        problems.raise_all(source, [str(key) for key in data])
    cfg.source = source
    return cfg


# `$NAME` or `${NAME}`: a shell variable, which a launch script's shell expanded and nothing
# here or in a job does. Hydra's interpolations (`${oc.env:HOME}`, `${data.max_prompt_length}`)
# are lowercase or dotted, so verl's raw overrides may keep them (backends/verl/traps.py).
SHELL_VARIABLE = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Z_][A-Z0-9_]*\})")


def _check_paths_expand_nothing(cfg: ExperimentConfig, problems: ConfigProblems) -> None:
    """A path copied from a launch script keeps its shell's `$HOME`, which nothing here or in
    a job expands: a file would be looked for under a folder named `$HOME`, a model_path taken
    for a hub id. `~` is the home a config may name (_anchor_paths)."""
    t = cfg.task
    paths = {"model_path": cfg.model_path, "task.reward_path": t.reward_path,
             "search.strategy_file": cfg.search.strategy_file,
             "slurm.setup_dir": cfg.slurm.setup_dir,
             **{f"task.{name}[{i}]": p for name in ("train_files", "val_files", "test_files")
                for i, p in enumerate(getattr(t, name))}}
    for key, path in paths.items():
        if isinstance(path, str) and (found := SHELL_VARIABLE.search(path)):
            problems.add(key, f"{path!r} holds the shell variable {found[0]}, which nothing "
                         "expands here: write the path out (~/ for your home)")


def _price_a_site_server_at_zero(agents: AgentConfig, data: Any) -> None:
    """The price defaults are Claude Sonnet's list rates; backend openai is most often a site's
    own server (vLLM), where they would price tokens nobody paid for. Its unset prices are 0
    (a paid gateway sets agents.price_*)."""
    given = data.get("agents") if isinstance(data, Mapping) else None
    if agents.backend != "openai":
        return
    for name in [f.name for f in dataclasses.fields(AgentConfig) if f.name.startswith("price_")]:
        if not isinstance(given, Mapping) or name not in given:
            setattr(agents, name, 0.0)


def _check_hparams(cfg: ExperimentConfig, problems: ConfigProblems) -> None:
    """Each key alone, so that every bad one is named, then all together for their batch
    arithmetic; which keys are valid depends on the backend, so not with a refused one."""
    if problems.refused("backend", "hparams"):
        return
    for key, value in cfg.hparams.items():
        with problems.collect("hparams."):
            validate_hparams({key: value}, cfg.backend, written=True)
    if not problems.refused("hparams"):
        with problems.collect("hparams."):
            cfg.hparams = validate_hparams(cfg.hparams, cfg.backend, written=True)


def _check_for_backend(cfg: ExperimentConfig) -> None:
    """Settings one trainer ignores or cannot run with: refused as the file is read, not by
    every phase job after its queue wait."""
    if cfg.backend == "cpu":
        if cfg.model_path is not None:
            raise ConfigError("model_path", "is read by the verl backend only; the cpu backend "
                              "builds its own base model (task.warm_start): remove it, or set "
                              "backend: verl")
        return
    problems = ConfigProblems()
    if cfg.task.warm_start != WarmStartConfig():
        problems.add("task.warm_start", "only the cpu backend warm-starts a base model; verl "
                                        "trains the model at model_path")
    if cfg.slurm.gpus_per_node < 1:
        problems.add("slurm.gpus_per_node", f"the {cfg.backend} backend trains on GPUs: give "
                                            "each phase node's GPU count (e.g. 8), not 0")
    if isinstance(cfg.hparams, Mapping) and "lora_rank" not in cfg.hparams:
        problems.add("hparams.lora_rank", "the verl backend needs it (e.g. lora_rank: 64 and "
                                          f"lora_alpha: 64): {VERL_NEEDS_LORA}")
    for key in _uncounted(cfg):
        problems.add(f"hparams.{key}", "search.budget_samples charges each phase "
                     "total_training_steps x train_batch_size x rollout_n samples, and its "
                     + ("phases are measured in total_epochs, which no budget can count or "
                        "cut before they train" if key == "total_training_steps" else
                        f"phases leave {key} to {cfg.backend}'s own default, unknown here")
                     + ": set it, or budget in phases with search.budget_iterations")
    problems.raise_all()


def _uncounted(cfg: ExperimentConfig) -> list[str]:
    """What a sample budget needs of a phase (COUNTED_KEYS) and the trainer's defaults, the
    experiment and the method's space leave unset: that phase would be charged nothing, or
    could not be cut. Asked of verl only (the cpu trainer's defaults give the batch shape, and
    its one default epoch of a small split is charged as it trains), whose defaults() are
    empty: its own values live in an install the login node need not have. A replay's phases
    take their steps and batches from its strategy file."""
    from .methods.space import DEFAULT_SPACES, method_space
    from .search.budget import COUNTED_KEYS

    method = cfg.search.method
    if cfg.search.budget_samples is None or method == "replay" \
            or not isinstance(cfg.hparams, Mapping):
        return []
    planned = method_space(method, cfg.search.space, cfg.backend) if method in DEFAULT_SPACES \
        else {}
    given = {**cfg.hparams, **planned}
    return [key for key in COUNTED_KEYS if not given.get(key)]


def _check_names(cfg: ExperimentConfig, problems: ConfigProblems) -> None:
    """The experiment's name, and names that are their registries' to check. Imported here:
    the backends' and the methods' packages import this module, so importing them at the top
    would tie the two together."""
    from .backends.registry import BACKENDS
    from .methods.registry import check_method
    from .schedulers import check_scheduler_kind

    def name() -> None:
        if not _NAME.match(cfg.name):
            raise ConfigError("name", "use 1-40 letters, digits, '-' or '_' (it appears in job "
                                      "names)")

    def backend() -> None:
        if cfg.backend not in BACKENDS:
            raise ConfigError("backend", f"must be one of {', '.join(BACKENDS)}")
    problems.check(name, "name")
    problems.check(backend, "backend")
    problems.check(lambda: check_scheduler_kind(cfg.scheduler), "scheduler")
    problems.check(lambda: check_method(cfg.search.method, bool(cfg.search.space)),
                   "search.method")


# YAML 1.1's base-60 numbers (12:00:00 is 43200): in a config they are Slurm times.
_SEXAGESIMAL = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that reads an unquoted 12:00:00 as the text it is, not base 60, and that
    refuses a key given twice in one mapping: YAML keeps the last value silently, so an edit
    lower in the file would quietly undo one above. A `<<` merge may still be overridden;
    that is what it is for."""

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode and implicit[0] and _SEXAGESIMAL.match(value):
            return "tag:yaml.org,2002:str"
        return super().resolve(kind, value, implicit)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:       # an unhashable key: SafeLoader's own error names it
                continue
            if first is not None:
                raise yaml.YAMLError(f"key {key!r} is given twice, on lines {first} and {line}")
            seen[key] = line
        return super().construct_mapping(node, deep)


def read_yaml(path: Path, key: str, loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> Any:
    """What a YAML file a user gives holds. A file that cannot be read, is not UTF-8 (Latin-1,
    UTF-16, binary) or is not YAML is a ConfigError under `key` naming the file, never a
    traceback."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(key, f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}); "
                               "save it as UTF-8") from None
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(key, f"{path} is not valid YAML: {exc}") from None


def load_config(path: str | Path, refused: list[ConfigError] | None = None) -> ExperimentConfig:
    """Read experiment.yaml; YAML syntax errors are reported with the file and line, a file in
    another encoding (Latin-1, UTF-16) by name rather than as a decoding traceback. `refused`:
    as for parse_config."""
    path = Path(path)
    data = read_yaml(path, "<file>", UniqueKeyLoader)
    if data is None:
        raise ConfigError("<file>", f"{path} is empty")
    cfg = parse_config(data, str(path), refused)
    _anchor_paths(cfg, path.parent.resolve())
    return cfg


def _anchor_paths(cfg: ExperimentConfig, base: Path) -> None:
    """Relative file paths mean relative to the config file, not to wherever a controller is
    restarted: make them absolute once, so the frozen copy is unambiguous. `~` is the user's
    home, as in a shell (no job expands it, and a hub id never starts with it)."""
    def fix(p: str) -> str:
        p = os.path.expanduser(p)
        return p if Path(p).is_absolute() else str(base / p)
    t = cfg.task
    t.train_files, t.val_files, t.test_files = ([fix(p) for p in files] for files in
                                                (t.train_files, t.val_files, t.test_files))
    if t.reward_path:
        t.reward_path = fix(t.reward_path)
    if cfg.search.strategy_file:
        cfg.search.strategy_file = fix(cfg.search.strategy_file)
    # Each kind of job starts in another folder: the setup lines all run from this one.
    cfg.slurm.setup_dir = fix(cfg.slurm.setup_dir or ".")
    # A phase runs its trainer from its node folder: a relative interpreter or cache would be
    # looked for there. A bare command name (python3) is the PATH's, as in a shell.
    python, cache = cfg.trainer.get("python"), cfg.trainer.get("cache_dir")
    if isinstance(python, str) and "/" in python:
        cfg.trainer["python"] = fix(python)
    if isinstance(cache, str) and cache:
        cfg.trainer["cache_dir"] = fix(cache)
    # A hub id (Qwen/Qwen3-4B) reads like a relative path: only an explicit ./ or ../, or a
    # folder that is there beside the config, is one.
    model = cfg.model_path and os.path.expanduser(cfg.model_path)
    if model and not Path(model).is_absolute() and (
            model.startswith(("./", "../")) or (base / model).is_dir()):
        model = str((base / model).resolve())
    cfg.model_path = model
