"""The frame guard's rule, in the standard library only: the evaluator's guard
(``evals.cache.guard``) and exported policy modules (``search_spaces.export``, which copies the code
below the marker) both decide with it, so an exported policy drops what the evaluation counted.

The rule: the frame (system and developer messages, the first user message) never leaves; an
assistant message leaves when its policy says; any other message leaves at ``max(t, r)``, ``t`` the
trigger its policy chose and ``r`` the first assistant message after it (that turn has read it),
and not at all while ``r`` is not yet part of the request.
"""

from __future__ import annotations

# ---- exported from here ----
# ---- the frame guard (a message leaves the KV only after an assistant turn has read it) ----
from collections.abc import Sequence

FRAME_ROLES = ("system", "developer")


def frame_ids(roles: Sequence[str]) -> frozenset[int]:
    """The messages the guard never drops: system and developer messages and the first user message."""
    first_user = next((i for i, r in enumerate(roles) if r == "user"), None)
    return frozenset(i for i, r in enumerate(roles) if r in FRAME_ROLES or i == first_user)


def read_at(roles: Sequence[str]) -> list[int | None]:
    """For each message, the first assistant message after it (``None`` when none follows); an
    assistant message reads itself."""
    out: list[int | None] = [None] * len(roles)
    nxt: int | None = None
    for i in range(len(roles) - 1, -1, -1):
        if roles[i] == "assistant":
            nxt = i
        out[i] = nxt
    return out


class FrameGuard:
    """The guard over one history's roles: :meth:`trigger` says when a drop may happen."""

    def __init__(self, roles: Sequence[str]):
        self.roles = list(roles)
        self.frame = frame_ids(self.roles)
        self.read = read_at(self.roles)

    def trigger(self, message: int, trigger: int, n_messages: int) -> int | None:
        """When ``message``, dropped by its policy after ``trigger`` in a request of ``n_messages``
        messages, may leave: a trigger, or ``None`` (not in this request)."""
        if message in self.frame:
            return None
        if self.roles[message] == "assistant":
            return trigger
        seen = self.read[message]
        return None if seen is None or seen >= n_messages else max(trigger, seen)

    def table(self, drops: dict[int, list]) -> dict[int, list]:
        """A drop table (trigger -> entries: message ids, or ``{"message": id, ...}`` text ranges) of
        a request holding every message of :attr:`roles`, guarded; entries keep their order."""
        out: dict[int, list] = {}
        for t in sorted(drops):
            for entry in drops[t]:
                m = entry.get("message") if isinstance(entry, dict) else entry
                if type(m) is not int or not 0 <= m < len(self.roles):
                    raise ValueError(f"drop entry {entry!r} after message {t} is not a message id of this history "
                                     "(nor a text range naming one)")
                when = self.trigger(m, t, len(self.roles))
                if when is not None:
                    out.setdefault(when, []).append(entry)
        return out


def guard_wire(messages: Sequence[dict], wire: dict) -> dict:
    """A wire-format schedule for ``messages`` (``drop_message`` and/or ``drop_rule`` tables,
    ``reposition``) with the frame guard applied to every drop table; string keys, as on the wire.

    Raises:
        ValueError: a drop table that is not trigger id -> list of message ids or text ranges.
    """
    guard = FrameGuard([str(m.get("role", "")) for m in messages])

    def guarded(table: dict) -> dict:
        if not isinstance(table, dict) or not all(isinstance(v, list) for v in table.values()):
            raise ValueError(f"a drop table must map trigger ids to lists, got {table!r:.120}")
        try:
            triggers = {int(k): list(v) for k, v in table.items()}
        except (TypeError, ValueError):
            raise ValueError(f"a drop table's triggers must be message ids, got {list(table)!r:.120}") from None
        out = guard.table(triggers)
        return {str(t): out[t] for t in sorted(out)}

    out = dict(wire)
    if wire.get("drop_message"):
        out["drop_message"] = guarded(wire["drop_message"])
    if wire.get("drop_rule"):
        rules = wire["drop_rule"] if isinstance(wire["drop_rule"], list) else [wire["drop_rule"]]
        if not all(isinstance(r, dict) for r in rules):
            raise ValueError(f"drop_rule must be a rule or a list of rules, got {wire['drop_rule']!r:.120}")
        rules = [dict(r, drop_messages=guarded(r.get("drop_messages") or {})) for r in rules]
        out["drop_rule"] = rules if isinstance(wire["drop_rule"], list) else rules[0]
    return out
