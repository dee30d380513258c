"""Text baselines: scaled thresholds, what they record for cost accounting, pluggable summarizers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from search_spaces import estimate_tokens, get_policy
from search_spaces.cache.summarize import CallableSummarizer, ExtractiveSummarizer, engine_summarizer, summary_prompt
from tests.search_spaces.trajectories import build, recorded

MSGS = build(["call"] * 6, [True], words=10)  # 0 S, 1 U, A2 T3 A4 T5 A6 T7 A8 T9 A10 T11 A12 T13
COUNTS = [20, 20] + [100] * (len(MSGS) - 2)


def test_thresholds_are_scaled_from_the_reference_study():
    assert get_policy("standard").params == {"window": 4096, "threshold_ratio": 0.75, "keep_rounds": 2,
                                             "summary_ratio": 0.125}
    assert get_policy("text_engineering").params["threshold_ratio"] == 0.375
    small = build(["call"], [False])
    for name, threshold in (("standard", 3072), ("text_engineering", 1536), ("trim", 3072)):
        d = get_policy(name).decide(small, token_counts=[5] * len(small))
        assert d["threshold"] == threshold and d["window"] == 4096
        assert d["messages"] == small and d["events"] == [] and d["first_edited"] is None
    assert get_policy("trim").decide(small, token_counts=[5] * len(small))["target"] == 2048
    assert get_policy("standard", window=128_000).decide(small, token_counts=[5] * 4)["threshold"] == 96_000
    assert get_policy("text_engineering", window=128_000).decide(small, token_counts=[5] * 4)["threshold"] == 48_000


def test_standard_summarizes_old_rounds_and_records_the_cost_inputs():
    # threshold 0.75 * 800 = 600: context is 640 at message 7 (a tool response) -> summarize 2..3,
    # keeping the newest two rounds (4..5 and 6..7)
    d = get_policy("standard", window=800).decide(MSGS[:8], token_counts=COUNTS[:8])
    assert d["summarizer"] == "extractive" and d["token_counter"] == "estimate"
    assert d["summarized_ids"] == [2, 3] and d["first_edited"] == 2
    assert [m["role"] for m in d["messages"]] == ["system", "user", "user", "assistant", "tool", "assistant", "tool"]
    assert d["messages"][2]["content"].startswith("Summary of messages 2-3:\n")
    assert d["messages"][3:] == MSGS[4:8]
    event = d["events"][0]
    assert event["trigger"] == 7 and event["summarized_ids"] == [2, 3]
    assert event["output_tokens"] == d["summary_output_tokens"] == estimate_tokens([d["messages"][2]])[0]
    assert event["input_tokens"] == d["summary_input_tokens"] > event["output_tokens"]
    assert "4800" in d["summary"]  # the extractive summary keeps the numbers of the summarized tool response


def test_text_engineering_summarizes_earlier_than_standard():
    standard = get_policy("standard").decide(MSGS, token_counts=[3 * c for c in COUNTS])
    te = get_policy("text_engineering").decide(MSGS, token_counts=[3 * c for c in COUNTS])
    assert len(te["events"]) > len(standard["events"])
    assert te["events"][0]["trigger"] < (standard["events"] or [{"trigger": 99}])[0]["trigger"]


def test_a_summary_stays_until_the_next_one():
    p = get_policy("standard", window=800)
    turns = [p.decide(MSGS[:n], token_counts=COUNTS[:n]) for n in (8, 9, 10)]
    assert len(turns[0]["events"]) == 1
    assert turns[0]["events"] == turns[1]["events"]  # message 8 is an assistant turn: no check there
    assert turns[1]["messages"][: len(turns[0]["messages"])] == turns[0]["messages"]
    assert len(turns[2]["events"]) == 2  # 9 is a tool response over the threshold: summary folded again
    assert turns[2]["summarized_ids"] == [2, 3, 4, 5] and turns[2]["events"][0] == turns[0]["events"][0]


def test_trim_deletes_old_rounds_without_summary():
    d = get_policy("trim", window=800).decide(MSGS[:10], token_counts=COUNTS[:10])
    # 640 > 600 at message 7: trim towards 400 keeping two rounds -> only 2..3 can go (leaves 440);
    # 640 again at message 9 -> 4..5 go
    assert d["summarizer"] is None and d["first_edited"] == 2
    assert [(e["trigger"], e["removed_ids"]) for e in d["events"]] == [(7, [2, 3]), (9, [4, 5])]
    assert d["messages"] == MSGS[:2] + MSGS[6:10]
    wide = get_policy("trim", window=800, keep_rounds=1).decide(MSGS[:10], token_counts=COUNTS[:10])
    # keeping one round, 2..5 go at once (240 <= 400), and 440 at message 9 stays under 600
    assert [e["removed_ids"] for e in wide["events"]] == [[2, 3, 4, 5]]


def test_callable_summarizer_is_cached_and_recorded():
    calls = []

    def llm(prompt: str) -> str:
        calls.append(prompt)
        return f"summary #{len(calls)}"

    p = get_policy("standard", window=800, summarizer=CallableSummarizer(llm, name="engine"))
    decisions = p.run_episode(MSGS, token_counts=COUNTS)
    last = decisions[-1].wire
    assert last["summarizer"] == "engine"
    assert len(calls) == len(last["events"])  # each checkpoint summarized once, however many turns
    assert last["summary"] == f"summary #{len(calls)}"
    assert all(prompt.startswith(summary_prompt([], 0)[:40]) for prompt in calls)


def test_engine_summarizer_wraps_engine_chat():
    seen = []

    class FakeEngine:
        def chat(self, messages, max_tokens):
            seen.append((messages, max_tokens))
            return SimpleNamespace(text=" Order 4800 ships from A. ")

    s = engine_summarizer(FakeEngine(), max_tokens=32)
    assert s.summarize(["[3 tool] Order 4800 ships from Warehouse A."], 100) == "Order 4800 ships from A."
    assert seen[0][1] == 32 and seen[0][0][0]["role"] == "user" and s.name == "engine"


def test_custom_token_counter_is_used_and_named():
    def words(messages):
        return [len(str(m.get("content", "")).split()) for m in messages]

    d = get_policy("standard", window=800, counter=words).decide(MSGS[:8], token_counts=COUNTS[:8])
    assert d["token_counter"] == "words" and d["summary_output_tokens"] == words([d["messages"][2]])[0]


def test_extractive_summary_keeps_entity_sentences_within_budget():
    texts = ["[3 tool search] The weather is nice. Order 4821 ships from Warehouse C. nothing here",
             "[5 tool search] Customer Acme7 paid 120 dollars."]
    out = ExtractiveSummarizer().summarize(texts, 1000)
    assert out == "[3 tool search] Order 4821 ships from Warehouse C.\n[5 tool search] Customer Acme7 paid 120 dollars."
    assert len(ExtractiveSummarizer().summarize(texts, 40)) <= 40 + len("[5 tool search] ")


@pytest.mark.parametrize("name", ["standard", "text_engineering", "trim"])
def test_text_decisions_on_recorded_trajectories_keep_tool_pairs(name):
    for msgs in recorded():
        counts = [4 * c for c in estimate_tokens(msgs)]
        d = get_policy(name, window=2048).decide(msgs, token_counts=counts)
        ids = {m.get("tool_call_id") for m in d["messages"] if m["role"] == "tool"}
        calls = {c["id"] for m in d["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []}
        assert ids <= calls  # every kept tool response still has its call
