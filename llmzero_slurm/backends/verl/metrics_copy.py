"""Copy verl's file-logger output into the node's metrics.jsonl, as the CPU trainer writes it.

verl's FileLogger writes `{"step": N, "data": {...}}` lines with steps counted from 0 in every
run and truncates its file when it opens it. The node's metrics.jsonl counts global steps
across a strategy and keeps the held-out test scores apart from validation, so each line is
rewritten on the way: step + offset, null (orjson's spelling of NaN) back to NaN, and
`val-core/<source>/...` (and `val-aux/...`) become `test-core/<source>/...` for the data
sources of the test files (agents never see those).

A phase job runs this beside verl (`follow --pid`) so the monitor sees curves while training
runs, and `copy` takes what it had not copied once verl ends; `drain` before verl starts
copies what an interrupted earlier attempt left and removes that file, so verl's truncation
can never destroy lines not yet copied. The byte position
already copied is kept in `<metrics>.verl-pos`; a crash between appending and recording it
repeats a line (same step, same values) rather than losing one.

An evolve phase starts from weights its parent validated at the resume step: `carry` puts
those scores into its metrics (marked `carried_from`) and verl skips its own pass before
training (`trainer.val_before_train=false`, set by the backend only when the scores exist);
`validated` tells the job the same of the phase's own checkpoint a requeue resumes.

Runs on GPU nodes as a plain script (standard library only):
    python3 metrics_copy.py drain|follow|copy --verl-file F --metrics-file M --step-offset K
        [--test-source S ...] [--tracker T] [--pid PID] [--interval SECONDS]
    python3 metrics_copy.py carry --parent-metrics P --parent-node N --metrics-file M
        --step-offset K
    python3 metrics_copy.py validated --tracker T --metrics-file M --step-offset K

Long: it runs as one plain script in the phase job (standard library, no package import), so
every metrics action the job script needs lives in this file.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

_SPLITS = (("val-core/", "test-core/"), ("val-aux/", "test-aux/"))


def rename_metrics(data: Mapping[str, Any], test_sources: Sequence[str]) -> dict[str, Any]:
    """Move validation-loop metrics of test data sources to the test-* namespace."""
    out: dict[str, Any] = {}
    for name, value in data.items():
        for val_prefix, test_prefix in _SPLITS:
            for source in test_sources:
                if name.startswith(f"{val_prefix}{source}/"):
                    name = test_prefix + name[len(val_prefix):]
                    break
        out[name] = value
    return out


class VerlMetricsIngest:
    """Incremental copier from one verl file-logger file to a node's metrics.jsonl."""

    def __init__(self, verl_file: Path, metrics_file: Path, step_offset: int,
                 test_sources: Sequence[str] = ()):
        self.verl_file = Path(verl_file)
        self.metrics_file = Path(metrics_file)
        self.step_offset = step_offset
        self.test_sources = tuple(test_sources)
        self.pos_file = self.metrics_file.with_name(self.metrics_file.name + ".verl-pos")

    def _position(self) -> int:
        try:
            return int(json.loads(self.pos_file.read_text(encoding="utf-8"))["pos"])
        except FileNotFoundError:
            return 0
        except (ValueError, KeyError, TypeError):
            warn(f"{self.pos_file} is unreadable; copying {self.verl_file} from its start")
            return 0

    def _save_position(self, pos: int) -> None:
        tmp = self.pos_file.with_name(f"{self.pos_file.name}.tmp{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(json.dumps({"pos": pos, "verl_file": str(self.verl_file)}))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.pos_file)

    def poll(self) -> int:
        """Copy every complete new line; return how many were copied."""
        try:
            with open(self.verl_file, "rb") as src:
                src.seek(0, os.SEEK_END)
                size = src.tell()
                pos = self._position()
                if size < pos:      # verl reopened (truncated) the file under us
                    warn(f"{self.verl_file} shrank from {pos} to {size} bytes; "
                         "copying it again from the start")
                    pos = 0
                src.seek(pos)
                chunk = src.read(size - pos)
        except FileNotFoundError:
            return 0
        complete = chunk[:chunk.rfind(b"\n") + 1]   # a torn last line waits for the next poll
        lines = []
        offset = pos
        for raw in complete.splitlines(keepends=True):
            line = self._convert(raw, offset)
            offset += len(raw)
            if line is not None:
                lines.append(line)
        if lines:
            with open(self.metrics_file, "a", encoding="utf-8") as dst:
                dst.write("".join(lines))
                dst.flush()
                os.fsync(dst.fileno())
        if complete:
            self._save_position(pos + len(complete))
        return len(lines)

    def _convert(self, raw: bytes, offset: int) -> str | None:
        if not raw.strip():
            return None
        try:
            record = json.loads(raw)
            step, data = int(record["step"]), record["data"]
            if not isinstance(data, dict):
                raise TypeError("data is not an object")
        except (ValueError, KeyError, TypeError) as exc:
            warn(f"{self.verl_file} byte {offset}: not a verl file-logger line ({exc}); "
                 f"left in place, not copied: {raw[:120]!r}")
            return None
        # verl's logger writes with orjson, which spells NaN and infinities as null: a
        # diverged loss must reach the agents as NaN, not vanish from the curve.
        data = {k: math.nan if v is None else v for k, v in data.items()}
        data = rename_metrics(data, self.test_sources)
        return json.dumps({"step": step + self.step_offset, "data": data}) + "\n"

    def drain(self, tracker: Path | None = None) -> int:
        """Copy what an earlier attempt left, then clear the way for a fresh verl run. With
        `tracker`, drop the rows that attempt logged past the checkpoint the new run resumes
        from (none: past the phase's start), so that the node keeps one curve: scores no
        checkpoint holds are never its best, and the monitor sees the new run's steps."""
        copied = self.poll()
        self.verl_file.unlink(missing_ok=True)
        self.pos_file.unlink(missing_ok=True)
        if tracker is not None:
            drop_after(self.metrics_file, _tracked_step(tracker, self.step_offset))
        return copied

    def follow(self, pid: int, interval: float) -> int:
        """Copy new lines every `interval` seconds while `pid` lives, then once more. An
        error of the shared filesystem (ESTALE, EIO, a full disk) waits for the next round:
        the saved position makes the copy resume where it stopped."""
        copied = 0
        while _alive(pid):
            copied += self._poll_or_warn()
            time.sleep(interval)
        return copied + self.poll()

    def _poll_or_warn(self) -> int:
        try:
            return self.poll()
        except OSError as exc:
            warn(f"copying {self.verl_file}: {exc}; trying again")
            return 0


_SCORES = ("val-core/", "val-aux/", "test-core/", "test-aux/")


def scores_at(metrics_file: Path, step: int) -> dict[str, Any]:
    """The validation and test scores a metrics.jsonl holds for `step` ({} when none)."""
    found: dict[str, Any] = {}
    try:
        lines = Path(metrics_file).read_bytes().splitlines()   # bytes: not all UTF-8
    except FileNotFoundError:
        return found
    for line in lines:
        try:
            record = json.loads(line)
            if int(record["step"]) == step and isinstance(record["data"], dict):
                found.update({k: v for k, v in record["data"].items() if k.startswith(_SCORES)})
        except (ValueError, KeyError, TypeError):
            continue
    return found


def carry(parent_metrics: Path, metrics_file: Path, step: int, parent_node: int) -> int:
    """Put the parent's scores at `step` into this phase's metrics, marked as carried: the
    phase starts from those very weights, so verl does not validate them again
    (trainer.val_before_train=false). Once per phase, whatever the attempt."""
    for line in (Path(metrics_file).read_text(encoding="utf-8").splitlines() if Path(metrics_file).exists() else []):
        if '"carried_from"' in line:
            return 0
    scores = scores_at(parent_metrics, step)
    if not scores:
        warn(f"{parent_metrics} has no scores at step {step}; nothing carried")
        return 0
    with open(metrics_file, "a", encoding="utf-8") as dst:
        dst.write(json.dumps({"step": step, "data": scores,
                              "carried_from": {"node": parent_node, "step": step}}) + "\n")
    return 1


def _tracked_step(tracker: Path, step_offset: int) -> int | None:
    """The global step of the phase's own newest checkpoint (verl's tracker file), if any."""
    try:
        return step_offset + int(Path(tracker).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def rows_through(lines: Sequence[bytes], step: int | None) -> list[bytes]:
    """The metrics.jsonl lines up to `step` (None: none), as a requeued phase resumes from it
    (the cpu trainer cuts its own log by this rule too). A line that cannot be read is kept
    byte for byte (not all are UTF-8: a client crash on a shared filesystem); a torn last
    line, from a killed writer, is not."""
    kept = []
    for line in lines:
        try:
            if step is None or int(json.loads(line)["step"]) > step:
                continue
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            if not line.endswith(b"\n"):
                continue
        kept.append(line)
    return kept


def drop_after(metrics_file: Path, step: int | None) -> None:
    """Keep the rows of `metrics_file` up to `step` (rows_through), replacing it atomically."""
    try:
        lines = Path(metrics_file).read_bytes().splitlines(keepends=True)  # bytes: not all UTF-8
    except FileNotFoundError:
        return
    kept = rows_through(lines, step)
    if len(kept) == len(lines):
        return
    tmp = Path(f"{metrics_file}.tmp{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(b"".join(kept))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, metrics_file)
    warn(f"dropped {len(lines) - len(kept)} rows an interrupted attempt logged after step "
         f"{step if step is not None else 'none'} (its run resumes from there)")


def validated(tracker: Path, metrics_file: Path, step_offset: int) -> int | None:
    """The global step of the phase's own newest checkpoint (verl's tracker file) when the
    phase already validated it, else None: a requeued or continued phase resumes there, and
    verl need not validate the same weights again before training."""
    step = _tracked_step(tracker, step_offset)
    if step is None:
        return None
    return step if any(k.startswith("val-core/") for k in scores_at(metrics_file, step)) else None


def _alive(pid: int) -> bool:
    """True while `pid` runs; an exited child its parent has not reaped yet counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X")


def warn(message: str) -> None:
    print(f"verl_metrics: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Copy verl's file-logger metrics into a node's metrics.jsonl with global "
                    "steps and test scores renamed to test-core/ (exit 0 ok, 2 bad arguments).")
    parser.add_argument("action", choices=("drain", "follow", "copy", "carry", "validated"),
                        help="drain: copy leftovers and remove the verl file; "
                             "follow: copy while --pid runs; copy: copy what is new once; "
                             "carry: copy the parent's scores "
                             "at --step-offset, marked as carried; validated: exit 0 when the "
                             "checkpoint --tracker names was validated already, else 1")
    parser.add_argument("--verl-file", type=Path)
    parser.add_argument("--tracker", type=Path, help="validated, drain: verl's checkpoint "
                        "tracker file (drain: drop rows logged after that checkpoint)")
    parser.add_argument("--parent-metrics", type=Path, help="carry: the parent's metrics.jsonl")
    parser.add_argument("--parent-node", type=int, help="carry: the parent's node id")
    parser.add_argument("--metrics-file", type=Path, required=True)
    parser.add_argument("--step-offset", type=int, default=0,
                        help="global step at which this phase starts")
    parser.add_argument("--test-source", action="append", default=[],
                        help="a data_source of the test files (repeatable)")
    parser.add_argument("--pid", type=int, help="follow: the training process to watch")
    parser.add_argument("--interval", type=float, default=10.0)
    args = parser.parse_args(argv)
    if args.step_offset < 0:
        parser.error("--step-offset must be >= 0")
    if args.action == "carry":
        if args.parent_metrics is None or args.parent_node is None:
            parser.error("carry needs --parent-metrics and --parent-node")
        copied = carry(args.parent_metrics, args.metrics_file, args.step_offset, args.parent_node)
        print(f"verl_metrics: carry: {copied} row of step {args.step_offset} from node "
              f"{args.parent_node}")
        return 0
    if args.action == "validated":
        if args.tracker is None:
            parser.error("validated needs --tracker")
        step = validated(args.tracker, args.metrics_file, args.step_offset)
        if step is None:
            return 1
        print(f"verl_metrics: resuming step {step}, validated already: verl skips its "
              "validation before training")
        return 0
    if args.verl_file is None:
        parser.error(f"{args.action} needs --verl-file")
    ingest = VerlMetricsIngest(args.verl_file, args.metrics_file, args.step_offset,
                               args.test_source)
    if args.action == "drain":
        copied = ingest.drain(args.tracker)
    elif args.action == "copy":
        copied = ingest.poll()
    else:
        if args.pid is None:
            parser.error("follow needs --pid")
        copied = ingest.follow(args.pid, args.interval)
    print(f"verl_metrics: {args.action}: copied {copied} lines to {args.metrics_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
