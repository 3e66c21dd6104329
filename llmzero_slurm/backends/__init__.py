"""Trainer backends by name (backends/registry.py); each is imported only when a phase uses it."""
from __future__ import annotations

import importlib

from ..errors import ConfigError
from .base import TrainerBackend
from .registry import BACKENDS

__all__ = ["BACKENDS", "TrainerBackend", "get_backend"]


def get_backend(name: str) -> TrainerBackend:
    if name not in BACKENDS:
        raise ConfigError("backend", f"unknown trainer backend {name!r} (known: {', '.join(BACKENDS)})")
    module, cls = BACKENDS[name].split(":")
    backend = getattr(importlib.import_module(module), cls)()
    assert isinstance(backend, TrainerBackend)
    return backend
