"""Strict JSON request bodies: parsed off the event loop, refused with a 400 that says why.

FastAPI's own parsing answers some bad bodies in its ``{"detail"}`` shape, and lets others reach
the engine (where they fail as 500s). Here a body must be UTF-8 JSON text holding one object,
with no ``NaN``/``Infinity`` literal, no number beyond float range or integer longer than
``MAX_INT_DIGITS`` digits, no duplicate key, no lone surrogate in any string (``"\\ud800"``
parses to one, and no tokenizer or file can take it) and no nesting deeper than the server's
``max_json_depth``. The parsed object is then validated by the route's pydantic model; its
errors go to the app's ``RequestValidationError`` handler.

Use: ``req: Annotated[ChatRequest, Depends(json_body(ChatRequest))]``.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from engine.errors import show
from engine.server.limits import RequestError, ServerLimits

if TYPE_CHECKING:
    from engine.server.intake import Intake

MAX_INT_DIGITS = 40
"""Longest integer literal accepted (any request field fits in far fewer digits)."""

M = TypeVar("M", bound=BaseModel)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""A ``\uD800``-``\uDFFF`` escape: the only way a surrogate gets into parsed JSON text."""
_CONTAINERS = (dict, list)


def _bad(message: str, value: Any = None) -> RequestError:
    return RequestError(f"body: {message}", code="invalid_json", field="body", value=value)


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _bad(f"an integer literal has {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS} are accepted)")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _bad(f"the number {show(text, 40)} is beyond the float range")
    return value


def _constant(name: str) -> Any:
    raise _bad(f"{name} is not valid JSON (numbers must be finite)")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _bad(f"key {show(dup, 40)} appears twice in one object", dup)
    return out


def parse_json(raw: bytes, max_depth: int) -> Any:
    """Parse ``raw`` strictly (see the module docstring).

    Raises:
        RequestError: code ``invalid_json``, naming what is wrong (and where, for strings).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _bad(f"the body is not valid UTF-8 (byte {err.start}: {raw[err.start:err.start + 1]!r})") from None
    try:
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant,
                           object_pairs_hook=_object)
    except RecursionError:
        raise _bad(f"nested more than {max_depth} levels deep") from None
    except json.JSONDecodeError as err:
        raise RequestError(f"malformed JSON body: {err}", code="json_invalid", field="body") from None
    if _deeper_than(value, max_depth):
        raise _bad(f"nested more than {max_depth} levels deep")
    if _SURROGATE_ESCAPE.search(raw):  # rare: walk the strings (a pair of surrogates is fine)
        _check_strings(value)
    return value


def _deeper_than(value: Any, max_depth: int) -> bool:
    """Whether arrays and objects in ``value`` nest more than ``max_depth`` levels (breadth first,
    one level at a time, looking only at containers)."""
    level = [value] if value.__class__ in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            return True
        below: list[Any] = []
        for node in level:
            below.extend([c for c in (node.values() if node.__class__ is dict else node) if c.__class__ in _CONTAINERS])
        level = below
    return False


def _check_strings(value: Any) -> None:
    """Walk ``value`` iteratively for strings (keys included) that cannot be encoded as UTF-8."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if not node.isascii():
                _check_string(node, value)
        elif isinstance(node, dict):
            for k, v in node.items():
                if not k.isascii():
                    _check_string(k, value)
                stack.append(v)
        elif isinstance(node, list):
            stack.extend(node)


def _check_string(text: str, root: Any) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        where = _path_of(root, text) or "body"
        raise RequestError(f"{where}: the string holds a lone surrogate ({text[err.start]!r} at character "
                           f"{err.start}), which is not Unicode text", code="invalid_string", field=where,
                           value=show(text, 40)) from None


def _path_of(node: Any, target: str, path: str = "") -> str | None:
    """The dotted path of string ``target`` in ``node`` (only on the error path; depth is bounded)."""
    if node is target:
        return path
    if isinstance(node, dict):
        for k, v in node.items():
            if k is target:
                return path or "body"
            found = _path_of(v, target, f"{path}.{k}" if path else k)
            if found is not None:
                return found
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found = _path_of(v, target, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def parse_object(raw: bytes, max_depth: int) -> dict[str, Any]:
    """Parse a body that must hold one JSON object (strictly: :func:`parse_json`).

    Raises:
        RequestError: the body is not acceptable JSON, or not an object.
    """
    value = parse_json(raw, max_depth)
    if not isinstance(value, dict):
        raise RequestError(f"body: a request body must be a JSON object, got {type(value).__name__}",
                           code="invalid_type", field="body", value=show(value, 40))
    return value


def validate(value: dict[str, Any], model: type[M]) -> M:
    """``value`` (a parsed body) as ``model``.

    Raises:
        RequestValidationError: the object does not fit ``model`` (the app answers 400).
    """
    try:
        return model.model_validate(value)
    except ValidationError as err:
        raise RequestValidationError(err.errors(include_url=False, include_context=False)) from None


def parse_model(raw: bytes, model: type[M], max_depth: int) -> M:
    """Parse and validate a body into ``model`` (:func:`parse_object`, then :func:`validate`).

    Raises:
        RequestError: the body is not acceptable JSON, or not an object.
        RequestValidationError: the object does not fit ``model`` (the app answers 400).
    """
    return validate(parse_object(raw, max_depth), model)


def json_body(model: type[M]) -> Callable[[Request], Awaitable[M]]:
    """A FastAPI dependency that reads the request body as ``model`` (parsing on a pool thread; a
    large chat or score body is first screened by the app's intake process: ``engine.server.intake``)."""

    async def read(request: Request) -> M:
        limits: ServerLimits = getattr(request.app.state, "limits", None) or ServerLimits()
        raw = await request.body()
        intake: Intake | None = getattr(request.app.state, "intake", None)
        if intake is not None and intake.wants(raw, model):
            await intake.screen(raw, model)  # a large body's refusal, found outside this process
        return await asyncio.to_thread(parse_model, raw, model, limits.max_json_depth)

    return read
