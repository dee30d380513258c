"""The AKV-harness face of an exported policy module (``akv export --format akv-harness``).

Never imported by the framework: ``export.py`` copies the code below the marker into the exported
module, after the program API (``program_api.py``) and the contained program, which define the
names imported and stubbed above the marker (they are here for the linter and the type checker).

The face follows the interface of the public AKV policy package (``akvalgo`` in thu-nics/AKV),
written from its documentation: ``HarnessPolicy().decide(request) -> ContextDecision``, where the
request is any object with ``messages`` (OpenAI chat messages) and optionally ``call_index``,
``tools``, ``completed_call_message_ids``, ``prompt_end_message_ids`` (defaults ``0``, ``()``,
``()``, ``{}``), plus ``enable_thinking``, ``reasoning_effort``, ``api_style`` for a token
counter. It is stateless: the program sees ``request.previous = None``. ``FRAME_GUARD`` (set by
the export) guards each decision as the evaluator's frame guard does. docs/export.md.
"""

from __future__ import annotations

from typing import Any

from search_spaces.cache.frame_guard import guard_wire
from search_spaces.cache.program_api import Plan, RequestView, estimate_tokens

FRAME_GUARD = False
LABEL = ""
PROGRAM_SHA256 = ""
PARAMS: dict[str, Any] = {}
_program: dict[str, Any] = {}

# ---- exported from here ----
# ---- the AKV harness interface (decide(request) -> ContextDecision) ----
import copy  # noqa: E402
import dataclasses  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402

ROLES = ("system", "developer", "user", "assistant", "tool")
RECOVERED_TOOL_CALLS = "contextualize_recovered_tool_calls"  # calls a harness recovered from text
_CACHE_FIELDS = ("drop_message", "drop_rule", "reposition", "cache")


@dataclasses.dataclass(frozen=True)
class PolicyRequest:
    """One request as an AKV harness describes it (any object with these attributes will do)."""

    messages: Sequence[Mapping[str, Any]]
    call_index: int = 0
    tools: Sequence[Mapping[str, Any]] = ()
    enable_thinking: bool | None = None
    reasoning_effort: str | None = None
    api_style: str | None = None
    completed_call_message_ids: Sequence[int] = ()
    prompt_end_message_ids: Mapping[int, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ContextDecision:
    """What to send: ``drop_message`` (trigger id -> dropped ids, cumulative; None when empty),
    ``reposition`` (trigger ids; None when empty), ``messages`` (always None: the text is kept)."""

    drop_message: dict[int, tuple[int, ...]] | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    messages: tuple[dict[str, Any], ...] | None = None
    reposition: tuple[int, ...] | None = None


def _calls(message: Mapping[str, Any]) -> list[Any]:
    recovered = message.get(RECOVERED_TOOL_CALLS)
    return list(message.get("tool_calls") or (recovered.get("tool_calls") if isinstance(recovered, Mapping)
                                               else None) or ())


def tool_batches(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, ...]]:
    """The tool batches of ``messages``: (assistant id, its response ids...) per assistant turn with
    tool calls. Raises ValueError (naming the message) for an unknown role, a tool response outside
    a batch or answering a call its assistant did not make, missing or repeated call ids, or a
    batch without every response."""
    out, i, n = [], 0, len(messages)
    while i < n:
        role = messages[i].get("role") if isinstance(messages[i], Mapping) else None
        if role not in ROLES:
            raise ValueError(f"messages[{i}] has role {role!r}; expected one of {', '.join(ROLES)}")
        if role == "tool":
            raise ValueError(f"messages[{i}] is a tool response that no assistant tool call asked for")
        calls = _calls(messages[i]) if role == "assistant" else []
        if not calls:
            i += 1
            continue
        ids = [str(c.get("id")) for c in calls if isinstance(c, Mapping) and c.get("id") is not None]
        if len(set(ids)) != len(calls):
            raise ValueError(f"messages[{i}]: its tool calls need distinct ids, got {ids!r}")
        unit, answered = [i], []
        i += 1
        while i < n and isinstance(messages[i], Mapping) and messages[i].get("role") == "tool":
            if str(messages[i].get("tool_call_id")) not in ids:
                raise ValueError(f"messages[{i}] answers tool call {messages[i].get('tool_call_id')!r}, which "
                                 f"messages[{unit[0]}] did not make")
            unit.append(i)
            answered.append(str(messages[i].get("tool_call_id")))
            i += 1
        if sorted(answered) != sorted(ids):
            raise ValueError(f"messages[{unit[0]}]: its tool batch is incomplete ({len(answered)} responses for "
                             f"{len(ids)} calls)")
        out.append(tuple(unit))
    return out


def _check_plain(payload: Mapping[str, Any]) -> None:
    given = [name for name in _CACHE_FIELDS if payload.get(name) is not None]
    if given:
        raise ValueError(f"the request already carries {given[0]}: build it from the plain history")
    if "extra_body" in payload:
        raise ValueError("the request has extra_body: pass the final HTTP body, with extra_body merged")


def request_from_payload(payload: Mapping[str, Any], *, completed_call_message_ids: Sequence[int] | None = None,
                         prompt_end_message_ids: Mapping[int, int] | None = None,
                         api_style: str | None = None) -> PolicyRequest:
    """The request for a chat-completions body without cache fields. Call ends default to the last
    response of each complete tool batch; a harness whose observations arrive as user messages
    declares every call end (the tool batches' included), and may declare for a call end the user
    message right after it as the end of that call's prompt.

    Raises:
        ValueError: cache fields already set, no messages, a malformed history (see
            :func:`tool_batches`), or declared ids that are not such messages.
    """
    _check_plain(payload)
    messages = copy.deepcopy(list(payload.get("messages") or ()))
    if not messages:
        raise ValueError("the request has no messages")
    native = [unit[-1] for unit in tool_batches(messages)]
    ends = list(native if completed_call_message_ids is None else completed_call_message_ids)
    for j, b in enumerate(ends):
        if type(b) is not int or not 0 <= b < len(messages) or messages[b]["role"] not in ("tool", "user") or (
                messages[b]["role"] == "tool" and b not in native) or (j and b <= ends[j - 1]):
            raise ValueError(f"completed_call_message_ids: {b!r} is not the end of a tool batch or a user "
                             "observation after the previous call end")
    missing = sorted(set(native) - set(ends))
    if missing:
        raise ValueError(f"completed_call_message_ids misses the tool batch ending at {missing[0]}")
    ends_of = dict(prompt_end_message_ids or {})
    for b, e in ends_of.items():
        if type(b) is not int or type(e) is not int or b not in ends or e != b + 1 or e >= len(messages) or \
                messages[e]["role"] != "user":
            raise ValueError(f"prompt_end_message_ids: {b!r}: {e!r} is not the user message right after call end {b!r}")
    template = payload.get("chat_template_kwargs") or {}
    return PolicyRequest(tuple(messages), len(ends), tuple(copy.deepcopy(list(payload.get("tools") or ()))),
                         template.get("enable_thinking"), payload.get("reasoning_effort"), api_style, tuple(ends),
                         ends_of)


def _message_id(value: Any, n: int, what: str) -> int:
    if type(value) is not int or not 0 <= value < n:
        raise ValueError(f"{what}: {value!r} is not a message id of this request (0..{n - 1})")
    return int(value)


def apply_decision(payload: Mapping[str, Any], decision: ContextDecision) -> dict[str, Any]:
    """A copy of ``payload`` (a chat-completions body without cache fields) with the decision's
    fields set: what to send. Send it without inserting, merging or reordering messages.

    Raises:
        ValueError: cache fields already set, or ids that are not messages of the body.
    """
    _check_plain(payload)
    body = copy.deepcopy(dict(payload))
    if decision.messages is not None:
        body["messages"] = copy.deepcopy(list(decision.messages))
    n = len(body["messages"])
    if decision.drop_message is not None:
        table = {}
        for trigger, ids in decision.drop_message.items():
            t = _message_id(trigger, n, "drop_message")
            table[str(t)] = [_message_id(i, n, f"drop_message[{t}]") for i in ids]
            if any(i > t for i in table[str(t)]):
                raise ValueError(f"drop_message[{t}] drops a later message: {table[str(t)]}")
        body["drop_message"] = table
    if decision.reposition is not None:
        triggers = [_message_id(i, n, "reposition") for i in decision.reposition]
        if not triggers or triggers != sorted(set(triggers)):
            raise ValueError(f"reposition must be increasing message ids, got {triggers}")
        body["reposition"] = triggers
    return body


def _declared(messages: Sequence[Mapping[str, Any]], call_index: Any, ends: Sequence[Any],
              prompt_ends: Mapping[Any, Any]) -> dict[str, str]:
    """Why the harness's call ends / prompt ends cannot be used (by RequestView method name)."""
    n, why = len(messages), ""
    if type(call_index) is not int:
        why = f"call_index must be an int, got {call_index!r}"
    elif len(ends) != call_index:
        why = f"completed_call_message_ids holds {len(ends)} call ends for call_index {call_index}"
    for j, b in enumerate(ends if not why else ()):
        if type(b) is not int or not 0 <= b < n:
            why = f"completed_call_message_ids: {b!r} is not a message id (0..{n - 1})"
        elif messages[b]["role"] not in ("tool", "user"):
            why = f"completed_call_message_ids: message {b} has role {messages[b]['role']!r}, not tool or user"
        elif b + 1 < n and messages[b + 1]["role"] == "tool":
            why = f"completed_call_message_ids: message {b} is inside a tool batch"
        elif j and b <= ends[j - 1]:
            why = f"completed_call_message_ids must increase, got {ends[j - 1]!r} then {b!r}"
        if why:
            break
    problems = {"call_ends": why} if why else {}
    for b, e in prompt_ends.items():
        if why or type(b) is not int or type(e) is not int or b not in ends or e != b + 1 or e >= n or \
                messages[e]["role"] != "user":
            problems["prompt_end"] = why or (f"prompt_end_message_ids: {b!r}: {e!r} is not the user message right "
                                             f"after call end {b!r}")
            break
    return problems


@dataclasses.dataclass(frozen=True)
class HarnessPolicy:
    """This module's policy behind the AKV harness interface.

    Attributes:
        token_counter: optional; ``message_layout(messages, tools, *, enable_thinking,
            reasoning_effort, api_style)`` returning ``message_ends`` and ``generation_tokens``
            (an akvalgo ``ChatTokenCounter``). Message i counts ``message_ends[i] -
            message_ends[i-1]`` tokens, message 0 ``message_ends[0] + generation_tokens``, so that
            the tokens up to a message are the prompt length the server sees. Default:
            ``estimate_tokens`` (one token per 4 characters, plus 4 per message).
    """

    token_counter: Any = None

    def _counts(self, request: Any, messages: list[Mapping[str, Any]]) -> list[int]:
        if self.token_counter is None:
            return estimate_tokens(messages)
        tools = list(getattr(request, "tools", ()) or ())
        layout = self.token_counter.message_layout(
            messages, tools, enable_thinking=getattr(request, "enable_thinking", None),
            reasoning_effort=getattr(request, "reasoning_effort", None), api_style=getattr(request, "api_style", None))
        ends = [int(e) for e in layout.message_ends]
        if len(ends) != len(messages) or ends[0] < 0 or any(b < a for a, b in itertools.pairwise(ends)):
            raise ValueError(f"the token counter's message_ends {ends} do not fit {len(messages)} messages")
        return [ends[0] + int(layout.generation_tokens)] + [b - a for a, b in itertools.pairwise(ends)]

    def decide(self, request: Any) -> ContextDecision:
        """The cumulative decision for ``request`` (see the module docstring for its attributes).

        Raises:
            ValueError: a malformed history (:func:`tool_batches`), call ends the policy needs that
                do not fit the messages, or a program decision this interface cannot carry.
        """
        messages = [dict(m) if isinstance(m, Mapping) else m for m in getattr(request, "messages", None) or ()]
        if not messages:
            raise ValueError("the request has no messages")
        tool_batches(messages)
        counts = self._counts(request, messages)
        call_index = getattr(request, "call_index", 0)
        ends = list(getattr(request, "completed_call_message_ids", ()) or ())
        prompt_ends = dict(getattr(request, "prompt_end_message_ids", None) or {})
        problems = _declared(messages, call_index, ends, prompt_ends)
        seen = [dict(m, tool_calls=_calls(m)) if m.get("role") == "assistant" else m for m in messages]
        view = RequestView(seen, counts, None, None, None, call_ends=() if "call_ends" in problems else ends,
                           prompt_ends={} if "prompt_end" in problems else prompt_ends, problems=problems)
        out = _program["decide"](view, dict(PARAMS))
        if view.refusals:
            raise ValueError(view.refusals[0])
        wire = out.wire() if isinstance(out, Plan) else json.loads(json.dumps(out))
        counted = "token_counter" if self.token_counter is not None else "estimate_tokens"
        decision = _decision(wire, len(messages), counted)
        if not FRAME_GUARD:
            return decision
        # a message leaves only after an assistant turn has read it; the frame stays (checked ids only)
        table = {str(t): list(ids) for t, ids in (decision.drop_message or {}).items()}
        return _decision(guard_wire(messages, {"drop_message": table, "reposition": list(decision.reposition or ())}),
                         len(messages), counted)


def _decision(wire: Any, n: int, counted: str) -> ContextDecision:
    if not isinstance(wire, dict):
        raise ValueError(f"the policy program returned {type(wire).__name__}, not a schedule")
    if wire.get("drop_rule"):
        raise ValueError("the policy dropped reasoning (drop_rule), which an AKV harness decision cannot carry")
    drops: dict[int, tuple[int, ...]] = {}
    for key, ids in (wire.get("drop_message") or {}).items():
        t = _message_id(int(key) if isinstance(key, str) and key.isdigit() else key, n, "drop_message")
        drops[t] = tuple(sorted(_message_id(i, t + 1, f"drop_message[{t}]") for i in ids))
    dropped = sorted(i for ids in drops.values() for i in ids)
    if len(set(dropped)) != len(dropped):
        raise ValueError(f"the policy dropped a message twice: {dropped}")
    reposition = tuple(_message_id(i, n, "reposition") for i in wire.get("reposition") or ())
    if list(reposition) != sorted(set(reposition)):
        raise ValueError(f"the policy's reposition ids do not increase: {list(reposition)}")
    metadata = {"policy": "akv-rsi", "label": LABEL, "program_sha256": PROGRAM_SHA256,
                "params": json.loads(json.dumps(PARAMS)), "frame_guard": FRAME_GUARD, "token_counts": counted,
                "dropped_message_ids": dropped,
                "drop_event_count": len(drops),
                "reposition_message_ids": list(reposition), "reposition_event_count": len(reposition)}
    return ContextDecision(drop_message=dict(sorted(drops.items())) or None, metadata=metadata, messages=None,
                           reposition=reposition or None)


if __name__ == "__main__":
    import sys

    body = json.load(sys.stdin)
    json.dump(apply_decision(body, HarnessPolicy().decide(request_from_payload(body))), sys.stdout)
