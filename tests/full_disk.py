"""A real full disk for tests: a command run with one folder on a small tmpfs of its own.

The tmpfs is mounted in a private mount namespace (`unshare --mount`, so root only; the test
is skipped elsewhere) over the folder, with the folder's files copied onto it first; `fill`
then takes every free byte, as a job's checkpoints do on a full scratch disk. When the command
ends, what it left on the tmpfs is copied back into the folder for the test to read.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

import pytest

ON_TMPFS = r'''
set -e
dir=$1 keep=$2 fill=$3
shift 3
cp -a "$dir"/. "$keep"/
mount -t tmpfs -o size=1m llmz-full-disk "$dir"
cp -a "$keep"/. "$dir"/
if [ "$fill" = 1 ]; then dd if=/dev/zero of="$dir/.llmz-fill" bs=4096 2>/dev/null || true; fi
set +e
"$@"
rc=$?
rm -f "$dir/.llmz-fill"
rm -rf "$keep" && mkdir "$keep" && cp -a "$dir"/. "$keep"/
umount -l "$dir"
find "$dir" -mindepth 1 -delete && cp -a "$keep"/. "$dir"/
exit $rc
'''


def on_full_disk(folder: Path, argv: Sequence[str], fill: bool = True,
                 env: Mapping[str, str] | None = None, timeout: float = 300
                 ) -> subprocess.CompletedProcess:
    """Run `argv` with `folder` on a 1 MiB tmpfs (full from the start when `fill`)."""
    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "--mount", "true"], capture_output=True).returncode:
        pytest.skip("needs unshare --mount (root) to give a folder a small filesystem")
    folder.mkdir(parents=True, exist_ok=True)
    keep = folder.parent / f".{folder.name}.kept"
    keep.mkdir()
    try:
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               ON_TMPFS, "sh", str(folder), str(keep), "1" if fill else "0",
                               *argv], capture_output=True, text=True, env=env, timeout=timeout)
    finally:
        shutil.rmtree(keep, ignore_errors=True)
