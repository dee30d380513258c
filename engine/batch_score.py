"""Score several requests in one forward pass: the branches of many histories prefilled together.

Policies replaying one task ask nearly the same probes: their histories share a long prefix in
the radix tree and part where their drops differ. :func:`score_many` plans the requests against
the tree in order, as :meth:`engine.Engine.score` called on each in turn would, and then runs ONE
:func:`engine.prefill.batched_prefill` over every request's new tokens and candidates: a ragged
batch whose per-sequence masks are the jobs' own views (keys and positions). The token space of
the pass::

    | request 0's computed tokens | request 1's | ... | stored KV read by any of them (each payload once) |
    ^0                                                ^Q

A request's tokens map into it: those it computes to its own rows (queries); those it reads from
the tree to the columns of a stored payload (gathered once however many requests read it), or,
when an earlier request of the batch commits them, to that request's rows. Each request commits
to the tree as soon as it is planned, with *pending* KV (:class:`PendingKV`, :class:`PendingHidden`)
standing for what the pass will compute, so the next request plans against it exactly as it would
after the sequential ``score``: a prefix new to the tree is computed once, by the first request
that needs it, and a later request attends to it inside the same pass. After the pass every
pending payload becomes the computed tensors; if the pass fails, they become ABSENT.

A request identical to an earlier one of the batch (same history items, same candidates) is planned
and committed as usual but takes that request's scores instead of scoring its candidates again
(the scores are a function of those alone).

Exactness: scores equal :meth:`engine.Engine.score` called one request at a time within float
rounding (``tests/engine/test_batch_score.py``: 1e-5 absolute on float32 log-probabilities, the
same best candidates), and so do the usage reports. Only eviction under memory pressure may
differ: the batch holds every request's locks until its pass is done.

Not for: generation (``Engine.start``/``step`` batch decoding), or requests of different engines.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from engine.cache.kvstore import Payload, SizedKV, TensorKV
from engine.cache.plan import RequestPlan, commit, plan_request, release
from engine.cache.radix import KVState, Node
from engine.errors import AKVError
from engine.prefill import Job, PrefillResult, batched_prefill, history_jobs
from engine.scoring import logit_rows, target_logprobs

if TYPE_CHECKING:
    from engine.engine import Engine
    from engine.results import Prepared, ScoreResult

BATCH_SCORE_TOKENS = 2048
"""Candidate tokens of one forward pass of :func:`score_many`; more requests go in further passes."""


@dataclass(frozen=True)
class PendingKV(SizedKV):
    """A node's KV while the pass that computes it has not run: rows ``[start, start + n)`` of the
    pass. Only in the tree between a batch's commits and the end of its pass (locked all along, so
    it is never evicted nor moved between tiers)."""

    start: int = 0

    def split(self, at: int) -> tuple[PendingKV, PendingKV]:
        assert 0 < at < self.n
        return (PendingKV(at, self.bytes_per_token, self.start),
                PendingKV(self.n - at, self.bytes_per_token, self.start + at))

    def to_host(self) -> PendingKV:
        raise AssertionError("pending KV is locked in the pool until its pass ends")

    def to_device(self) -> PendingKV:
        raise AssertionError("pending KV is locked in the pool until its pass ends")


@dataclass(frozen=True)
class PendingHidden:
    """A node's ``end_hidden`` while its pass has not run: the hidden state of the pass's row ``row``."""

    row: int


@dataclass
class _Request:
    """One request of a pass.

    Attributes:
        prepared, plan: the request and its plan against the tree.
        glob: [n + candidate tokens] each local token's index in the pass (queries ``>= 0``; a stored
            column ``s`` is ``-2 - s`` until :meth:`_Pass.finish_map`; ``-1``: not used).
        compute: [same] which local tokens the pass computes for it (history, then candidates).
        jobs: its jobs in local indices; twin: an identical earlier request of the pass.
        end: the node the request's prompt ends on, once committed.
    """

    prepared: Prepared
    plan: RequestPlan
    glob: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    compute: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    jobs: list[Job] = field(default_factory=list)
    twin: int | None = None
    end: Node | None = None

    @property
    def n(self) -> int:
        return self.prepared.history.n_tokens

    @property
    def candidate_idx(self) -> list[np.ndarray]:
        """Local token indices of each candidate (empty for a twin, which scores none)."""
        if self.twin is not None:
            return []
        lens = [len(c) for c in self.prepared.continuations]
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64) + self.n
        return [np.arange(s, s + k, dtype=np.int64) for s, k in zip(starts, lens)]


def score_many(eng: Engine, requests: Sequence[Prepared]) -> list[ScoreResult]:
    """Score every request (from :meth:`engine.Engine.prepare` with candidates), in order, in as
    few forward passes as :data:`BATCH_SCORE_TOKENS` allows (see the module docstring).

    Returns:
        one :class:`engine.results.ScoreResult` per request, equal to ``eng.score`` on each in turn.

    Raises:
        AKVError: a request without candidates (before anything is planned).
    """
    for i, p in enumerate(requests):
        if not p.continuations:
            raise AKVError(f"request {i} has no candidates: candidates must be a non-empty list of "
                           "non-empty strings", field="candidates", value=list(p.candidates))
    out: list[ScoreResult] = []
    for chunk in _chunks(requests, BATCH_SCORE_TOKENS):
        out.extend(_Pass(eng).run(chunk))
    return out


def _chunks(requests: Sequence[Prepared], budget: int) -> Iterator[list[Prepared]]:
    """Consecutive requests with at most ``budget`` candidate tokens together (one alone may exceed it)."""
    chunk: list[Prepared] = []
    tokens = 0
    for p in requests:
        if chunk and tokens + p.scored_tokens > budget:
            yield chunk
            chunk, tokens = [], 0
        chunk.append(p)
        tokens += p.scored_tokens
    if chunk:
        yield chunk


class _Pass:
    """The requests of one forward pass, their map into its token space, and its stored columns."""

    def __init__(self, eng: Engine):
        self.eng = eng
        self.requests: list[_Request] = []
        self.n_queries = 0
        self.columns: dict[int, int] = {}  # id(stored payload) -> its first column
        self.payloads: list[tuple[Payload, int, np.ndarray]] = []  # (payload, first column, compute positions)
        self.n_columns = 0

    def run(self, prepared: Sequence[Prepared]) -> list[ScoreResult]:
        from engine.results import ScoreResult, Timings

        eng = self.eng
        t0 = time.perf_counter()
        try:
            for p in prepared:
                self._add(p)
            self._finish_map()
            pre, logit_tokens = self._forward()
            hidden = pre.hidden  # None when no request computes a row that scoring reads
            row_of = {int(t): i for i, t in enumerate(logit_tokens)}
            scores = self._scores(hidden, row_of)
            self._resolve(pre, hidden, row_of)
        except BaseException:
            self._release()
            self._abandon()
            raise
        self._release()
        share = (time.perf_counter() - t0) / max(1, len(self.requests))
        out = []
        for r, s in zip(self.requests, scores):
            eng.stats.add(r.plan.usage, Timings(share, 0.0))
            p = r.prepared
            out.append(ScoreResult(list(p.candidates), s, [len(c) for c in p.continuations], r.plan.usage))
        return out

    # ------------------------------------------------------------------ planning

    def _add(self, p: Prepared) -> None:
        """Plan ``p``, map its tokens into the pass, and commit it (with pending KV)."""
        eng = self.eng
        plan = plan_request(eng.tree, p.items, p.history)
        r = _Request(p, plan)
        self.requests.append(r)  # from here on its lock is released whatever happens
        r.twin = next((i for i, o in enumerate(self.requests[:-1])
                       if o.twin is None and o.prepared.continuations == p.continuations
                       and o.prepared.items == p.items), None)
        h, n = p.history, r.n
        cands = r.candidate_idx
        n_cand = sum(len(c) for c in cands)
        compute = np.concatenate([plan.compute, np.ones(n_cand, dtype=bool)])
        glob = np.full(n + n_cand, -1, dtype=np.int64)
        q = np.flatnonzero(compute)
        glob[q] = self.n_queries + np.arange(q.size, dtype=np.int64)
        self.n_queries += int(q.size)
        for node in plan.match.path:  # what it reads from the tree
            if not node.n_tokens or node.state is KVState.ABSENT:
                continue
            a = node.token_start
            read = a + np.flatnonzero(~plan.compute[a:node.token_end])
            if not read.size:
                continue
            if isinstance(node.payload, PendingKV):  # computed in this pass by an earlier request
                glob[read] = node.payload.start + (read - a)
            else:
                assert node.payload is not None
                glob[read] = -2 - (self._column(node.payload, h.compute_pos[a:node.token_end]) + (read - a))
        r.glob, r.compute = glob, compute
        r.jobs = history_jobs(h, plan.compute)
        for idx in cands:
            pos = h.next_pos + np.arange(len(idx), dtype=np.int64)
            r.jobs.append(Job(idx, np.concatenate([h.alive, idx]), np.concatenate([h.alive_pos, pos])))
        bpt = eng.geometry.bytes_per_token

        def pending(s: int, e: int) -> PendingKV:
            assert glob[e - 1] - glob[s] == e - 1 - s and glob[s] >= 0
            return PendingKV(e - s, bpt, int(glob[s]))

        last = PendingHidden(int(glob[n - 1])) if plan.compute[n - 1] else None
        r.end = commit(eng.tree, plan, p.items, pending, bpt, last)

    def _column(self, payload: Payload, compute_pos: np.ndarray) -> int:
        """The first column of a stored payload in the pass (added on first use)."""
        key = id(payload)
        if key not in self.columns:
            self.columns[key] = self.n_columns
            self.payloads.append((payload, self.n_columns, compute_pos.copy()))
            self.n_columns += payload.n_tokens
        return self.columns[key]

    def _finish_map(self) -> None:
        """Stored columns go after the queries: column ``s`` is pass index ``Q + s``."""
        q = self.n_queries
        for r in self.requests:
            r.glob = np.where(r.glob <= -2, q + (-2 - r.glob), r.glob)

    # ------------------------------------------------------------------ the pass

    def _forward(self) -> tuple[PrefillResult, list[int]]:
        eng, q = self.eng, self.n_queries
        size = q + self.n_columns
        token_ids = np.zeros(size, dtype=np.int64)
        compute_pos = np.zeros(size, dtype=np.int64)
        jobs: list[Job] = []
        logit_tokens: list[int] = []
        for r in self.requests:
            h, conts = r.prepared.history, r.prepared.continuations
            cands = r.candidate_idx
            ids = np.concatenate([h.token_ids, *(np.asarray(conts[i], dtype=np.int64) for i in range(len(cands)))])
            pos = np.concatenate([h.compute_pos, *(h.next_pos + np.arange(len(c), dtype=np.int64) for c in cands)])
            mine = r.compute
            token_ids[r.glob[mine]] = ids[mine]
            compute_pos[r.glob[mine]] = pos[mine]
            for j in r.jobs:
                keys = r.glob[j.keys]
                assert np.all(keys >= 0), "a key of a job is neither computed nor stored"
                jobs.append(Job(r.glob[j.queries], keys, j.key_pos))
            if r.plan.compute[r.n - 1]:
                logit_tokens.append(int(r.glob[r.n - 1]))
            for idx in cands:
                logit_tokens.extend(int(t) for t in r.glob[idx[:-1]])
        for _, first, cpos in self.payloads:
            compute_pos[q + first:q + first + len(cpos)] = cpos
        pre = batched_prefill(eng.model, token_ids, compute_pos, jobs, self._gather, logit_tokens, logits=False)
        assert np.array_equal(pre.compute_idx, np.arange(q)), "the pass computes exactly its queries, in order"
        return pre, logit_tokens

    def _gather(self, tokens: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """KV of stored columns (pass indices ``>= Q``, ascending), from their payloads."""
        cols = tokens - self.n_queries
        assert cols.size and cols[0] >= 0, "only stored columns are gathered"
        firsts = np.asarray([f for _, f, _ in self.payloads], dtype=np.int64)
        which = np.searchsorted(firsts, cols, side="right") - 1
        device = self.eng.model.device
        ks, vs = [], []
        for w in np.unique(which):
            payload, first, _ = self.payloads[int(w)]
            assert isinstance(payload, TensorKV)
            idx = torch.as_tensor(cols[which == w] - first, device=payload.keys.device)
            ks.append(payload.keys.index_select(2, idx).to(device))
            vs.append(payload.values.index_select(2, idx).to(device))
        return torch.cat(ks, dim=2), torch.cat(vs, dim=2)

    def _scores(self, hidden: torch.Tensor | None, row_of: dict[int, int]) -> list[list[float]]:
        """Each request's candidate log-likelihoods from the pass's hidden states."""
        eng = self.eng
        model = eng.model
        firsts: list[torch.Tensor] = []  # hidden state after each scoring request's history
        rows: list[int] = []
        targets: list[int] = []
        scoring = [r for r in self.requests if r.twin is None]
        for r in scoring:
            n = r.n
            if r.plan.compute[n - 1]:
                assert hidden is not None
                firsts.append(hidden[row_of[int(r.glob[n - 1])]])
            elif isinstance(r.plan.end_hidden, PendingHidden):
                assert hidden is not None
                firsts.append(hidden[row_of[r.plan.end_hidden.row]])
            else:
                firsts.append(r.plan.end_hidden.to(model.device))
            for idx, cont in zip(r.candidate_idx, r.prepared.continuations):
                rows.extend(row_of[int(t)] for t in r.glob[idx[:-1]])
                targets.extend(cont[1:])
        stacked, chunk = torch.stack(firsts), logit_rows(model.vocab_size)
        first_lp = torch.cat([torch.log_softmax(model.logits(stacked[a:a + chunk]), -1)
                              for a in range(0, len(firsts), chunk)])
        picked: list[float] = []
        if targets:
            assert hidden is not None
            picked = target_logprobs(
                model, hidden[torch.as_tensor(rows, dtype=torch.int64, device=hidden.device)], targets)
        own: dict[int, list[float]] = {}
        k = 0
        for i, r in enumerate(scoring):
            scores = []
            for cont in r.prepared.continuations:
                total = float(first_lp[i, cont[0]])
                for _ in range(len(cont) - 1):
                    total += picked[k]
                    k += 1
                scores.append(total)
            own[id(r)] = scores
        return [list(own[id(r if r.twin is None else self.requests[r.twin])]) for r in self.requests]

    # ------------------------------------------------------------------ after the pass

    def _pending_nodes(self) -> list[Node]:
        """Nodes holding pending KV or hidden states: all on the committed requests' paths."""
        seen: set[int] = set()
        out = []
        for r in self.requests:
            node = r.end
            while node is not None and node.uid not in seen:
                seen.add(node.uid)
                if isinstance(node.payload, PendingKV) or isinstance(node.end_hidden, PendingHidden):
                    out.append(node)
                node = node.parent
        return out

    def _resolve(self, pre: PrefillResult, hidden: torch.Tensor | None, row_of: dict[int, int]) -> None:
        """Give every pending node the KV (and hidden state) the pass computed for it."""
        home = str(self.eng.model.device)
        for node in self._pending_nodes():
            p = node.payload
            if isinstance(p, PendingKV):
                node.payload = TensorKV(pre.keys[:, :, p.start:p.start + p.n].clone(),
                                        pre.values[:, :, p.start:p.start + p.n].clone(), home)
            if isinstance(node.end_hidden, PendingHidden):
                assert hidden is not None
                node.end_hidden = hidden[row_of[node.end_hidden.row]].clone()

    def _release(self) -> None:
        tree = self.eng.tree
        for r in self.requests:
            release(tree, r.end if r.end is not None else (r.plan.match.last or tree.root))

    def _abandon(self) -> None:
        """The pass failed: every node holding pending KV becomes ABSENT (an unlocked leaf leaves the
        tree) and pending hidden states are forgotten. The whole tree is searched, since a commit
        may have failed half-way; parents come before children, so emptied branches are removed."""
        tree = self.eng.tree
        pending = [n for n in tree.nodes()
                   if isinstance(n.payload, PendingKV) or isinstance(n.end_hidden, PendingHidden)]
        for node in pending:
            if isinstance(node.end_hidden, PendingHidden):
                node.end_hidden = None
            if isinstance(node.payload, PendingKV):
                tree.unfill(node)
