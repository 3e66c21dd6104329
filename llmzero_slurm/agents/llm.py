"""LLM backends behind one small interface: a prompt in, a reply with tokens and dollars out.

`complete` either returns text or raises `LLMUnavailable` (after the SDK's own retries with
back-off on 429, 5xx and timeouts, when `agents.timeout_s` has passed, and for any other
failure of the exchange); agents then fall back to the heuristics. The API key is read from
the environment here and handed to the SDK; it is never stored anywhere else, and is cut out
of every failure's text (a gateway may echo it), which reaches records and logs.
"""
from __future__ import annotations

import base64
import io
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol
from urllib.parse import urlsplit

from PIL import Image

from ..config import LLM_BACKENDS_SAID, AgentConfig
from ..errors import ConfigError
from .cleartext import refuse_cleartext_key
from .deadline import HOOKS, Abandoned, within
from .probe import probe
from .route import address, proxy_for
from .usage import Usage, anthropic_usage, openai_usage


class LLMUnavailable(Exception):
    """The service could not give an answer (network, rate limit, server error, timeout)."""


@dataclass
class Prompt:
    """`system` is the static part (role, grounding notes, answer format), identical across
    calls of one agent, so it is the part marked for prompt caching."""

    system: str
    text: str
    images: list[Path] = field(default_factory=list)
    turns: list[tuple[str, str]] = field(default_factory=list)  # (role, text) after the first
    max_tokens: int = 1024

    def repair(self, answer: str, problem: str) -> "Prompt":
        """The same conversation plus the rejected answer and what was wrong with it."""
        note = (f"Your answer could not be used: {problem}\n"
                "Answer again in the required format, fixing exactly this problem.")
        # The Messages API refuses an empty turn (400): an empty answer is shown as such.
        return Prompt(self.system, self.text, self.images,
                      [*self.turns, ("assistant", answer.strip() or "(no text)"), ("user", note)],
                      self.max_tokens)


@dataclass
class Reply:
    text: str
    usage: Usage
    cut: str | None = None   # why the service ended the answer early (its text is no answer)
    refused: bool = False    # ended as a refusal: a conversation keeping it is refused again


# Stop reasons after which the text is not a whole answer: a draft block before the cut, or
# the start of a refusal, must not be parsed as the agent's decision.
_CUT = {"max_tokens": "the answer was cut off at the token limit before it ended; answer more "
                      "briefly and end with the requested block",
        "model_context_window_exceeded": "the answer was cut off at the model's context "
                                         "window; answer more briefly",
        "length": "the answer was cut off at the token limit before it ended; answer more "
                  "briefly and end with the requested block",
        "refusal": "the service ended the answer as a refusal",
        "content_filter": "the service's content filter ended the answer"}
REFUSALS = ("refusal", "content_filter")


def cut_reason(stop: str | None) -> str | None:
    """What to tell the LLM (and record) when the service ended its answer early."""
    return f"{_CUT[stop]} (stop reason {stop})" if stop in _CUT else None


class Backend(Protocol):
    name: str

    @property
    def key(self) -> str: ...

    def complete(self, prompt: Prompt) -> Reply: ...

    def probe(self, limit_s: float) -> str: ...


def encode_png(path: Path, max_px: int) -> tuple[str, int, int]:
    """Base64 PNG no larger than max_px on its longer side (image tokens grow with area)."""
    with Image.open(path) as opened:
        img = opened.convert("RGB")
        img.thumbnail((max_px, max_px))
        buf = io.BytesIO()
        img.save(buf, format="PNG", optimize=True)
        return base64.b64encode(buf.getvalue()).decode("ascii"), img.width, img.height


def user_content(prompt: Prompt, max_px: int, image_block: Callable[[str], dict[str, Any]],
                 images: bool = True) -> list[dict[str, Any]]:
    """Each plot announced by name, then the image, then the per-call text."""
    content: list[dict[str, Any]] = []
    for path in prompt.images if images else ():
        content.append({"type": "text", "text": f"Plot {path.name}:"})
        content.append(image_block(encode_png(path, max_px)[0]))
    content.append({"type": "text", "text": prompt.text})
    return content


class _SDKBackend:
    """A vendor SDK client; the SDK retries 429/5xx/timeouts itself with exponential back-off
    (honouring retry-after), `max_retries` times, all within `timeout_s` (deadline.py)."""

    vendor: str     # how a failure is named in the agent's record
    name: str       # the backend, as agents.backend spells it

    def __init__(self, cfg: AgentConfig, api_key: str):
        self.cfg = cfg
        sdk, http_client = self.sdk()
        self.client = sdk(api_key=api_key, base_url=cfg.base_url, timeout=cfg.timeout_s,
                          max_retries=cfg.max_retries, http_client=http_client(event_hooks=HOOKS))

    @staticmethod
    def sdk() -> tuple[Any, Any]:
        """The SDK's client class and its own HTTP client class (its defaults kept), imported
        here: the two SDKs take over a second to import, which every command paid, --help and
        a one-line config error included, and the offline heuristics never need."""
        raise NotImplementedError

    @property
    def key(self) -> str:
        """The key the client sends: the records scrub it (records.py), since the monitor's is
        handed over and not in its environment."""
        return str(self.client.api_key or "")

    def request(self, prompt: Prompt) -> dict[str, Any]:
        raise NotImplementedError

    def send(self, body: dict[str, Any]) -> Reply:
        raise NotImplementedError

    def complete(self, prompt: Prompt) -> Reply:
        """The reply, or LLMUnavailable with its reason. Not only the SDK's APIError: a client
        that fails otherwise (a RuntimeError from inside the SDK) or a reply that is not what
        the API promises must also end in the agents' fallback, never crash the controller."""
        body = self.request(prompt)
        try:
            return within(self.cfg.timeout_s, lambda: self.send(body))
        except LLMUnavailable:
            raise
        except Abandoned as exc:
            raise LLMUnavailable(f"{self.vendor}: {exc}") from None
        except Exception as exc:  # any failure of the exchange is a fallback
            why = f"{exc} ({type(c).__name__}: {c})" if (c := exc.__cause__) else str(exc)  # what it met
            raise LLMUnavailable(self.redact(f"{self.vendor}: {type(exc).__name__}: {why}")) from None

    def redact(self, text: str) -> str:
        """`text` without the key, as sent or escaped in a header's repr (errors echo it)."""
        for form in {self.key, repr(self.key)[1:-1]} if len(self.key) >= 8 else ():
            text = text.replace(form, "[redacted]")
        return text

    def excerpt(self, reply: object) -> str:
        """The start of a reply that is no answer (a proxy's page may echo the key): redacted
        before it is cut, as a key cut in two would not be found."""
        return self.redact(str(reply))[:200]

    def probe(self, limit_s: float) -> str:
        """--check's trial of the key, the model and the URL (probe.py)."""
        return probe(self, self.request(Prompt("Answer in one word.", "Ready?", max_tokens=1)),
                     limit_s)


class AnthropicBackend(_SDKBackend):
    """Claude through the official SDK: cached system block, images as base64 PNG blocks."""

    name = "anthropic"
    vendor = "Anthropic API"
    @staticmethod
    def sdk() -> tuple[Any, Any]:
        import anthropic

        return anthropic.Anthropic, anthropic.DefaultHttpxClient

    def request(self, prompt: Prompt) -> dict[str, Any]:
        """The Messages API request body (also used by the cost benchmark)."""
        content = user_content(prompt, self.cfg.image_max_px, lambda data: {
            "type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}})
        messages = [{"role": "user", "content": content}]
        messages += [{"role": role, "content": text} for role, text in prompt.turns]
        cache: dict[str, str] = {"type": "ephemeral"}
        if self.cfg.cache_ttl != "5m":
            cache["ttl"] = self.cfg.cache_ttl
        return {"model": self.cfg.model, "max_tokens": min(prompt.max_tokens, self.cfg.max_tokens),
                "system": [{"type": "text", "text": prompt.system, "cache_control": cache}],
                "messages": messages}

    def send(self, body: dict[str, Any]) -> Reply:
        resp = self.client.messages.create(**body)
        if not isinstance(getattr(resp, "content", None), list):
            raise LLMUnavailable(f"{self.vendor}: the reply is not a Messages API answer (no "
                                 f"content blocks): {self.excerpt(resp)}")
        text = "".join(b.text for b in resp.content if getattr(b, "type", "") == "text")
        usage = anthropic_usage(self.cfg, getattr(resp, "usage", None), self.vendor)
        stop = getattr(resp, "stop_reason", None)
        return Reply(text, usage, cut_reason(stop), stop in REFUSALS)


class OpenAIBackend(_SDKBackend):
    """Any OpenAI-compatible chat-completions server (vLLM, SGLang on the cluster, ...)."""

    name = "openai"
    vendor = "OpenAI-compatible API"
    @staticmethod
    def sdk() -> tuple[Any, Any]:
        import openai

        return openai.OpenAI, openai.DefaultHttpxClient

    def request(self, prompt: Prompt) -> dict[str, Any]:
        content = user_content(prompt, self.cfg.image_max_px, lambda data: {
            "type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
            self.cfg.images)
        messages = [{"role": "system", "content": prompt.system},
                    {"role": "user", "content": content}]
        messages += [{"role": role, "content": text} for role, text in prompt.turns]
        return {"model": self.cfg.model, "messages": messages, "max_tokens":
                min(prompt.max_tokens, self.cfg.max_tokens) + self.cfg.thinking_tokens}

    def send(self, body: dict[str, Any]) -> Reply:
        resp = self.client.chat.completions.create(**body)
        if not resp.choices or getattr(resp.choices[0], "message", None) is None:
            raise LLMUnavailable(f"{self.vendor}: the reply has no choice with a message: "
                                 f"{self.excerpt(resp)}")
        usage = openai_usage(self.cfg, resp.usage, self.vendor)
        message = resp.choices[0].message   # vLLM's reasoning parser: the thinking apart
        thought = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
        text = f"<think>\n{thought}\n</think>\n" if isinstance(thought, str) and thought else ""
        return Reply(text + (message.content or ""), usage,
                     cut_reason(stop := resp.choices[0].finish_reason), stop in REFUSALS)


def choose_backend(cfg: AgentConfig, key: str | None = None) -> Backend | None:
    """The configured LLM, or None for the offline heuristics.

    `auto` uses Anthropic when there is a key and the heuristics otherwise, so a cluster
    without outbound access still runs a full search. `key`: one handed over outside the
    environment (the monitor job's); by default the variable `key_env` names.
    """
    key = (os.environ.get(cfg.key_env, "") if key is None else key).strip()   # a file's CRLF
    if cfg.backend == "heuristic" or (cfg.backend == "auto" and not key):
        return None
    if key:
        refuse_cleartext_key(cfg, endpoint(cfg))
    if cfg.backend in ("auto", "anthropic"):
        if not key:
            raise ConfigError("agents.api_key_env",
                              f"backend anthropic needs the API key in ${cfg.key_env}")
        return AnthropicBackend(cfg, key)
    if cfg.backend == "openai":
        if not cfg.base_url:
            raise ConfigError("agents.base_url", "backend openai needs the server's base_url")
        return OpenAIBackend(cfg, key or "EMPTY")   # local servers usually take any key
    raise ConfigError("agents.backend", LLM_BACKENDS_SAID)


ANTHROPIC_URL = "https://api.anthropic.com"


def endpoint(cfg: AgentConfig) -> str:
    """The URL the backend's SDK calls: agents.base_url, else (anthropic) the SDK's own
    $ANTHROPIC_BASE_URL, a site's gateway, else the public API."""
    return cfg.base_url or os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_URL


def unreachable(cfg: AgentConfig, timeout_s: float = 5.0) -> str | None:
    """Why the configured LLM endpoint cannot be reached from this machine, or None.

    One TCP connection to the endpoint, or to the proxy when one is set: compute nodes are
    often cut off from the internet, and finding that out through the SDK's retries costs
    minutes per call. An open connection is no proof the service answers, only that a route
    exists; the SDK's own errors cover the rest.
    """
    url = endpoint(cfg)
    target = urlsplit(url).hostname or ""
    proxy = proxy_for(url)
    host, port = address(proxy or url)
    if not host:
        return f"cannot tell the host of {proxy or url!r}"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        via = f" (through the proxy {host}:{port})" if proxy else ""
        return f"{target}:{port}{via} did not answer within {timeout_s:.0f} s: " \
               f"{exc.strerror or exc}"
