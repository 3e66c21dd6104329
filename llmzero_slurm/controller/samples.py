"""`llmzero-start --check --render DIR`: the phase scripts a search would submit, written where
a user can read them, and diff them against the launch script they replace, before anything
is created: no run folder, no node."""
from __future__ import annotations

import tempfile
from pathlib import Path

from ..backends import get_backend
from ..config import ExperimentConfig
from ..errors import StorageError, UsageError
from ..hparams import validate_hparams
from ..methods import make_method
from ..methods.base import MethodContext
from ..render import render
from ..store.node_dir import NodeDir
from .preflight import sample_specs

# The first phase as the search's method proposes it, then the other kinds of script it renders.
NAMES = ("first-phase.sbatch", "evolve-sample.sbatch", "debug-sample.sbatch")
# Each file's second line, and a refusal after its #SBATCH lines (which sbatch reads only
# before the first command): a sample submitted by mistake would write into a run that does
# not exist yet, or into the folder of another's node.
HEADER = ("# rendered by llmzero-start --check --render: a sample that refuses to run; a run's own "
          "is {run}/nodes/NNNN/phase.sbatch")
REFUSAL = ('echo "llmzero: $0 is a sample rendered by llmzero-start --check --render: refused, '
           'nothing written; llmzero-start CONFIG starts the run and renders its own" >&2; exit 2')


def refuse_unless_empty(out: Path) -> None:
    """Only a new or empty folder: a file of the user's (their old launch script) is never
    replaced. Asked before the checks run, so a refusal costs nothing."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a folder: --render takes a new or empty folder")
    try:
        held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    except OSError as exc:
        raise StorageError(out, f"cannot be listed ({exc.strerror or exc})") from None
    if held:
        shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
        raise UsageError(f"{out} is not empty (it holds {shown}): --render takes a new or empty "
                         "folder, and replaces no file there")


def first_hparams(cfg: ExperimentConfig) -> dict:
    """The first phase's configuration as the controller's method proposes it (build_controller
    wires the same base); a method's first phase is planned from the config alone, without a
    tree or an agent, so asking for it here has no side effect (its context is a scratch folder)."""
    backend = get_backend(cfg.backend)
    base = validate_hparams(backend.effective_hparams(cfg.hparams), backend.name)
    with tempfile.TemporaryDirectory(prefix="llmz-check-") as tmp:
        ctx = MethodContext(cfg, lambda i: NodeDir(Path(tmp) / f"{i:04d}"), Path(tmp),
                            base_hparams=base)
        first = make_method(cfg.search.method, ctx).first_hparams()
    return base if first is None else backend.effective_hparams(first)


def render_samples(cfg: ExperimentConfig, run_dir: Path, out: Path) -> str:
    """Write NAMES into `out` and say where. Their node folders are those of the run a start
    would create (or resumes) in `run_dir`, though none exists: rendered in a scratch folder
    whose path is then replaced; the evolve and debug samples resume from node 0000. Not
    inside `run_dir`: that would make the run's folder, which its start then finds is no run."""
    if out.resolve().is_relative_to(run_dir.resolve()):
        raise UsageError(f"{out} is inside {run_dir}, the folder of the run: --render takes a "
                         "folder outside it")
    nodes = str(run_dir.resolve() / "nodes")
    with tempfile.TemporaryDirectory(prefix="llmz-check-") as tmp:
        texts = [render(spec).replace(tmp, nodes)
                 for spec in sample_specs(cfg, Path(tmp), first_hparams(cfg))]
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in zip(NAMES, texts):
        lines = text.splitlines(keepends=True)
        last = max((i for i, line in enumerate(lines) if line.startswith("#SBATCH")), default=0)
        lines.insert(last + 1, REFUSAL + "\n")
        lines.insert(1, HEADER.format(run=run_dir.resolve()) + "\n")
        path = out / name
        path.write_text("".join(lines), encoding="utf-8")
        written.append(str(path.resolve()))
    return "written (samples: each refuses to run): " + ", ".join(written)
