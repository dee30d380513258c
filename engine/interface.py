"""What evaluators need from an engine: the ``ChatEngine`` protocol.

Two implementations satisfy it: :class:`engine.Engine` (in this process, CPU or CUDA) and
:class:`engine.remote.RemoteEngine` (any server that speaks the wire format: ``akv serve``, or an
AKV-patched SGLang). ``evals.replay.Replay`` and the executors only use these members, and one
conformance suite (``tests/engine/test_conformance.py``) runs against both.

Not for: serving internals (trees, schedulers); those belong to the in-process engine only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from engine.accounting import Accountant
    from engine.engine import ChatResult, EngineStats, ScoreResult
    from engine.layout import Layout, Rendered, Renderer
    from engine.schedule import Schedule


@runtime_checkable
class ChatEngine(Protocol):
    """An engine that answers chat and scoring requests under a cache schedule.

    Contract:
        - ``render``/``layout``/``accountant``/``renderer`` are local and exact: token counts and
          the dry-run usage of a request equal what :meth:`chat` reports for it when the engine's
          cache has seen the same requests (invariant 4 of docs/architecture.md).
        - :meth:`chat` with ``temperature=0`` is deterministic for a given cache state history.
        - usage partitions the prompt: ``prompt = prefill + cached + drop_skipped``.
        - caller mistakes (bad schedule, messages, sampling values, too long a prompt) raise the
          :class:`engine.errors.AKVError` subclass the in-process engine raises, with the same
          ``field``; an unreachable server raises :class:`engine.errors.RemoteUnavailableError`
          (``transient``); an engine that cannot score raises
          :class:`engine.errors.ScoringUnsupportedError` from :meth:`score`.
        - ``stats`` accumulates usage over every request (for replica reuse reports).
    """

    name: str
    renderer: Renderer
    stats: EngineStats

    def render(self, messages: Sequence[Any]) -> Rendered: ...

    def layout(self, messages: Sequence[Any], schedule: Mapping[str, Any] | Schedule | None = None) -> Layout: ...

    def accountant(self, pool_bytes: int | None = None, host_bytes: int | None = None) -> Accountant: ...

    def chat(
        self,
        messages: Sequence[Any],
        schedule: Mapping[str, Any] | Schedule | None = None,
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        prefix: str = "",
        on_text: Callable[[str], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> ChatResult: ...

    def score(
        self,
        messages: Sequence[Any],
        candidates: Sequence[str],
        schedule: Mapping[str, Any] | Schedule | None = None,
        *,
        prefix: str = "",
    ) -> ScoreResult: ...
