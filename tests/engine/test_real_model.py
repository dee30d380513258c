"""The real default model (gemma-3-270m): retrieval works with the evidence and fails without it."""

from __future__ import annotations

import pytest

from engine import Engine

pytestmark = pytest.mark.slow

MESSAGES = [
    {"role": "system", "content": "You are a logistics agent. You call tools and read their results."},
    {"role": "user", "content": "Find which warehouse ships order 4821."},
    {"role": "assistant", "content": "I will search the order database.",
     "tool_calls": [{"function": {"name": "search", "arguments": {"q": "4821"}}}]},
    {"role": "tool", "name": "search",
     "content": "Order 4821 ships from Warehouse Falkirk. Order 4822 ships from Warehouse Dundee. "
                "Order 4823 ships from Warehouse Perth."},
    {"role": "assistant", "content": "Let me check the carrier schedule too.",
     "tool_calls": [{"function": {"name": "carriers", "arguments": {}}}]},
    {"role": "tool", "name": "carriers",
     "content": "Carrier Nordline departs Monday. Carrier Swiftway departs Tuesday. Carrier Baltic departs Friday."},
    {"role": "user", "content": "Which warehouse ships order 4821?"},
]
CANDIDATES = [" Falkirk", " Dundee", " Perth", " Nordline", " Baltic"]
CLOZE = "Order 4821 ships from Warehouse"
DROP_EVIDENCE = {"drop_message": {"5": [3]}, "reposition": [5]}


@pytest.fixture(scope="module")
def plain_gemma():
    return Engine.from_pretrained("gemma-3-270m", template="plain")


def test_answers_from_an_early_tool_response_and_not_after_dropping_it(plain_gemma):
    eng = plain_gemma
    text_before = eng.render(MESSAGES).token_ids
    full = eng.score(MESSAGES, CANDIDATES, prefix=CLOZE)
    gen_full = eng.chat(MESSAGES, max_tokens=4, prefix=CLOZE)
    assert CANDIDATES[full.best] == " Falkirk"
    assert "Falkirk" in gen_full.text

    dropped = eng.score(MESSAGES, CANDIDATES, DROP_EVIDENCE, prefix=CLOZE)
    gen_dropped = eng.chat(MESSAGES, DROP_EVIDENCE, max_tokens=4, prefix=CLOZE)
    assert CANDIDATES[dropped.best] != " Falkirk"
    assert dropped.logprobs[0] < full.logprobs[0] - 5.0
    assert "Falkirk" not in gen_dropped.text
    # The drop reached the cache, never the text: the same tokens are rendered either way.
    assert eng.render(MESSAGES).token_ids == text_before
    assert dropped.usage.prompt_tokens == full.usage.prompt_tokens
    eng.check_integrity()


def test_segment_batched_restore_matches_the_reference_on_gemma(plain_gemma):
    """A few real-model cases: drops + reposition, restored after eviction, equal the reference."""
    import torch

    from engine.oracle.reference import ReferenceExecutor

    eng = Engine(plain_gemma.model, plain_gemma.tokenizer, "plain", pool_bytes=40 * eng_bpt(plain_gemma))
    for sched in (None, DROP_EVIDENCE, {"drop_message": {"4": [2], "6": [3, 5]}, "reposition": [6]}):
        items = eng.layout(MESSAGES, sched).items
        ref = torch.log_softmax(ReferenceExecutor(eng.model).run(items).last_logits, -1)
        got = eng.score(MESSAGES, [" Perth", " Monday"], sched)
        ids = [eng.tokenizer.encode(c, add_special_tokens=False)[0] for c in (" Perth", " Monday")]  # 1 token each
        assert abs(got.logprobs[0] - float(ref[ids[0]])) < 1e-3
        assert abs(got.logprobs[1] - float(ref[ids[1]])) < 1e-3
    eng.check_integrity()


def eng_bpt(eng: Engine) -> int:
    return eng.geometry.bytes_per_token
