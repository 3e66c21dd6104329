"""A scripted LLM service on 127.0.0.1 speaking the Anthropic Messages API and the OpenAI chat
completions API, so tests drive the real SDKs over real HTTP.

Each request takes the next scripted step; the last step repeats forever. Steps:
  {"text": "..."}                  a 200 answer
  {"status": 429} / {"status": 500} an API error (retry-after-ms keeps SDK back-off short;
                                   "retry_after": S sends a retry-after of S seconds instead)
  {"status": 401, "message": "..."}  an error saying this ("{key}": the key the request sent,
                                   as some gateways echo it)
  {"delay": 3.0, "text": "..."}    answer after a delay (for client timeouts)
  {"trickle": 4.0, "text": "..."}  a 200 answer whose body arrives in small pieces spread over
                                   this many seconds (a proxy that trickles bytes: no read waits
                                   long, the whole reply does)
  {"body": {...}}                  a 200 answer with exactly this JSON body (a malformed reply)
  {"text": "...", "stop_reason": "max_tokens"}  an answer the service ended early (cut, refusal;
                                   OpenAI: "finish_reason": "length")
Like the real Messages API, a request with an empty message (a turn without text) is refused
with a 400 invalid_request_error.
`reply(..., models=[...])` also lists those models at GET .../v1/models (as vLLM does); by
default that route answers 404, as on a server whose API lies elsewhere.
Every request's path, headers and JSON body are kept in `requests`; the paths of replies the
client hung up on before their end, in `dropped`. Usage mimics prompt
caching: a system block marked cache_control is a cache write the first time, a read after.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ANTHROPIC_ERRORS = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error",
                     500: "api_error", 529: "overloaded_error"}


def _tokens(value: Any) -> int:
    """About four characters a token; an image counts as a flat 500 (its bytes are not text)."""
    images = 0

    def strip(v: Any) -> Any:
        nonlocal images
        if isinstance(v, dict):
            if v.get("type") in ("image", "image_url"):
                images += 1
                return None
            return {k: strip(x) for k, x in v.items()}
        return [strip(x) for x in v] if isinstance(v, list) else v

    return max(1, len(json.dumps(strip(value))) // 4 + 500 * images)


class LoopbackLLM:
    def __init__(self, port: int = 0) -> None:
        """`port`: one a service stopped earlier held (a server that comes back)."""
        self.script: list[dict[str, Any]] = [{"text": "no answer scripted"}]
        self.models: list[str] | None = None
        self.requests: list[dict[str, Any]] = []
        self.dropped: list[str] = []
        self.cached: set[str] = set()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "LoopbackLLM":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reply(self, *steps: dict[str, Any] | str, models: list[str] | None = None) -> None:
        """Script the next responses; plain strings are 200 answers."""
        self.models = models
        self.script = [{"text": s} if isinstance(s, str) else s for s in steps]
        self.requests.clear()
        self.dropped.clear()

    def _next(self, path: str, headers: dict[str, str], body: Any) -> dict[str, Any]:
        with self.lock:
            self.requests.append({"path": path, "body": body,
                                  "headers": {k.lower(): v for k, v in headers.items()}})
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    def _anthropic_usage(self, body: dict[str, Any], text: str) -> dict[str, Any]:
        read = 0
        write = {"5m": 0, "1h": 0}      # by the TTL the block asked for, as the API reports it
        for block in body.get("system") or []:
            if isinstance(block, dict) and block.get("cache_control"):
                key = hashlib.sha256(block["text"].encode()).hexdigest()
                with self.lock:
                    hit = key in self.cached
                    self.cached.add(key)
                if hit:
                    read += _tokens(block["text"])
                else:
                    write[block["cache_control"].get("ttl", "5m")] += _tokens(block["text"])
        return {"input_tokens": _tokens(body.get("messages")), "output_tokens": _tokens(text),
                "cache_creation_input_tokens": sum(write.values()),
                "cache_creation": {f"ephemeral_{ttl}_input_tokens": n for ttl, n in write.items()},
                "cache_read_input_tokens": read}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, payload: Any, trickle: float = 0.0,
                      retry_after: int | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if retry_after is not None:    # seconds, as a rate-limited server says
                    self.send_header("retry-after", str(retry_after))
                elif status >= 400:
                    self.send_header("retry-after-ms", "20")
                self.end_headers()
                pieces = max(1, int(trickle / 0.1))
                size = -(-len(data) // pieces)
                try:
                    for start in range(0, len(data), size):
                        self.wfile.write(data[start:start + size])
                        self.wfile.flush()
                        time.sleep(trickle / pieces)
                except (BrokenPipeError, ConnectionResetError):
                    service.dropped.append(self.path)  # the client gave up (timeout tests)

            def do_GET(self) -> None:
                service.requests.append({"path": self.path, "body": None, "headers": {
                    k.lower(): v for k, v in self.headers.items()}})
                if service.models is None or not self.path.endswith("/v1/models"):
                    return self._send(404, {"detail": "Not Found"})
                self._send(200, {"object": "list", "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "vllm"}
                    for m in service.models]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                step = service._next(self.path, dict(self.headers), body)
                time.sleep(step.get("delay", 0))
                status, text = step.get("status", 200), step.get("text", "")
                if "body" in step:
                    return self._send(200, step["body"])
                anthropic = self.path.endswith("/v1/messages")
                if anthropic and any(not m.get("content") for m in body.get("messages", [])):
                    return self._send(400, {"type": "error", "error": {
                        "type": "invalid_request_error", "message": "messages: all messages "
                        "must have non-empty content except for the optional final assistant "
                        "message"}})
                if status != 200:
                    sent = self.headers.get("x-api-key") or self.headers.get("authorization", "")
                    said = step.get("message", f"scripted {status}").replace("{key}", sent)
                    error = ({"type": "error", "error": {"type": _ANTHROPIC_ERRORS.get(
                        status, "api_error"), "message": said}} if anthropic
                        else {"error": {"message": said, "type": "server_error", "code": None}})
                    return self._send(status, error, retry_after=step.get("retry_after"))
                if anthropic:
                    return self._send(200, {
                        "id": f"msg_{len(service.requests)}", "type": "message",
                        "role": "assistant", "model": body["model"],
                        "content": [{"type": "text", "text": text}],
                        "stop_reason": step.get("stop_reason", "end_turn"),
                        "stop_sequence": None, "usage": service._anthropic_usage(body, text)},
                        step.get("trickle", 0.0))
                if self.path.endswith("/chat/completions"):
                    prompt, completion = _tokens(body["messages"]), _tokens(text)
                    return self._send(200, {
                        "id": f"chatcmpl-{len(service.requests)}", "object": "chat.completion",
                        "created": int(time.time()), "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": step.get("finish_reason", "stop"),
                                     "message": {"role": "assistant", "content": text}}],
                        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                  "total_tokens": prompt + completion}}, step.get("trickle", 0.0))
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        return Handler
