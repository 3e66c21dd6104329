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

__all__ = ["METHODS", "MethodContext", "SearchMethod", "make_method", "method_class"]


def method_class(name: str) -> type[SearchMethod]:
    """The method's class, loaded on first use (what it is, e.g. whether it early-stops,
    without building it)."""
    if name not in METHODS:
        raise ConfigError("search.method", f"unknown method {name!r} "
                          f"(known: {', '.join(sorted(METHODS))})")
    module, cls = METHODS[name].path.split(":")
    found = getattr(importlib.import_module(module), cls)
    assert isinstance(found, type) and issubclass(found, SearchMethod)
    return found


def make_method(name: str, ctx: MethodContext) -> SearchMethod:
    method = method_class(name)(ctx)
    method.check_budget()
    return method
