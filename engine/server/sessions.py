"""Sessions: what an agent sent last, so that a request that edits its history is refused.

The interface is stateless (every request carries the whole history), but a harness may name
its session (``session_id``). Within a session, messages may only be appended and the schedule
only extended: an entry for a trigger that the previous request already covered must not change.
Text-level baselines that rewrite history start a new session (or send none).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import MessageError, ScheduleError
from engine.schedule import Schedule
from engine.template import normalize_message


@dataclass(frozen=True)
class SessionState:
    messages: tuple[dict[str, Any], ...]
    schedule: Schedule


class Sessions:
    """Last accepted state per session id (LRU-bounded)."""

    def __init__(self, capacity: int = 10_000):
        self._states: OrderedDict[str, SessionState] = OrderedDict()
        self.capacity = capacity

    def check(self, session_id: str | None, messages: Sequence[Any], schedule: Schedule) -> None:
        """Raise if this request edits the session's history (messages or past schedule entries).

        May run on a pool thread while the event loop calls :meth:`update` (one dict read).
        """
        old = self._states.get(session_id) if session_id is not None else None
        if old is None:
            return
        new = [normalize_message(m, i) for i, m in enumerate(messages)]
        if len(new) < len(old.messages):
            raise MessageError(
                f"session {session_id!r} had {len(old.messages)} messages and this request has {len(new)}; "
                "messages may only be appended", field="messages", value=len(new))
        for i, (a, b) in enumerate(zip(old.messages, new)):
            if a != b:
                raise MessageError(f"messages[{i}] differs from session {session_id!r}'s history; messages may only "
                                   "be appended", field=f"messages[{i}]", value=str(b.get("content"))[:80])
        changes = schedule.changes_before(old.schedule, len(old.messages))
        if changes.drops:
            t = min(changes.drops)
            raise ScheduleError(f"drop_message[{str(t)!r}] changes an event of session {session_id!r}'s past; "
                                "schedules may only be extended", field=f"drop_message.{t}", value=t)
        if changes:
            old_rep, new_rep = list(changes.repositions_before), list(changes.repositions_now)
            raise ScheduleError(f"reposition {new_rep} changes session {session_id!r}'s past {old_rep}; schedules "
                                "may only be extended", field="reposition", value=new_rep)

    def schedule_of(self, session_id: str | None) -> Schedule | None:
        """The schedule session ``session_id`` was last served with (``None``: no such session)."""
        old = self._states.get(session_id) if session_id is not None else None
        return old.schedule if old is not None else None

    def update(self, session_id: str | None, messages: Sequence[Any], schedule: Schedule) -> None:
        if session_id is None:
            return
        self._states[session_id] = SessionState(tuple(normalize_message(m, i) for i, m in enumerate(messages)),
                                                schedule)
        self._states.move_to_end(session_id)
        while len(self._states) > self.capacity:
            self._states.popitem(last=False)
