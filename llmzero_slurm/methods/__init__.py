"""Search methods: llmzero (agents + UCT) and the baselines, behind one interface.

`make_method(config.search.method, ctx)` is the only way the controller gets one; a static
method builds and checks its whole plan here, so a bad search.space fails at start-up.
"""
from __future__ import annotations

from ..errors import ConfigError
from .base import MethodContext, SearchMethod
from .grid import GridMethod
from .guidebook import GuidebookMethod
from .llmzero import LLMZeroMethod
from .practitioner import PractitionerMethod
from .random_search import RandomSearchMethod
from .replay import ReplayMethod

METHODS: dict[str, type[SearchMethod]] = {
    cls.name: cls for cls in (LLMZeroMethod, PractitionerMethod, RandomSearchMethod, GridMethod,
                              GuidebookMethod, ReplayMethod)
}


def make_method(name: str, ctx: MethodContext) -> SearchMethod:
    cls = METHODS.get(name)
    if cls is None:
        raise ConfigError("search.method", f"unknown method {name!r} "
                          f"(known: {', '.join(sorted(METHODS))})")
    return cls(ctx)
