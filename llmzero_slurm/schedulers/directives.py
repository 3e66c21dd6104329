"""Reading the #SBATCH directives back out of a script, as sbatch itself does."""
from __future__ import annotations

import shlex


def read_directives(text: str) -> dict[str, str]:
    """Long-form options from the #SBATCH lines before the first command ('' for flags).

    Like sbatch, parsing stops at the first line that is neither blank nor a comment.
    """
    out: dict[str, str] = {}
    for line in text.splitlines()[1:]:
        stripped = line.strip()
        if not stripped or (stripped.startswith("#") and not stripped.startswith("#SBATCH")):
            continue
        if not stripped.startswith("#SBATCH"):
            break
        words = shlex.split(stripped[len("#SBATCH"):], comments=True)
        while words:
            word = words.pop(0)
            if not word.startswith("--"):
                continue
            key, eq, value = word[2:].partition("=")
            if not eq and words and not words[0].startswith("-"):
                value = words.pop(0)
            out[key] = value
    return out


def expand_output(pattern: str, job_id: str, job_name: str) -> str:
    """The %j / %x / %% substitutions of --output that a local run needs."""
    return (pattern.replace("%%", "\0").replace("%j", job_id).replace("%x", job_name)
            .replace("\0", "%"))
