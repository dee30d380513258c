"""The public AKV policy's parameter names for ``rolling_drop`` (``akvalgo.AKVPolicy``, thu-nics/AKV).

A team's existing configuration, written with the reference's names, becomes this project's
``rolling_drop`` without translation by hand: :func:`from_reference` checks it with the
reference's rules (same refusals, one line each, naming the bad value) and returns the same
policy under our names (docs/export.md has the table). A configuration uses either the
reference's names or ours, never a mix (``keep_tool_responses`` is both).

Not here: ``token_counter`` (our policies always get token counts: the model's tokenizer in the
framework, a counter or an estimate in an exported module), ``mode="text_drop"`` (text-level
dropping is not part of ``rolling_drop``; ``mode="kv_drop"`` is accepted).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.errors import show
from search_spaces.errors import ParameterError

NAME = "rolling_drop"
REFERENCE_NAMES = (
    "keep_tool_responses", "mode", "rolling_drop_target",
    "drop_after_call", "drop_interval_calls", "drop_trigger_tokens", "drop_trigger_responses", "drop_target_tokens",
    "reposition_after_call", "reposition_interval_calls", "reposition_trigger_tokens",
)
_OPTIONAL = ("drop_after_call", "drop_interval_calls", "drop_trigger_tokens", "drop_trigger_responses",
             "drop_target_tokens", "reposition_after_call", "reposition_interval_calls", "reposition_trigger_tokens")
_TRIGGERS = ("drop_after_call", "drop_trigger_tokens", "drop_trigger_responses")


def uses_reference_names(params: Mapping[str, Any]) -> bool:
    """Whether ``params`` holds a name only the reference uses (``keep_tool_responses`` is shared)."""
    return any(name in REFERENCE_NAMES and name != "keep_tool_responses" for name in params)


def _refuse(name: str, value: Any, why: str) -> None:
    raise ParameterError(f"{NAME}: {name}={show(value)} {why}", field=name, value=value)


def _positive(value: Any) -> bool:
    return type(value) is int and value > 0


def from_reference(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` in the reference's names, checked with its rules, as ``rolling_drop`` parameters.

    ``None`` means unset, as in the reference.

    Raises:
        ParameterError: one line naming the parameter and its value: a name that is not the
            reference's, a value the reference refuses, or a combination it refuses (drop
            triggers are mutually exclusive; an interval needs its first call; a triggered drop
            is tool-only; a token target needs a trigger and lies below a token trigger; a
            response trigger without a target exceeds K; token and call repositions exclude each
            other), or ``mode="text_drop"``.
    """
    for name, value in params.items():
        if name not in REFERENCE_NAMES:
            _refuse(name, value, f"is not an AKV reference parameter; with the reference's names use only: "
                    f"{', '.join(REFERENCE_NAMES)}")
    p = {name: params.get(name) for name in _OPTIONAL}
    k = params.get("keep_tool_responses", 12)
    if not _positive(k):
        _refuse("keep_tool_responses", k, "must be a positive integer")
    mode = params.get("mode", "kv_drop")
    if mode not in ("kv_drop", "text_drop"):
        _refuse("mode", mode, "must be kv_drop or text_drop")
    if mode == "text_drop":
        _refuse("mode", mode, "(text-level dropping) is not offered by rolling_drop; use kv_drop")
    target = params.get("rolling_drop_target", "tool")
    if target not in ("tool", "assistant", "both"):
        _refuse("rolling_drop_target", target, "must be tool, assistant or both")
    for name in _OPTIONAL:
        if p[name] is not None and not _positive(p[name]):
            _refuse(name, p[name], "must be a positive integer or None")
    fired = [name for name in _TRIGGERS if p[name] is not None]
    if len(fired) > 1:
        _refuse(fired[1], p[fired[1]], f"and {fired[0]}={p[fired[0]]}: drop trigger modes are mutually exclusive")
    if p["drop_interval_calls"] is not None and p["drop_after_call"] is None:
        _refuse("drop_interval_calls", p["drop_interval_calls"], "requires drop_after_call")
    if fired and target != "tool":
        _refuse("rolling_drop_target", target, f"with {fired[0]}: a triggered drop is tool-only")
    if p["drop_target_tokens"] is not None:
        if not fired:
            _refuse("drop_target_tokens", p["drop_target_tokens"], "requires a drop trigger")
        if p["drop_trigger_tokens"] is not None and p["drop_target_tokens"] >= p["drop_trigger_tokens"]:
            _refuse("drop_target_tokens", p["drop_target_tokens"],
                    f"must be below drop_trigger_tokens={p['drop_trigger_tokens']}")
    if p["drop_trigger_responses"] is not None and p["drop_target_tokens"] is None and \
            p["drop_trigger_responses"] <= k:
        _refuse("drop_trigger_responses", p["drop_trigger_responses"],
                f"must exceed keep_tool_responses={k} (the retained response count)")
    if p["reposition_interval_calls"] is not None and p["reposition_after_call"] is None:
        _refuse("reposition_interval_calls", p["reposition_interval_calls"], "requires reposition_after_call")
    if p["reposition_trigger_tokens"] is not None and p["reposition_after_call"] is not None:
        _refuse("reposition_trigger_tokens", p["reposition_trigger_tokens"],
                f"and reposition_after_call={p['reposition_after_call']}: use either token or call-based reposition")
    return _translate(k, target, p)


def _translate(k: int, target: str, p: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"keep_tool_responses": k, "target": target}
    if p["drop_after_call"] is not None:
        out.update(trigger="calls", first_call=p["drop_after_call"], every_calls=p["drop_interval_calls"] or 0)
    elif p["drop_trigger_tokens"] is not None:
        out.update(trigger="tokens", trigger_tokens=p["drop_trigger_tokens"])
    elif p["drop_trigger_responses"] is not None:
        out.update(trigger="response_count", trigger_responses=p["drop_trigger_responses"])
    if p["drop_target_tokens"] is not None:
        out["target_tokens"] = p["drop_target_tokens"]
    if p["reposition_after_call"] is not None:
        out.update(reposition="calls", reposition_start=p["reposition_after_call"],
                   reposition_every=p["reposition_interval_calls"] or 0)
    elif p["reposition_trigger_tokens"] is not None:
        out.update(reposition="tokens", reposition_tokens=p["reposition_trigger_tokens"])
    return out
