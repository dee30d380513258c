"""bench.server_limits' attack bodies: each holds its counter mark once, and every numbered body
is valid JSON of the same length whose first message carries the counter (so no two are equal)."""

from __future__ import annotations

import json

import pytest

from bench.server_limits import MARK, _attacks, numbered


def test_each_attack_body_is_numbered_in_place():
    attacks = _attacks()
    for name, body in attacks.items():
        assert body.count(MARK) == 1, name
        first, later = numbered(body, 0), numbered(body, 12_345_678)
        assert len(first) == len(later) == len(body) and first != later, name
        value = json.loads(later)
        content = value["messages"][0]["content"]
        assert content.startswith("12345678") and MARK.decode() not in content, name
        assert json.loads(first)["messages"][1:] == value["messages"][1:], name
    sizes = {name: len(body) for name, body in attacks.items()}
    assert sizes["10 MB body (over --max-body-bytes)"] > 10_000_000
    assert 2_900_000 < sizes["3 MB prompt (over the context window)"] < 4 << 20  # under the default body limit
    assert len(json.loads(attacks["100k messages (over the context window)"])["messages"]) == 100_000


def test_a_body_without_its_mark_or_a_counter_too_long_is_refused():
    with pytest.raises(ValueError):
        numbered(b'{"messages": []}', 0)
    with pytest.raises(ValueError):
        numbered(b'{"a": "' + MARK + b'"}', 10**8)
