"""Hydra's override grammar: spelling values, splitting `prefix key=value` strings."""
from __future__ import annotations

import re
from typing import Any

from ...errors import ConfigError

_OVERRIDE = re.compile(r"^(?P<prefix>~|\+\+|\+)?(?P<key>[A-Za-z_][A-Za-z0-9_.@/-]*)(?:=(?P<value>.*))?$",
                       re.DOTALL)
BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_QUOTE_RUN = re.compile(r'(\\*)("|$)')
_HYDRA_WORDS = {"true", "false", "null", "nan", "inf", "none", "yes", "no", "on", "off"}


def hydra_value(value: Any) -> str:
    """Spell a Python value in Hydra's override grammar (strings double-quoted unless bare words)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        if "${" in value:
            raise ConfigError("<value>", f"{value!r} contains '${{', which Hydra would "
                              "treat as an interpolation; rename the path")
        if BARE.match(value) and value.lower() not in _HYDRA_WORDS:
            return value
        # Hydra keeps backslashes literal except in a run that precedes a quote (or the
        # closing quote): such runs are doubled, and the quote itself is escaped.
        return '"' + _QUOTE_RUN.sub(lambda m: m[1] * 2 + ('\\"' if m[2] else ""), value) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    raise ConfigError("<value>", f"cannot pass a {type(value).__name__} to verl")


def parse_override(text: str) -> tuple[str, str, str | None]:
    """Split a Hydra override into (prefix, key, value); the error names the bad string."""
    match = _OVERRIDE.match(text.strip()) if isinstance(text, str) else None
    if match is None or (match["value"] is None and match["prefix"] != "~"):
        raise ConfigError("trainer.overrides", f"{text!r} is not a Hydra override "
                          "(expected key=value, +key=value, ++key=value or ~key)")
    return match["prefix"] or "", match["key"], match["value"]
