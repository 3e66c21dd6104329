"""The early stopper's answer: CONTINUE or STOP, and why, read from text an LLM writes."""
from __future__ import annotations

import re
from dataclasses import dataclass

# The stopper's labels, however an LLM dresses them in markdown (**DECISION**:, **REASON:**):
# in any case at the start of a line, in capitals anywhere, never the word in its prose ("the
# key decision: whether...").
_LABEL = re.compile(r"(?:^[ \t*_#>]*(?i:(REASON|DECISION))|\b(REASON|DECISION))\b[*_`]*[ \t]*:",
                    re.M)
_MARKUP = " \t\r\n*_`#>"
DECISIONS = ("CONTINUE", "STOP")


@dataclass
class Decision:
    action: str                     # CONTINUE | STOP
    reason: str
    step: int | None = None
    source: str = "rule"
    val_step: int | None = None     # the last validation point the decision saw
    overruled: bool = False         # a rule overruled the LLM's STOP (stopper.py)
    unread: bool = False            # CONTINUE because the LLM's answer could not be read


def _labelled(text: str) -> dict[str, str]:
    """Each label's last value (upper-case label: the text up to the next label), without
    the markdown around it."""
    marks = list(_LABEL.finditer(text))
    ends = [m.start() for m in marks[1:]] + [len(text)]
    return {(m.group(1) or m.group(2)).upper(): text[m.end():end].strip(_MARKUP)
            for m, end in zip(marks, ends)}


def parse_decision(text: str, step: int | None, source: str) -> Decision | None:
    """CONTINUE/STOP from the stopper's answer, or None when it does not say. The decision
    line must hold one allowed word and nothing more: "STOP is not warranted; CONTINUE" says
    neither for sure."""
    fields = _labelled(text)
    lines = fields.get("DECISION", "").splitlines()
    action = lines[0].strip(_MARKUP + ".!").upper() if lines else ""
    if action not in DECISIONS:
        return None
    return Decision(action, fields.get("REASON", "")[:1000], step, source)
