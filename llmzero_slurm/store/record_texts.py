"""Node records as last read, so that reading the tree again opens only the ones that changed.

The controller reads every node.json each poll and the monitor each pass: hundreds of opens and
reads on a shared filesystem's metadata server, for records of finished phases that do not
change. A stat says whether a file is the one read before (inode, size, mtime, ctime): every
write of llmzero's renames a new file into place, and an edit in place changes its ctime.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from .atomic import read_utf8

UNSETTLED_S = 5.0     # a file written this recently is read every time (see `text`)


class RecordTexts:
    def __init__(self) -> None:
        self._texts: dict[Path, tuple[tuple[int, int, int, int], str]] = {}

    def text(self, path: Path, found: os.stat_result) -> str:
        """The text of `path`, read again only when `found`, its stat taken just before, is
        not the one taken before the last read (a change between the stat and the read is read
        next time: its stat differs). A file written in the last UNSETTLED_S is read every
        time: an mtime may be as coarse as a second (Lustre), and a write of the same size
        within that second would keep it. StateError as read_json's."""
        kept = self._texts.get(path)
        if kept is not None and kept[0] == _identity(found):
            return kept[1]
        text = read_utf8(path)
        if time.time() - found.st_mtime > UNSETTLED_S:
            self._texts[path] = (_identity(found), text)
        else:
            self._texts.pop(path, None)
        return text


def stat_or_none(path: Path) -> os.stat_result | None:
    """The file's stat; None when there is none (as Path.exists, whose other errors it raises)."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    """What changes with every write of a file: its inode (a rename), size, mtime and ctime."""
    return stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns
