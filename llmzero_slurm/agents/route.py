"""The route from this machine to an LLM endpoint: directly, or through the proxy an HTTP
client takes (`<scheme>_proxy`, `all_proxy` and `no_proxy` from the environment, as urllib and
httpx read them). One answer for the monitor's start-up probe (agents/llm.py) and the
cluster-side preflight job (cluster_probe.py): the standard library only, as that job needs.
"""
from __future__ import annotations

import urllib.request
from urllib.parse import urlsplit


def proxy_for(url: str) -> str | None:
    """The proxy a request to `url` goes through, or None for a direct connection."""
    parts = urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):   # no_proxy (on Linux, only that)
        return None
    proxies = urllib.request.getproxies_environment()
    return proxies.get(parts.scheme) or proxies.get("all")


def address(url: str) -> tuple[str | None, int]:
    """Host and port of `url`; a proxy may be given without its scheme."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
