"""Layout: exact per-message spans, stability under append, event order, part-level drops."""

from __future__ import annotations

import pytest

from engine import REPOSITION, Drop, MessageError, ScheduleError
from engine.layout import Renderer
from engine.models.loading import load_tokenizer
from tests.engine.agent import trajectory


@pytest.fixture(scope="module", params=["gemma", "plain"])
def renderer(request):
    return Renderer(load_tokenizer("gemma-3-270m"), request.param)


def test_spans_tile_the_tokens(renderer):
    msgs = trajectory(4)
    r = renderer.render(msgs)
    assert r.spans[0][0] == 0
    for (s0, e0), (s1, _) in zip(r.spans, r.spans[1:]):
        assert e0 == s1 and s0 < e0
    assert r.spans[-1][1] == r.prompt_start
    assert r.token_ids[r.prompt_start:] == renderer.prompt_ids
    # Each message's tokens are exactly its parts, tokenized on their own.
    tok = renderer.tokenizer
    for i, msg in enumerate(r.messages):
        s, e = r.spans[i]
        parts = renderer.template.parts(msg, i)
        expect = [tok.bos_token_id] if i == 0 else []
        for p in parts:
            expect += tok.encode(p.text, add_special_tokens=False)
        assert r.token_ids[s:e] == expect


def test_rendering_is_stable_under_append(renderer):
    msgs = trajectory(6)
    full = renderer.render(msgs)
    for k in range(1, len(msgs)):
        part = renderer.render(msgs[:k])
        assert part.spans == full.spans[:k]
        assert part.token_ids[:part.prompt_start] == full.token_ids[:full.spans[k - 1][1]]


def test_a_prefix_of_a_rendering_is_the_rendering_of_the_prefix(renderer):
    msgs = trajectory(6)
    full = renderer.render(msgs)
    for k in range(1, len(msgs) + 1):
        assert full.prefix(k) == renderer.render(msgs[:k]), k
    for bad in (0, len(msgs) + 1):
        with pytest.raises(MessageError, match="prefix needs"):
            full.prefix(bad)


def test_events_follow_their_trigger_drop_before_reposition(renderer):
    msgs = trajectory(3)
    lay = renderer.layout(msgs, {"drop_message": {"5": [3]}, "reposition": [5]})
    r = lay.rendered
    end5 = r.spans[5][1]
    # Items: tokens up to the end of message 5, then Drop(span 3), then Reposition, then the rest.
    tokens_before = sum(1 for it in lay.items[: end5 + 2] if isinstance(it, int))
    assert tokens_before == end5
    assert lay.items[end5] == Drop((r.spans[3],))
    assert lay.items[end5 + 1] is REPOSITION
    assert [it for it in lay.items if isinstance(it, int)] == r.token_ids


def test_thinking_drop_targets_only_the_reasoning(renderer):
    msgs = trajectory(3)
    lay = renderer.layout(msgs, {"drop_rule": {"type": "thinking_drop", "drop_messages": {"6": [2]}}})
    drop = next(it for it in lay.items if isinstance(it, Drop))
    thinking = next(p for p in lay.rendered.parts[2] if p.kind == "thinking")
    assert drop.ranges == ((thinking.start, thinking.end),)


def test_text_drop_targets_tokens_inside_the_range(renderer):
    msgs = trajectory(2)
    content = msgs[3]["content"]
    start = content.index("Warehouse")
    end = start + len("Warehouse A")
    lay = renderer.layout(msgs, {"drop_rule": {"type": "text_drop",
                                               "drop_messages": {"3": [{"message": 3, "start": start, "end": end}]}}})
    drop = next(it for it in lay.items if isinstance(it, Drop))
    dropped = [lay.rendered.token_ids[t] for s, e in drop.ranges for t in range(s, e)]
    assert renderer.tokenizer.decode(dropped).strip() == "Warehouse A"
    with pytest.raises(ScheduleError, match="beyond"):
        renderer.layout(msgs, {"drop_rule": {"type": "text_drop", "drop_messages": {
            "3": [{"message": 3, "start": 0, "end": len(content) + 5}]}}})


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ([], "messages"),
        ([{"role": "wizard", "content": "hi"}], "messages[0].role"),
        ([{"role": "user", "content": 5}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}], "messages[0].content"),
        ([{"role": "user", "content": "a"}, "not a dict"], "messages[1]"),
        ([{"role": "user", "content": "a", "tool_calls": [{}]}], "messages[0].tool_calls"),
    ],
)
def test_bad_messages_name_the_field(renderer, messages, field):
    with pytest.raises(MessageError) as err:
        renderer.render(messages)
    assert err.value.field == field


def test_content_parts_are_joined(renderer):
    a = renderer.render([{"role": "user", "content": [{"type": "text", "text": "Hello "},
                                                       {"type": "text", "text": "world"}]}])
    b = renderer.render([{"role": "user", "content": "Hello world"}])
    assert a.token_ids == b.token_ids


def _compile_by_message(renderer, rendered, schedule):
    """The obvious compile: every message's tokens, then the events it triggers."""
    from engine.history import merge_ranges

    drops, items = dict(schedule.drops), []
    for i, (s, e) in enumerate(rendered.spans):
        items.extend(rendered.token_ids[s:e])
        ranges = merge_ranges([r for d in drops.get(i, ()) for r in renderer._target_ranges(rendered, d, i)])
        if ranges:
            items.append(Drop(ranges))
        if i in schedule.repositions:
            items.append(REPOSITION)
    return items + rendered.token_ids[rendered.prompt_start:]


@pytest.mark.parametrize("seed", range(12))
def test_compile_equals_the_message_by_message_reference(renderer, seed):
    import random

    from engine.schedule import parse_schedule

    rng = random.Random(seed)
    msgs = trajectory(rng.randint(1, 6))
    n = len(msgs)
    drops: dict[str, list[int]] = {}
    free = set(range(n))  # a message is dropped at most once
    for trigger in sorted(rng.sample(range(n), rng.randint(0, n))):
        ids = sorted(i for i in free if i <= trigger and rng.random() < 0.5)
        if ids:
            drops[str(trigger)] = ids
            free -= set(ids)
    repos = sorted(rng.sample(range(n), rng.randint(0, min(2, n))))
    schedule = parse_schedule({"drop_message": drops, "reposition": repos}, n_messages=n)
    rendered = renderer.render(msgs)
    assert renderer.compile(rendered, schedule) == _compile_by_message(renderer, rendered, schedule)


@pytest.mark.parametrize("seed", range(8))
def test_a_session_compiled_once_gives_every_request_its_own_compile(renderer, seed):
    """Request n of a session holds messages[:n] under the last schedule's entries triggered before
    n (what a schedule that only extends its past had at n): the session layout's request(n) must
    equal compiling that prefix under that restricted schedule, thinking drops included."""
    import random

    from engine.schedule import DropKind, parse_schedule

    rng = random.Random(seed)
    msgs = trajectory(rng.randint(2, 6))
    n = len(msgs)
    table: dict[str, list[int]] = {}
    thinking: dict[str, list[int]] = {}
    free = set(range(n))
    for trigger in sorted(rng.sample(range(n), rng.randint(1, n))):
        ids = sorted(i for i in free if i <= trigger and rng.random() < 0.4)
        if ids:
            table[str(trigger)] = ids
            free -= set(ids)
        reasoning = [i for i in range(trigger + 1) if msgs[i].get("reasoning_content") and i in free]
        if reasoning and rng.random() < 0.5:
            thinking[str(trigger)] = reasoning[:1]
    rules = [{"type": "message_drop", "drop_messages": table}, {"type": "thinking_drop", "drop_messages": thinking}]
    repos = sorted(rng.sample(range(n), rng.randint(0, min(3, n))))
    last = parse_schedule({"drop_rule": rules, "reposition": repos}, n_messages=n)
    assert any(d.kind is DropKind.THINKING for _, ds in last.drops for d in ds) or not thinking
    rendered = renderer.render(msgs)
    session = renderer.compile_session(rendered, last)
    for k in range(1, n + 1):
        restricted = parse_schedule({
            "drop_rule": [{"type": r["type"], "drop_messages": {t: v for t, v in r["drop_messages"].items()
                                                                if int(t) < k}} for r in rules],
            "reposition": [r for r in repos if r < k]}, n_messages=k)
        assert session.request(k) == renderer.compile(rendered.prefix(k), restricted), k
