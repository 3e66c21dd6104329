"""The data sources of verl parquet files: the names its validation scores are logged under."""
from __future__ import annotations

import re
from pathlib import Path

from ...config import TaskConfig
from ...errors import ConfigError
from .settings import VerlSettings


def data_sources(path: str, key: str) -> set[str]:
    """The data_source values of a verl parquet file (the names its validation scores get);
    `key`: the config key that names the file."""
    import pyarrow.parquet as pq

    from ...tasks.dataset import require_file

    require_file(path, key)
    try:
        column = pq.read_table(path, columns=["data_source"]).column("data_source")
    except (OSError, KeyError, ValueError) as exc:
        raise ConfigError(key, f"cannot read data_source from {path} ({exc}): verl logs each "
                               "row's validation scores under it; give every row one") from None
    return {str(v) for v in column.to_pylist()}


def held_out_sources(task: TaskConfig, settings: VerlSettings) -> list[str]:
    """Data sources whose validation-loop scores are held-out test scores.

    verl names validation metrics by data_source only, so a source shared between the
    validation and test files would mix the two scores into one curve: refused.
    """
    if not task.test_files:
        return []
    listed = set(settings.test_data_sources)
    # The list is for test files this machine cannot read; files it can read are checked.
    if listed and not all(Path(f).is_file() for f in task.test_files):
        sources = listed
    else:
        sources = set().union(*(data_sources(f, "task.test_files") for f in task.test_files))
        if listed and listed != sources:
            raise ConfigError("trainer.test_data_sources", f"lists {sorted(listed)}, but the "
                              f"test files hold {sorted(sources)}: rows of a source not listed "
                              "would be logged as validation, and the agents would see test "
                              "scores; list exactly the test files' sources, or leave it out")
    val_files = [f for f in task.val_files if not listed or Path(f).is_file()]
    shared = sources & set().union(*(data_sources(f, "task.val_files") for f in val_files))
    if shared:
        raise ConfigError("task.test_files", f"share data_source {sorted(shared)} with "
                          "task.val_files; verl would log both as one val-core/ score, so "
                          "give the test rows their own data_source")
    for source in sources:
        if not re.match(r"^[^\s'\"\\$`*?\[\]]{1,200}$", source):
            raise ConfigError("trainer.test_data_sources", f"{source!r}: use a data_source "
                              "without spaces, quotes, glob or shell characters")
    return sorted(sources)
