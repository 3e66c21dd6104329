"""Slurm client shims: sbatch, squeue, sacct and scancel that misbehave on purpose.

A test puts a `Shims` folder first on PATH; each shim there finds the real client (the next
one on PATH), numbers its calls, logs them to calls.log and, for the calls a rule of its
`<name>.plan` covers, misbehaves as a sick cluster does: fails with a message, times out
although the job registers later, answers slowly, leaves a job out of its listing, or reports
a state. Everything else goes to the real client, so the cluster under the fault is the real
one. Rules are counted per client, so a test states faults in calls ("the first two sbatch"),
which the scheduler's retry settings turn into polls.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

CLIENTS = ("sbatch", "squeue", "sacct", "scancel")

# One script for every client (its name is $0's). A plan line: "<first>-<last> <action> <n> <text>".
SHIM = r'''#!/usr/bin/env bash
# A Slurm client shim written by tests/slurm_shims.py: see that module.
set -u
here=$(cd "$(dirname "$0")" && pwd)
name=$(basename "$0")
real=
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    [[ -n $d && ${d%/} != "$here" && -x $d/$name ]] || continue
    real=$d/$name
    break
done
[[ -n $real ]] || { echo "$name shim: no real $name on PATH" >&2; exit 127; }
n=$(flock "$here/.lock" bash -c 'n=$(($(cat "$1" 2>/dev/null || echo 0) + 1)); echo $n >"$1"; echo $n' \
    _ "$here/$name.count")
action=real num=0 text=
if [[ -r $here/$name.plan ]]; then
    while read -r range act rnum rtext; do
        if ((n >= ${range%-*} && n <= ${range#*-})); then
            action=$act num=$rnum text=$rtext
            break
        fi
    done <"$here/$name.plan"
fi
log() { printf '%s\t%s\t%s\t%s\t%s\n' "$(date +%s.%N)" "$name" "$n" "$1" "$2" >>"$here/calls.log"; }
log "$action" "$*"
case $action in
    fail) echo "$text" >&2; exit "$num" ;;
    late)   # the request reaches slurmctld after the client gave up
        (sleep "$num"; out=$("$real" "$@" 2>&1); log late-answer "${out//$'\n'/ }") </dev/null >/dev/null 2>&1 &
        echo "$text" >&2; exit 1 ;;
    slow) sleep "$num"; exec "$real" "$@" ;;
    omit)
        out=$("$real" "$@"); rc=$?
        [[ -z $out ]] || grep -vF -- "$text" <<<"$out"
        exit $rc ;;
    state)  # one row per job asked: --jobs=1,2 -> "1|STATE|0:0"
        for a in "$@"; do
            [[ $a == --jobs=* ]] || continue
            IFS=, read -ra ids <<<"${a#--jobs=}"
            for id in "${ids[@]}"; do echo "$id|$text|0:0"; done
        done
        exit 0 ;;
    *) exec "$real" "$@" ;;
esac
'''


@dataclass(frozen=True)
class Call:
    """One shim call: when, which client, its number for that client, what it did, argv."""

    at: float
    client: str
    n: int
    action: str      # real | fail | late | slow | omit | state | late-answer (the late job's reply)
    argv: str


class Shims:
    """The shim folder; rules are added per client and call range (1-based, inclusive)."""

    def __init__(self, folder: Path):
        self.dir = folder
        folder.mkdir(parents=True, exist_ok=True)
        for client in CLIENTS:
            path = folder / client
            path.write_text(SHIM)
            path.chmod(0o755)

    def _rule(self, client: str, calls: tuple[int, int], action: str, num: float, text: str) -> None:
        with (self.dir / f"{client}.plan").open("a") as fh:
            fh.write(f"{calls[0]}-{calls[1]} {action} {num:g} {text}\n")

    def fail(self, client: str, calls: tuple[int, int], stderr: str, code: int = 1) -> None:
        """These calls print `stderr` and exit `code` without reaching slurmctld."""
        self._rule(client, calls, "fail", code, stderr)

    def late(self, client: str, calls: tuple[int, int], delay_s: float, stderr: str) -> None:
        """These calls fail with `stderr`, yet the real call runs `delay_s` later (a request
        slurmctld registers after its client timed out)."""
        self._rule(client, calls, "late", delay_s, stderr)

    def slow(self, client: str, calls: tuple[int, int], delay_s: float) -> None:
        """These calls answer truly, `delay_s` late."""
        self._rule(client, calls, "slow", delay_s, "-")

    def omit(self, client: str, calls: tuple[int, int], pattern: str) -> None:
        """These calls answer truly, less every line containing `pattern`."""
        self._rule(client, calls, "omit", 0, pattern)

    def state(self, client: str, calls: tuple[int, int], state: str) -> None:
        """These calls (sacct) report every job of their --jobs= as `state`, exit code 0."""
        self._rule(client, calls, "state", 0, state)

    def calls(self, client: str | None = None) -> list[Call]:
        log = self.dir / "calls.log"
        rows = [line.split("\t", 4) for line in log.read_text().splitlines()] if log.exists() else []
        return [Call(float(r[0]), r[1], int(r[2]), r[3], r[4]) for r in rows
                if client is None or r[1] == client]


    def real(self, client: str, *argv: str) -> str:
        """The real client's answer, past the shims (uncounted and unlogged by them)."""
        path = next(Path(d) / client for d in os.environ["PATH"].split(os.pathsep)
                    if d and Path(d) != self.dir and (Path(d) / client).is_file())
        return subprocess.run([str(path), *argv], capture_output=True, text=True,
                              timeout=60).stdout
