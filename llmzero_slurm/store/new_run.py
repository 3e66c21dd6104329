"""Whether a folder may become a new run: RunStore.create asks before it makes anything and
again under the run's lock, where a create that raced it to the same folder is found."""
from __future__ import annotations

from pathlib import Path

import yaml

from ..errors import ConfigError, StateError
from .inputs import INPUTS

CHECK_DIR = "preflight"   # the cluster checks' scripts, plans and outputs, in the run directory
# What may be in a run directory before its meta.json: the cluster checks' folder
# (`llmzero-start --check --on-cluster` writes it first), and once a create has begun (it makes
# an empty nodes/ first) its lock file, experiment.yaml, its inputs' record and hidden temporary
# files.
BEFORE_RUN = (CHECK_DIR,)
BEING_MADE = ("nodes", "tree.lock", "experiment.yaml", "experiment.yaml.bak", INPUTS)


def foreign_files(root: Path) -> list[str]:
    """The names in `root` that llmzero did not write there before a run: a half-made run may
    be made again, anyone else's folder must be left alone (its experiment.yaml overwritten)."""
    nodes = root / "nodes"
    try:
        names = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
        begun = nodes.is_dir() and not any(nodes.iterdir())
    except OSError as exc:
        raise StateError(root, f"cannot be read ({exc.strerror})") from None
    return [n for n in names if n not in BEFORE_RUN
            and not (begun and (n in BEING_MADE or n.startswith(".")))]


def refuse_taken(root: Path) -> None:
    """Raise unless `root` is free for a new run: a run there already (StateError, whoever made
    it, however recently), a file, or a folder of someone else's (ConfigError, the wrong
    argument)."""
    if root.exists() and not root.is_dir():
        raise ConfigError("--run-dir", f"{root} is a file, not a folder; choose a new folder "
                                       "for the run")
    refuse_nested(root)
    foreign = foreign_files(root)
    if "meta.json" in foreign:
        raise StateError(root, "already holds a run; open it instead of creating it")
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise ConfigError("--run-dir", f"{root} is not a run directory and not empty (it holds "
                                       f"{shown}); choose a new or empty folder for the run")


def refuse_nested(root: Path) -> None:
    """ConfigError when a folder above `root` holds a run: a second seed or method given
    `--run-dir runs/NAME/seed2` would go wherever that run goes (an `rm -rf` for a fresh search,
    a tar to another cluster)."""
    for above in Path(root).absolute().parents:
        if (above / "meta.json").is_file() and (above / "experiment.yaml").is_file():
            try:
                name = repr(yaml.safe_load((above / "experiment.yaml").read_text())["name"])
            except (OSError, ValueError, yaml.YAMLError, TypeError, KeyError):
                name = "unnamed"
            raise ConfigError("--run-dir", f"{root} is inside the run directory {above} (run "
                                           f"{name}); a run inside another is removed, moved "
                                           f"or copied with it: choose a folder outside it, "
                                           f"such as {above}-{Path(root).name}")
