"""What evaluators need from an engine: the ``ChatEngine`` protocol.

Two implementations satisfy it: :class:`engine.Engine` (in this process, CPU or CUDA) and
:class:`engine.remote.RemoteEngine` (any server that speaks the wire format: ``akv serve``, or an
AKV-patched SGLang). ``evals.cache.evaluator.Replay`` and the executors only use these members, and one
conformance suite (``tests/engine/test_conformance.py``) runs against both.

Not for: serving internals (trees, schedulers); those belong to the in-process engine only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack, runtime_checkable

if TYPE_CHECKING:
    from engine.cache.accounting import Accountant
    from engine.layout import Layout, Rendered, Renderer
    from engine.request import Request
    from engine.results import ChatResult, EngineStats, Prepared, ScoreResult
    from engine.schedule import Schedule


class ChatOptions(TypedDict, total=False):
    """The options of one chat request, written once for every engine (all optional).

    Keys:
        max_tokens, temperature, top_p, seed, stop: sampling (temperature 0, the default, is greedy);
            defaults and checks are those of :class:`engine.sampling.SamplingParams`.
        ignore_eos: keep generating past the model's end-of-sequence tokens (as vLLM's and SGLang's
            option of that name): a benchmark or trace replay that must produce ``max_tokens``.
        min_tokens: the first ``min_tokens`` tokens of the reply cannot end it (vLLM's option of that
            name): the end-of-turn tokens (the tokenizer's end of sequence, the template's stop
            tokens and its turn-opening marker) are masked until then. An agent harness sets 1 so
            that a turn is never empty.
        prefix: text the assistant's reply starts with (a cloze lead-in); not part of the text returned.
        tool_choice: OpenAI's: ``"auto"`` (the default), ``"none"``, ``"required"`` or
            ``{"type": "function", "function": {"name": ...}}`` over message 0's ``tools``. The last
            two open the reply with ``<tool_call>`` (``engine.toolcalls.forced_opening``), and the text
            returned starts with that opening; the rest of the reply is decoded under a grammar of the
            declared tools' schemas (``engine.grammar``): well-formed calls of declared tools.
        response_format: OpenAI's: ``{"type": "json_schema", "json_schema": {"schema": {...}}}`` or
            ``{"type": "json_object"}`` decode the reply as one JSON value of the schema
            (``engine.grammar``); ``{"type": "text"}`` or ``None`` (the default) leave it free.
        on_text: called with each new piece of text as it is generated (streaming).
        cancelled: polled between tokens; when it returns True generation stops.
        salt: the tenant's cache namespace (``engine.history.Salt``): histories with different salts
            share no cached prefix. ``None`` (the default) is the shared namespace. A remote engine's
            namespace is its API key's tenant, so it refuses a salt.
    """

    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stop: Sequence[str] | None
    ignore_eos: bool
    min_tokens: int
    prefix: str
    tool_choice: str | dict[str, Any] | None
    response_format: Mapping[str, Any] | None
    on_text: Callable[[str], None] | None
    cancelled: Callable[[], bool] | None
    salt: str | None


def check_chat_options(options: Mapping[str, Any]) -> None:
    """Refuse keys that are not :class:`ChatOptions` (a misspelt option must not pass silently).

    Raises:
        TypeError: naming the unknown keys and the known ones.
    """
    unknown = sorted(set(options) - ChatOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"unknown chat option(s) {unknown}; the options are {sorted(ChatOptions.__optional_keys__)}")


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

    def chat(self, messages: Sequence[Any], schedule: Mapping[str, Any] | Schedule | None = None,
             **options: Unpack[ChatOptions]) -> ChatResult: ...

    def score(
        self,
        messages: Sequence[Any],
        candidates: Sequence[str],
        schedule: Mapping[str, Any] | Schedule | None = None,
        *,
        prefix: str = "",
    ) -> ScoreResult: ...


@runtime_checkable
class BatchScorer(Protocol):
    """An engine that scores several prepared requests in one forward pass (:class:`engine.Engine`;
    a remote engine does not). ``score_many`` returns what ``score`` on each request in turn returns
    (scores within float rounding) and raises what ``prepare`` and ``score`` raise for a bad request."""

    def prepare(
        self,
        messages: Sequence[Any],
        schedule: Mapping[str, Any] | Schedule | None = None,
        *,
        prefix: str = "",
        candidates: Sequence[str] | None = None,
        salt: str | None = None,
        extra_tokens: int = 0,
    ) -> Prepared: ...

    def score_many(self, requests: Sequence[Prepared]) -> list[ScoreResult]: ...


@runtime_checkable
class BatchGenerator(Protocol):
    """An engine that generates replies for several chat requests in shared decode steps
    (:class:`engine.Engine`; a remote engine does not). ``generate_many`` returns, request by
    request, what :meth:`ChatEngine.chat` returns for it (greedy tokens equal wherever float
    rounding of the batched step leaves the argmax alone) and raises what ``prepare_request``
    raises for a bad request, before any request starts."""

    def request(self, messages: Sequence[Any], schedule: Mapping[str, Any] | Schedule | None = None,
                **options: Unpack[ChatOptions]) -> Request: ...

    def prepare_request(self, request: Request) -> Request: ...

    def generate_many(self, requests: Sequence[Request], batch_size: int = ...) -> list[ChatResult]: ...
