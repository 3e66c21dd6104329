"""The trainer backends by name: the one list of them. Each is imported only when a phase
uses it (`get_backend`), and experiment.yaml's `backend:` is checked against this list."""
from __future__ import annotations

# name -> "module:Class"
BACKENDS: dict[str, str] = {
    "cpu": "llmzero_slurm.backends.cpu:CpuBackend",
    "verl": "llmzero_slurm.backends.verl:VerlBackend",
}
