"""Pydantic models of the HTTP edge (OpenAI chat-completions shapes plus the AKV fields).

Only the edge uses pydantic: request bodies are validated here; a chat body then becomes one
:class:`engine.request.Request` (``engine.server.prepare.chat_request``), which the engine checks
with its own error types (messages, schedule, sampling values) and carries to the reply.

Validation is strict (``STRICT``): a field typed as an integer, boolean or string takes only that
JSON type (``max_tokens: true``, ``stream: "yes"`` and ``n: 1.0`` are 400s, not coerced), numbers
must be finite, and ``stop`` strings must be non-empty. Bodies are parsed by ``engine.server.body``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

STRICT = ConfigDict(strict=True, allow_inf_nan=False)
MAX_STOP = 16
"""Most stop strings per request (OpenAI allows 4; each is searched for after every token)."""
MAX_STOP_CHARS = 1000
SEED_RANGE = 1 << 63
"""``seed`` must lie in [-2**63, 2**63) (a signed 64-bit integer)."""

Seconds = Annotated[float, Field(gt=0, le=365 * 86400.0)]


class StreamOptions(BaseModel):
    model_config = STRICT

    include_usage: bool = False


class ScheduleFields(BaseModel):
    """The AKV cache-engineering fields (the public AKV engine's wire format, ``engine.schedule``)
    of every request that carries a schedule."""

    model_config = STRICT

    drop_message: dict[str, Any] | None = None
    reposition: list[Any] | None = None
    drop_rule: Any = None
    cache: dict[str, Any] | None = None

    def schedule(self) -> dict[str, Any]:
        return {"drop_message": self.drop_message, "reposition": self.reposition,
                "drop_rule": self.drop_rule, "cache": self.cache}


UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "logprobs": lambda v: bool(v), "top_logprobs": lambda v: v not in (None, 0),
    "logit_bias": lambda v: bool(v), "presence_penalty": lambda v: v not in (None, 0),
    "frequency_penalty": lambda v: v not in (None, 0),
}
"""OpenAI fields that would change the reply and that the engine does not implement: refused when
set to anything but their default, so a client never gets a reply that silently ignored them."""


DEFAULT_MAX_TOKENS = 256
"""A chat reply's token limit when the request sets neither ``max_tokens`` nor ``max_completion_tokens``."""


class ChatRequest(ScheduleFields):
    """``POST /v1/chat/completions``. Unknown OpenAI fields are accepted and ignored, except those of
    :data:`UNSUPPORTED` set to a value that would change the reply (refused, 400)."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    model: str | None = Field(default=None, max_length=256)
    messages: list[Any]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = Field(default=None, ge=-SEED_RANGE, lt=SEED_RANGE)
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(default=0, ge=0)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    # AKV extensions
    session_id: str | None = Field(default=None, min_length=1, max_length=256)
    prefix: str = ""
    timeout: Seconds | None = None
    # AKV extension: also return the generated token ids (choices[0].token_ids; non-streaming only)
    return_token_ids: bool = False
    # tool-gap survival: after this reply the session waits on a tool ({"expected_s", "tool", "side_effect"})
    tool_gap: dict[str, Any] | None = None
    # OpenAI tools: when given, <tool_call> blocks in the reply come back as message.tool_calls. The
    # chatml template renders them into the system turn (as Qwen's own template does); gemma and plain
    # do not: with those, list the tools in the system prompt (as the task suites do).
    tools: list[Any] | None = None
    # OpenAI tool_choice: "auto" (default), "none" (calls stay text), "required" or a named function
    # (the reply opens with a tool call: engine.toolcalls.forced_opening, and goes on under a grammar of the
    # declared tools' schemas: engine.grammar)
    tool_choice: str | dict[str, Any] | None = None
    # OpenAI response_format: {"type": "text"} (default), {"type": "json_object"} or {"type": "json_schema",
    # "json_schema": {"name": ..., "schema": {...}}}: the reply decoded under the schema's grammar (engine.grammar)
    response_format: dict[str, Any] | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _check_stop(cls, value: Any) -> Any:
        if value is None:
            return value
        stops = [value] if isinstance(value, str) else value
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise ValueError("stop must be a string or a list of strings")
        if len(stops) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop strings are accepted, got {len(stops)}")
        for s in stops:
            if not 0 < len(s) <= MAX_STOP_CHARS:
                raise ValueError(f"a stop string must have 1 to {MAX_STOP_CHARS} characters, got {len(s)}")
        return value

    def new_tokens(self) -> int:
        """Tokens the reply may add: ``max_completion_tokens``, else ``max_tokens``, else
        :data:`DEFAULT_MAX_TOKENS`."""
        chosen = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        return DEFAULT_MAX_TOKENS if chosen is None else chosen

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def unsupported(self) -> tuple[str, Any] | None:
        """The first field of :data:`UNSUPPORTED` this request sets to a non-default value, with it."""
        for name, value in (self.model_extra or {}).items():
            if name in UNSUPPORTED and UNSUPPORTED[name](value):
                return name, value
        return None


class ScoreRequest(ScheduleFields):
    """``POST /v1/akv/score`` (AKV extension): log-likelihood of candidate continuations.

    The context is the rendered ``messages`` under the schedule plus ``prefix`` (text the
    assistant's reply starts with); see ``engine.Engine.score``. The server caps the number of
    candidates and their tokens (``engine.server.limits.ServerLimits``).
    """

    model_config = STRICT

    model: str | None = Field(default=None, max_length=256)
    messages: list[Any]
    candidates: list[str]
    prefix: str = ""
    timeout: Seconds | None = None


class CacheSaveRequest(ScheduleFields):
    """``POST /v1/cache/save``: write a history's KV to ``name`` in the tenant's snapshots
    (an existing ``name`` is refused with 409 unless ``overwrite``)."""

    model_config = STRICT

    messages: list[Any]
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")
    overwrite: bool = False


class CacheLoadRequest(BaseModel):
    """``POST /v1/cache/load``: warm the tree from a saved file."""

    model_config = STRICT

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")


