"""A small Python client for the AKV server.

    from engine.remote.client import AKVClient
    c = AKVClient("http://127.0.0.1:30000")            # api_key="..." for a server with --api-key
    r = c.chat(messages, drop_message={"7": [3]}, reposition=[7], max_tokens=32)
    r["choices"][0]["message"]["content"], r["usage"]["prompt_tokens_details"]["cached_tokens"]
    for piece in c.stream(messages, max_tokens=32): print(piece, end="")

The official ``openai`` package works too; pass the AKV fields through ``extra_body``::

    from openai import OpenAI
    client = OpenAI(base_url="http://127.0.0.1:30000/v1", api_key="unused")   # or the server's key
    client.chat.completions.create(model="gemma-3-270m", messages=messages,
                                   extra_body={"drop_message": {"7": [3]}, "reposition": [7]})
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx


class AKVServerError(RuntimeError):
    """An error object returned by the server (status, message, param)."""

    def __init__(self, status: int, error: dict[str, Any]):
        super().__init__(f"HTTP {status}: {error.get('message')}")
        self.status = status
        self.error = error


class AKVClient:
    """Thin synchronous client. ``schedule`` fields are passed as keyword arguments.

    ``api_key`` is sent as ``Authorization: Bearer`` (a server started with ``--api-key``).
    """

    def __init__(self, base_url: str, timeout: float = 600.0, api_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers)

    def close(self) -> None:
        self.http.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post(path, json=body)
        data = r.json()
        if r.status_code != 200:
            raise AKVServerError(r.status_code, data.get("error", data))
        return data

    def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """``POST /v1/chat/completions``; kwargs: max_tokens, temperature, drop_message, reposition, ..."""
        return self._post("/v1/chat/completions", {"messages": messages, **kwargs})

    def stream(self, messages: list[dict[str, Any]], **kwargs: Any) -> Iterator[str]:
        """Yield text pieces as they are generated (server-sent events)."""
        body = {"messages": messages, "stream": True, **kwargs}
        with self.http.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                r.read()
                raise AKVServerError(r.status_code, r.json().get("error", {}))
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    raise AKVServerError(int(event["error"].get("code", 500)), event["error"])
                for choice in event.get("choices", []):
                    piece = choice.get("delta", {}).get("content")
                    if piece:
                        yield piece

    def save(self, name: str, messages: list[dict[str, Any]], *, overwrite: bool = False,
             **schedule: Any) -> dict[str, Any]:
        """Save a history's KV as ``name`` (409 if it exists, unless ``overwrite``)."""
        return self._post("/v1/cache/save", {"name": name, "messages": messages, "overwrite": overwrite, **schedule})

    def load(self, name: str) -> dict[str, Any]:
        return self._post("/v1/cache/load", {"name": name})

    def health(self) -> dict[str, Any]:
        return self.http.get("/health").json()

    def metrics(self) -> str:
        return self.http.get("/metrics").text
