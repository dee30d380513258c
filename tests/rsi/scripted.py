"""A scripted OpenAI-compatible endpoint: a real FastAPI app (run with ``engine.server.ServerThread``)
that answers each chat completion with the next scripted reply and records the request bodies."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from fastapi import FastAPI, Request


def scripted_app(replies: Iterator[str], seen: list[dict]) -> FastAPI:
    app = FastAPI()
    lock = threading.Lock()

    @app.post("/v1/chat/completions")
    async def chat(req: Request) -> dict:
        body = await req.json()
        with lock:
            seen.append(body)
            text = next(replies, "no more ideas")
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}}

    return app
