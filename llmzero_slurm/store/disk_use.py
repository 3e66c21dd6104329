"""What a run holds on its filesystem, by part: a user under a quota sees what the run costs
and where (checkpoints, which a later phase may resume from, or files that can be redrawn).

Bytes are those allocated (st_blocks), as quotas count them; links are counted as links and
never followed (a checkpoint folder linked to scratch is that filesystem's to count).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

from .node_dir import NodeDir

PARTS = ("checkpoints", "phase files", "report", "tensorboard", "monitor", "run files")


class Use(NamedTuple):
    bytes: int = 0
    files: int = 0     # files, folders and links: the inodes a quota counts

    def plus(self, other: Use) -> Use:
        return Use(self.bytes + other.bytes, self.files + other.files)


_ANY = NodeDir(".")
CHECKPOINTS = (_ANY.ckpt.name, _ANY.best_adapter.name)   # the node folder's owner names them


def _part(rel: tuple[str, ...]) -> str:
    if rel[0] == "nodes" and len(rel) > 2 and rel[2] in CHECKPOINTS:
        return "checkpoints"
    if rel[0] == "nodes":
        return "phase files"
    return rel[0] if rel[0] in ("report", "tensorboard", "monitor") else "run files"


def _walk(root: Path) -> Iterator[tuple[tuple[str, ...], Use]]:
    """Each file, folder and link under `root`: its path's parts below `root`, and its use. A
    file that vanishes during the walk (a checkpoint being replaced) is left out."""
    for folder, dirs, files in os.walk(root):
        base = Path(folder).relative_to(root).parts
        for name in (*dirs, *files):
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            yield (*base, name), Use(st.st_blocks * 512, 1)


def disk_use(root: Path) -> dict[str, Use]:
    """Each part of PARTS that holds anything: its bytes and inodes."""
    out: dict[str, Use] = {}
    for rel, use in _walk(root):
        part = _part(rel)
        out[part] = out.get(part, Use()).plus(use)
    return {p: out[p] for p in PARTS if p in out}


def held(folders: Iterable[Path]) -> Use:
    """What the `folders` hold, each with itself counted (what removing them would free)."""
    total = Use()
    for folder in folders:
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        total = total.plus(Use(st.st_blocks * 512, 1))
        for _, use in _walk(folder):
            total = total.plus(use)
    return total


def size_text(n: int) -> str:
    """Bytes as du -h writes them, in powers of 1024."""
    value, unit = float(n), "B"
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            break
        value /= 1024
    return f"{value:.0f}{unit}" if unit == "B" or value >= 10 else f"{value:.1f}{unit}"


def disk_line(use: dict[str, Use], freed: Use | None = None) -> str:
    """The run's use by part; `freed`: what search.keep_checkpoints: useful would remove."""
    total = Use()
    for u in use.values():
        total = total.plus(u)
    return (f"disk: {size_text(total.bytes)} in {total.files} files; "
            + ", ".join(f"{part} {size_text(u.bytes)}" for part, u in use.items())
            + (f"; search.keep_checkpoints: useful would free {size_text(freed.bytes)} in "
               f"{freed.files} files" if freed and freed.files else ""))
