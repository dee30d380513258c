"""The Engine: chat and scoring under a cache schedule, on a history-aware radix tree.

One request, end to end::

    messages + schedule --layout--> event history --replay--> per-token positions and views
        --plan--> reuse / compute / skip (+ exact usage) --batched_prefill--> new KV + logits
        --commit--> tree (restored nodes, new suffix) --decode--> text, generated KV --> tree

The engine is single-threaded: the HTTP server runs it on one worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import numpy as np
import torch

from engine.cache.accounting import Accountant
from engine.cache.kvstore import TensorKV
from engine.cache.plan import TokenUsage, plan_request, release
from engine.cache.radix import Node, RadixTree
from engine.decode import GENERATE_BATCH, Decoder, stop_token_ids
from engine.errors import AKVError, ModelLoadError
from engine.grammar import GrammarCompiler
from engine.history import Item, replay, salted
from engine.interface import ChatOptions
from engine.layout import Layout, Rendered, Renderer
from engine.models import gguf_weights
from engine.models.catalog import default_template
from engine.models.gguf_weights import WEIGHT_FORMS
from engine.models.lean import LeanModel
from engine.models.loading import load_model
from engine.prefill import batched_prefill, commit_prefill, history_jobs, tree_gather
from engine.request import Request, RequestState
from engine.results import ChatResult, EngineStats, Generation, Prepared, ScoreResult, Timings
from engine.schedule import Schedule, parse_schedule
from engine.scoring import score_passes
from engine.settings import settings
from engine.window import ContextWindow

if TYPE_CHECKING:
    from engine.snapshot import SnapshotInfo

GiB = 1 << 30


class Engine:
    """Serve chat requests with cache schedules.

    Args:
        model: the decoder (``LeanModel``).
        tokenizer: its tokenizer.
        template: chat template name (``engine.template``).
        pool_bytes: KV pool budget; exceeding it evicts (never crashes).
        host_bytes: host-tier budget for swapped-out KV (0 disables swapping).
        max_context: largest position a request may reach (default: the model's).
    """

    def __init__(self, model: LeanModel, tokenizer: Any, template: str = "gemma", pool_bytes: int = 2 * GiB,
                 host_bytes: int = 0, max_context: int | None = None, name: str | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name or model.name
        self.renderer = Renderer(tokenizer, template)
        self.geometry = model.geometry
        self.tree = RadixTree(pool_bytes, host_bytes)
        self.max_context = min(max_context or model.max_positions, model.max_positions)
        self.window = ContextWindow(self.max_context, self.renderer)
        self.stats = EngineStats()
        self._tokenizer_sha: str | None = None
        stop_ids, end_of_turn_ids = stop_token_ids(tokenizer, self.renderer.template)
        # runs start/step/finish; reads the tree when it needs it (scratch_cache and clear_cache replace it)
        self.decoder = Decoder(model, lambda: self.tree, tokenizer, stop_ids, end_of_turn_ids,
                               self.geometry.bytes_per_token, self.stats)
        # constrained replies (tool_choice required, response_format): grammars compiled for this tokenizer
        self.grammars = GrammarCompiler(tokenizer, model.vocab_size, stop_ids)

    @classmethod
    def from_pretrained(cls, name: str = "gemma-3-270m", *, template: str | None = None,
                        pool_bytes: int | None = None, host_bytes: int = 0, threads: int | None = None,
                        device: str = "cpu", dtype: torch.dtype = torch.float32,
                        max_context: int | None = None, keep_source: bool = False,
                        weights: str = "dense") -> Engine:
        """Load ``name`` (a named model such as "gemma-3-270m" or "qwen2.5-coder-1.5b", a tiny
        random one, or a local path), offline.

        ``template`` defaults to the model's own (``engine.models.catalog``; "gemma" for models
        without one). ``keep_source`` keeps the transformers model runnable beside the engine's
        packed weights (``engine.model.hf``, for reference checks); by default its packed weights
        are released, so the process holds one copy of them. ``weights="gguf"`` (CPU, a named
        model with a Qwen2 GGUF) adds decode forms in the GGUF's own bits beside the ``dtype``
        weights, which keep serving prefill (``engine.models.gguf_weights``).

        Raises:
            ModelLoadError: an unknown model, or ``weights`` this model cannot have (naming it).
        """
        if weights not in WEIGHT_FORMS:
            raise ModelLoadError(f"weights must be one of {', '.join(WEIGHT_FORMS)}, got {weights!r}",
                                 field="weights", value=weights)
        threads = threads if threads is not None else settings().threads
        if threads < 0:
            raise AKVError(f"threads must be >= 0 (0 leaves torch's default), got {threads}", field="threads",
                           value=threads)
        if threads:
            torch.set_num_threads(threads)
        if weights == "gguf":
            gguf_weights.spec_with_gguf(name)  # before the load, which can take minutes
        loaded = load_model(name, dtype=dtype, device=device)
        model = LeanModel(loaded.hf_model, loaded.name, keep_source=keep_source)
        if weights == "gguf":
            model = gguf_weights.attach(model, own_embedding=not keep_source)
        pool = pool_bytes if pool_bytes is not None else (2 * GiB if "tiny" not in name else 256 << 20)
        template = template or default_template(loaded.name, "gemma")
        return cls(model, loaded.tokenizer, template, pool, host_bytes, max_context, loaded.name)

    # ------------------------------------------------------------------ public API

    def render(self, messages: Sequence[Any]) -> Rendered:
        """Tokens of ``messages`` under the template, with per-message spans."""
        return self.renderer.render(messages)

    def layout(self, messages: Sequence[Any], schedule: Mapping[str, Any] | Schedule | None = None) -> Layout:
        """Render and compile ``messages`` + ``schedule`` into the event history."""
        return self.renderer.layout(messages, schedule)

    def accountant(self, pool_bytes: int | None = None, host_bytes: int | None = None) -> Accountant:
        """A dry-run accountant with this engine's renderer and KV geometry (same budgets by default)."""
        return Accountant(self.renderer, self.geometry.bytes_per_token,
                          self.tree.pool_bytes if pool_bytes is None else pool_bytes,
                          self.tree.host_bytes if host_bytes is None else host_bytes)

    @contextmanager
    def scratch_cache(self, pool_bytes: int | None = None, host_bytes: int | None = None) -> Iterator[RadixTree]:
        """Serve from a fresh, empty radix tree for the duration of the ``with`` body (budgets as
        this engine's unless given) and put the engine's own tree back after, even on an error:
        for measurements and trace replays that must start cold and leave the cache as it was."""
        own = self.tree
        self.tree = RadixTree(own.pool_bytes if pool_bytes is None else pool_bytes,
                              own.host_bytes if host_bytes is None else host_bytes)
        try:
            yield self.tree
        finally:
            self.tree = own

    def clear_cache(self) -> None:
        """Forget every cached prefix (a fresh tree with the same budgets)."""
        self.tree = RadixTree(self.tree.pool_bytes, self.tree.host_bytes)

    def swap_bandwidth(self, n_tokens: int = 256, repeats: int = 9) -> float:
        """Bytes per second of moving an ``n_tokens`` KV payload to the host tier and back on this
        engine's device (median of ``repeats`` round trips, after two warm-up ones)."""
        g, dev, dtype = self.geometry, self.model.device, self.model.dtype
        shape = (g.n_layers, g.n_kv_heads, n_tokens, g.head_dim)
        kv = TensorKV(torch.zeros(shape, device=dev, dtype=dtype), torch.zeros(shape, device=dev, dtype=dtype),
                      str(dev))
        tree = RadixTree(1 << 40, 1 << 40)
        node = tree.extend(tree.root, list(range(n_tokens)), kv)
        moves = []
        for i in range(repeats + 2):
            self.synchronize()
            t0 = time.perf_counter()
            tree.swap_out(node)
            tree.swap_in(node)
            self.synchronize()
            if i >= 2:
                moves.append((time.perf_counter() - t0) / 2)
        return float(kv.nbytes / max(float(np.median(moves)), 1e-9))

    def synchronize(self) -> None:
        """Wait for the device's queued work (a no-op on CPU): time measurements start and end here."""
        if self.model.device.type == "cuda":
            torch.cuda.synchronize()

    def check_integrity(self) -> None:
        """Assert the radix tree's invariants (and that no request holds locks)."""
        self.tree.check_integrity()

    def chat(self, messages: Sequence[Any], schedule: Mapping[str, Any] | Schedule | None = None,
             **options: Unpack[ChatOptions]) -> ChatResult:
        """Generate the assistant's next message under ``schedule``.

        Args:
            messages: OpenAI-style messages (system/user/assistant/tool).
            schedule: the cumulative cache schedule in the wire format (or a parsed Schedule).
            options: sampling, prefix, streaming, cancellation and cache namespace
                (:class:`engine.interface.ChatOptions`).

        Raises:
            AKVError subclasses for bad messages, schedules, sampling values or lengths.
        """
        g = self.start(messages, schedule, **options)
        try:
            if g.cancelled is not None and g.cancelled():
                g.reason, g.done = "cancelled", True
            while not g.done:
                self.step([g])
        finally:
            result = self.finish(g)
        return result

    def prefill(self, messages: Sequence[Any], schedule: Mapping[str, Any] | Schedule | None = None, *,
                salt: str | None = None) -> TokenUsage:
        """Bring the history of ``messages`` + ``schedule`` into the tree without generating."""
        items = salted(self.layout(messages, schedule).items, salt)
        history = replay(items)
        self.window.check_history(history, 0)
        plan = plan_request(self.tree, items, history)
        end: Node | None = None
        try:
            n = history.n_tokens
            pre = batched_prefill(self.model, history.token_ids, history.compute_pos,
                                  history_jobs(history, plan.compute), tree_gather(plan.match.path, self.model.device),
                                  [n - 1] if plan.compute[n - 1] else [], logits=False)
            last_hidden = pre.hidden[0] if pre.hidden is not None and plan.compute[n - 1] else None
            end = commit_prefill(self.tree, plan, items, pre, last_hidden, self.geometry.bytes_per_token,
                                 self.model.device)
        finally:
            release(self.tree, end if end is not None else (plan.match.last or self.tree.root))
        return plan.usage

    @property
    def tokenizer_fingerprint(self) -> str:
        """SHA-256 of the tokenizer definition (snapshots refuse other tokenizers)."""
        if self._tokenizer_sha is None:
            from engine.snapshot import tokenizer_fingerprint

            self._tokenizer_sha = tokenizer_fingerprint(self.tokenizer)
        return self._tokenizer_sha

    def save_session(self, messages: Sequence[Any], schedule: Any, path: str | Path, *, salt: str | None = None,
                     secret: bytes | None = None) -> SnapshotInfo:
        """Write the KV of this history to ``path`` (safetensors + JSON metadata; ``engine.snapshot``).

        ``salt``: the cache namespace the history lives in; ``secret``: authenticate the file
        (HMAC-SHA256) so that a load with the same secret refuses any edit.
        """
        from engine.snapshot import save_session

        return save_session(self, messages, schedule, path, salt=salt, secret=secret)

    def load_session(self, path: str | Path, *, salt: str | None = None, secret: bytes | None = None) -> SnapshotInfo:
        """Warm the tree (in ``salt``'s namespace) from a file written by :meth:`save_session`;
        refused files change nothing. With ``secret``, files without a valid HMAC are refused."""
        from engine.snapshot import load_session

        return load_session(self, path, salt=salt, secret=secret)

    def prepare(
        self,
        messages: Sequence[Any],
        schedule: Mapping[str, Any] | Schedule | None = None,
        *,
        prefix: str = "",
        candidates: Sequence[str] | None = None,
        salt: str | None = None,
        extra_tokens: int = 0,
    ) -> Prepared:
        """Tokenize and replay a request without touching the tree or the model.

        Safe to call on any thread while the engine works on another (the server does it on a
        pool thread, so that a huge prompt never stalls the engine thread). Pass the result to
        :meth:`start` or :meth:`score` as ``prepared``.

        Args:
            messages, schedule, prefix, salt: as for :meth:`chat`.
            candidates: score candidates (see :meth:`score`); ``None`` for a chat request.
            extra_tokens: positions the request will add after the prompt (``max_tokens``).

        Raises:
            MessageError, ScheduleError: a malformed request.
            ContextLengthError: the prompt plus ``extra_tokens`` (or the longest candidate) does not
                fit the context window.
        """
        if candidates is not None and (not candidates or not all(isinstance(c, str) and c for c in candidates)):
            raise AKVError("candidates must be a non-empty list of non-empty strings",
                           field="candidates", value=candidates)
        sched = parse_schedule(schedule)
        if isinstance(messages, list):
            self.window.check_fits(len(messages), sched, extra_tokens)
        return self._tokenize(messages, sched, prefix, candidates or (), salt, extra_tokens)

    def request(self, messages: Sequence[Any], schedule: Mapping[str, Any] | Schedule | None = None,
                **options: Unpack[ChatOptions]) -> Request:
        """The chat request of these arguments (:meth:`engine.request.Request.of`, with this engine's
        template stop strings): sampling built, ``tool_choice`` and schedule checked; not yet
        tokenized. ``on_text`` and ``cancelled`` are given to :meth:`start_request` instead.

        Raises:
            TypeError: an unknown option. AKVError subclasses: bad sampling values, ``tool_choice``
                or schedule.
        """
        return Request.of(messages, schedule, options, self.renderer.template.stop)

    def prepare_request(self, request: Request) -> Request:
        """Tokenize and replay ``request`` (``NEW`` or ``SCREENED``) and check, once, that its prompt
        plus ``max_tokens`` fits the context window; it is ``PREPARED`` after. Touches neither the
        tree nor the model: safe on any thread (the server calls it on a pool thread).

        Its grammar, if any, is compiled here too (``request.matcher``; cached per grammar).

        Raises:
            MessageError, ScheduleError: a malformed request.
            ContextLengthError: the prompt plus ``max_tokens`` does not fit the context window.
            AKVError: a grammar past the compiler's limits (``engine.grammar.GrammarCompiler.matcher``).
        """
        if request.state is RequestState.NEW and isinstance(request.messages, list):  # screened: already checked
            self.window.check_fits(len(request.messages), request.schedule, request.sampling.max_tokens)
        prepared = self._tokenize(request.messages, request.schedule, request.reply_prefix, (), request.salt,
                                  request.sampling.max_tokens)
        if request.grammar is not None:
            request.matcher = self.grammars.matcher(request.grammar)
        request.advance(RequestState.PREPARED, prepared)
        return request

    def _tokenize(self, messages: Sequence[Any], sched: Schedule, prefix: str, candidates: Sequence[str],
                  salt: str | None, extra_tokens: int) -> Prepared:
        """Render, replay and check the window exactly (once: by the token count before the replay
        when there are no repositions, then it equals the reach; by the replayed reach otherwise)."""
        layout = self.layout(messages, sched)
        prefix_ids = self.renderer.encode_text(prefix)
        conts = tuple(self._continuation(prefix, prefix_ids, c) for c in candidates)
        extra = max([extra_tokens, *map(len, conts)])
        if not sched.repositions:  # positions are token counts: refuse before the replay
            self.window.check_reach(len(layout.rendered.token_ids) + len(prefix_ids), extra)
        items: list[Item] = salted([*layout.items, *prefix_ids], salt)
        history = replay(items)
        if sched.repositions:
            self.window.check_history(history, extra)
        return Prepared(layout, items, history, tuple(candidates), conts)

    def score(
        self,
        messages: Sequence[Any],
        candidates: Sequence[str],
        schedule: Mapping[str, Any] | Schedule | None = None,
        *,
        prefix: str = "",
        salt: str | None = None,
        prepared: Prepared | None = None,
    ) -> ScoreResult:
        """Log-likelihood of each candidate as the continuation of the assistant's reply.

        The context is the rendered prompt plus ``prefix`` (text the assistant's reply starts
        with). As in lm-evaluation-harness, ``prefix + candidate`` is encoded together and the
        candidate's tokens are the tail; put the separating space in the candidate (" Paris").
        Every candidate sees the same cache state. The history is computed once, with the first
        group of candidates; candidates go through the model in groups of at most
        ``SCORE_GROUP_TOKENS`` tokens, and only each token's own log-probability is kept, so
        memory does not grow with the number of candidates.

        ``prepared``: the result of :meth:`prepare` for these arguments (then they are ignored).
        """
        p = prepared if prepared is not None else self.prepare(messages, schedule, prefix=prefix,
                                                               candidates=candidates, salt=salt)
        if not p.continuations:
            raise AKVError("candidates must be a non-empty list of non-empty strings",
                           field="candidates", value=list(p.candidates))
        items, history, conts = p.items, p.history, p.continuations  # prepare checked the window
        t0 = time.perf_counter()
        plan = plan_request(self.tree, items, history)
        end: Node | None = None
        try:
            end, scores = score_passes(self.model, self.tree, self.geometry.bytes_per_token, plan, items, history,
                                       conts)
        finally:
            release(self.tree, end if end is not None else (plan.match.last or self.tree.root))
        self.stats.add(plan.usage, Timings(time.perf_counter() - t0, 0.0))
        return ScoreResult(list(p.candidates), scores, [len(c) for c in conts], plan.usage)

    def score_many(self, requests: Sequence[Prepared]) -> list[ScoreResult]:
        """Score several requests (each from :meth:`prepare` with candidates) in one forward pass:
        their histories' new tokens and every candidate together, a prefix new to the tree computed
        once (``engine.batch_score``). Results, usage and the tree afterwards are those of
        :meth:`score` called on each request in order (scores within float rounding).

        Raises:
            AKVError: a request without candidates (before anything is planned).
        """
        from engine.batch_score import score_many

        return score_many(self, requests)

    def generate_many(self, requests: Sequence[Request], batch_size: int = GENERATE_BATCH) -> list[ChatResult]:
        """Replies to several chat requests (each from :meth:`request`, ``NEW`` or already
        ``PREPARED``), decoded in shared steps: prefilled in order against the tree, at most
        ``batch_size`` in flight, each step one forward pass for all of them (the
        :class:`engine.decode.Decoder` the server's scheduler drives, :meth:`Decoder.run`). Each
        result is what :meth:`chat` returns for its request (tokens, text, usage, finish reason),
        greedy tokens equal unless the batched step's float rounding flips an argmax; a request
        whose prompt extends an earlier request's reply may find that reply's KV not yet in the
        tree (it is then computed: more ``prefill`` tokens in its usage).

        Raises:
            ValueError: ``batch_size`` below 1, or a request already started.
            What :meth:`prepare_request` raises for a bad request, before any request starts.
        """
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        started = [i for i, r in enumerate(requests) if r.state in (RequestState.RUNNING, RequestState.FINISHED)]
        if started:
            raise ValueError(f"generate_many takes new or prepared requests; request {started[0]} is "
                             f"{requests[started[0]].state.value}")
        for r in requests:
            if r.state is not RequestState.PREPARED:
                self.prepare_request(r)
        return self.decoder.run(requests, batch_size)

    # ------------------------------------------------------------------ internals

    def _continuation(self, prefix: str, prefix_ids: list[int], candidate: str) -> list[int]:
        whole = self.renderer.encode_text(prefix + candidate)
        if whole[:len(prefix_ids)] == prefix_ids and len(whole) > len(prefix_ids):
            return whole[len(prefix_ids):]
        return self.renderer.encode_text(candidate)

    def check_fits(self, n_messages: int, schedule: Schedule, extra_tokens: int = 0) -> None:
        """:meth:`engine.window.ContextWindow.check_fits`: a request too long by its message count."""
        self.window.check_fits(n_messages, schedule, extra_tokens)

    def check_prompt_fits(self, messages: Sequence[Any], schedule: Schedule, prefix: str = "",
                          extra_tokens: int = 0) -> None:
        """:meth:`engine.window.ContextWindow.check_prompt_fits`: a prompt too long by its text's
        length, refused before tokenizing. The server calls this off the engine thread;
        :meth:`prepare` does not (trusted callers tokenize anyway)."""
        self.window.check_prompt_fits(messages, schedule, prefix, extra_tokens)

    def start(self, messages: Sequence[Any], schedule: Mapping[str, Any] | Schedule | None = None,
              **options: Unpack[ChatOptions]) -> Generation:
        """Process the prompt (prefill) and return an in-flight :class:`Generation`.

        Drive it with :meth:`step` (several generations may step together, sharing one forward
        pass) until ``done``, then call :meth:`finish`, which must always be called: it stores
        the generated KV and releases the request's locks. Arguments are those of :meth:`chat`:
        the request is built (:meth:`request`), prepared (:meth:`prepare_request`) and started
        (:meth:`start_request`).
        """
        request = self.prepare_request(self.request(messages, schedule, **options))
        return self.start_request(request, options.get("on_text"), options.get("cancelled"))

    def start_request(self, request: Request, on_text: Callable[[str], None] | None = None,
                      cancelled: Callable[[], bool] | None = None) -> Generation:
        """:meth:`start` for a request already ``PREPARED`` (:meth:`prepare_request`, perhaps on
        another thread): its prefill runs now. ``on_text`` and ``cancelled`` as in
        :class:`engine.interface.ChatOptions`."""
        return self.decoder.start(request, on_text, cancelled)

    def step(self, generations: Sequence[Generation]) -> None:
        """Advance every unfinished generation by one token, with one forward pass for all."""
        self.decoder.step(generations)

    def finish(self, g: Generation) -> ChatResult:
        """Store the generated KV, release the locks and return the result (call exactly once)."""
        return self.decoder.finish(g)
