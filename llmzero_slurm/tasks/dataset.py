"""verl-format parquet splits: writing a built-in task's data and reading any dataset back.

Rows follow verl's RL dataset schema (data_source, prompt as a chat list, ability,
reward_model{style, ground_truth}, extra_info), so one file serves verl and the CPU trainer.
Reading checks every row and names the file and row of the first bad one.
"""
from __future__ import annotations

import hashlib
import os
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DataError
from . import get_task

SPLITS = ("train", "val", "test")
SPLIT_SIZES = {"train": 4000, "val": 512, "test": 1024}
DATA_SEED = 20260611


@dataclass(frozen=True)
class Example:
    """One prompt of a split, in the form the trainers consume."""

    data_source: str
    messages: tuple[dict[str, str], ...]
    ground_truth: Any           # as the file holds it: verl hands its reward the same
    extra_info: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def answer(self) -> str:
        """The ground truth as a model would write it: the warm start's target."""
        return str(self.ground_truth)


def generate_rows(task: ModuleType, sizes: dict[str, int] = SPLIT_SIZES,
                  seed: int = DATA_SEED) -> dict[str, list[dict[str, Any]]]:
    """Distinct problems split into train/val/test, identical on every machine for one seed."""
    rng = random.Random(seed)
    needed = sum(sizes.values())
    problems: dict[str, str] = {}
    for _ in range(needed * 20):
        question, answer = task.sample(rng)
        problems.setdefault(question, answer)
        if len(problems) == needed:
            break
    else:
        raise DataError(task.DATA_SOURCE, f"could not draw {needed} distinct problems")
    items = list(problems.items())
    rows: dict[str, list[dict[str, Any]]] = {}
    start = 0
    for split in SPLITS:
        rows[split] = [_row(task, q, a, split, i)
                       for i, (q, a) in enumerate(items[start:start + sizes[split]])]
        start += sizes[split]
    return rows


def _row(task: ModuleType, question: str, answer: str, split: str, index: int) -> dict[str, Any]:
    return {
        "data_source": task.DATA_SOURCE,
        "prompt": [{"role": "user", "content": question}],
        "ability": task.ABILITY,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index},
    }


def materialize(name: str, root: Path) -> dict[str, Path]:
    """Write (once) a built-in task's splits under `root`; return the parquet path of each split.

    The folder name carries a hash of the task's source and the split sizes, so a changed
    generator never reuses stale files, and concurrent writers each rename a complete file.
    """
    task = get_task(name)
    digest = hashlib.sha256(Path(str(task.__file__)).read_bytes())
    digest.update(repr((sorted(SPLIT_SIZES.items()), DATA_SEED)).encode())
    folder = Path(root) / f"{name}-{digest.hexdigest()[:12]}"
    paths = {split: folder / f"{split}.parquet" for split in SPLITS}
    if all(p.exists() for p in paths.values()):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    for split, split_rows in generate_rows(task).items():
        write_parquet(split_rows, paths[split])
    return paths


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """Write rows atomically: a reader sees the old file or the whole new one. The temporary
    name is drawn at random, not from the pid, which jobs on two nodes of a shared cache, or
    two threads, may have in common."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def require_file(path: str | Path, key: str | None = None) -> Path:
    """`path`, or DataError when it names nothing, with the config `key` that gave it: parquet's
    own error ("cannot read") hides that the name is what is wrong."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "does not exist" + (f" (config key '{key}')" if key else ""))
    return path


REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model")
SCHEMA = ("verl's schema: data_source (text), prompt (a chat list of {role, content}), "
          "reward_model {style, ground_truth}, extra_info (optional)")


def read_examples(path: str | Path, key: str | None = None) -> list[Example]:
    """Load and check one verl-format parquet file; `key`: the config key that names it."""
    path = require_file(path, key)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise not_parquet(path, exc) from None
    _require_columns(path, table.column_names)
    rows = table.to_pylist()
    if not rows:
        raise DataError(path, "has no rows")
    return [_example(path, i, row) for i, row in enumerate(rows)]


def check_footer(path: str | Path, key: str | None = None) -> int:
    """The rows of a verl-format parquet file, read from its footer alone (its columns and row
    count), so a start checks a large dataset in a moment; read_examples reads the rows."""
    path = require_file(path, key)
    try:
        # a folder of parquet files reads as one table, as read_examples reads it
        dataset = pq.ParquetDataset(path)
        columns = dataset.schema.names
        rows = sum(pq.read_metadata(f, filesystem=dataset.filesystem).num_rows
                   for f in dataset.files)
    except (OSError, pa.ArrowException) as exc:
        raise not_parquet(path, exc) from None
    _require_columns(path, columns)
    if not rows:
        raise DataError(path, "has no rows")
    return int(rows)


def train_rows(paths: Sequence[str | Path]) -> int | None:
    """The rows of the training files, read from their footers; None when one cannot be read
    on this machine (a path only the compute nodes see)."""
    try:
        return sum(check_footer(path) for path in paths)
    except DataError:
        return None


def short_of_a_batch(rows: int, batch: int | None) -> str | None:
    """Why `rows` training rows cannot feed train_batch_size `batch`, or None. Both trainers
    drop a ragged tail; verl 0.9.1 with no full batch divides by its 0 steps per epoch in fit(),
    failing the job after its queue wait, model load and validation pass."""
    if not batch or rows >= batch:
        return None
    return (f"{rows} training rows, fewer than train_batch_size={batch}: no phase would have "
            "a full batch to train on")


def footers(path: str | Path) -> dict[str, tuple[int, str]]:
    """Each parquet file `path` reads as (itself, or a folder's files as ParquetDataset lists
    them for check_footer and the trainers), by its name within `path` ('' for a file): its
    size and the sha256 of its footer (schema, row groups, column statistics), read from the
    file's end alone, so a large dataset is fingerprinted in a moment on a login node. A file
    that is not parquet is a DataError."""
    path = Path(path)
    try:
        files = [Path(f) for f in pq.ParquetDataset(path).files] if path.is_dir() else [path]
        return {("" if f == path else str(f.relative_to(path))): _footer(f) for f in files}
    except (OSError, pa.ArrowException) as exc:
        raise not_parquet(path, exc) from None


def not_parquet(path: Path, why: object) -> DataError:
    """The refusal of a file parquet cannot read. One that holds JSON (JSON lines, the usual
    form of one's own data, or an array; a BOM or CRLF too) is said to be JSON, with the line
    that writes it as parquet: pyarrow's own error speaks of magic bytes and corruption."""
    try:
        with open(path, "rb") as f:
            head = f.read(64).removeprefix(b"\xef\xbb\xbf").lstrip()
    except OSError:     # a folder, or unreadable: pyarrow's reason says it
        head = b""
    if head[:1] not in (b"{", b"["):
        return DataError(path, f"cannot read as parquet: {why}")
    rows = ("json.load(f)" if head[:1] == b"[" else "[json.loads(line) for line in f if line.strip()]")
    target = f"{path.stem}.converted.parquet" if path.suffix == ".parquet" else f"{path.stem}.parquet"
    return DataError(path, f"holds JSON, not parquet; the task files must be parquet in {SCHEMA}. "
                     f"Convert it with: import json, pyarrow as pa, pyarrow.parquet as pq; "
                     f"f = open({path.name!r}, encoding='utf-8-sig'); "
                     f"pq.write_table(pa.Table.from_pylist({rows}), {target!r})")


def _footer(path: Path) -> tuple[int, str]:
    """A parquet file's size and its footer's sha256: the file ends with the footer, its
    length (4 bytes, little-endian) and the magic PAR1."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - 8))
        tail = f.read(8)
        length = int.from_bytes(tail[:4], "little")
        if size < 12 or tail[4:] != b"PAR1" or length > size - 12:
            raise not_parquet(path, "it does not end as a parquet file")
        f.seek(size - 8 - length)
        return size, hashlib.sha256(f.read(length)).hexdigest()


def _require_columns(path: Path, columns: list[str]) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise DataError(path, f"has no column {', '.join(map(repr, missing))} (its columns: "
                        f"{', '.join(columns)}); {SCHEMA}")


def _example(path: Path, index: int, row: dict[str, Any]) -> Example:
    def bad(problem: str) -> DataError:
        return DataError(path, f"row {index}: {problem}")

    source = row.get("data_source")
    if not isinstance(source, str) or not source:
        raise bad("column 'data_source' must be a non-empty string")
    prompt = row.get("prompt")
    if isinstance(prompt, str):
        raise bad("column 'prompt' holds text; verl's schema wants a chat list: "
                  f"{[{'role': 'user', 'content': prompt[:40]}]}")
    if not isinstance(prompt, list) or not prompt or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in prompt):
        raise bad("column 'prompt' must be a chat list of {role, content} messages")
    reward = row.get("reward_model")
    if isinstance(reward, str):
        raise bad("column 'reward_model' holds text (a JSON string?), not a struct; verl reads "
                  "reward_model['ground_truth'], so store a dict, e.g. with pandas: "
                  "df['reward_model'] = df['reward_model'].map(json.loads)")
    truth = reward.get("ground_truth") if isinstance(reward, dict) else None
    if truth is None:
        raise bad("column 'reward_model' needs a 'ground_truth'")
    messages = tuple({"role": str(m.get("role", "user")), "content": m["content"]} for m in prompt)
    return Example(source, messages, truth, row.get("extra_info") or {})
