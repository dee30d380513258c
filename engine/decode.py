"""Decoding: a contiguous working cache of the final view, token sampling and stop handling, and
the :class:`Decoder` that runs a chat generation from its prefill to its generated KV in the tree.

After prefill, the alive tokens' KV (keys rotated to their final positions) is copied once into
preallocated [L, Hkv, capacity, D] buffers; every decode step appends one token in place and
attends over a slice (sliding layers: only the keys inside the window, found by one binary
search per step). The LM head runs for one row per step; nothing else is computed.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from engine.cache.accounting import insert_output
from engine.cache.kvstore import TensorKV
from engine.cache.plan import plan_request, release
from engine.models.lean import LeanModel
from engine.prefill import batched_prefill, commit_prefill, history_jobs, tree_gather, view_kv
from engine.request import Request, RequestState
from engine.results import ChatResult, EngineStats, Generation, Timings
from engine.rope import rotate_keys
from engine.sampling import SamplingParams

if TYPE_CHECKING:
    from engine.cache.radix import Node, RadixTree
    from engine.template import ChatTemplate

log = logging.getLogger("akv.decode")

GENERATE_BATCH = 8
"""Generations in flight at once by default in :meth:`Decoder.run` (``Engine.generate_many``): on
CPU a decode step's cost grows little with a few more rows, and each in-flight generation holds
its prompt's tree path locked and its own decode cache."""


class DecodeCache:
    """The final view's KV, contiguous, with room for generated tokens.

    Args:
        model: the decoder.
        keys, values: [L, Hkv, n, D] the view's KV as stored (keys at compute positions).
        stored_pos: [n] compute positions of those keys; view_pos: [n] their positions now.
        capacity: n + the most tokens that will be appended.
    """

    def __init__(self, model: LeanModel, keys: torch.Tensor, values: torch.Tensor,
                 stored_pos: np.ndarray, view_pos: np.ndarray, capacity: int):
        self.model = model
        n = keys.shape[2]
        shape = (keys.shape[0], keys.shape[1], capacity, keys.shape[3])
        self.k = torch.empty(shape, dtype=keys.dtype, device=keys.device)
        self.v = torch.empty(shape, dtype=keys.dtype, device=keys.device)
        self.v[:, :, :n] = values
        deltas = np.asarray(view_pos, dtype=np.int64) - np.asarray(stored_pos, dtype=np.int64)
        moved = np.flatnonzero(deltas)
        self.k[:, :, :n] = keys
        if moved.size:
            idx = torch.as_tensor(moved, device=keys.device)
            for kind, rope in model.ropes.items():
                layers = [i for i, t in enumerate(model.layer_types) if t == kind]
                li = torch.as_tensor(layers, device=keys.device)
                sub = keys.index_select(0, li).index_select(2, idx)
                rotated = rotate_keys(sub, rope, deltas[moved])
                for j, layer in enumerate(layers):
                    self.k[layer][:, idx] = rotated[j]
        self.pos = np.empty(capacity, dtype=np.int64)
        self.pos[:n] = view_pos
        self.n = n
        self.start = n  # first appended token's slot

    def begin(self, position: int) -> dict[int | None, int]:
        """Reserve the next slot for a token at ``position``; returns each window's first visible slot."""
        slot = self.n
        assert slot < self.k.shape[2], "decode cache is full"
        self.pos[slot] = position
        return {w: (int(np.searchsorted(self.pos[:slot + 1], position - w, side="right")) if w else 0)
                for w in set(self.model.windows)}

    def attend_row(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lo: int) -> torch.Tensor:
        """Store one token's k/v [Hkv, D] in the reserved slot and attend q [Hq, D] over slots [lo, slot]."""
        m = self.model
        slot = self.n
        self.k[layer][:, slot] = k
        self.v[layer][:, slot] = v
        # One query per head: two batched matrix-vector products over the cache slice, read in place
        # (scaled_dot_product_attention's generic path would first write a scaled copy of the keys).
        qg = q.reshape(m.n_kv_heads, m.n_heads // m.n_kv_heads, q.shape[-1])
        scores = torch.bmm(qg, self.k[layer][:, lo:slot + 1].transpose(1, 2)).mul_(m.scaling)
        o = torch.bmm(torch.softmax(scores, dim=-1), self.v[layer][:, lo:slot + 1])
        return o.reshape(m.n_heads, q.shape[-1])

    def commit(self) -> None:
        """The reserved slot now holds the token's KV in every layer."""
        self.n += 1

    def appended(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """KV [L, Hkv, end - start, D] of appended tokens [start, end) (keys at their positions)."""
        assert 0 <= start <= end <= self.n - self.start
        return (self.k[:, :, self.start + start:self.start + end].clone(),
                self.v[:, :, self.start + start:self.start + end].clone())


class Sampler:
    """Turns logits into tokens under :class:`SamplingParams`."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.generator = torch.Generator()
        seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        self.generator.manual_seed(seed)

    @property
    def greedy(self) -> bool:
        return self.params.temperature == 0.0

    def __call__(self, logits: torch.Tensor) -> int:
        p = self.params
        if p.temperature == 0.0:
            return int(torch.argmax(logits).item())
        probs = torch.softmax(logits.float().cpu() / p.temperature, dim=-1)
        if p.top_p < 1.0:
            sorted_p, sorted_i = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < p.top_p
            sorted_p = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
            choice = torch.multinomial(sorted_p / sorted_p.sum(), 1, generator=self.generator)
            return int(sorted_i[choice].item())
        return int(torch.multinomial(probs, 1, generator=self.generator).item())


def find_stop(text: str, stops: Sequence[str]) -> int | None:
    """Index where the earliest stop string starts in ``text``, or ``None``."""
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return min(hits) if hits else None


def step_caches(model: LeanModel, caches: list[DecodeCache], tokens: list[int], positions: list[int]) -> torch.Tensor:
    """Feed one token to each cache in a single forward pass; returns hidden states [B, H].

    Everything but attention runs batched over the B tokens; each row attends over its own cache.
    """
    windows = [c.begin(p) for c, p in zip(caches, positions)]

    def attend_rows(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    rows: np.ndarray | None) -> torch.Tensor:
        assert rows is None, "every row's hidden state is requested"
        w = model.windows[layer]
        out = torch.empty_like(q)
        for b, cache in enumerate(caches):
            out[:, b] = cache.attend_row(layer, q[:, b], k[:, b], v[:, b], windows[b][w])
        return out

    fwd = model.forward(tokens, positions, attend_rows, logit_rows=list(range(len(caches))), logits=False)
    for c in caches:
        c.commit()
    assert fwd.hidden is not None
    return fwd.hidden


def stop_token_ids(tokenizer: Any, template: ChatTemplate) -> tuple[set[int], list[int]]:
    """The token ids that end a reply (the tokenizer's end of sequence and ``template``'s stop
    strings that are one token) and what ``min_tokens`` masks: the stops and the template's
    turn-opening marker (a model that opens a new turn has ended its own: Qwen writes an empty
    turn this way), sorted."""

    def one_token(text: str) -> int | None:
        ids = tokenizer.encode(text, add_special_tokens=False) if text else []
        return ids[0] if len(ids) == 1 else None

    stops = {tokenizer.eos_token_id, *(one_token(s) for s in template.stop)}
    stop_ids = {i for i in stops if i is not None}
    opener = one_token(template.turn_open)
    return stop_ids, sorted(stop_ids | ({opener} if opener is not None else set()))


class Decoder:
    """Runs chat generations: the prompt's prefill into a :class:`DecodeCache`, then token by token
    (the generations in flight share one forward pass a step) until a stop, then the generated KV
    into the tree. :meth:`engine.engine.Engine.start_request`, ``step`` and ``finish`` are these.

    The decoder takes prepared requests only (:meth:`engine.engine.Engine.prepare_request`
    tokenized them and checked the window): it neither tokenizes nor checks lengths.

    Args:
        model: the decoder.
        tree: the engine's current radix tree (``Engine.scratch_cache`` and ``clear_cache`` replace it).
        tokenizer: decodes the generated tokens (stop strings, streaming, the reply's text).
        stop_ids: token ids that end a reply (unless ``ignore_eos``).
        end_of_turn_ids: the ids that ``min_tokens`` masks (:func:`stop_token_ids`).
        bytes_per_token: KV bytes of one token (the tree's budget).
        stats: the engine's counters; each finished generation is added.
    """

    def __init__(self, model: LeanModel, tree: Callable[[], RadixTree], tokenizer: Any, stop_ids: set[int],
                 end_of_turn_ids: list[int], bytes_per_token: int, stats: EngineStats):
        self.model = model
        self.tree = tree
        self.tokenizer = tokenizer
        self.stop_ids = stop_ids
        self.end_of_turn_ids = end_of_turn_ids
        self.bytes_per_token = bytes_per_token
        self.stats = stats

    def start(self, request: Request, on_text: Callable[[str], None] | None = None,
              cancelled: Callable[[], bool] | None = None) -> Generation:
        """:meth:`engine.engine.Engine.start_request`: prefill a ``PREPARED`` request's prompt; an
        in-flight :class:`Generation` (the request is ``RUNNING``). On an error the request's locks
        are released before it propagates."""
        assert request.prepared is not None and request.state is RequestState.PREPARED, \
            f"the decoder starts prepared requests, got a {request.state.value} one"
        items, history = request.prepared.items, request.prepared.history
        t0 = time.perf_counter()
        tree, model = self.tree(), self.model
        plan = plan_request(tree, items, history)
        end: Node | None = None
        try:
            n = history.n_tokens
            gather = tree_gather(plan.match.path, model.device)
            pre = batched_prefill(model, history.token_ids, history.compute_pos,
                                  history_jobs(history, plan.compute), gather,
                                  [n - 1] if plan.compute[n - 1] else [], logits=False)
            if plan.compute[n - 1]:
                assert pre.hidden is not None
                hidden, last_hidden = pre.hidden[0], pre.hidden[0]
            else:
                hidden, last_hidden = plan.end_hidden.to(model.device), None
            end = commit_prefill(tree, plan, items, pre, last_hidden, self.bytes_per_token, model.device)
            keys, values = view_kv(model, pre, history.alive, gather)
            cache = DecodeCache(model, keys, values, history.compute_pos[history.alive], history.alive_pos,
                                capacity=len(history.alive) + request.sampling.max_tokens)
        except BaseException:
            release(tree, end if end is not None else (plan.match.last or tree.root))
            raise
        request.advance(RequestState.RUNNING)
        if request.opening and on_text is not None:
            on_text(request.opening)
        return Generation(request=request, usage=plan.usage, end=end, cache=cache, sampler=Sampler(request.sampling),
                          hidden=hidden, next_pos=history.next_pos, on_text=on_text, cancelled=cancelled,
                          t_start=t0, t_decode=time.perf_counter(), grammar=request.matcher)

    def step(self, generations: Sequence[Generation]) -> None:
        """Advance every unfinished generation by one token, with one forward pass for all.

        Unmasked greedy rows pick through ``greedy_batch``; the others get their logits masked
        (:meth:`_mask`: ``min_tokens``, a grammar) and sampled one by one."""
        live = [g for g in generations if not g.done]
        if not live:
            return
        held = [len(g.tokens) < g.request.sampling.min_tokens for g in live]
        plain = [g.sampler.greedy and not h and g.grammar is None for g, h in zip(live, held)]
        greedy = [g for g, p in zip(live, plain) if p]
        if greedy:
            picks = self.model.greedy_batch(torch.stack([g.hidden for g in greedy]))
            for g, tok in zip(greedy, picks):
                g.tokens.append(tok)
        for g, h, p in zip(live, held, plain):
            if not p:
                logits = self.model.logits(g.hidden[None])[0]
                self._mask(g, logits, h)
                g.tokens.append(g.sampler(logits))
        advancing = [g for g in live if not self._after_token(g)]
        if not advancing:
            return
        toks = [g.tokens[-1] for g in advancing]
        positions = [g.next_pos + len(g.tokens) - 1 for g in advancing]
        hidden = step_caches(self.model, [g.cache for g in advancing], toks, positions)
        for g, h in zip(advancing, hidden):
            g.hidden = h

    def run(self, requests: Sequence[Request], batch_size: int = GENERATE_BATCH) -> list[ChatResult]:
        """Generate a reply for each ``PREPARED`` request, at most ``batch_size`` in flight:
        started (prefilled) in order as room frees up, advanced together by :meth:`step`, finished
        as they end (in order among those ending at the same step). The results, in the requests'
        order, are what :meth:`start`, :meth:`step` until done and :meth:`finish` give each one
        alone, but for the rounding of the batched step and a later request's prompt that extends
        an earlier one's reply, whose generated KV may not be in the tree yet (it is computed).

        On an error every started generation is finished (its locks released) before it propagates.
        """
        assert batch_size >= 1, batch_size
        results: list[ChatResult | None] = [None] * len(requests)
        waiting = iter(enumerate(requests))
        active: list[tuple[int, Generation]] = []
        try:
            while True:
                while len(active) < batch_size and (nxt := next(waiting, None)) is not None:
                    active.append((nxt[0], self.start(nxt[1])))
                if not active:
                    break
                self.step([g for _, g in active])
                for i, g in active:
                    if g.done:
                        results[i] = self.finish(g)
                active = [(i, g) for i, g in active if not g.finished]
        finally:
            for _, g in active:
                if not g.finished:
                    self.finish(g)
        assert all(r is not None for r in results)
        return [r for r in results if r is not None]

    def _mask(self, g: Generation, logits: torch.Tensor, held: bool) -> None:
        """Mask ``logits`` [V] in place: the end-of-turn tokens while ``held`` (``min_tokens``), and
        every token ``g``'s grammar does not allow next. Where both together would allow nothing
        (the grammar can only end), the grammar's mask alone applies."""
        if g.grammar is None:
            if held:
                logits[self.end_of_turn_ids] = float("-inf")
            return
        allowed = g.grammar.allowed()
        assert allowed.shape == logits.shape, f"grammar mask {tuple(allowed.shape)} vs logits {tuple(logits.shape)}"
        if held:
            kept = allowed.clone()
            kept[self.end_of_turn_ids] = False
            allowed = kept if bool(kept.any()) else allowed
        logits.masked_fill_(~allowed.to(logits.device), float("-inf"))

    def _after_token(self, g: Generation) -> bool:
        """Handle the token just appended to ``g``: its grammar, stop checks and streaming. Returns
        done. A grammar that can take nothing more ends the reply (``stop``)."""
        tok, params = g.tokens[-1], g.request.sampling
        if g.grammar is not None and not g.grammar.consume(tok):
            log.warning("a constrained reply took a token its grammar refused: %s", g.grammar.error[:200])
        if tok in self.stop_ids and not params.ignore_eos:
            g.reason = "stop"
        else:
            text = self.tokenizer.decode(g.tokens, skip_special_tokens=True)
            cut = find_stop(text, params.stop)
            if cut is not None:
                text, g.reason = text[:cut], "stop"
            if g.on_text is not None and len(text) > len(g.emitted) and not text.endswith("\ufffd"):
                g.on_text(text[len(g.emitted):])
                g.emitted = text
        if g.reason is None and g.grammar is not None and g.grammar.stopped:
            g.reason = "stop"
        if g.reason is None and len(g.tokens) >= params.max_tokens:
            g.reason = "length"
        if g.reason is None and g.cancelled is not None and g.cancelled():
            g.reason = "cancelled"
        g.done = g.reason is not None
        return g.done

    def finish(self, g: Generation) -> ChatResult:
        """Store the generated KV, release the locks and return the result (call exactly once)."""
        assert not g.finished, "finish() called twice"
        g.finished = True
        t_end = time.perf_counter()
        tree = self.tree()
        try:
            if len(g.tokens) > 1:
                insert_output(tree, g.items, g.tokens, lambda s, e: self._generated_payload(g.cache, s, e),
                              self.bytes_per_token)
        finally:
            release(tree, g.end)
            g.request.advance(RequestState.FINISHED)
        text = self.tokenizer.decode(g.tokens, skip_special_tokens=True)
        cut = find_stop(text, g.request.sampling.stop)
        text = text if cut is None else text[:cut]
        if g.on_text is not None and len(text) > len(g.emitted):
            g.on_text(text[len(g.emitted):])
        usage = g.usage.with_completion(len(g.tokens))
        timings = Timings(g.t_decode - g.t_start, t_end - g.t_decode)
        self.stats.add(usage, timings)
        return ChatResult(g.request.opening + text, list(g.tokens), usage, g.reason or "cancelled", timings)

    def _generated_payload(self, cache: DecodeCache, start: int, end: int) -> TensorKV:
        keys, values = cache.appended(start, end)
        return TensorKV(keys, values, str(self.model.device))
