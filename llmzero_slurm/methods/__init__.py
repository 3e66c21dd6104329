"""Search methods: llmzero (agents + UCT) and the baselines, behind one interface.

`make_method(config.search.method, ctx)` is the only way the controller gets one; a static
method builds and checks its whole plan here, so a bad search.space fails at start-up. The
names are methods/registry.py's.
"""
from __future__ import annotations

import importlib

from ..errors import ConfigError
from .base import MethodContext, SearchMethod
from .registry import METHODS

__all__ = ["METHODS", "MethodContext", "SearchMethod", "make_method"]


def make_method(name: str, ctx: MethodContext) -> SearchMethod:
    if name not in METHODS:
        raise ConfigError("search.method", f"unknown method {name!r} "
                          f"(known: {', '.join(sorted(METHODS))})")
    module, cls = METHODS[name].split(":")
    method = getattr(importlib.import_module(module), cls)(ctx)
    assert isinstance(method, SearchMethod)
    return method
