"""The HTTP server with a survival manager: ``tool_gap`` pauses a session, its next request resumes it."""

from __future__ import annotations

import httpx
import pytest

from engine.server import ServerThread, create_app
from engine.survival import Action, SurvivalManager, TreeBackend
from search_spaces.survival import get_survival_policy
from tests.engine.test_engine import fresh

MSGS = [{"role": "system", "content": "You are an agent with tools."},
        {"role": "user", "content": "Look up the weather in Lyon."}]


@pytest.fixture(scope="module")
def served(tiny, tmp_path_factory):
    eng = fresh(tiny, pool_bytes=1 << 22)
    manager = SurvivalManager(TreeBackend(eng.tree, eng.geometry.bytes_per_token),
                              get_survival_policy("ttl", variant="released"), strict=False)
    app = create_app(eng, snapshot_dir=tmp_path_factory.mktemp("snaps"), survival=manager)
    with ServerThread(app) as srv:
        yield srv, manager


def post(srv, body):
    return httpx.post(srv.base_url + "/v1/chat/completions", json=body, timeout=60)


def test_tool_gap_pauses_and_the_next_request_resumes(served):
    srv, manager = served
    r = post(srv, {"messages": MSGS, "max_tokens": 3, "session_id": "agent-1",
                   "tool_gap": {"expected_s": 1.5, "tool": "weather"}})
    assert r.status_code == 200, r.text
    paused = manager.paused["agent-1"]
    assert paused.gap.tool == "weather" and paused.gap.expected_s == 1.5
    assert (paused.decision.action, paused.decision.ttl_s) == (Action.PIN, 2.0) and paused.context_tokens > 0
    follow = [*MSGS, {"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
              {"role": "tool", "name": "weather", "content": "Sunny, 21 C."}]
    r2 = post(srv, {"messages": follow, "max_tokens": 3, "session_id": "agent-1"})
    assert r2.status_code == 200 and "agent-1" not in manager.paused and manager.counters.resumes == 1
    assert r2.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    text = httpx.get(srv.base_url + "/metrics").text
    assert "akv_survival_paused_sessions" in text and "akv_survival_pauses_total 1.0" in text


@pytest.mark.parametrize("body, message", [
    ({"session_id": "x", "tool_gap": {"expected_s": -2}}, "tool_gap.expected_s must be >= 0"),
    ({"session_id": "x", "tool_gap": {"expected_s": 1, "eta": 3}}, "tool_gap: unknown field 'eta'"),
    ({"tool_gap": {"expected_s": 1.0}}, "tool_gap: a paused session needs a session_id"),
])
def test_bad_tool_gaps_get_a_clear_400(served, body, message):
    srv, _ = served
    r = post(srv, {"messages": MSGS, "max_tokens": 2, **body})
    assert r.status_code == 400 and message in r.json()["error"]["message"]
