"""A durable agent session: checkpointed steps, crash recovery by event replay, fork, restore, merge.

The agent's driver (its loop of LLM calls and tool calls) calls :meth:`DurableSession.llm` and
:meth:`DurableSession.tool` (and :meth:`DurableSession.say` for a message from outside it, such
as the user's next turn). Before each step the session checkpoints its state with the step
marked ``STARTED`` (optionally with a KV snapshot), and after it with the step ``DONE``. After a
crash, :meth:`DurableSession.open` loads the last checkpoint and the driver is simply run again
from the start: every call that matches a finished step returns its recorded result without
running anything (event replay), so finished LLM calls are not recomputed and tools are not
re-run; the first unfinished step runs live -- unless it is a side-effecting tool call whose
outcome is unknown, which is refused (:class:`SideEffectError`) until :meth:`resolve` records it.

:meth:`fork` starts a branch with the same history; the engine's radix tree shares the prefix's
KV between them (copy-on-write: new tokens go on a new branch of the tree). :meth:`restore`
rewinds to an earlier step (the abandoned steps stay on record; effects they had stay in the
ledger, so re-issuing such a call returns its recorded result). :meth:`merge` appends a branch's
outcome to the main history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from engine.durable.records import ReplayMismatchError, SideEffectError, StepKind, StepRecord, StepStatus
from engine.durable.store import CheckpointStore, DurableError
from engine.durable.tools import ToolBox, canonical_args, idempotency_key
from engine.errors import SnapshotError


class DurableSession:
    """Use :meth:`create` or :meth:`open`; see the module docstring."""

    def __init__(self, store: CheckpointStore, session: str, engine: Any, tools: ToolBox,
                 messages: Sequence[Mapping[str, Any]], schedule: Mapping[str, Any] | None, *,
                 kv_snapshots: bool = False) -> None:
        self.store, self.id, self.engine, self.tools = store, session, engine, tools
        self.initial = tuple(dict(m) for m in messages)
        self.schedule = dict(schedule) if schedule is not None else None
        self.kv_snapshots = kv_snapshots
        self.steps: list[StepRecord] = []
        self.pending: StepRecord | None = None
        self.effects: dict[str, dict[str, Any]] = {}
        self.abandoned: list[dict[str, Any]] = []
        self.parent: dict[str, Any] | None = None
        self.cursor = 0
        self.seq = -1
        self.kv_file: str | None = None
        self.kv_loaded = False

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def create(cls, store: CheckpointStore, session: str, engine: Any, tools: ToolBox,
               messages: Sequence[Mapping[str, Any]], schedule: Mapping[str, Any] | None = None, *,
               kv_snapshots: bool = False) -> DurableSession:
        """Start a new session (refused if ``session`` already exists in ``store``)."""
        if store.exists(session):
            raise DurableError(f"durable session {session!r} already exists; use DurableSession.open",
                               field="session", value=session)
        s = cls(store, session, engine, tools, messages, schedule, kv_snapshots=kv_snapshots)
        s._checkpoint()
        return s

    @classmethod
    def open(cls, store: CheckpointStore, session: str, engine: Any, tools: ToolBox) -> DurableSession:
        """Load the last checkpoint, ready for the driver to be re-run from its start (event replay)."""
        loaded = store.latest(session)
        st = loaded.state
        s = cls(store, session, engine, tools, st["messages"], st.get("schedule"),
                kv_snapshots=bool(st.get("kv_snapshots")))
        s.steps = [StepRecord.from_wire(r) for r in st.get("steps", [])]
        s.pending = StepRecord.from_wire(st["pending"]) if st.get("pending") else None
        s.effects = dict(st.get("effects") or {})
        s.abandoned = list(st.get("abandoned") or [])
        s.parent = st.get("parent")
        s.seq = loaded.seq
        s.kv_file = st.get("kv")
        if s.kv_file and engine is not None:
            try:
                engine.load_session(store.session_dir(session) / s.kv_file)
                s.kv_loaded = True
            except SnapshotError:
                s.kv_loaded = False  # the KV is an optimisation: recompute instead
        return s

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The history as of the replay cursor: the initial messages plus what each step appended."""
        out = [dict(m) for m in self.initial]
        for r in self.steps[:self.cursor]:
            out.extend(dict(m) for m in r.appended)
        return out

    @property
    def replaying(self) -> bool:
        return self.cursor < len(self.steps)

    def _state(self) -> dict[str, Any]:
        return {"messages": [dict(m) for m in self.initial], "schedule": self.schedule,
                "steps": [r.wire() for r in self.steps], "pending": self.pending.wire() if self.pending else None,
                "effects": self.effects, "abandoned": self.abandoned, "parent": self.parent, "kv": self.kv_file,
                "kv_snapshots": self.kv_snapshots}

    def _checkpoint(self) -> None:
        self.seq += 1
        if self.kv_snapshots and self.engine is not None and len(self.messages) > 0:
            path = self.store.kv_path(self.id, self.seq)
            self.engine.save_session(self.messages, self.schedule, path)
            old, self.kv_file = self.kv_file, path.name
            self.store.write(self.id, self.seq, self._state())
            if old and old != self.kv_file:
                (self.store.session_dir(self.id) / old).unlink(missing_ok=True)
            return
        self.store.write(self.id, self.seq, self._state())

    # ------------------------------------------------------------------ steps

    def _replayed(self, kind: StepKind, tool: str | None = None, args: Any = None) -> StepRecord | None:
        if not self.replaying:
            return None
        r = self.steps[self.cursor]
        if r.kind is not kind or r.tool != tool or (kind is StepKind.TOOL and r.args != args):
            want = f"{kind.value}" + (f" {tool!r} {args}" if tool else "")
            got = f"{r.kind.value}" + (f" {r.tool!r} {r.args}" if r.tool else "")
            raise ReplayMismatchError(f"step {r.index} was recorded as {got}, but the agent now asks for {want}",
                                      field=f"steps[{r.index}]", value=want)
        self.cursor += 1
        return r

    def _begin(self, record: StepRecord) -> None:
        if self.pending is not None and self.pending.index == record.index and self.pending.in_doubt:
            raise SideEffectError(str(self.pending.tool), record.index, "it may have run before the crash, so it "
                                  "is not run again")
        self.pending = record
        self._checkpoint()

    def _done(self, record: StepRecord) -> None:
        self.steps.append(record)
        self.pending = None
        self.cursor = len(self.steps)
        self._checkpoint()

    def llm(self, *, schedule: Mapping[str, Any] | None = None, **sampling: Any) -> str:
        """The assistant's next message (``engine.chat`` on the history); replayed when recorded."""
        r = self._replayed(StepKind.LLM)
        if r is not None:
            return str(r.result)
        sched = dict(schedule) if schedule is not None else self.schedule
        rec = StepRecord(len(self.steps), StepKind.LLM, StepStatus.STARTED, schedule=sched)
        self._begin(rec)
        out = self.engine.chat(self.messages, sched, **sampling)
        self.schedule = sched
        self._done(replace(rec, status=StepStatus.DONE, result=out.text,
                           appended=({"role": "assistant", "content": out.text},), usage=out.usage.as_dict(),
                           meta={"token_ids": [int(t) for t in out.token_ids]}))
        return str(out.text)

    def tool(self, name: str, args: Mapping[str, Any] | None = None, *, key: str | None = None) -> str:
        """Call tool ``name``; replayed when recorded; a side effect runs at most once per key."""
        tool = self.tools.get(name)
        clean = canonical_args(args)
        r = self._replayed(StepKind.TOOL, name, clean)
        if r is not None:
            return str(r.result)
        k = (key or idempotency_key(name, clean)) if tool.side_effect else None
        rec = StepRecord(len(self.steps), StepKind.TOOL, StepStatus.STARTED, name, clean, tool.side_effect, k)
        if k is not None and k in self.effects:  # this effect already happened in this lineage
            result, reused = str(self.effects[k]["result"]), True
            if self.pending is not None and self.pending.index == rec.index:
                self.pending = None
        else:
            self._begin(rec)
            result, reused = tool.fn(clean), False
            if not isinstance(result, str):
                raise DurableError(f"tool {name!r} returned {type(result).__name__}; tools return text",
                                   field="tool", value=name)
            if k is not None:
                self.effects[k] = {"tool": name, "step": rec.index, "session": self.id, "result": result}
        self._done(replace(rec, status=StepStatus.DONE, result=result, reused_effect=reused,
                           appended=({"role": "tool", "name": name, "content": result},)))
        return result

    def say(self, message: Mapping[str, Any]) -> None:
        """Append ``message`` from outside the agent (the user's next turn); replayed when recorded.

        Raises:
            ReplayMismatchError: the record holds another message (or another step) at this point.
        """
        said = canonical_args(message)
        r = self._replayed(StepKind.MESSAGE, str(said.get("role")))
        if r is not None:
            if r.appended and dict(r.appended[0]) != said:
                raise ReplayMismatchError(f"step {r.index} appended another {said.get('role')} message than the "
                                          "agent now says", field=f"steps[{r.index}]", value=said.get("role"))
            return
        self._done(StepRecord(len(self.steps), StepKind.MESSAGE, StepStatus.DONE, str(said.get("role")),
                              appended=(said,)))

    def resolve(self, step: int, result: str | None, *, ran: bool = True) -> None:
        """Record the outcome of the in-doubt side-effecting call at ``step`` (``ran=False``: it did
        not run, so it may run now)."""
        p = self.pending
        if p is None or p.index != step or not p.in_doubt:
            raise DurableError(f"step {step} is not an in-doubt side-effecting call", field="step", value=step)
        if ran:
            if not isinstance(result, str):
                raise DurableError("resolve: the recorded result must be text", field="result", value=result)
            assert p.key is not None
            self.effects[p.key] = {"tool": p.tool, "step": step, "session": self.id, "result": result}
        self.pending = None
        self._checkpoint()

    # ------------------------------------------------------------------ branches

    def _check_live(self, what: str) -> None:
        if self.replaying:
            raise DurableError(f"{what}: the session is replaying (step {self.cursor} of {len(self.steps)}); "
                               "re-run the agent to the end of its record first", field="session", value=self.id)
        if self.pending is not None and self.pending.in_doubt:
            raise SideEffectError(str(self.pending.tool), self.pending.index, f"cannot {what} while it is in doubt")

    def fork(self, session: str) -> DurableSession:
        """A new session ``session`` with this history; the engine shares the prefix's KV."""
        self._check_live("fork")
        b = DurableSession(self.store, session, self.engine, self.tools, self.initial, self.schedule,
                           kv_snapshots=self.kv_snapshots)
        if self.store.exists(session):
            raise DurableError(f"durable session {session!r} already exists", field="session", value=session)
        b.steps, b.cursor = list(self.steps), len(self.steps)
        b.effects = {k: dict(v) for k, v in self.effects.items()}
        b.parent = {"session": self.id, "step": len(self.steps)}
        b._checkpoint()
        return b

    def restore(self, step: int) -> None:
        """Rewind to the state before ``step`` (the later steps are kept on record as abandoned).

        Raises:
            SideEffectError: an in-doubt side-effecting call lies at or after ``step``.
            DurableError: ``step`` out of range, or the session is replaying.
        """
        if self.pending is not None and self.pending.in_doubt and self.pending.index >= step:
            raise SideEffectError(str(self.pending.tool), self.pending.index, f"cannot restore to step {step} "
                                  "past it")
        self._check_live("restore")
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= len(self.steps):
            raise DurableError(f"restore: step must be in [0, {len(self.steps)}], got {step!r}", field="step",
                               value=step)
        self.abandoned.append({"from_step": step, "steps": [r.wire() for r in self.steps[step:]]})
        self.steps = self.steps[:step]
        self.cursor = step
        self.pending = None
        llm = [r for r in self.steps if r.kind is StepKind.LLM]
        self.schedule = dict(llm[-1].schedule) if llm and llm[-1].schedule is not None else self.schedule
        self._checkpoint()

    def merge(self, branch: DurableSession, outcome: str | None = None) -> str:
        """Append ``branch``'s outcome (default: its last assistant message after the fork) as a tool
        message ``branch:<id>``; its effects join this session's ledger."""
        r = self._replayed(StepKind.MERGE, f"branch:{branch.id}")
        if r is not None:
            return str(r.result)
        self._check_live("merge")
        if not branch.parent or branch.parent.get("session") != self.id:
            raise DurableError(f"session {branch.id!r} is not a branch of {self.id!r}", field="branch", value=branch.id)
        if outcome is None:
            after = branch.steps[int(branch.parent["step"]):]
            texts = [str(s.result) for s in after if s.kind is StepKind.LLM]
            outcome = texts[-1] if texts else ""
        name = f"branch:{branch.id}"
        self.effects.update({k: dict(v) for k, v in branch.effects.items()})
        rec = StepRecord(len(self.steps), StepKind.MERGE, StepStatus.DONE, name, None, result=outcome,
                         appended=({"role": "tool", "name": name, "content": outcome},))
        self._done(rec)
        return outcome
