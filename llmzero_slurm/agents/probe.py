"""--check's trial of the agents' LLM service: one request for one token, and when the service
answers 404 or 400, its model list to tell a wrong model from a wrong URL.

Apart from llm.py because a site's own OpenAI-compatible server (vLLM) makes the two easy to
confuse: a base_url without /v1 and a misspelt model both answer 404.
"""
from __future__ import annotations

import errno
import socket
from typing import Any, Protocol

from ..config import AgentConfig
from ..errors import ConfigError
from .deadline import within
from .route import address


class Unverified(Exception):
    """The trial got no verdict (the network, a timeout, 429, 5xx): the agents retry those."""


class _SDKBackend(Protocol):
    """What the trial needs of llm.py's SDK backends."""

    cfg: AgentConfig
    client: Any
    name: str
    vendor: str

    def redact(self, text: str) -> str: ...

    def send(self, body: dict[str, Any]) -> Any: ...


def _served(llm: _SDKBackend, seconds: float) -> list[str] | None:
    """The model names the service lists (GET {base_url}/models), or None when it lists none:
    then its API is not at base_url at all (404), or it cannot say."""
    try:
        page = within(seconds, lambda: llm.client.models.list())
        return [str(m.id) for m in page.data]
    except Exception:  # the list only sharpens the message
        return None


def _not_found(llm: _SDKBackend, said: str, seconds: float) -> ConfigError:
    """Why the service refused a well-formed one-token request to the configured model."""
    cfg, url = llm.cfg, str(llm.client.base_url)
    served = _served(llm, seconds)
    if served is not None and cfg.model not in served:
        return ConfigError("agents.model", f"the {llm.vendor} at {url} serves no model "
                           f"{cfg.model!r}; it serves: {', '.join(map(repr, served[:20]))} "
                           f"({said})")
    root = url.rstrip("/")
    if served is None and llm.name == "openai" and not root.endswith("/v1"):
        return ConfigError("agents.base_url", f"nothing at {root} answers the chat-completions "
                           f"API ({said}): agents.base_url is the API's root, which for vLLM "
                           f"and most OpenAI-compatible servers ends in /v1: try {root}/v1")
    return ConfigError("agents.model", f"the {llm.vendor} at {url} has no model "
                       f"{cfg.model!r}, or refused a one-token request to it: {said}")


def probe(llm: _SDKBackend, body: dict[str, Any], limit_s: float) -> str:
    """`body`: a request for one token, given min(agents.timeout_s, `limit_s`): a start must
    not wait minutes on a server that is down. A refusal that no waiting cures (401/403 the
    key, 400/404 the model or the URL) is a ConfigError naming what to fix, since every agent
    call would fall back to the heuristics; any other failure (the network, 429, 5xx) is
    Unverified, as the agents retry those."""
    import anthropic   # as the backend did (llm.py's sdk): both load only where one is used
    import openai

    seconds = min(llm.cfg.timeout_s, limit_s)
    limit = (f"the trial's {seconds:g} s (the lesser of agents.timeout_s, "
             f"{llm.cfg.timeout_s:g} s, and {limit_s:g} s)")
    try:
        within(seconds, lambda: llm.send(body), limit)
    except (anthropic.APIStatusError, openai.APIStatusError) as exc:
        said = f"{type(exc).__name__}: {llm.redact(str(exc))[:300]}"
        if exc.status_code in (401, 403):
            raise ConfigError("agents.api_key_env", f"the {llm.vendor} refused the key in "
                              f"${llm.cfg.key_env}: {said}") from None
        if exc.status_code in (400, 404):
            raise _not_found(llm, said, seconds) from None
        raise Unverified(said) from None
    except Exception as exc:  # the network, a timeout: said, not failed
        # The SDK's "Connection error." names neither the URL nor why: its cause does.
        why = f"{exc} ({type(c).__name__}: {c})" if (c := exc.__cause__) else str(exc)
        url = str(llm.client.base_url).rstrip("/")
        raise Unverified(f"{_plainly(exc, url)}{type(exc).__name__}: {llm.redact(why)[:300]} "
                         f"at {url}") from None
    return "a one-token request was answered"


def _plainly(exc: BaseException, url: str) -> str:
    """What a refused connection or an unknown host means, ahead of the SDK's own words."""
    (host, port), seen = address(url), exc.__cause__ or exc.__context__
    while seen is not None and not isinstance(seen, OSError):
        seen = seen.__cause__ or seen.__context__
    if isinstance(seen, socket.gaierror):
        return (f"the host name {host!r} does not resolve (a typo in "
                "agents.base_url, or a name only some nodes know): ")
    if isinstance(seen, OSError) and seen.errno == errno.ECONNREFUSED:
        return (f"connection refused: nothing listens at {host}:{port} (is "
                "the server running, on that port?): ")
    return ""
