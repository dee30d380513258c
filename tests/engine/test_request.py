"""One request object from intake to reply (``engine.request``): built once, carried as the same
object from the HTTP route through the scheduler and the engine to the decoder, its window checked
once per check."""

from __future__ import annotations

import httpx
import pytest

from engine.request import Request, RequestState
from engine.server import ServerThread, create_app
from engine.window import ContextWindow
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh

CHAT = "/v1/chat/completions"


@pytest.fixture
def built(monkeypatch):
    """Every :class:`Request` built while the test runs, on any thread."""
    made: list[Request] = []
    init = Request.__init__

    def counted(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Request, "__init__", counted)
    return made


@pytest.fixture
def reaches(monkeypatch):
    """Every context-window check made while the test runs: ``(reach, extra, at_least)``."""
    calls: list[tuple[int, int, bool]] = []
    check = ContextWindow.check_reach

    def counted(self, reach, extra, *, at_least=False):
        calls.append((reach, extra, at_least))
        return check(self, reach, extra, at_least=at_least)

    monkeypatch.setattr(ContextWindow, "check_reach", counted)
    return calls


def test_the_route_builds_one_request_and_the_decoder_gets_that_object(tiny, tmp_path, built):
    eng = fresh(tiny)
    started, finished = [], []
    start, finish = eng.decoder.start, eng.decoder.finish
    eng.decoder.start = lambda request, *a: started.append(request) or start(request, *a)  # type: ignore[method-assign]
    eng.decoder.finish = lambda g: finished.append(g.request) or finish(g)  # type: ignore[method-assign]
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    body = {"messages": trajectory(2), "max_tokens": 3, "temperature": 0, "stop": ["zz"], "min_tokens": 1,
            "tools": tools, "tool_choice": "required", "drop_message": {"3": [1]}}
    with ServerThread(create_app(eng, snapshot_dir=tmp_path)) as srv:
        r = httpx.post(srv.base_url + CHAT, json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert len(built) == 1
    request = built[0]
    assert started == [request] and finished == [request]  # the same object, not a copy
    assert request.state is RequestState.FINISHED
    assert request.sampling.stop == ("zz", *eng.renderer.template.stop)  # built once, with the template's
    assert (request.sampling.max_tokens, request.sampling.min_tokens) == (3, 1)
    assert request.opening == "<tool_call>\n" and request.messages[0]["tools"] == tools
    assert request.schedule.drops and request.prepared is not None


def test_in_process_chat_builds_one_request(tiny, built):
    eng = fresh(tiny)
    assert eng.chat(trajectory(2), max_tokens=2).token_ids
    assert len(built) == 1 and built[0].state is RequestState.FINISHED


@pytest.mark.parametrize("schedule", [None, {"drop_message": {"3": [1]}, "reposition": [3]}])
def test_a_served_chat_checks_the_window_once_per_check(tiny, tmp_path, reaches, schedule):
    """The bounds before tokenizing (message count, text length) and the exact check after it, each
    once: the decoder no longer checks again, nor does preparing repeat the screen."""
    eng = fresh(tiny)
    msgs = trajectory(2)
    with ServerThread(create_app(eng, snapshot_dir=tmp_path)) as srv:
        r = httpx.post(srv.base_url + CHAT, json={"messages": msgs, "max_tokens": 3, **(schedule or {})}, timeout=60)
    assert r.status_code == 200, r.text
    by_count = [] if schedule else [(len(msgs), 3, False)]  # with repositions there is no bound before tokenizing
    floor = eng.renderer.min_tokens(msgs)
    by_length = [(floor, 3, True)] if floor is not None and not schedule else []
    exact = [c for c in reaches if c not in by_count + by_length]
    assert reaches == by_count + by_length + exact
    assert len(exact) == 1 and exact[0][1:] == (3, False)


def test_the_lifecycle_in_process(tiny):
    eng = fresh(tiny)
    request = eng.request(trajectory(2), max_tokens=2)
    assert request.state is RequestState.NEW and request.prepared is None
    with pytest.raises(AssertionError, match="new"):
        eng.start_request(request)  # the decoder takes prepared requests only
    assert eng.prepare_request(request) is request and request.state is RequestState.PREPARED
    g = eng.start_request(request)
    assert g.request is request and request.state is RequestState.RUNNING
    while not g.done:
        eng.step([g])
    result = eng.finish(g)
    assert request.state is RequestState.FINISHED
    assert result.token_ids == fresh(tiny).chat(trajectory(2), max_tokens=2).token_ids
    eng.check_integrity()
