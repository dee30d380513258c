"""# Writing a KV-cache policy program

A policy program is one Python file that decides, at every request of an agent session, which
messages the model stops attending to (their KV is *dropped*; the text stays) and when position
ids are compacted (*reposition*). It is run in a sandbox, many requests at a time.

## What the file must define

```python
DEFAULTS = {"keep": 12}            # optional, a literal dict: every parameter and its default
NEEDS = {"relevance": ["w_intent"]}  # optional, a literal dict; see "Inputs on request" below

def decide(request, params):       # -> request.plan() or a wire-format dict
    ...

def space(trial):                  # -> dict of parameters, drawn with trial.suggest_*
    return {"keep": trial.suggest_int("keep", 1, 32)}
```

`params` is `DEFAULTS` updated with the values being evaluated (a plain dict); a parameter name
that `DEFAULTS` does not list fails the candidate. `space` receives an object with Optuna's
`suggest_int(name, low, high, step=1, log=False)`, `suggest_float(name, low, high, step=None,
log=False)` and `suggest_categorical(name, choices)`; it may branch on earlier answers, and only
the parameters it reaches are drawn. Integer bounds and steps must lie within +-2**53, float
bounds and steps must be finite, a categorical has 1 to 1000 choices (None, bools, such numbers
or strings), and one `space` may suggest at most 256 parameters; anything else fails the
candidate with its reason. Complete examples: the seed programs `full`, `rolling_drop`
(the expert policy: keep the last 12 tool responses), `read_drop` (the hand rule: drop tool output
once read, above a length, and stale re-reads), `thinking_drop` and `scored_drop`.

## The schedule you return (cumulative, stable)

Message ids are 0-based indices into `request.messages`. Return the *whole* schedule since the
start of the session, never only the new part:

- `plan.drop(trigger, ids)`: after message `trigger` is processed, messages `ids` leave the KV.
  Every id must be `<= trigger` and `< request.n`; a message is dropped at most once.
- `plan.drop_reasoning(trigger, ids)`: the same for the reasoning part of assistant messages only.
- `plan.reposition(trigger)`: after message `trigger` (after its drops), compact positions.
  Triggers must be strictly increasing.

A decision must be *stable*: what you return for a longer history must contain, unchanged, every
entry you returned for a shorter one, and add nothing at triggers that earlier requests already
covered. The easy way: scan the messages from the start and decide each trigger from the
messages up to it only (never look ahead), as the seeds do. A violation fails the candidate.

Instead of a plan you may return the wire format itself:
`{"drop_message": {"7": [3, 5]}, "reposition": [7]}`.

## The request

| name | meaning |
|---|---|
| `request.n` | number of messages |
| `request.messages` | tuple of messages (read-only, see below) |
| `request.tokens` | tuple of token counts, one per message |
| `request.call_index` | assistant turns before this request |
| `request.previous` | what this policy returned for the previous request (dict), or `None` |
| `request.previous_n` | messages of that previous request (0 for the first, or when the caller does not say) |
| `request.relevance` | tuple of floats (similarity of each message to the first user message) or `None` |
| `request.total_tokens()` | sum of all token counts |
| `request.tokens_since(i)` | tokens of messages `i .. n-1` |
| `request.tokens_between(a, b)` | tokens of messages `a .. b-1` |
| `request.tool_responses()` | ids of tool messages, oldest first |
| `request.assistant_turns()` | ids of assistant messages |
| `request.user_messages()` | ids of user messages |
| `request.with_reasoning()` | ids of assistant messages that have reasoning |
| `request.calls_before(i)` | number of assistant messages before message `i` |
| `request.call_starts()` | ids of the first non-assistant message after each assistant message |
| `request.is_call_start(i)` | whether message `i` is such a message |
| `request.call_ends()` | ids of the last response of each complete tool batch, oldest first |
| `request.prompt_end(i)` | for a call end `i`: where that call's prompt ends (`i` or `i + 1`) |
| `request.entities(i)` | frozenset of lowercased numbers, ids and capitalised names in message `i` |
| `request.tools_between(a, b)` | tool messages among `a .. b-1` (a response's age at `t`: `(i + 1, t + 1)`) |
| `request.call_of(i)` | tool message `i`: `(name, arguments)` of the call it answers; else `None` |
| `request.batch_of(i)` | tool message `i`: `(position, size)` in its tool batch (0-based); else `(0, 0)` |
| `request.superseded_by(i)` | the first later tool message answering the same call (tool, arguments), or `-1` |
| `request.mentioned_by(i, least=1)` | later user / assistant messages sharing `least` entities with `i` |
| `request.plan()` | a new empty plan |

A message `m` has `m.index`, `m.role` ("system", "user", "assistant", "tool"), `m.content`,
`m.reasoning` ("" when none), `m.has_reasoning`, `m.tool_calls` (tuple of `(name, arguments)`),
`m.call_ids` (the calls' ids, aligned with `m.tool_calls`), `m.name`, `m.tool_call_id`, `m.tokens`,
`m.text` (content, reasoning and calls joined), `m.entities` (those of `request.entities(m.index)`),
`m.is_system`, `m.is_user`, `m.is_assistant`, `m.is_tool`. A plan has `drop`, `drop_reasoning`,
`reposition`, `dropped()` (set of dropped ids) and `wire()`.

The five message features (`tools_between` to `mentioned_by`) answer in constant or logarithmic
time (computed once per trajectory), so a program may ask them of every message at every request.
They never look past the request's last message: `mentioned_by` lists ids before `n`, oldest
first; `call_of` matches a response by `tool_call_id`, else by its place in the batch.

A *complete tool batch* is an assistant message with N tool calls followed by its N tool
responses. In a module exported for an AKV harness (docs/export.md), `call_ends()` is what the
harness declares (its tool batches, and user messages it treats as observations), and
`prompt_end(i)` is `i + 1` where the harness declares that user message as the end of the
call's prompt; in the framework it is always `i`.

## Inputs on request

`relevance` is computed (with a sentence-embedding model) only when the program asks for it:
`NEEDS = {"relevance": ["w_intent"]}` means "compute it when any of these parameters is
nonzero"; an empty list means always. Otherwise `request.relevance` is `None`.

## The language

Plain Python functions, loops, comprehensions, `lambda`, `try`/`except`, dicts, lists, sets,
tuples, strings and numbers. Allowed modules: `math`, `re`, `statistics`. Allowed builtins: the
usual pure ones (`len`, `range`, `sorted`, `min`, `max`, `sum`, `enumerate`, `zip`, `abs`,
`round`, `int`, `float`, `str`, `list`, `dict`, `set`, ...). Not allowed: other imports, `open`,
`eval`, `exec`, `getattr`, classes, `global`, `with`, `yield`, attribute assignment, any name
or attribute starting with `_`, and using the name of a builtin outside the allowed ones for
anything of your own (a variable, parameter, function or import alias named `open`, `type`, `id`,
`input`, `compile`...: choose another name). At most 20 KB of source. Each batch of requests runs under CPU,
memory and wall-clock limits; an exception, a timeout or an invalid schedule fails the candidate
with a one-line reason. A program's sandbox processes are kept for their next calls (a search asks
one program for thousands of trials), but each call runs your module afresh: module-level
variables start again from their initial values, so what one trial stores never reaches the next.
The episodes of one call are shared between two processes that decide them at the same time, so
carry nothing from one episode to another either.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_IDENT = re.compile(r"\b[A-Za-z]+[-_]?\d[\w-]*")
_NAME = re.compile(r"\b[A-Z][A-Za-z]{2,}\b")
_COMMON = frozenset(str.split(
    "the this that these those there then what which when where why how and but for now next let yes "
    "not all any its our you your was are has had here step"))


@functools.lru_cache(maxsize=8192)
def entities(text: str) -> frozenset[str]:
    """Lowercased numbers of two or more characters, ids (``row3-4``, ``c12``) and capitalised
    names (common sentence words aside) found in ``text``. Memoised: every request of a session
    shows the same messages again."""
    found = {m.group(0) for m in _NUMBER.finditer(text) if len(m.group(0)) > 1}
    found |= {m.group(0).lower() for m in _IDENT.finditer(text)}
    found |= {w.lower() for w in _NAME.findall(text) if w.lower() not in _COMMON}
    return frozenset(found)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return ""


def _tool_calls(raw: Any) -> tuple[tuple[str, str], ...]:
    calls = []
    for call in raw or ():
        fn = call.get("function", call) if isinstance(call, Mapping) else {}
        args = fn.get("arguments", {})
        text = args if isinstance(args, str) else json.dumps(args, sort_keys=True, ensure_ascii=False)
        calls.append((str(fn.get("name") or ""), text))
    return tuple(calls)


def estimate_tokens(messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """A crude, dependency-free token count per message: 4 tokens of turn markup plus one token
    per 4 characters of content, reasoning and tool calls (rounded up). Exported policies use it
    when no counts are given; pass the same counts to the in-framework policy to match them.
    """
    counts = []
    for m in messages:
        chars = len(_content_text(m.get("content"))) + len(m.get("reasoning_content") or "")
        chars += sum(len(name) + len(args) + 24 for name, args in _tool_calls(m.get("tool_calls")))
        counts.append(4 + math.ceil(chars / 4))
    return counts


class Message:
    """One message of the request, read-only by convention (programs cannot assign attributes)."""

    __slots__ = ("_entities", "_text", "call_ids", "content", "has_reasoning", "index", "is_assistant", "is_system",
                 "is_tool", "is_user", "name", "reasoning", "role", "tokens", "tool_call_id", "tool_calls")

    def __init__(self, index: int, data: Mapping[str, Any], tokens: int) -> None:
        self._text: str | None = None
        self._entities: frozenset[str] | None = None
        self.index = index
        self.role = str(data.get("role", ""))
        self.content = _content_text(data.get("content"))
        self.reasoning = str(data.get("reasoning_content") or "")
        self.tool_calls = _tool_calls(data.get("tool_calls"))
        self.call_ids = tuple(str(c.get("id") or "") if isinstance(c, Mapping) else ""
                              for c in data.get("tool_calls") or ())
        self.name = str(data.get("name") or "")
        self.tool_call_id = str(data.get("tool_call_id") or "")
        self.tokens = tokens
        # the role tests, made once: programs read them at every request of every message
        self.has_reasoning = bool(self.reasoning)
        self.is_system = self.role in ("system", "developer")
        self.is_user = self.role == "user"
        self.is_assistant = self.role == "assistant"
        self.is_tool = self.role == "tool"

    @property
    def text(self) -> str:
        """Content, reasoning and tool calls joined by newlines (what entities are read from)."""
        if self._text is None:
            parts = [self.content, self.reasoning] + [f"{name} {args}" for name, args in self.tool_calls]
            self._text = "\n".join(p for p in parts if p)
        return self._text

    @property
    def entities(self) -> frozenset[str]:
        """The entities of :attr:`text` (:func:`entities`), read once per message."""
        if self._entities is None:
            self._entities = entities(self.text)
        return self._entities


class Plan:
    """A cumulative schedule under construction; ``wire()`` gives the wire-format dict."""

    def __init__(self) -> None:
        self._drops: dict[int, list[int]] = {}
        self._thinking: dict[int, list[int]] = {}
        self._repositions: list[int] = []

    def drop(self, trigger: int, ids: Iterable[int]) -> None:
        ids = [int(i) for i in ids]
        if ids:
            self._drops.setdefault(int(trigger), []).extend(ids)

    def drop_reasoning(self, trigger: int, ids: Iterable[int]) -> None:
        ids = [int(i) for i in ids]
        if ids:
            self._thinking.setdefault(int(trigger), []).extend(ids)

    def reposition(self, trigger: int) -> None:
        self._repositions.append(int(trigger))

    def dropped(self) -> set[int]:
        """Ids of the messages dropped so far (whole messages, not reasoning parts)."""
        return {i for ids in self._drops.values() for i in ids}

    def wire(self) -> dict[str, Any]:
        def table(d: dict[int, list[int]]) -> dict[str, list[int]]:
            return {str(t): sorted(ids) for t, ids in sorted(d.items())}

        out: dict[str, Any] = {}
        if not self._thinking:
            out["drop_message"] = table(self._drops)
        else:
            rules = [{"type": "thinking_drop", "drop_messages": table(self._thinking)}]
            if self._drops:
                rules.insert(0, {"type": "message_drop", "drop_messages": table(self._drops)})
            out["drop_rule"] = rules[0] if len(rules) == 1 else rules
        out["reposition"] = list(self._repositions)
        return out


class Trajectory:
    """A trajectory's :class:`Message` objects, token counts and running sums, made once for the
    views of all its requests (see :class:`RequestView`'s ``built``). The call, batch, supersession
    and mention indexes are built on first use over the whole trajectory; the views cut them at
    their own last message, so nothing a request shows comes from a later message."""

    __slots__ = ("_batches", "_calls_of", "_holders", "_mentions", "_superseded", "calls", "messages", "prefix",
                 "tokens", "tools")

    def __init__(self, messages: Sequence[Mapping[str, Any]], tokens: Sequence[int]) -> None:
        if len(tokens) != len(messages):
            raise ValueError(f"{len(tokens)} token counts for {len(messages)} messages")
        self.messages = tuple(Message(i, m, int(t)) for i, (m, t) in enumerate(zip(messages, tokens)))
        self.tokens = tuple(m.tokens for m in self.messages)
        self.calls = [0]
        self.prefix = [0]
        self.tools = [0]
        for m in self.messages:
            self.calls.append(self.calls[-1] + (1 if m.is_assistant else 0))
            self.prefix.append(self.prefix[-1] + m.tokens)
            self.tools.append(self.tools[-1] + (1 if m.is_tool else 0))
        self._calls_of: list[tuple[str, str] | None] | None = None
        self._batches: list[tuple[int, int]] = []
        self._superseded: list[int] | None = None
        self._holders: dict[str, list[int]] | None = None
        self._mentions: dict[tuple[int, int], list[int]] = {}

    def entities(self, i: int) -> frozenset[str]:
        return self.messages[i].entities

    def calls_of(self) -> list[tuple[str, str] | None]:
        """Per message, the ``(name, arguments)`` of the call a tool message answers (``None`` for
        other messages and unmatched responses), and :attr:`_batches` beside it."""
        if self._calls_of is None:
            out: list[tuple[str, str] | None] = []
            batches: list[tuple[int, int]] = []
            calls: tuple[tuple[str, str], ...] = ()
            ids: list[str] = []
            seen = 0  # tool responses since the open batch's assistant message
            for m in self.messages:
                if m.is_assistant:
                    calls, ids, seen = m.tool_calls, list(m.call_ids), 0
                    out.append(None)
                    batches.append((0, 0))
                elif m.is_tool and calls:
                    j = ids.index(m.tool_call_id) if m.tool_call_id and m.tool_call_id in ids else seen
                    out.append(calls[j] if j < len(calls) else None)
                    batches.append((j, len(calls)) if j < len(calls) else (0, 0))
                    seen += 1
                else:
                    if not m.is_tool:
                        calls, ids, seen = (), [], 0
                    out.append(None)
                    batches.append((0, 0))
            self._calls_of, self._batches = out, batches
        return self._calls_of

    def batches(self) -> list[tuple[int, int]]:
        self.calls_of()
        return self._batches

    def superseded(self) -> list[int]:
        """Per message, the first later tool message answering the same call, or -1."""
        if self._superseded is None:
            calls = self.calls_of()
            out = [-1] * len(self.messages)
            last: dict[tuple[str, str], int] = {}
            for i, call in enumerate(calls):
                if call is None:
                    continue
                if call in last:
                    out[last[call]] = i
                last[call] = i
            self._superseded = out
        return self._superseded

    def mentions(self, i: int, least: int) -> list[int]:
        """Ids after ``i`` of the user and assistant messages sharing >= ``least`` entities with ``i``."""
        key = (i, least)
        hit = self._mentions.get(key)
        if hit is None:
            if self._holders is None:
                holders: dict[str, list[int]] = {}
                for j, m in enumerate(self.messages):
                    if m.is_user or m.is_assistant:
                        for e in self.entities(j):
                            holders.setdefault(e, []).append(j)
                self._holders = holders
            shared: dict[int, int] = {}
            for e in self.entities(i):
                for j in self._holders.get(e, ()):
                    if j > i:
                        shared[j] = shared.get(j, 0) + 1
            hit = self._mentions[key] = sorted(j for j, c in shared.items() if c >= least)
        return hit


class RequestView:
    """What a program sees of one request (see the module docstring for every name)."""

    __slots__ = ("_call_ends", "_calls", "_prefix", "_previous", "_problems", "_prompt_ends", "_refused", "_tools",
                 "_whole", "call_index", "messages", "n", "previous_n", "relevance", "tokens")

    def __init__(self, messages: Sequence[Mapping[str, Any]], tokens: Sequence[int], call_index: int | None = None,
                 previous: Mapping[str, Any] | None = None, relevance: Sequence[float] | None = None, *,
                 call_ends: Sequence[int] | None = None, prompt_ends: Mapping[int, int] | None = None,
                 problems: Mapping[str, str] | None = None, built: Trajectory | None = None,
                 previous_json: str | None = None, previous_n: int = 0) -> None:
        """``call_ends`` / ``prompt_ends``: what an AKV harness declares (default: the complete tool
        batches, no prompt suffixes). ``problems``: method name -> why the harness's declaration is
        unusable; calling that method then raises ``ValueError`` and is recorded in :attr:`refusals`, so
        an exported module can refuse the request even when the program catches the exception.
        ``built``: the whole trajectory made once (:class:`Trajectory`), of which ``messages`` and
        ``tokens`` are the first ones: the requests of one trajectory share it instead of rebuilding
        their messages (programs cannot assign attributes). ``previous_json``: ``previous`` as JSON
        text, when the caller has it (the view keeps the text and parses it on access). ``previous_n``:
        how many messages the previous request had (0: the first request, or not known; a program
        that continues from ``previous`` must then decide every trigger again)."""
        if len(tokens) != len(messages):
            raise ValueError(f"{len(tokens)} token counts for {len(messages)} messages")
        whole = built if built is not None else Trajectory(messages, tokens)
        n = len(messages)
        if n > len(whole.messages):
            raise ValueError(f"a trajectory of {len(whole.messages)} messages has no request of {n}")
        self.messages = whole.messages[:n]
        self.tokens = whole.tokens[:n]
        self.n = n
        self._calls = whole.calls[:n + 1]
        self.call_index = self._calls[-1] if call_index is None else int(call_index)
        self._previous = previous_json if previous is None else json.dumps(previous)
        self.previous_n = max(0, min(int(previous_n), n)) if self._previous is not None else 0
        self.relevance = tuple(float(r) for r in relevance) if relevance is not None else None
        self._prefix = whole.prefix[:n + 1]
        self._tools = whole.tools
        self._whole = whole
        self._call_ends = tuple(int(i) for i in call_ends) if call_ends is not None else None
        self._prompt_ends = {int(k): int(v) for k, v in (prompt_ends or {}).items()}
        self._problems = dict(problems or {})
        self._refused: list[str] = []

    @property
    def refusals(self) -> tuple[str, ...]:
        """Why each call of a method the harness declared unusable (``problems``) was refused, in
        order, even those the program caught: an exported module refuses the request on the first."""
        return tuple(self._refused)

    @property
    def previous(self) -> dict[str, Any] | None:
        """A fresh copy of the previous decision, so a program cannot alter the record."""
        return json.loads(self._previous) if self._previous is not None else None

    def total_tokens(self) -> int:
        return self._prefix[-1]

    def tokens_since(self, i: int) -> int:
        return self._prefix[-1] - self._prefix[max(0, min(i, self.n))]

    def tokens_between(self, a: int, b: int) -> int:
        a, b = max(0, min(a, self.n)), max(0, min(b, self.n))
        return max(0, self._prefix[b] - self._prefix[a])

    def tool_responses(self) -> list[int]:
        return [m.index for m in self.messages if m.is_tool]

    def assistant_turns(self) -> list[int]:
        return [m.index for m in self.messages if m.is_assistant]

    def user_messages(self) -> list[int]:
        return [m.index for m in self.messages if m.is_user]

    def with_reasoning(self) -> list[int]:
        return [m.index for m in self.messages if m.is_assistant and m.has_reasoning]

    def calls_before(self, i: int) -> int:
        return self._calls[max(0, min(i, self.n))]

    def is_call_start(self, i: int) -> bool:
        return 0 < i < self.n and not self.messages[i].is_assistant and self.messages[i - 1].is_assistant

    def call_starts(self) -> list[int]:
        return [i for i in range(self.n) if self.is_call_start(i)]

    def _problem(self, method: str) -> None:
        if method in self._problems:
            self._refused.append(self._problems[method])
            raise ValueError(self._problems[method])

    def call_ends(self) -> list[int]:
        self._problem("call_ends")
        if self._call_ends is not None:
            return list(self._call_ends)
        ends, expected = [], 0  # expected: responses the open tool batch still waits for
        for m in self.messages:
            if m.is_assistant:
                expected = len(m.tool_calls)
            elif m.is_tool and expected:
                expected -= 1
                if not expected:
                    ends.append(m.index)
            elif not m.is_tool:
                expected = 0  # a user or system message closes an incomplete batch for good
        return ends

    def prompt_end(self, i: int) -> int:
        self._problem("prompt_end")
        return self._prompt_ends.get(i, i)

    def entities(self, i: int) -> frozenset[str]:
        if type(i) is int and 0 <= i < self.n:  # the common case, one call deep (programs ask it of every pair)
            return self._whole.messages[i].entities
        return self._whole.entities(self._index(i))

    def _index(self, i: int) -> int:
        """``i`` as a message id of this request (negative ids count from the end, as for a tuple)."""
        if not -self.n <= i < self.n:
            raise IndexError(f"message {i} is outside this request's {self.n} messages")
        return i % self.n

    def tools_between(self, a: int, b: int) -> int:
        a, b = max(0, min(a, self.n)), max(0, min(b, self.n))
        return max(0, self._tools[b] - self._tools[a])

    def call_of(self, i: int) -> tuple[str, str] | None:
        return self._whole.calls_of()[self._index(i)]

    def batch_of(self, i: int) -> tuple[int, int]:
        return self._whole.batches()[self._index(i)]

    def superseded_by(self, i: int) -> int:
        j = self._whole.superseded()[self._index(i)]
        return j if 0 <= j < self.n else -1

    def mentioned_by(self, i: int, least: int = 1) -> list[int]:
        later = self._whole.mentions(self._index(i), max(1, int(least)))
        return later[:bisect.bisect_left(later, self.n)]

    def plan(self) -> Plan:
        return Plan()


API_CLASSES = (Message, Plan, RequestView)
