"""README.md against the code: what it names (settings, command-line flags, exit codes, files)
exists, so a renamed key or a removed file cannot leave the page telling a newcomer otherwise."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from llmzero_slurm.backends import get_backend
from llmzero_slurm.backends.registry import BACKENDS
from llmzero_slurm.config import ExperimentConfig
from llmzero_slurm.controller.outcome import NOTHING_COMPLETED
from llmzero_slurm.controller.lease import LeaseLost
from llmzero_slurm.errors import ConfigError, LockTimeout, SchedulerError, StateError, UsageError
from llmzero_slurm.paths import ROOT

README = (ROOT / "README.md").read_text()
COMMANDS = ("start", "status", "stop", "report", "repair")
SECTIONS = ("search", "agents", "slurm", "state", "task", "monitor", "controller", "trainer")


def test_every_setting_the_readme_names_exists():
    """`section.key` in backticks (not a file such as `controller.json`, not a verl override
    such as `trainer.val_before_train=false`) is a key of experiment.yaml, or of a backend's
    `trainer:` section."""
    known = set(ExperimentConfig().by_key())
    known |= {f"trainer.{key}" for name in BACKENDS for key in get_backend(name).trainer_keys}
    named = set(re.findall(rf"`((?:{'|'.join(SECTIONS)})\.[a-z_.]*[a-z_])(?=[`: ])", README))
    named = {key for key in named if not key.endswith((".json", ".log", ".lock", ".sbatch"))}
    assert named, "the pattern finds the README's settings"
    unknown = {key for key in named
               if key not in known and not any(k.startswith(key + ".") for k in known)}
    assert not unknown


@pytest.mark.parametrize("name", COMMANDS)
def test_every_flag_the_readme_gives_a_command_is_in_its_help(name):
    uses = re.findall(rf"llmzero-{name}\b([^`\n#]*)", README)
    flags = {flag for rest in uses for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", rest)}
    helped = subprocess.run([sys.executable, "-m", f"llmzero_slurm.cli.{name}", "--help"],
                            capture_output=True, text=True, check=True).stdout
    assert not {flag for flag in flags if not re.search(rf"(?<![\w-]){flag}\b", helped)}


def test_the_readme_exit_codes_are_the_errors_codes():
    codes = re.search(r"^Exit codes: (.*?)\.\s", README, re.S | re.M)
    assert codes
    said = " ".join(codes.group(1).split())
    for code, meaning in ((ConfigError.exit_code, "bad configuration"),
                          (UsageError.exit_code, "or arguments"),
                          (StateError.exit_code, "corrupt or unwritable state"),
                          (LockTimeout.exit_code, "lock timeout"),
                          (SchedulerError.exit_code, "batch-system error"),
                          (LeaseLost.exit_code, "another controller holds"),
                          (NOTHING_COMPLETED, "the search ended without a single completed")):
        assert re.search(rf"\b{code} [^,]*{meaning}", said), (code, meaning)


def _expand(path: str) -> list[str]:
    """`a.{json,txt}` -> a.json, a.txt."""
    brace = re.search(r"\{([^{}]*)\}", path)
    if not brace:
        return [path]
    return [p for alt in brace.group(1).split(",")
            for p in _expand(path[:brace.start()] + alt + path[brace.end():])]


def test_every_repository_file_the_readme_names_is_there():
    named = set(re.findall(r"`((?:llmzero_slurm|jobs|benchmarks|templates|tests|examples)/[^` ]*)`",
                           README))
    named |= {"benchmarks/results/" + p for p in re.findall(
        r"`((?:strategy_validity|search_quality|stopper_margins|cpu_trainer)[^` /]*"
        r"\.(?:json|txt|png|\{[^}]*\}))`", README)}
    paths = [p for name in named for p in _expand(name) if "<" not in p]
    assert len(paths) > 20, "the patterns find the README's files"
    assert not [p for p in paths if not (ROOT / p).exists()]


def test_the_code_layout_names_every_module_and_benchmark():
    layout = README.split("## Code layout", 1)[1].split("\n## ", 1)[0]
    modules = [p.name for p in (ROOT / "llmzero_slurm").iterdir()
               if p.suffix == ".py" and p.name != "__init__.py" or
               p.is_dir() and (p / "__init__.py").exists()]
    benchmarks = [p.stem for p in (ROOT / "benchmarks").glob("*.py")]
    assert not [m for m in modules if not re.search(rf"\b{re.escape(m.removesuffix('.py'))}\b",
                                                    layout)]
    assert not [b for b in benchmarks if not re.search(rf"\b{b}\b", layout)]


def test_every_package_file_the_code_names_is_there():
    """A refusal told users to "see llmzero_slurm/backends/verl.py", long since a package."""
    sources = [*(ROOT / "llmzero_slurm").rglob("*.py"), *(ROOT / "templates").rglob("*.j2"),
               *(ROOT / "jobs").glob("*.py")]
    named = {m for path in sources
             for m in re.findall(r"llmzero_slurm/[\w/]+\.py", path.read_text())}
    assert named, "the pattern finds the files the code names"
    assert not [p for p in named if not (ROOT / p).exists()]


def test_the_readme_table_of_search_defaults_is_the_code_s():
    """The table under "How `llmzero` searches" gives each tree setting's default: a default
    changed in SearchSettings must change the table, or the page tells a reader of the paper
    that the run follows Appendix B.6 where it does not."""
    from llmzero_slurm.search.settings import SearchSettings
    section = README.split("### How `llmzero` searches", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `search\.(\w+)` \| ([^|]+) \|", section, re.M)
    assert len(rows) >= 10, "the pattern finds the table's rows"
    defaults = SearchSettings()
    for name, shown in rows:
        assert float(shown) == getattr(defaults, name), name
