"""The HTTP side of ``engine.remote``: requests, server errors mapped to ``AKVError``s, usage parsing.

A server's error object ``{"error": {"message", "type", "param", "code"}}`` becomes the exception
the in-process engine would have raised (``code`` names it: ``ScheduleError``, ``MessageError``,
``context_length_exceeded``, ...), with ``field`` = ``param``; anything else is a
:class:`RemoteError` naming the server. A full queue (503) is retried after ``Retry-After``; a
server that cannot be reached is a :class:`RemoteUnavailableError` (transient).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from engine.cache.plan import TokenUsage
from engine.errors import (
    AKVError,
    CapacityError,
    ContextLengthError,
    MessageError,
    ModelLoadError,
    RemoteError,
    RemoteUnavailableError,
    ScheduleError,
    SnapshotError,
)

ERROR_CODES: dict[str, type[AKVError]] = {
    "AKVError": AKVError, "ScheduleError": ScheduleError, "MessageError": MessageError,
    "ContextLengthError": ContextLengthError, "context_length_exceeded": ContextLengthError,
    "SnapshotError": SnapshotError, "ModelLoadError": ModelLoadError, "queue_full": CapacityError,
}
"""Server error codes (``akv serve`` uses the exception's class name) -> the local exception."""


@dataclass(frozen=True)
class StreamedReply:
    """A streamed chat reply: text, finish reason, usage (``None`` when cancelled) and time to first text."""

    text: str
    finish_reason: str
    usage: dict[str, Any] | None
    ttft: float | None


def _count(details: dict[str, Any], usage: dict[str, Any], key: str, url: str) -> int | None:
    value = details.get(key) if key in details else usage.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RemoteError(f"{url}: usage {key} must be a non-negative integer, got {value!r}", server=url,
                          code="bad_usage", field=f"usage.{key}", value=value)
    return value


def parse_usage(raw: Any, url: str, *, schedule_sent: bool) -> TokenUsage:
    """OpenAI usage (+ AKV ``prompt_tokens_details``) -> :class:`TokenUsage`.

    Raises:
        RemoteError: no usage, malformed counts, counts that do not partition the prompt, or
            (``code == "schedule_ignored"``) a schedule was sent and the answer has no
            ``drop_skipped_tokens``: the server does not speak the cache-engineering wire format.
    """
    if not isinstance(raw, dict) or not isinstance(raw.get("prompt_tokens"), int):
        raise RemoteError(f"{url}: the answer has no usage.prompt_tokens (got {str(raw)[:120]})", server=url,
                          code="bad_usage", field="usage")
    details = raw.get("prompt_tokens_details") or {}
    if not isinstance(details, dict):
        raise RemoteError(f"{url}: usage.prompt_tokens_details must be an object", server=url, code="bad_usage",
                          field="usage.prompt_tokens_details")
    prompt = int(raw["prompt_tokens"])
    cached = _count(details, raw, "cached_tokens", url) or 0
    skipped = _count(details, raw, "drop_skipped_tokens", url)
    repos = _count(details, raw, "repos_tokens", url) or 0
    completion = _count({}, raw, "completion_tokens", url) or 0
    if skipped is None and schedule_sent:
        raise RemoteError(
            f"{url} ignored the cache schedule: its usage has no prompt_tokens_details.drop_skipped_tokens, so it "
            "does not speak the AKV wire format (stock SGLang?). Use such a server only for the full-cache and text "
            "baselines, or serve drop policies with `akv serve` or an AKV-patched SGLang", server=url,
            code="schedule_ignored", field="drop_message")
    skipped = skipped or 0
    prefill = _count({}, raw, "prefill_tokens", url)
    prefill = prompt - cached - skipped if prefill is None else prefill
    if prefill + cached + skipped != prompt or prefill < 0:
        raise RemoteError(f"{url}: usage does not partition the prompt: prefill {prefill} + cached {cached} + "
                          f"drop_skipped {skipped} != prompt {prompt}", server=url, code="bad_usage", field="usage")
    return TokenUsage(prompt, prefill, cached, skipped, repos, completion)


def check_endpoint(base_url: Any) -> None:
    """Refuse ``base_url`` unless it is an http(s) URL with a host (made first, before any slow work).

    Raises:
        AKVError: naming the value.
    """
    try:
        url = httpx.URL(base_url) if isinstance(base_url, str) else None
    except httpx.InvalidURL:
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise AKVError(f"endpoint {base_url!r} is not an http(s) URL (for example http://127.0.0.1:30000)",
                       field="endpoint", value=base_url)


def reach_endpoint(base_url: Any, api_key: str | None = None, timeout: float = 30.0) -> None:
    """Refuse ``base_url`` unless it is an http(s) URL that answers ``GET /v1/models`` (made first,
    before any slow work such as loading a tokenizer).

    Raises:
        AKVError: not an http(s) URL; ``RemoteUnavailableError``: it cannot be reached; ``RemoteError``:
            it answers with an error (a wrong key, say).
    """
    wire = WireClient(base_url, timeout, api_key=api_key, busy_retries=0)
    try:
        wire.get("/v1/models")
    finally:
        wire.close()


class WireClient:
    """JSON over HTTP to one server, with errors mapped (see the module docstring)."""

    def __init__(self, base_url: str, timeout: float = 600.0, http: httpx.Client | None = None,
                 busy_retries: int = 5, api_key: str | None = None):
        check_endpoint(base_url)
        self.base_url = base_url.rstrip("/")
        self.http = http if http is not None else httpx.Client(base_url=self.base_url, timeout=timeout)
        if api_key:  # as the OpenAI client sends it (akv serve --api-key)
            self.http.headers["Authorization"] = f"Bearer {api_key}"
        self.busy_retries = busy_retries

    def close(self) -> None:
        self.http.close()

    def _send(self, method: str, path: str, body: dict[str, Any] | None) -> httpx.Response:
        for attempt in range(self.busy_retries + 1):
            try:
                r = self.http.request(method, self.base_url + path, json=body)
            except httpx.TransportError as err:
                raise RemoteUnavailableError(f"{self.base_url} cannot be reached ({type(err).__name__}: {err})",
                                             server=self.base_url, status=503, code="unavailable") from err
            if r.status_code != 503 or attempt == self.busy_retries:
                return r
            time.sleep(min(5.0, float(r.headers.get("retry-after") or 1)))
        raise AssertionError("unreachable")

    def get(self, path: str) -> dict[str, Any]:
        r = self._send("GET", path, None)
        return self._json(r, path)

    def post(self, path: str, body: dict[str, Any],
             missing: Callable[[int], AKVError] | None = None) -> dict[str, Any]:
        """POST ``body``; ``missing(status)`` is raised when the route does not exist (404/405)."""
        r = self._send("POST", path, body)
        if missing is not None and r.status_code in (404, 405) and not _is_error_object(r):
            raise missing(r.status_code)
        return self._json(r, path)

    def _json(self, r: httpx.Response, path: str) -> dict[str, Any]:
        try:
            data = r.json()
        except ValueError:
            data = None
        if r.status_code == 200 and isinstance(data, dict):
            return data
        if r.status_code == 200:
            raise RemoteError(f"{self.base_url}{path} answered 200 without a JSON object: {r.text[:120]!r}",
                              server=self.base_url, code="bad_answer")
        raise self.error(r.status_code, data, r.text)

    def error(self, status: int, data: Any, text: str = "") -> AKVError:
        """The exception for an error answer (see :data:`ERROR_CODES`)."""
        err = data.get("error") if isinstance(data, dict) else None
        if not isinstance(err, dict):
            detail = data.get("detail") if isinstance(data, dict) else None
            return RemoteError(f"{self.base_url}: HTTP {status}: {detail or text[:200]}", server=self.base_url,
                               status=status, code=None)
        message, code, param = str(err.get("message") or ""), err.get("code"), err.get("param")
        cls = ERROR_CODES.get(str(code)) if status < 500 or code == "queue_full" else None
        if cls is not None:
            exc = cls(message, field=param, value=None)
            exc.status = status
            return exc
        return RemoteError(f"{self.base_url}: HTTP {status}: {message}", server=self.base_url, status=status,
                           code=None if code is None else str(code), field=param)

    def stream_chat(self, body: dict[str, Any], on_text: Callable[[str], None] | None,
                    cancelled: Callable[[], bool] | None) -> StreamedReply:
        """Stream a chat completion (server-sent events); hang up when ``cancelled()`` turns true."""
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        pieces: list[str] = []
        reason, usage, ttft = "stop", None, None
        t0 = time.perf_counter()
        try:
            with self.http.stream("POST", self.base_url + "/v1/chat/completions", json=body) as r:
                if r.status_code != 200:
                    r.read()
                    try:
                        data = r.json()
                    except ValueError:
                        data = None
                    raise self.error(r.status_code, data, r.text)
                for line in r.iter_lines():
                    if cancelled is not None and cancelled():
                        return StreamedReply("".join(pieces), "cancelled", None, ttft)
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    event = json.loads(line[6:])
                    if "error" in event:
                        status = int(event["error"].get("code") or 500)
                        raise self.error(status, {"error": {"message": event["error"].get("message")}})
                    for choice in event.get("choices") or []:
                        piece = (choice.get("delta") or {}).get("content")
                        if piece:
                            ttft = ttft if ttft is not None else time.perf_counter() - t0
                            pieces.append(piece)
                            if on_text is not None:
                                on_text(piece)
                        reason = choice.get("finish_reason") or reason
                    usage = event.get("usage") or usage
        except httpx.TransportError as err:
            raise RemoteUnavailableError(f"{self.base_url} cannot be reached ({type(err).__name__}: {err})",
                                         server=self.base_url, status=503, code="unavailable") from err
        return StreamedReply("".join(pieces), reason, usage, ttft)


def _is_error_object(r: httpx.Response) -> bool:
    """Whether a 404 is our server's error object (e.g. an unknown model) rather than a missing route."""
    try:
        data = r.json()
    except ValueError:
        return False
    return isinstance(data, dict) and isinstance(data.get("error"), dict) and bool(data["error"].get("code"))
