"""An independent re-implementation of the public AKV policy (``akvalgo.AKVPolicy``, kv_drop mode),
for the differential test of ``rolling_drop`` and of modules exported for an AKV harness.

Written from reading the public source (thu-nics/AKV at 7330fa05: ``akvalgo/policy.py``,
``reposition.py``, ``messages.py``, ``adapter.py``), not copied from it: the slow, obvious form,
every quantity recomputed from its definition at each call end. What it encodes:

- history: roles are system, developer, user, assistant, tool; an assistant turn with tool calls
  (distinct ids) is followed by exactly its responses (any order); anything else is refused.
- rolling (no drop trigger): the j-th tool response (j >= K) drops the (j-K)-th, at itself.
- call-end triggers (tool-only): at completed call c (its last message ``boundaries[c-1]``, a tool
  response), over the tool responses up to it not dropped by earlier triggers ("visible"): fire
  at c == after or every ``interval`` after; or when the visible prompt (prompt length up to the
  boundary including the generation header, minus dropped responses) exceeds the token trigger;
  or when ``trigger_responses`` are visible. Fired: all visible but the newest K, or with a token
  target the oldest visible until the visible prompt is at most the target.
- assistant / both: an assistant turn with tool calls, with the assistant turns without calls
  since the previous batch, goes at the latest trigger among its responses once all have gone.
- reposition: at call ``after`` and every ``interval`` after (unconditional), or at call ends
  where the position (prompt up to the call's prompt end, including the generation header, minus
  the tokens compacted at the last one) exceeds the trigger and more has been dropped since.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")
OPTIONAL = ("drop_after_call", "drop_interval_calls", "drop_trigger_tokens", "drop_trigger_responses",
            "drop_target_tokens", "reposition_after_call", "reposition_interval_calls", "reposition_trigger_tokens")


@dataclass(frozen=True)
class Layout:
    """A token layout as an akvalgo counter reports it: end offset of each message (prompt prefix
    included) and the generation header's length."""

    message_ends: tuple[int, ...]
    generation_tokens: int
    message_token_counts: tuple[int, ...] | None = None


class Counter:
    """A token counter over fixed per-message counts (the ``ChatTokenCounter`` shape)."""

    def __init__(self, counts: Sequence[int], prefix: int, generation: int, with_counts: bool) -> None:
        self.counts, self.prefix, self.generation, self.with_counts = list(counts), prefix, generation, with_counts

    def message_layout(self, messages: Sequence[Any], tools: Sequence[Any], *, enable_thinking: Any,
                       reasoning_effort: Any, api_style: Any) -> Layout:
        counts = self.counts[: len(messages)]
        ends = tuple(self.prefix + sum(counts[: i + 1]) for i in range(len(counts)))
        firsts = (self.prefix + counts[0], *counts[1:]) if counts else ()
        return Layout(ends, self.generation, tuple(firsts) if self.with_counts else None)


def config_error(cfg: Mapping[str, Any]) -> str | None:
    """Why the reference refuses ``cfg`` at construction (with a token counter given), or None."""
    k = cfg.get("keep_tool_responses")
    if type(k) is not int or k <= 0:
        return "keep_tool_responses"
    if cfg.get("mode", "kv_drop") not in ("kv_drop", "text_drop"):
        return "mode"
    if cfg.get("rolling_drop_target", "tool") not in ("tool", "assistant", "both"):
        return "rolling_drop_target"
    drops = [n for n in OPTIONAL if n.startswith("drop_")]
    for name in drops:
        v = cfg.get(name)
        if v is not None and (type(v) is not int or v <= 0):
            return name
    triggers = [n for n in ("drop_after_call", "drop_trigger_tokens", "drop_trigger_responses")
                if cfg.get(n) is not None]
    if len(triggers) > 1:
        return "exclusive"
    if cfg.get("drop_interval_calls") is not None and cfg.get("drop_after_call") is None:
        return "drop_interval_calls"
    if triggers and (cfg.get("mode", "kv_drop") != "kv_drop" or cfg.get("rolling_drop_target", "tool") != "tool"):
        return "rolling_drop_target"
    target = cfg.get("drop_target_tokens")
    if target is not None and (not triggers or (cfg.get("drop_trigger_tokens") is not None
                                                and target >= cfg["drop_trigger_tokens"])):
        return "drop_target_tokens"
    responses = cfg.get("drop_trigger_responses")
    if responses is not None and target is None and responses <= k:
        return "drop_trigger_responses"
    for name in ("reposition_after_call", "reposition_interval_calls", "reposition_trigger_tokens"):
        v = cfg.get(name)
        if v is not None and (type(v) is not int or v <= 0):
            return name
    if cfg.get("reposition_interval_calls") is not None and cfg.get("reposition_after_call") is None:
        return "reposition_interval_calls"
    if cfg.get("reposition_trigger_tokens") is not None and cfg.get("reposition_after_call") is not None:
        return "reposition_trigger_tokens"
    if cfg.get("mode", "kv_drop") != "kv_drop" and (cfg.get("reposition_after_call") is not None
                                                    or cfg.get("reposition_trigger_tokens") is not None):
        return "mode"
    return None


def _calls(m: Mapping[str, Any]) -> list[Any]:
    return list(m.get("tool_calls") or ())


def units(messages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Messages grouped as the reference groups them: one unit per message, except an assistant
    turn with tool calls, whose unit holds its responses. Raises ValueError on a bad history."""
    out: list[list[int]] = []
    i = 0
    while i < len(messages):
        role = messages[i]["role"]
        if role not in ROLES or role == "tool":
            raise ValueError(f"bad message {i}")
        calls = _calls(messages[i]) if role == "assistant" else []
        unit = [i]
        i += 1
        if calls:
            want = [str(c["id"]) for c in calls if isinstance(c, dict) and c.get("id") is not None]
            if len(set(want)) != len(calls):
                raise ValueError("call ids")
            got = []
            while i < len(messages) and messages[i]["role"] == "tool":
                if str(messages[i].get("tool_call_id")) not in want:
                    raise ValueError("unknown result")
                got.append(str(messages[i].get("tool_call_id")))
                unit.append(i)
                i += 1
            if sorted(got) != sorted(want):
                raise ValueError("incomplete batch")
        out.append(unit)
    return out


def _tokens(layout: Layout, i: int) -> int:
    if layout.message_token_counts is not None:
        return layout.message_token_counts[i]
    return layout.message_ends[i] - (layout.message_ends[i - 1] if i else 0)


def _triggered(cfg: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], call_index: int,
               boundaries: Sequence[int], layout: Layout | None) -> dict[int, tuple[int, ...]]:
    n = len(messages)
    if len(boundaries) != call_index or any(type(b) is not int or not 0 < b < n or messages[b]["role"] != "tool"
                                             for b in boundaries) or list(boundaries) != sorted(set(boundaries)):
        raise ValueError("triggered drop: bad boundaries")
    k = cfg["keep_tool_responses"]
    after, every = cfg.get("drop_after_call"), cfg.get("drop_interval_calls")
    trig_tokens, trig_resp, target = (cfg.get("drop_trigger_tokens"), cfg.get("drop_trigger_responses"),
                                      cfg.get("drop_target_tokens"))
    tools = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    schedule: dict[int, tuple[int, ...]] = {}
    for c, b in enumerate(boundaries, 1):
        gone = {i for ids in schedule.values() for i in ids}
        visible = [i for i in tools if i <= b and i not in gone]
        prompt = None
        if layout is not None:
            prompt = layout.message_ends[b] + layout.generation_tokens - sum(_tokens(layout, i) for i in gone)
        if trig_tokens is not None:
            assert prompt is not None
            fire = prompt > trig_tokens
        elif trig_resp is not None:
            fire = len(visible) >= trig_resp
        else:
            fire = after is not None and (c == after or (every is not None and c > after and (c - after) % every == 0))
        if not fire:
            continue
        if target is not None:
            assert layout is not None and prompt is not None
            chosen = []
            for i in visible:  # the K newest are not protected here
                if prompt <= target:
                    break
                chosen.append(i)
                prompt -= _tokens(layout, i)
        else:
            chosen = visible[: max(0, len(visible) - k)]
        if chosen:
            schedule[b] = tuple(chosen)
    return schedule


def _with_assistants(messages: Sequence[Mapping[str, Any]], tool_schedule: dict[int, tuple[int, ...]],
                     target: str) -> dict[int, tuple[int, ...]]:
    when = {i: t for t, ids in tool_schedule.items() for i in ids}
    out: dict[int, list[int]] = {t: list(ids) for t, ids in tool_schedule.items()} if target == "both" else {}
    all_units = units(messages)
    last_batch = -1  # index (in all_units) of the previous unit with responses
    for u, unit in enumerate(all_units):
        if len(unit) == 1:
            continue
        heads = [all_units[v][0] for v in range(last_batch + 1, u + 1)]
        group = [h for h in heads if messages[h]["role"] == "assistant"]
        last_batch = u
        if all(r in when for r in unit[1:]):
            out.setdefault(max(when[r] for r in unit[1:]), []).extend(group)
    return {t: tuple(sorted(out[t])) for t in sorted(out)}


def _reposition(cfg: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], call_index: int,
                boundaries: Sequence[int], prompt_ends: Mapping[int, int], layout: Layout | None,
                schedule: dict[int, tuple[int, ...]]) -> tuple[int, ...] | None:
    after, every, trig = (cfg.get("reposition_after_call"), cfg.get("reposition_interval_calls"),
                          cfg.get("reposition_trigger_tokens"))
    if after is None and trig is None:
        return None
    n = len(messages)
    if len(boundaries) != call_index or list(boundaries) != sorted(set(boundaries)) or any(
            type(b) is not int or not 0 <= b < n or messages[b]["role"] not in ("tool", "user")
            or (b + 1 < n and messages[b + 1]["role"] == "tool") for b in boundaries):
        raise ValueError("reposition: bad boundaries")
    if trig is None:
        assert after is not None
        calls = [after] if every is None else list(range(after, call_index + 1, every))
        return tuple(boundaries[c - 1] for c in calls if c <= call_index) or None
    for b, e in prompt_ends.items():
        if b not in boundaries or e != b + 1 or messages[e]["role"] != "user":
            raise ValueError("reposition: bad prompt end")
    if boundaries:
        last = prompt_ends.get(boundaries[-1], boundaries[-1])
        for m in messages[last + 1:]:
            if m["role"] != "assistant" or m.get("content") or not str(m.get("reasoning_content") or "").strip() or \
                    m.get("tool_calls"):
                raise ValueError("token reposition requires the current generation boundary")
    assert layout is not None
    events: list[int] = []
    compacted: set[int] = set()
    for b in boundaries:
        done = sum(_tokens(layout, i) for i in compacted)
        position = layout.message_ends[prompt_ends.get(b, b)] + layout.generation_tokens - done
        dropped = {i for t, ids in schedule.items() if t <= b for i in ids}
        if position > trig and sum(_tokens(layout, i) for i in dropped) > done:
            events.append(b)
            compacted = dropped
    return tuple(events) or None


def decide(cfg: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], *, call_index: int = 0,
           boundaries: Sequence[int] = (), prompt_ends: Mapping[int, int] | None = None,
           counter: Counter | None = None) -> tuple[dict[int, tuple[int, ...]] | None, tuple[int, ...] | None]:
    """``(drop_message, reposition)`` as the reference decides them (None when empty).

    Raises:
        ValueError: where the reference refuses the request.
    """
    units(messages)
    k = cfg["keep_tool_responses"]
    tools = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    token_modes = any(cfg.get(n) is not None for n in ("drop_trigger_tokens", "drop_target_tokens",
                                                      "reposition_trigger_tokens"))
    layout = counter.message_layout(messages, (), enable_thinking=None, reasoning_effort=None, api_style=None) \
        if counter is not None and token_modes else None
    if any(cfg.get(n) is not None for n in ("drop_after_call", "drop_trigger_tokens", "drop_trigger_responses")):
        schedule = _triggered(cfg, messages, call_index, boundaries, layout)
    else:
        schedule = {tools[j]: (tools[j - k],) for j in range(k, len(tools))}
    target = cfg.get("rolling_drop_target", "tool")
    if target != "tool":
        schedule = _with_assistants(messages, schedule, target)
    reposition = _reposition(cfg, messages, call_index, boundaries, dict(prompt_ends or {}), layout, schedule)
    return schedule or None, reposition
