"""Scoring candidates: the forward passes behind :meth:`engine.engine.Engine.score`.

A request's history is computed once, with the first group of candidates; the candidates go
through the model in groups (:data:`SCORE_GROUP_TOKENS`, :data:`SCORE_GROUP_SIZE`), each seeing
the history's alive tokens and then itself, and only each token's own log-probability is kept
(:func:`target_logprobs`, :func:`logit_rows` rows of logits at a time), so memory does not
grow with the number of candidates. Many requests in one pass: :mod:`engine.batch_score`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from engine.prefill import Job, PrefillResult, batched_prefill, commit_prefill, history_jobs, tree_gather

if TYPE_CHECKING:
    from engine.cache.plan import RequestPlan
    from engine.cache.radix import Node, RadixTree
    from engine.history import History, Item
    from engine.models.lean import LeanModel

SCORE_GROUP_TOKENS = 256
"""Candidate tokens :meth:`Engine.score` puts through the model in one forward pass (bounds its memory)."""
SCORE_GROUP_SIZE = 16
"""Candidates in one forward pass (each holds its own view of the history while attending)."""
SCORE_LOGIT_BYTES = 24 << 20
"""Bytes of vocabulary-sized float32 logits alive at once while scoring (``logsumexp`` holds a
temporary of the same size): 24 rows at gemma's 262,144-token vocabulary, 41 at Qwen's 151,936.
Each chunk reads the whole LM head once, so larger chunks read it fewer times (scoring 1,519
recorded assistant tokens took 1.8x less time at 128 rows than at 16), but 128 rows grew a scoring
process by 230 MiB (tests/engine/test_request_memory.py bounds the growth at 64 MiB). Rows are
independent in the product: any chunk size gives the same log-likelihoods."""


def logit_rows(vocab_size: int) -> int:
    """Rows of logits per chunk within :data:`SCORE_LOGIT_BYTES` (at least 1)."""
    return max(1, SCORE_LOGIT_BYTES // (4 * max(1, vocab_size)))


def _groups_of(lens: Sequence[int]) -> list[list[int]]:
    """Consecutive candidate indices, at most SCORE_GROUP_SIZE and SCORE_GROUP_TOKENS tokens per group
    (a longer candidate is a group of its own)."""
    groups: list[list[int]] = [[]]
    tokens = 0
    for i, k in enumerate(lens):
        if groups[-1] and (len(groups[-1]) >= SCORE_GROUP_SIZE or tokens + k > SCORE_GROUP_TOKENS):
            groups.append([])
            tokens = 0
        groups[-1].append(i)
        tokens += k
    return groups


def score_passes(model: LeanModel, tree: RadixTree, bytes_per_token: int, plan: RequestPlan, items: list[Item],
                 history: History, conts: Sequence[list[int]]) -> tuple[Node, list[float]]:
    """The forward passes of :meth:`engine.engine.Engine.score`: each continuation of ``conts``
    scored after ``history`` (planned as ``plan`` against ``tree``, to which the history is then
    committed); returns the committed end node and the scores.

    Token space of the passes (indices)::

        | history [0, n) | candidate 0 | candidate 1 | ... |    each candidate sees the history's
        ^0               ^n            ^n + len(c0)             alive tokens, then itself, at
                                                                positions next_pos, next_pos + 1, ...

    Pass 1 computes the history's missing tokens and the first group; later passes gather the
    history's KV from pass 1's result. Logits are made :func:`logit_rows` rows at a time.
    """
    n = history.n_tokens
    lens = [len(c) for c in conts]
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64) + n
    token_ids = np.concatenate([history.token_ids, np.asarray([t for c in conts for t in c], dtype=np.int64)])
    compute_pos = np.concatenate([history.compute_pos,
                                  *(history.next_pos + np.arange(k, dtype=np.int64) for k in lens)])
    head = [n - 1] if plan.compute[n - 1] else []
    first_pass: PrefillResult | None = None
    first: torch.Tensor | None = None  # log-probabilities of the token after the history [V]
    last_hidden: torch.Tensor | None = None
    scores: list[float] = []
    for group in _groups_of(lens):
        jobs, rows, targets = [], [], []
        for i in group:
            idx = np.arange(starts[i], starts[i] + lens[i], dtype=np.int64)
            pos = history.next_pos + np.arange(lens[i], dtype=np.int64)
            jobs.append(Job(idx, np.concatenate([history.alive, idx]), np.concatenate([history.alive_pos, pos])))
            rows.extend(idx[:-1].tolist())
            targets.extend(conts[i][1:])
        if first_pass is None:
            pre = batched_prefill(model, token_ids, compute_pos, [*history_jobs(history, plan.compute), *jobs],
                                  tree_gather(plan.match.path, model.device), head + rows, logits=False)
            first_pass = pre
            last_hidden = pre.hidden[0] if head and pre.hidden is not None else None
            after = last_hidden if last_hidden is not None else plan.end_hidden.to(model.device)
            first = torch.log_softmax(model.logits(after[None]), -1)[0]
            hidden = pre.hidden[len(head):] if pre.hidden is not None else None
        else:
            pre = batched_prefill(model, token_ids, compute_pos, jobs, first_pass.columns, rows,
                                  logits=False)
            hidden = pre.hidden
        picked = target_logprobs(model, hidden, targets) if targets else []
        k = 0
        for i in group:
            assert first is not None
            total = float(first[conts[i][0]])
            for _ in range(lens[i] - 1):
                total += picked[k]
                k += 1
            scores.append(total)
    assert first_pass is not None
    return commit_prefill(tree, plan, items, first_pass, last_hidden, bytes_per_token, model.device), scores


def target_logprobs(model: LeanModel, hidden: torch.Tensor | None, targets: Sequence[int]) -> list[float]:
    """log p(targets[r] | hidden[r]) under ``model`` for each row of ``hidden`` (last-layer states),
    computing at most :func:`logit_rows` rows of logits at once (what scoring keeps of each token)."""
    assert hidden is not None and hidden.shape[0] == len(targets)
    out: list[float] = []
    want = torch.as_tensor(list(targets), dtype=torch.int64, device=hidden.device)
    rows = logit_rows(model.vocab_size)
    for a in range(0, len(targets), rows):
        logits = model.logits(hidden[a:a + rows])
        lp = logits.gather(1, want[a:a + rows, None])[:, 0] - torch.logsumexp(logits, dim=-1)
        out.extend(lp.tolist())
    return out
