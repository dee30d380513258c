"""Segment-batched prefill: compute many token runs that need different views in one forward pass.

Each *job* is a set of query tokens that share a view: the keys they may see and the positions
those keys have in that view (their own segment's earlier tokens come last, causally). Jobs
differ in alive sets and position deltas (restoring a history with many drops, or scoring
several candidate answers), yet everything except attention runs once over all query tokens:
embeddings, projections, norms and MLPs are batched; only attention is split by job.

When no job rotates a key and the jobs' keys fit one position order not much longer than the
largest job's (a history restored with drops: each segment's view is the one before it less what
was dropped), the jobs attend as one: every query over that order, a key a query's job does not
see masked out. That reads the keys in place instead of copying each job's keys layer by layer.

Keys come from two places: stored KV gathered from the tree (``ext``) and this pass's own
queries (``new``, available layer by layer as the pass proceeds). A key stored at position p and
seen at position p' is rotated by p' - p on the fly; values are used as stored. Sliding-window
layers only gather the keys inside the window of a job's first query.

It must equal :class:`engine.oracle.reference.ReferenceExecutor` within float tolerance (tests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from engine.attention import Block, attend_blocks, plan_blocks
from engine.cache.kvstore import TensorKV
from engine.cache.plan import RequestPlan, commit
from engine.history import History, Item
from engine.models.lean import LeanModel
from engine.rope import apply_rope

if TYPE_CHECKING:
    from engine.cache.radix import Node, RadixTree

_Rotation = tuple[np.ndarray, torch.Tensor, torch.Tensor] | None
"""Keys of a job to rotate (indices into its keys) with the cos/sin of their deltas, or ``None``."""

GatherFn = Callable[[np.ndarray], tuple[torch.Tensor, torch.Tensor]]
"""Stored token indices (ascending) -> their keys, values [L, Hkv, M, D] as stored."""


@dataclass(frozen=True)
class Job:
    """Queries that share one view.

    Attributes:
        queries: token indices computed by this pass (ascending, contiguous in the pass's order).
        keys: token indices the queries may see, in position order (view, then own segment).
        key_pos: positions of ``keys`` in this view (ascending).
    """

    queries: np.ndarray
    keys: np.ndarray
    key_pos: np.ndarray


@dataclass(frozen=True)
class PrefillResult:
    """Output of :func:`batched_prefill`.

    Attributes:
        compute_idx: [T] the computed token indices (the pass's order).
        keys, values: [L, Hkv, T, D] their KV (keys at their compute positions).
        logits: [R, V] next-token logits of the requested tokens, in request order.
        hidden: [R, H] their last-layer hidden states.
        ext_idx: [M] stored tokens that were gathered; ext_keys/ext_values: their KV as stored.
    """

    compute_idx: np.ndarray
    keys: torch.Tensor
    values: torch.Tensor
    logits: torch.Tensor | None
    hidden: torch.Tensor | None
    ext_idx: np.ndarray
    ext_keys: torch.Tensor
    ext_values: torch.Tensor

    def columns(self, tokens: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """KV [L, Hkv, n, D] (as stored) of ``tokens``, each either gathered or computed here."""
        m = self.ext_idx.shape[0]
        in_ext = _member(tokens, self.ext_idx)
        in_new = _member(tokens, self.compute_idx)
        assert np.all(in_ext | in_new), "a requested token was neither gathered nor computed"
        cols = np.where(in_ext, np.searchsorted(self.ext_idx, tokens), m + np.searchsorted(self.compute_idx, tokens))
        idx = torch.as_tensor(cols, device=self.keys.device)
        all_k = torch.cat([self.ext_keys, self.keys], dim=2) if m else self.keys
        all_v = torch.cat([self.ext_values, self.values], dim=2) if m else self.values
        return all_k.index_select(2, idx), all_v.index_select(2, idx)


def _member(tokens: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Boolean mask: which of ``tokens`` are in the ascending array ``sorted_set``."""
    if sorted_set.size == 0:
        return np.zeros(len(tokens), dtype=bool)
    i = np.minimum(np.searchsorted(sorted_set, tokens), sorted_set.size - 1)
    return sorted_set[i] == tokens


def history_jobs(history: History, compute: np.ndarray) -> list[Job]:
    """Jobs that compute the tokens flagged in ``compute`` [N] of ``history``."""
    jobs = []
    for seg in history.segments:
        q = np.flatnonzero(compute[seg.start:seg.end]) + seg.start
        if q.size == 0:
            continue
        own = np.arange(seg.start, int(q[-1]) + 1, dtype=np.int64)
        own_pos = seg.first_pos + (own - seg.start)
        jobs.append(Job(q, np.concatenate([seg.view, own]), np.concatenate([seg.view_pos, own_pos])))
    return jobs


def tree_gather(path: Sequence[Node], device: torch.device) -> GatherFn:
    """The gather of :func:`batched_prefill` over the stored KV of ``path`` (a request's matched
    nodes, in order): token indices -> their keys and values, read from the nodes' payloads and
    moved to ``device``."""
    nodes = [n for n in path if n.n_tokens]
    starts = np.asarray([n.token_start for n in nodes], dtype=np.int64)

    def gather(tokens: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        which = np.searchsorted(starts, tokens, side="right") - 1
        ks, vs = [], []
        for w in np.unique(which):
            node = nodes[int(w)]
            assert node.payload is not None, f"{node} was needed but has no KV"
            local = tokens[which == w] - node.token_start
            assert isinstance(node.payload, TensorKV)
            idx = torch.as_tensor(local, device=node.payload.keys.device)
            ks.append(node.payload.keys.index_select(2, idx).to(device))
            vs.append(node.payload.values.index_select(2, idx).to(device))
        return torch.cat(ks, dim=2), torch.cat(vs, dim=2)

    return gather


def commit_prefill(tree: RadixTree, plan: RequestPlan, items: list[Item], pre: PrefillResult,
                   last_hidden: torch.Tensor | None, bytes_per_token: int, device: torch.device) -> Node:
    """:func:`engine.cache.plan.commit` of ``plan`` with the KV this pass computed (``pre``, copied
    per node so the pass's tensors can go) on ``device``; returns the request's end node (locked)."""
    compute_idx = pre.compute_idx
    home = str(device)

    def payload(s: int, e: int) -> TensorKV:
        c = int(np.searchsorted(compute_idx, s))
        assert compute_idx[c] == s and compute_idx[c + e - s - 1] == e - 1
        return TensorKV(pre.keys[:, :, c:c + e - s].clone(), pre.values[:, :, c:c + e - s].clone(), home)

    return commit(tree, plan, items, payload, bytes_per_token, last_hidden.clone() if last_hidden is not None else None)


def view_kv(model: LeanModel, pre: PrefillResult, tokens: np.ndarray,
            gather: GatherFn) -> tuple[torch.Tensor, torch.Tensor]:
    """KV [L, Hkv, n, D] of ``tokens`` (as stored), from the pass ``pre`` where it computed or
    gathered them, else through ``gather`` (the tree): the view a decode starts from."""
    geometry = model.geometry
    known = np.union1d(pre.compute_idx, pre.ext_idx)
    inside = np.isin(tokens, known)
    if inside.all():
        return pre.columns(tokens)
    k = torch.empty(geometry.n_layers, geometry.n_kv_heads, len(tokens), geometry.head_dim,
                    dtype=model.dtype, device=model.device)
    v = torch.empty_like(k)
    dev = model.device  # index tensors on the KV's device (no implicit host-to-device copies)
    if inside.any():
        at = torch.as_tensor(np.flatnonzero(inside), device=dev)
        k[:, :, at], v[:, :, at] = pre.columns(tokens[inside])
    rest = np.flatnonzero(~inside)
    gk, gv = gather(tokens[rest])
    k[:, :, torch.as_tensor(rest, device=dev)] = gk
    v[:, :, torch.as_tensor(rest, device=dev)] = gv
    return k, v

def batched_prefill(
    model: LeanModel,
    token_ids: np.ndarray,
    compute_pos: np.ndarray,
    jobs: Sequence[Job],
    gather: GatherFn,
    logit_tokens: Sequence[int] = (),
    logits: bool = True,
) -> PrefillResult:
    """Compute every job's queries in one forward pass.

    Args:
        model: the decoder.
        token_ids, compute_pos: [N] ids and compute positions of the whole token space.
        jobs: disjoint query sets; together they are the tokens to compute.
        gather: reads stored KV of tokens that are keys of some job but not computed here.
        logit_tokens: computed tokens whose hidden states (and logits) to return.
        logits: also compute their logits (False: hidden states only).
    """
    if not jobs:
        k0, v0 = _empty_kv(model)
        return PrefillResult(np.zeros(0, np.int64), k0, v0, None, None, np.zeros(0, np.int64), k0, v0)
    compute_idx = np.concatenate([j.queries for j in jobs])
    assert np.all(np.diff(compute_idx) > 0), "jobs must list disjoint queries in ascending order"
    # Columns of the key source: stored keys first (ext), then this pass's tokens in order.
    all_keys = np.unique(np.concatenate([j.keys for j in jobs])) if jobs else np.zeros(0, np.int64)
    ext_idx = all_keys[~_member(all_keys, compute_idx)]
    ext_k, ext_v = gather(ext_idx) if ext_idx.size else _empty_kv(model)
    m = ext_idx.shape[0]

    def col_of(tokens: np.ndarray) -> np.ndarray:
        in_ext = _member(tokens, ext_idx)
        return np.where(in_ext, np.searchsorted(ext_idx, tokens), m + np.searchsorted(compute_idx, tokens))

    merged = _merged_plan(model, jobs, all_keys, col_of, compute_idx, compute_pos)
    if merged is not None:
        plans = [merged]
    else:
        starts = np.concatenate([[0], np.cumsum([len(j.queries) for j in jobs])[:-1]]).astype(int)
        rotations: dict[tuple[str, bytes, bytes], _Rotation] = {}  # jobs with the same deltas share their tables
        plans = [_plan_job(model, job, col_of(job.keys), compute_pos, int(r), rotations)
                 for job, r in zip(jobs, starts)]

    def attend_jobs(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    rows: np.ndarray | None) -> torch.Tensor:
        window = model.windows[layer]
        kind = model.layer_types[layer]
        src_k = torch.cat([ext_k[layer], k], dim=1) if m else k
        src_v = torch.cat([ext_v[layer], v], dim=1) if m else v
        out = torch.empty_like(q) if len(plans) > 1 else None
        for p in plans:
            lo = p.slide_lo[window] if window is not None else 0
            if rows is None:
                dest, blocks = p.rows, p.blocks[window]
            else:  # a subset of the queries (the last layer): the job's share of them, planned afresh
                a, b = np.searchsorted(rows, [p.rows.start, p.rows.stop])
                if a == b:
                    continue
                dest = slice(int(a), int(b))
                sub = rows[a:b] - p.rows.start
                blocks = plan_blocks(p.q_pos[sub], p.key_pos[lo:], window, model.dtype, model.device,
                                     groups=None if p.groups is None else p.groups[sub],
                                     member=None if p.member is None else p.member[:, lo:])
            kj, vj, shared = _columns(src_k, src_v, p.cols[lo:])
            r = p.rot[kind]
            if r is not None:
                sel, cos, sin = r
                sel_lo = sel[sel >= lo] - lo
                if sel_lo.size:
                    keep = torch.as_tensor(sel >= lo, device=cos.device)
                    c, s = cos[keep], sin[keep]
                    if sel_lo.size == kj.shape[1]:
                        kj = apply_rope(kj, c, s)
                    else:
                        kj = kj.clone() if shared else kj  # a view of the source: rotate a copy
                        t = torch.as_tensor(sel_lo, device=q.device)
                        kj[:, t] = apply_rope(kj[:, t], c, s)
            o = attend_blocks(q[:, dest], kj, vj, blocks, model.scaling)
            if out is None:
                return o
            out[:, dest] = o
        assert out is not None
        return out

    ids = token_ids[compute_idx]
    rows = [int(np.searchsorted(compute_idx, t)) for t in logit_tokens]
    assert all(compute_idx[r] == t for r, t in zip(rows, logit_tokens)), "logits asked of a token not computed"
    fwd = model.forward(ids, compute_pos[compute_idx], attend_jobs, logit_rows=rows or None, logits=logits)
    return PrefillResult(compute_idx, fwd.keys, fwd.values, fwd.logits, fwd.hidden, ext_idx, ext_k, ext_v)


@dataclass(frozen=True)
class _JobPlan:
    """What attention needs of one job, worked out once per pass and used by every layer.

    Attributes:
        rows: the job's rows among the pass's queries.
        q_pos: [Q] their positions; key_pos: [K] the positions of its keys in its view.
        cols: [K] columns of the job's keys in the key source (stored first, then this pass's).
        rot: per RoPE kind, the keys whose view position differs from their compute position
            (indices into ``cols``) with the cos/sin of the delta, or ``None``.
        slide_lo: per sliding window, the first key inside the window of the job's first query.
        blocks: per window (``None``: full attention), the attention blocks over ``cols[slide_lo:]``.
        groups, member: (the jobs merged into one plan) each row's job and [jobs, K] which keys
            each job sees; ``None`` for one job.
    """

    rows: slice
    q_pos: np.ndarray
    key_pos: np.ndarray
    cols: np.ndarray
    rot: dict[str, _Rotation]
    slide_lo: dict[int, int]
    blocks: dict[int | None, tuple[Block, ...]]
    groups: np.ndarray | None = None
    member: np.ndarray | None = None


MERGE_KEYS = 1.5
"""Jobs attend as one only while their keys together are at most this many times the largest
job's: a merged query reads every key of the order up to its position, masked or not."""


def _merged_plan(model: LeanModel, jobs: Sequence[Job], keys: np.ndarray,
                 col_of: Callable[[np.ndarray], np.ndarray], compute_idx: np.ndarray,
                 compute_pos: np.ndarray) -> _JobPlan | None:
    """One plan for all ``jobs`` over the union of their ``keys`` (key-source columns by
    ``col_of``), or ``None`` when they cannot share it: fewer than two jobs, a key seen at a
    position other than its compute position (a rotation), positions of the queries or of the keys
    not strictly ascending (so that a position names one key), or a union longer than
    :data:`MERGE_KEYS` times the largest job's keys. Exact: each query sees the keys its own job
    lists, by the same causal and window rule."""
    if len(jobs) < 2 or keys.size > MERGE_KEYS * max(len(j.keys) for j in jobs):
        return None
    if any(not np.array_equal(j.key_pos, compute_pos[j.keys]) for j in jobs):
        return None
    q_pos, key_pos = compute_pos[compute_idx], compute_pos[keys]
    if not (bool(np.all(np.diff(q_pos) > 0)) and bool(np.all(np.diff(key_pos) > 0))):
        return None
    groups = np.repeat(np.arange(len(jobs)), [len(j.queries) for j in jobs])
    member = np.stack([_member(keys, j.keys) for j in jobs])
    slide_lo, blocks = _window_blocks(model, q_pos, key_pos, groups, member)
    return _JobPlan(slice(0, len(compute_idx)), q_pos, key_pos, col_of(keys), dict.fromkeys(model.ropes),
                    slide_lo, blocks, groups, member)


def _window_blocks(model: LeanModel, q_pos: np.ndarray, key_pos: np.ndarray, groups: np.ndarray | None = None,
                   member: np.ndarray | None = None) -> tuple[dict[int, int], dict[int | None, tuple[Block, ...]]]:
    """Per sliding window, the first key inside the window of the first query; per window
    (``None``: full attention), the blocks of these queries over the keys from there on."""
    slide_lo = {w: int(np.searchsorted(key_pos, q_pos[0] - w, side="right"))
                for w in set(model.windows) if w is not None}
    blocks = {}
    for w in set(model.windows):
        lo = slide_lo[w] if w is not None else 0
        blocks[w] = plan_blocks(q_pos, key_pos[lo:], w, model.dtype, model.device, groups=groups,
                                member=None if member is None else member[:, lo:])
    return slide_lo, blocks


def _plan_job(model: LeanModel, job: Job, cols: np.ndarray, compute_pos: np.ndarray, row: int,
              rotations: dict[tuple[str, bytes, bytes], _Rotation]) -> _JobPlan:
    deltas = job.key_pos - compute_pos[job.keys]
    q_pos = compute_pos[job.queries]
    slide_lo, blocks = _window_blocks(model, q_pos, job.key_pos)
    sel = np.flatnonzero(deltas)
    rot = {}
    for kind in model.ropes:  # candidates of one request see one view: the same rotation, made once
        key = (kind, sel.tobytes(), deltas[sel].tobytes())
        if key not in rotations:
            rotations[key] = _rotation(model, kind, sel, deltas[sel])
        rot[kind] = rotations[key]
    return _JobPlan(slice(row, row + len(job.queries)), q_pos, job.key_pos, cols, rot, slide_lo, blocks)


def _columns(src_k: torch.Tensor, src_v: torch.Tensor, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Keys and values [Hkv, K, D] of key-source columns ``cols``, and whether they are views of the
    source (when the columns are one run) rather than gathered copies."""
    if cols.size and int(cols[-1]) - int(cols[0]) + 1 == cols.size and bool(np.all(np.diff(cols) == 1)):
        c0, c1 = int(cols[0]), int(cols[-1]) + 1
        return src_k[:, c0:c1], src_v[:, c0:c1], True
    idx = torch.as_tensor(cols, device=src_k.device)
    return src_k.index_select(1, idx), src_v.index_select(1, idx), False


def _rotation(model: LeanModel, kind: str, sel: np.ndarray, deltas: np.ndarray) -> _Rotation:
    """The keys ``sel`` (indices into a job's keys) rotated by ``deltas`` [len(sel)], with their cos/sin."""
    if sel.size == 0:
        return None
    cos, sin = model.ropes[kind].delta_cos_sin(deltas, model.dtype)
    return sel, cos.to(model.device), sin.to(model.device)


def _empty_kv(model: LeanModel) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (len(model.layers), model.n_kv_heads, 0, model.head_dim)
    z = torch.zeros(shape, dtype=model.dtype, device=model.device)
    return z, z.clone()
