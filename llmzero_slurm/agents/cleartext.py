"""Whether the agents' API key may go to their endpoint: never in clear text over the network
unless the config asks for it.

A personal $OPENAI_API_KEY or $ANTHROPIC_API_KEY set in the shell for other work would
otherwise be sent to a site's plain http:// server (vLLM on a compute node), readable on every
hop. Loopback http never leaves the machine (an SSH tunnel, the tests' server), and a variable
named in agents.api_key_env is a key the user chose to send to that server.
"""
from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from ..config import AgentConfig
from ..errors import ConfigError


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:      # a host name: it may resolve anywhere
        return False


def refuse_cleartext_key(cfg: AgentConfig, url: str) -> None:
    """ConfigError when the backend's default key variable would go to `url` over plain http
    to another machine (called only when there is a key to send)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or _loopback(parts.hostname or "") or cfg.api_key_env is not None:
        return
    raise ConfigError("agents.api_key_env", f"${cfg.key_env} would be sent in clear text to "
                      f"{url} (plain http:// to another machine), where anyone on the network "
                      f"path can read it: use https://, unset {cfg.key_env} for a server that "
                      f"takes no key (vLLM without --api-key), or name the variable holding "
                      f"this server's own key in agents.api_key_env to send it anyway")
