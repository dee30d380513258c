"""``rolling_drop``: the expert policy (keep the newest K tool responses' KV) and its generalisations.

Every parameter the public AKV policy (``akvalgo.AKVPolicy`` in thu-nics/AKV) also has means what it
means there; its parameter names are accepted as aliases (``rolling_akv.py``, docs/export.md).
A *call end* is the last message of a completed call: the last response of a complete tool batch
(``RequestView.call_ends``; an AKV harness may also declare user observations).

- **Rolling (the expert, ``trigger="responses"``):** scanning the messages in order, when the
  (K+1)-th newer tool response arrives the oldest kept one is dropped, that newer response being
  the trigger (``drop_batch`` > 1, ours: wait until K + ``drop_batch`` are kept, then drop all but
  K). Reasoning and everything else stay.
- **``target``:** ``tool`` drops the tool responses. ``assistant`` drops an assistant turn once
  every response of its tool batch has left the window, at the trigger of the last of them, with
  the assistant turns without tool calls just before it; the responses themselves stay.
  ``both``: the two together. Ours: ``assistant_newest`` / ``both_newest`` roll the assistant
  turns in a window of their own newest K (assistant turns only / and tool responses in theirs).
  ``assistant`` and ``both`` roll only on arrival (the reference refuses them with a trigger).
- **Call-end triggers** (drop at call ends instead of on arrival), decided at call end number c:
  ``calls`` at c == A and, when ``every_calls`` = I > 0, every I calls after (A = ``first_call``,
  0: A = I); ``tokens`` when the visible prompt (tokens up to the call end minus the dropped
  rolled messages) exceeds ``trigger_tokens``; ``response_count`` when ``trigger_responses`` rolled
  messages are kept. A trigger drops all kept rolled messages but the newest K, or, when
  ``target_tokens`` > 0, the oldest kept ones (K ignored, as in the reference) until the visible
  prompt is at most ``target_tokens``.
- **``reposition``** (at call ends, after that trigger's drops): ``calls`` at call A =
  ``reposition_start`` (0: A = ``reposition_every``) and every ``reposition_every`` = I calls after
  (I = 0: only at A), whether or not anything was dropped; ``tokens`` when the position counter at
  the call's prompt end (``prompt_end``; tokens so far minus those compacted by the last
  reposition) exceeds ``reposition_tokens`` and more tokens were dropped than at the last one.

Every trigger is decided from the messages up to it only, so the schedule is cumulative and stable.
The seed ``seeds/rolling_drop.py`` implements the same; ``tests/search_spaces/akv_reference.py``
re-implements the reference for the differential test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_spaces.cache.families.rolling_akv import from_reference, uses_reference_names
from search_spaces.cache.policy import Policy
from search_spaces.cache.program_api import Message, Plan, RequestView
from search_spaces.cache.request import Request
from search_spaces.errors import ParameterError
from search_spaces.params import as_dict, check_choice, check_range, resolve

NAME = "rolling_drop"
# target -> the roles that roll in a window of their own newest K
ROLLED = {"tool": ("tool",), "assistant": ("tool",), "both": ("tool",), "assistant_newest": ("assistant",),
          "both_newest": ("tool", "assistant")}
BATCH_TARGETS = ("assistant", "both")  # targets that drop assistant turns whose batch has expired
TRIGGERS = ("responses", "calls", "tokens", "response_count")
REPOSITIONS = ("never", "calls", "tokens")
_BIG = 1_000_000_000


@dataclass(frozen=True)
class RollingParams:
    """Parameters of ``rolling_drop`` (see the module docstring); defaults are the expert policy."""

    keep_tool_responses: int = 12  # K: newest rolled messages (of each role) that keep their KV
    target: str = "tool"
    trigger: str = "responses"
    drop_batch: int = 1
    first_call: int = 0
    every_calls: int = 4
    trigger_tokens: int = 3072
    trigger_responses: int = 13
    target_tokens: int = 0
    reposition: str = "never"
    reposition_start: int = 0
    reposition_every: int = 1
    reposition_tokens: int = 3072

    def __post_init__(self) -> None:
        check_range(NAME, "keep_tool_responses", self.keep_tool_responses, 0, 100_000)
        check_choice(NAME, "target", self.target, tuple(ROLLED))
        check_choice(NAME, "trigger", self.trigger, TRIGGERS)
        check_choice(NAME, "reposition", self.reposition, REPOSITIONS)
        for name in ("drop_batch", "trigger_tokens", "trigger_responses", "reposition_tokens"):
            check_range(NAME, name, getattr(self, name), 1, _BIG)
        for name in ("first_call", "every_calls", "target_tokens", "reposition_start", "reposition_every"):
            check_range(NAME, name, getattr(self, name), 0, _BIG)
        if self.target in BATCH_TARGETS and self.trigger != "responses":
            _refuse("target", self.target, f"drops assistant turns only with trigger 'responses' (got trigger "
                    f"{self.trigger!r}); 'assistant_newest' / 'both_newest' roll assistant turns with any trigger")
        if self.trigger == "calls" and self.first_call == 0 == self.every_calls:
            _refuse("every_calls", 0, "and first_call 0 leave trigger 'calls' no call to fire at")
        if self.target_tokens and self.trigger == "responses":
            _refuse("target_tokens", self.target_tokens, "needs a call-end trigger (calls, tokens or response_count)")
        if self.trigger == "tokens" and self.target_tokens >= self.trigger_tokens:
            _refuse("target_tokens", self.target_tokens, f"must be below trigger_tokens ({self.trigger_tokens})")
        if self.trigger == "response_count" and not self.target_tokens and \
                self.trigger_responses <= self.keep_tool_responses:
            _refuse("trigger_responses", self.trigger_responses,
                    f"must exceed keep_tool_responses ({self.keep_tool_responses}) without target_tokens")
        if self.reposition == "calls" and self.reposition_start == 0 == self.reposition_every:
            _refuse("reposition_every", 0, "and reposition_start 0 leave reposition 'calls' no call to fire at")


def _refuse(name: str, value: Any, why: str) -> None:
    raise ParameterError(f"{NAME}: parameter {name!r} = {value!r} {why}", field=name, value=value)


def _every(c: int, first: int, every: int) -> bool:
    """Whether call number ``c`` is ``first`` or, with ``every`` > 0, a multiple of ``every`` calls after it."""
    return c == first or (every > 0 and c > first and (c - first) % every == 0)


class _Batches:
    """Assistant turns grouped with their tool batch, for the ``assistant`` / ``both`` targets: a
    group (the assistant turns without tool calls since the last batch, then the one that called)
    leaves when every response of its batch has expired."""

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.open: dict[str, Any] | None = None
        self.owner: dict[int, dict[str, Any]] = {}

    def see(self, m: Message) -> None:
        if m.is_assistant:
            self.pending.append(m.index)
            self.open = None
            if m.tool_calls:
                self.open = {"group": self.pending, "need": len(m.tool_calls), "got": 0, "expired": 0}
                self.pending = []
        elif m.is_tool and self.open is not None and self.open["got"] < self.open["need"]:
            self.open["got"] += 1
            self.owner[m.index] = self.open
        elif not m.is_tool:
            self.open = None

    def expire(self, ids: list[int]) -> list[int]:
        """The assistant turns whose batch has fully expired once ``ids`` expire."""
        out: list[int] = []
        for i in ids:
            unit = self.owner.get(i)
            if unit is not None:
                unit["expired"] += 1
                if unit["expired"] == unit["need"]:
                    out += unit["group"]
        return out


def rolling_plan(view: RequestView, p: RollingParams) -> Plan:
    """The cumulative plan for ``view`` (the reference implementation of the family)."""
    plan = Plan()
    k = p.keep_tool_responses
    kept: dict[str, list[int]] = {role: [] for role in ROLLED[p.target]}  # rolled, not expired, oldest first
    batches = _Batches() if p.target in BATCH_TARGETS else None
    ends = set(view.call_ends()) if p.trigger != "responses" or p.reposition != "never" else set()
    calls = hidden = dropped = compacted = 0  # hidden: tokens of expired rolled messages
    for m in view.messages:
        t = m.index
        if batches is not None:
            batches.see(m)
        if m.role in kept:
            kept[m.role].append(t)
        expired: list[int] = []
        if t in ends:
            calls += 1
        if p.trigger == "responses":
            q = kept.get(m.role)
            if q is not None and len(q) >= k + p.drop_batch:
                expired = q[: len(q) - k]
        elif t in ends:
            if not m.is_tool:
                raise ValueError(f"call end {t} is a {m.role} message: call-end triggers need tool batches "
                                 "(as in the AKV reference)")
            visible = sorted(i for q in kept.values() for i in q)
            prompt = view.tokens_between(0, t + 1) - hidden
            fired = (_every(calls, p.first_call or p.every_calls, p.every_calls) if p.trigger == "calls"
                     else prompt > p.trigger_tokens if p.trigger == "tokens"
                     else len(visible) >= p.trigger_responses)
            if fired and p.target_tokens:
                for i in visible:
                    if prompt <= p.target_tokens:
                        break
                    expired.append(i)
                    prompt -= view.tokens[i]
            elif fired:
                expired = sorted(i for q in kept.values() for i in q[: max(0, len(q) - k)])
        gone = set(expired)
        for role, q in kept.items():
            kept[role] = [i for i in q if i not in gone]
        hidden += sum(view.tokens[i] for i in expired)
        victims = [] if p.target == "assistant" else list(expired)
        if batches is not None:
            victims += batches.expire(expired)
        plan.drop(t, victims)
        dropped += sum(view.tokens[i] for i in victims)
        if t in ends and p.reposition == "calls":
            if _every(calls, p.reposition_start or p.reposition_every, p.reposition_every):
                plan.reposition(t)
        elif t in ends and p.reposition == "tokens":
            position = view.tokens_between(0, view.prompt_end(t) + 1) - compacted
            if position > p.reposition_tokens and dropped > compacted:
                plan.reposition(t)
                compacted = dropped
    return plan


class RollingDrop(Policy):
    """The ``rolling_drop`` family (see the module docstring). Accepts our parameter names or the
    AKV reference's (``rolling_akv.REFERENCE_NAMES``), not a mix."""

    name = NAME

    def __init__(self, **params: Any) -> None:
        super().__init__()
        if uses_reference_names(params):
            params = from_reference(params)
        self.p = resolve(RollingParams, params, NAME)

    @property
    def params(self) -> dict[str, Any]:
        return as_dict(self.p)

    def propose(self, request: Request) -> dict[str, Any]:
        return rolling_plan(request.view(), self.p).wire()


def space(trial: Any) -> dict[str, Any]:
    """Optuna search space of ``rolling_drop`` (conditional parameters are drawn only when used)."""
    params: dict[str, Any] = {
        "keep_tool_responses": trial.suggest_int("keep_tool_responses", 1, 32),
        "target": trial.suggest_categorical("target", list(ROLLED)),
        "reposition": trial.suggest_categorical("reposition", list(REPOSITIONS)),
    }
    if params["target"] not in BATCH_TARGETS:
        params["trigger"] = trial.suggest_categorical("trigger", list(TRIGGERS))
    trigger = params.get("trigger", "responses")
    if trigger == "responses":
        params["drop_batch"] = trial.suggest_int("drop_batch", 1, 8)
    elif trigger == "calls":
        params["first_call"] = trial.suggest_int("first_call", 1, 16)
        params["every_calls"] = trial.suggest_int("every_calls", 1, 16)
    elif trigger == "tokens":
        params["trigger_tokens"] = trial.suggest_int("trigger_tokens", 512, 8192, log=True)
        ratio = trial.suggest_float("target_ratio", 0.3, 0.95)
        params["target_tokens"] = int(params["trigger_tokens"] * ratio)
    else:
        k = params["keep_tool_responses"]
        params["trigger_responses"] = trial.suggest_int("trigger_responses", k + 1, k + 16)
    if params["reposition"] == "calls":
        params["reposition_start"] = trial.suggest_int("reposition_start", 1, 16)
        params["reposition_every"] = trial.suggest_int("reposition_every", 1, 16)
    elif params["reposition"] == "tokens":
        params["reposition_tokens"] = trial.suggest_int("reposition_tokens", 512, 8192, log=True)
    return params
