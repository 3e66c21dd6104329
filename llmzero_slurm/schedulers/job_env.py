"""The environment a job inherits from the process that submits it, less every credential.

Training never calls an LLM, and user reward code runs inside the phase job, so no LLM key of
any name may reach it: not as a variable the script unsets later (it would still sit in
/proc/<pid>/environ), not under a custom name (`agents.api_key_env`), not copied under another
name. Both schedulers submit with this environment, so their jobs never see the key; the
monitor job, started through submitit (which takes no environment of its own), is submitted
while the credentials are withheld from this process's environment.
"""
from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Iterable, Iterator, Mapping

# Names that hold a service credential: ANTHROPIC_API_KEY, OPENAI_API_KEY, ANTHROPIC_AUTH_TOKEN,
# a gateway's ACCESS_TOKEN. HF_TOKEN is not among them: a job may download its model with it.
CREDENTIAL = re.compile(r"API_?KEY|AUTH_?TOKEN|ACCESS_?TOKEN|SECRET", re.I)
MIN_SECRET_CHARS = 8    # a value this short is no key; dropping its copies would drop noise


def without_credentials(env: Mapping[str, str] | None = None,
                        names: Iterable[str] = ()) -> dict[str, str]:
    """`env` (default: this process's) without credential variables, the variables `names`,
    and any other variable holding one of their values."""
    env = dict(os.environ if env is None else env)
    secret = {n for n in env if CREDENTIAL.search(n)} | set(names)
    values = {env[n] for n in secret if len(env.get(n, "")) >= MIN_SECRET_CHARS}
    return {k: v for k, v in env.items() if k not in secret and v not in values}


@contextmanager
def credentials_withheld(names: Iterable[str] = ()) -> Iterator[None]:
    """This process's environment without credentials for the duration: for a library that
    starts jobs from os.environ and takes no environment of its own (submitit)."""
    kept = without_credentials(names=names)
    withheld = {k: v for k, v in os.environ.items() if k not in kept}
    for name in withheld:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(withheld)
