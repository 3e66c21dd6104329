"""TensorBoard event files of a run: `tensorboard --logdir runs/NAME/tensorboard`.

One TensorBoard run per node (`node-0007`), its metrics on global steps, so the phases of a
strategy line up as one continuous curve; and `best-strategy`, the best path's curves stitched
into one run. Written with tensorboardX: pure Python over protobuf, no TensorFlow and no torch,
which a login node can afford. Node runs are only ever appended to (`exported.json` keeps the
last step written per node, so a restarted controller writes no point twice), and written
afresh as one event file once appends have left MAX_EVENT_FILES of them; the best
strategy's run is written afresh whenever the best path or its progress changes. A node whose
points already written changed (a requeued phase rewrote its metrics.jsonl from an earlier
checkpoint, with other values) has its run written afresh too, so that TensorBoard shows the
values the report reads, not the first run's.
"""
from __future__ import annotations

import hashlib
import shutil
import sys
import uuid
from itertools import groupby
from pathlib import Path
from typing import Any, Callable

from ..errors import StateError
from ..metrics import MetricsLog, strategy_curves
from ..search.policy import best_path
from ..search.tree import Node, Tree
from ..store.atomic import read_json, write_json

TB_DIR = "tensorboard"
BEST_RUN = "best-strategy"
STATE_FILE = "exported.json"
# An export that appends writes a new event file: a long phase polled every 30 s would leave
# one a poll (thousands of inodes); past this many, its run is written afresh as one file.
MAX_EVENT_FILES = 16


def _tensorboardx() -> tuple[Any, Any, Any]:
    """tensorboardX's Summary, scalar and FileWriter, imported where used (only exports need
    them) and without torch: its package imports torch whenever it is installed, as in the
    .venv a cpu run's phases share with the controller, for ~200 MB and seconds of CPU that a
    login node's controller never uses. A process that already holds torch keeps it."""
    blocked = "torch" not in sys.modules
    if blocked:
        sys.modules["torch"] = None  # type: ignore[assignment]   # `import torch` raises
    try:
        from tensorboardX.summary import Summary, scalar
        from tensorboardX.writer import FileWriter
    finally:
        if blocked:
            del sys.modules["torch"]
    return Summary, scalar, FileWriter


def _write(run_dir: Path, log: MetricsLog, after: int = -1) -> int:
    """Append the points after step `after` to a TensorBoard run, one event a step holding
    its every scalar; the last step written. add_scalar, an event a scalar each converted
    through numpy, took 100 us a point: minutes for a search of 300 phases x 1,000 steps x
    40 metrics."""
    Summary, scalar, FileWriter = _tensorboardx()
    points = sorted((step, name, value) for name, pts in log.series.items()
                    for step, value in pts if step > after)
    if not points:
        return after
    tags = {name: scalar(name, 0.0).value[0].tag for name in log.series}   # as add_scalar's
    # A new event file per export (TensorBoard reads them all): its name alone, made of the
    # second and the host, would clobber an export of the same second.
    writer = FileWriter(str(run_dir), filename_suffix=f".{uuid.uuid4().hex[:12]}")
    try:
        for step, row in groupby(points, key=lambda p: p[0]):
            writer.add_summary(Summary(value=[Summary.Value(tag=tags[name], simple_value=value)
                                              for _, name, value in row]), step)
    finally:
        writer.close()
    return points[-1][0]


def _digest(log: MetricsLog, until: int) -> str:
    """A fingerprint of a log's points up to a step: what a TensorBoard run holds of it."""
    h = hashlib.sha256()
    for name in sorted(log.series):
        for step, value in log.series[name]:
            if step <= until:
                h.update(f"{name}\0{step}\0{value!r}\n".encode())
    return h.hexdigest()[:16]


def _exported(out: Path) -> tuple[dict[str, int], dict[str, str], Any]:
    """What earlier exports wrote: the last step and digest per node, the best path's progress.
    Without a record that reads (none yet, or damaged) the runs there are of unknown content,
    and appending to them could show points twice: they are written afresh."""
    try:
        state = read_json(out / STATE_FILE)
        return ({str(k): int(v) for k, v in state["nodes"].items()},
                {str(k): str(v) for k, v in state.get("digests", {}).items()}, state.get("best"))
    except (StateError, AttributeError, KeyError, TypeError, ValueError):
        for run in [*out.glob("node-*"), out / BEST_RUN]:
            shutil.rmtree(run, ignore_errors=True)
        return {}, {}, None


def export_tensorboard(root: str | Path, tree: Tree, metrics_of: Callable[[int], MetricsLog],
                       stamp_of: Callable[[int], str] | None = None) -> Path:
    """Bring <root>/tensorboard up to date with every node's metrics; return its path.
    `stamp_of(node id)`: a stamp of its metrics file (NodeDir.metrics_stamp): a node whose
    stamp is the one last exported is not read again. The controller runs this every poll,
    and parsing every node's whole log each time took minutes and GBs on a search of hundreds
    of long phases; with no stamp changed and the same best path, it reads and writes nothing."""
    out = Path(root) / TB_DIR
    out.mkdir(exist_ok=True)
    done, digests, best_before = _exported(out)
    stamps: dict[str, str] = _stamps(out) if stamp_of is not None else {}
    path = best_path(tree)
    on_path = {n.id for n in path}
    logs: dict[int, MetricsLog] = {}     # the best path's, kept: one other log held at a time
    read = False
    for node in tree:
        key, run = str(node.id), out / f"node-{node.id:04d}"
        if stamp_of is not None:
            stamp = stamp_of(node.id)     # before the read: a line added during it is read next time
            if stamps.get(key) == stamp and key in done and key in digests:
                continue
            stamps[key] = stamp
        log, read = metrics_of(node.id), True
        if node.id in on_path:
            logs[node.id] = log
        after = done.get(key, -1)
        if after >= 0 and (digests.get(key) != _digest(log, after)
                           or len(list(run.glob("events.out.tfevents.*"))) >= MAX_EVENT_FILES):
            shutil.rmtree(run, ignore_errors=True)    # its points changed, or too many files
            after = -1
        done[key] = _write(run, log, after)
        digests[key] = _digest(log, done[key])
    if not read and _same_path(path, best_before):
        return out     # no log changed and the same best path: nothing to read or write
    for n in path:
        if n.id not in logs:
            logs[n.id] = metrics_of(n.id)
    progress = [[n.id, logs[n.id].last_step, digests[str(n.id)]] for n in path]
    if progress != best_before:
        shutil.rmtree(out / BEST_RUN, ignore_errors=True)
        if path:
            _write(out / BEST_RUN, strategy_curves(path, logs.__getitem__))
    write_json(out / STATE_FILE, {"nodes": done, "digests": digests, "best": progress,
                                  "stamps": stamps})
    return out


def _same_path(path: list[Node], best: Any) -> bool:
    """Whether the last export's record of the best path's progress, `best`, is of these nodes."""
    return isinstance(best, list) and [[n.id] for n in path] == [
        p[:1] if isinstance(p, list) else None for p in best]


def _stamps(out: Path) -> dict[str, str]:
    """The metrics-file stamps the last export read (none: every node is read)."""
    try:
        stamps = read_json(out / STATE_FILE).get("stamps", {})
        return {str(k): str(v) for k, v in stamps.items()}
    except (StateError, AttributeError, TypeError, ValueError):
        return {}
