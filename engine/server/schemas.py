"""Pydantic models of the HTTP edge (OpenAI chat-completions shapes plus the AKV fields).

Only the edge uses pydantic: request bodies are validated here, then handed to the engine as
plain dicts (the engine re-validates messages and schedules with its own error types).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions``. Unknown OpenAI fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[Any]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    # AKV cache engineering (wire format of the public AKV engine)
    drop_message: dict[str, Any] | None = None
    reposition: list[Any] | None = None
    drop_rule: Any = None
    cache: dict[str, Any] | None = None
    # AKV extensions
    session_id: str | None = Field(default=None, max_length=256)
    prefix: str = ""
    timeout: float | None = Field(default=None, gt=0)
    # AKV extension: also return the generated token ids (choices[0].token_ids; non-streaming only)
    return_token_ids: bool = False
    # tool-gap survival: after this reply the session waits on a tool ({"expected_s", "tool", "side_effect"})
    tool_gap: dict[str, Any] | None = None
    # OpenAI tools: when given, <tool_call> blocks in the reply come back as message.tool_calls. The
    # templates do not render tool specs: list the tools in the system prompt (as the task suites do).
    tools: list[Any] | None = None

    def schedule(self) -> dict[str, Any]:
        return {"drop_message": self.drop_message, "reposition": self.reposition,
                "drop_rule": self.drop_rule, "cache": self.cache}

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class ScoreRequest(BaseModel):
    """``POST /v1/akv/score`` (AKV extension): log-likelihood of candidate continuations.

    The context is the rendered ``messages`` under the schedule plus ``prefix`` (text the
    assistant's reply starts with); see ``engine.Engine.score``.
    """

    model: str | None = None
    messages: list[Any]
    candidates: list[str]
    prefix: str = ""
    drop_message: dict[str, Any] | None = None
    reposition: list[Any] | None = None
    drop_rule: Any = None
    cache: dict[str, Any] | None = None
    timeout: float | None = Field(default=None, gt=0)

    def schedule(self) -> dict[str, Any]:
        return {"drop_message": self.drop_message, "reposition": self.reposition,
                "drop_rule": self.drop_rule, "cache": self.cache}


class CacheSaveRequest(BaseModel):
    """``POST /v1/cache/save``: write a history's KV to ``name`` under the server's snapshot dir."""

    messages: list[Any]
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")
    drop_message: dict[str, Any] | None = None
    reposition: list[Any] | None = None
    drop_rule: Any = None
    cache: dict[str, Any] | None = None

    def schedule(self) -> dict[str, Any]:
        return {"drop_message": self.drop_message, "reposition": self.reposition,
                "drop_rule": self.drop_rule, "cache": self.cache}


class CacheLoadRequest(BaseModel):
    """``POST /v1/cache/load``: warm the tree from a saved file."""

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")


class ErrorBody(BaseModel):
    message: str
    type: Literal["invalid_request_error", "server_error", "overloaded_error", "timeout_error",
                  "not_found_error"]
    param: str | None = None
    code: str | None = None
