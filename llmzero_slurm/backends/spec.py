"""A training phase described as data: everything that decides what its script does.

It belongs to the backend interface (a backend turns it into a command line), and the
renderer turns it into a script; the controller builds one per node with `for_node`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..config import ExperimentConfig, SlurmConfig, TaskConfig
from ..errors import ConfigError
from ..job_names import phase_job_name
from ..search.tree import Node


@dataclass(frozen=True)
class PhaseSpec:
    """Everything that decides what a phase script does."""

    experiment: str
    node_id: int
    kind: str                           # scratch | evolve | debug
    node_dir: Path
    token: str                          # exactly-once submission token (in --comment)
    hparams: Mapping[str, Any]
    backend: str = "cpu"
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    trainer: Mapping[str, Any] = field(default_factory=dict)   # backend-specific extras
    model_path: str | None = None
    resume_dir: Path | None = None      # node dir of the phase this one starts from
    resume_step: int = 0                # global step of that phase's checkpoint
    # Credential variables besides those schedulers/job_env.py names by pattern (the LLM key's,
    # agents.api_key_env): the script drops them too, for a rerun by hand from the user's shell.
    secret_names: tuple[str, ...] = ()

    @property
    def job_name(self) -> str:
        return phase_job_name(self.experiment, self.node_id, self.kind)

    @classmethod
    def for_node(cls, config: ExperimentConfig, node: Node, node_dir: Path, token: str,
                 resume_dir: Path | None = None) -> "PhaseSpec":
        """The phase of a tree node; `resume_dir` is the node dir of `node.resume.node`."""
        if (node.resume is None) != (resume_dir is None):
            raise ConfigError("resume", f"node {node.id}: a resume step needs the resumed "
                                        "node's directory, and only then")
        return cls(config.name, node.id, node.kind.value, Path(node_dir), token, node.hparams,
                   config.backend, config.slurm, config.task, config.trainer, config.model_path,
                   resume_dir, node.resume.step if node.resume else 0, (config.agents.key_env,))
