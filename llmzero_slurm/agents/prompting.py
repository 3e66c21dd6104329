"""Render an agent's Jinja template into the cached static part and the per-call part."""
from __future__ import annotations

from typing import Any, Mapping

import jinja2
import yaml

from ..paths import TEMPLATE_TEXTS

_ENV = jinja2.Environment(loader=jinja2.DictLoader({name.removeprefix("prompts/"): text
                                                   for name, text in TEMPLATE_TEXTS.items()
                                                   if name.startswith("prompts/")}),
                          undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                          trim_blocks=True)


def render(agent: str, **values: Any) -> tuple[str, str]:
    """(system, task) from templates/prompts/<agent>.j2's `system` and `task` blocks."""
    template = _ENV.get_template(f"{agent}.j2")
    context = template.new_context(values)
    return tuple("".join(template.blocks[name](context)).strip()  # type: ignore[return-value]
                 for name in ("system", "task"))


def as_yaml(values: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(values), sort_keys=True, default_flow_style=False).strip()


def score_text(value: float | None) -> str:
    return "none yet" if value is None else f"{value:.4f}"
