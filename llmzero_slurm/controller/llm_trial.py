"""The agents' LLM tried once with one request for one token, for `--check` and at each start.

A server that is down, a key it refuses or a model it lacks was otherwise found a phase later,
in the first proposal's fallback. --check fails on a refusal no waiting cures; a start only
says what is wrong and what happens next, as the agents' own policy is to fall back to the
offline heuristics and carry on (a resume from cron or a requeued controller job must not end
on an LLM that is briefly down).
"""
from __future__ import annotations

import socket
from dataclasses import replace

from ..agents.llm import Backend, choose_backend, endpoint
from ..agents.probe import Unverified
from ..config import AgentConfig
from ..errors import ConfigError

LLM_TRIAL_TIMEOUT_S = 15.0


def trial_backend(agents: AgentConfig) -> Backend | None:
    """The agents' backend for the trial, without retries (None: the offline heuristics). Its
    probe(LLM_TRIAL_TIMEOUT_S) raises ConfigError for a refusal of the key, model or URL and
    Unverified for no verdict (the network, a timeout, 429, 5xx)."""
    return choose_backend(replace(agents, max_retries=0))


def trial_warning(agents: AgentConfig) -> str | None:
    """A start's warning when the trial fails, or None: what is wrong and what happens next."""
    llm = trial_backend(agents)
    try:
        if llm is not None:
            llm.probe(LLM_TRIAL_TIMEOUT_S)
        return None
    except ConfigError as exc:
        why, then = str(exc), ("every agent call falls back to the offline heuristics until "
                               "that is fixed and the run is resumed")
    except Unverified as exc:
        why, then = str(exc), ("each agent call falls back to the offline heuristics while it "
                               "does not answer")
    return (f"warning: the agents' LLM at {endpoint(agents)} did not answer a one-token trial "
            f"request: {why}\n  The search starts anyway (tried from {socket.gethostname()}): "
            f"{then}; each fallback is logged, and `llmzero-status` counts them.")
