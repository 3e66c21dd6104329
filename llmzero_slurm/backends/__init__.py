"""Trainer backends by name; each is imported only when a phase uses it."""
from __future__ import annotations

import importlib

from ..errors import ConfigError
from .base import TrainerBackend

_BACKENDS = {"cpu": ("llmzero_slurm.backends.cpu", "CpuBackend"),
             "verl": ("llmzero_slurm.backends.verl", "VerlBackend")}


def get_backend(name: str) -> TrainerBackend:
    if name not in _BACKENDS:
        raise ConfigError("backend", f"unknown trainer backend {name!r} (known: {', '.join(_BACKENDS)})")
    module, cls = _BACKENDS[name]
    return getattr(importlib.import_module(module), cls)()
