"""Intent relevance: a fake embedder for the arithmetic, the real MiniLM model and tokenizer once."""

from __future__ import annotations

import pytest

from search_spaces import default_token_counts, get_policy
from search_spaces.cache.embed import MiniLMEmbedder, cosine, intent_relevance
from tests.search_spaces.trajectories import build


class CountingEmbedder:
    """Embeds a text as (has 'order', has 'weather', 1); counts what it was asked."""

    name = "counting"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def embed(self, texts):
        self.asked += list(texts)
        return [(float("order" in t.lower()), float("weather" in t.lower()), 1.0) for t in texts]


def test_intent_relevance_is_cosine_to_the_first_user_message():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Find order 7."},
            {"role": "assistant", "content": ""}, {"role": "tool", "content": "The weather is fine."}]
    emb = CountingEmbedder()
    rel = intent_relevance(msgs, emb)
    assert rel[1] == 1.0 and rel[2] == 0.0  # itself; an empty message
    assert rel[0] == round(cosine((0, 0, 1), (1, 0, 1)), 6) == 0.707107 and rel[3] == 0.5
    assert "" not in emb.asked
    assert intent_relevance([{"role": "system", "content": "x"}], emb) == (0.0,)


def test_relevance_of_a_trajectory_is_computed_once_per_embedding():
    msgs = [{"role": "user", "content": "Find order 8."}, {"role": "tool", "content": "order 8: shipped"},
            {"role": "tool", "content": "rain tomorrow"}]
    emb = CountingEmbedder()
    rel = intent_relevance(msgs, emb)
    assert intent_relevance(msgs, emb) == rel and len(emb.asked) == 3  # asked once, for the three texts
    other = CountingEmbedder()
    other.name = "counting-2"
    assert intent_relevance(msgs, other) == rel and len(other.asked) == 3  # another embedding: its own
    changed = [*msgs[:2], {"role": "tool", "content": "order 8: weather delay"}]
    assert intent_relevance(changed, emb)[2] != rel[2]  # another text: computed again


def test_scored_drop_computes_relevance_only_when_its_weights_need_it():
    msgs = build(["call"] * 4, [False])
    emb = CountingEmbedder()
    p = get_policy("scored_drop", embedder=emb, budget_tokens=300)
    p.decide(msgs, token_counts=[50] * len(msgs))
    assert emb.asked == []
    p = get_policy("scored_drop", embedder=emb, budget_tokens=300, w_intent=1.0)
    p.decide(msgs, token_counts=[50] * len(msgs))
    assert emb.asked  # computed once the intent weight is on


@pytest.mark.slow
def test_real_embedding_model_and_default_token_counter():
    emb = MiniLMEmbedder()
    msgs = [{"role": "user", "content": "Which warehouse ships order 4821 and why was it on hold?"},
            {"role": "tool", "content": "Order 4821 ships from the Lyon warehouse; it was held for a customs check."},
            {"role": "tool", "content": "Tomorrow's weather in Osaka: light rain, 14 degrees."}]
    rel = intent_relevance(msgs, emb)
    assert rel[0] == pytest.approx(1.0, abs=1e-5)
    assert rel[1] > rel[2] + 0.2  # the on-topic response is closer to the task
    assert intent_relevance(msgs, emb) == rel  # cached per text, deterministic
    counts = default_token_counts(msgs)
    assert len(counts) == 3 and all(c > 5 for c in counts)
    # the convenience form with both defaults: gemma token counts and the real embedder
    budget = counts[0] + counts[1] + 1  # over budget at message 2 only; one drop is enough
    p = get_policy("scored_drop", embedder=emb, budget_tokens=budget, protect_last=0, w_intent=5.0, w_recency=0.0,
                   w_reference=0.0, w_cost=0.0, target_ratio=0.99)
    assert p.decide(msgs)["drop_message"] == {"2": [2]}  # the off-topic response goes first
