"""The length bound on token counts (engine.tokenbound) never exceeds what the real tokenizer gives.

Checked against the default model's tokenizer (shared by the tiny models) on hostile strings:
runs of spaces and of "▁" (its longest tokens are 31 of them), the vocabulary's longest pieces
repeated and concatenated at random, special-token text, byte-fallback text, scripts whose
characters take 3-4 bytes. Tokenizers whose pipeline may drop input get no bound at all.
"""

from __future__ import annotations

import json
import random

import pytest

from engine.layout import Renderer
from engine.models.loading import load_tokenizer
from engine.tokenbound import META, bound_from_spec, measure, token_bound


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


@pytest.fixture(scope="module")
def bound(tok):
    b = token_bound(tok)
    assert b is not None
    return b


@pytest.fixture(scope="module")
def spec(tok):
    return json.loads(tok.backend_tokenizer.to_str())


def n_tokens(tok, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False))


def long_pieces(spec, k: int = 400) -> list[str]:
    """The ``k`` vocabulary and added-token strings that cover the most input (either unit)."""
    vocab = [*spec["model"]["vocab"], *(t["content"] for t in spec["added_tokens"])]
    by_spaces = sorted(vocab, key=lambda p: measure(p)[0], reverse=True)[:k // 2]
    by_bytes = sorted(vocab, key=lambda p: measure(p)[1], reverse=True)[:k // 2]
    return [p.replace(META, " ") if random.Random(len(p)).random() < 0.5 else p for p in by_spaces + by_bytes]


HOSTILE = [
    " ", "a", "hi", " " * 31, " " * 32, " " * 1000, META * 31, META * 1000, (" " + META) * 500, "\n" * 500,
    "\t" * 500, "a" * 5000, "lorem ipsum dolor sit amet consectetur " * 200, "<start_of_turn>" * 100,
    "<end_of_turn>\n" * 100, "<bos><eos><pad>" * 50, "<0x41>" * 100, "<unk>" * 100, "日本語のテキスト" * 300,
    "😀🎉👍" * 300, "\u0301" * 300, "ａｂｃ" * 300, "ﬀﬁﬂ" * 300, "ǅ" * 300, "\x00\x01\x7f" * 300,
    "=" * 2000, "-" * 2000, "." * 2000, "0123456789" * 300, "http://www.example.com/" * 100,
]


def test_the_bound_never_exceeds_the_real_count_on_hostile_strings(tok, bound):
    for text in HOSTILE:
        assert bound.at_least(text) <= n_tokens(tok, text), repr(text[:40])
    assert bound.at_least("") == 0 and bound.at_least("x") == 1


def test_the_bound_never_exceeds_the_real_count_on_the_longest_pieces(tok, bound, spec):
    pieces = long_pieces(spec)
    for p in pieces:  # each piece alone, and repeated (the text a bound is tightest on)
        assert bound.at_least(p) <= n_tokens(tok, p), repr(p)
        assert bound.at_least(p * 20) <= n_tokens(tok, p * 20), repr(p)
    rng = random.Random(0)
    fillers = [" ", META, "a", "\n", "日", "😀", "<start_of_turn>"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) if rng.random() < 0.8 else rng.choice(fillers)
                       for _ in range(rng.randint(1, 60)))
        assert bound.at_least(text) <= n_tokens(tok, text), repr(text[:80])


def test_the_bound_refuses_the_benchmarks_3_mb_prompt_without_tokenizing(bound):
    words = "lorem ipsum dolor sit amet consectetur " * (3_000_000 // 40)
    assert bound.at_least(words) > 32_768  # gemma-3-270m's window: refused from its length alone


def test_min_tokens_is_a_lower_bound_of_the_rendered_prompt(tok):
    r = Renderer(tok, "gemma")
    cases = [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": " " * 3000}, {"role": "user", "content": META * 3000}],
        [{"role": "user", "content": "<start_of_turn>model\n" * 50},
         {"role": "assistant", "content": "x" * 2000, "reasoning_content": "think " * 300},
         {"role": "tool", "name": "f", "content": "日本語" * 500}],
        [{"role": "user", "content": [{"type": "text", "text": "a" * 999}, {"type": "text", "text": " " * 99}]}],
        [{"role": "assistant", "content": "",
          "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}],
    ]
    for messages in cases:
        for prefix in ("", "Sure", " " * 200):
            want = len(r.render(messages).token_ids) + n_tokens(tok, prefix)
            assert r.min_tokens(messages, prefix) <= want, messages


def test_tokenizers_that_may_drop_input_get_no_bound(spec):
    assert bound_from_spec(spec) is not None

    def changed(edit):  # a copy of what the edits touch (a deep copy of 262k pieces takes seconds)
        s = {**spec, "model": {**spec["model"], "vocab": dict(spec["model"]["vocab"])},
             "added_tokens": [dict(t) for t in spec["added_tokens"]]}
        edit(s)
        return bound_from_spec(s)

    assert changed(lambda s: s["added_tokens"][0].update(lstrip=True)) is None  # eats the whitespace before it
    assert changed(lambda s: s["added_tokens"][0].update(rstrip=True)) is None
    assert changed(lambda s: s.update(normalizer={"type": "NFKC"})) is None  # "ａ" (3 bytes) -> "a"
    assert changed(lambda s: s.update(normalizer={"type": "Strip", "strip_left": True, "strip_right": True})) is None
    assert changed(lambda s: s.update(normalizer={"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": META}, {"type": "Lowercase"}]})) is None
    assert changed(lambda s: s.update(pre_tokenizer={"type": "Split", "pattern": {"String": " "},
                                                     "behavior": "Removed", "invert": False})) is None
    assert changed(lambda s: s.update(pre_tokenizer={"type": "ByteLevel"})) is None
    assert changed(lambda s: s["model"].update(byte_fallback=False)) is None  # a fused <unk> covers any run
    assert changed(lambda s: s["model"]["vocab"].pop("<0x41>")) is None
    assert changed(lambda s: s["model"].update(type="Unigram")) is None
    assert changed(lambda s: s.update(normalizer={"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": META}, {"type": "Replace", "pattern": {"String": " "}, "content": META}]}))


def test_a_tokenizer_without_a_backend_gets_no_bound():
    class Plain:
        bos_token_id = None

        def encode(self, text, add_special_tokens=False):
            return list(text.encode())

    assert token_bound(Plain()) is None
    assert Renderer(Plain(), "plain").min_tokens([{"role": "user", "content": "x" * 100}]) is None
