"""The intake process (``engine.server.intake``): large bodies are refused outside the server.

The reference is the same server with the intake off: for every large body (hostile or not) the
answer must be the same, field for field; the bodies the intake refuses must never be parsed in
the server's process; a killed child must cost nothing but a fallback to parsing in the server.
Requests go over real TCP (httpx).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

import engine.server.body as body_module
from engine import Engine
from engine.server import ServerThread, create_app
from engine.server.limits import ServerLimits
from tests.procs import gone

CHAT, SCORE = "/v1/chat/completions", "/v1/akv/score"
HI = [{"role": "user", "content": "hi"}]
INTAKE = 16 << 10
PAD = "x" * (INTAKE + 1000)  # an ignored extra field: a body over the threshold whose prompt is small
LOREM = "lorem ipsum " * 5000  # ~1,400 tokens at least by its length: beyond the 512-position window


def _big(value: dict) -> bytes:
    raw = json.dumps({**value, "pad": PAD}).encode()
    assert len(raw) >= INTAKE
    return raw


# (route, body, refused by the intake?) every body is over the intake's threshold
BODIES: dict[str, tuple[str, bytes, bool]] = {
    "5,000 messages": (CHAT, json.dumps({"messages": [{"role": "user", "content": "m"}] * 5000}).encode(), True),
    "a prompt too long by its bytes": (CHAT, json.dumps({"messages": [{"role": "user", "content": LOREM}]}).encode(),
                                       True),
    "a score prefix too long by its bytes": (SCORE, json.dumps({"messages": HI, "candidates": [" a"],
                                                                "prefix": LOREM}).encode(), True),
    "too many candidates": (SCORE, _big({"messages": HI, "candidates": [" a"] * 100}), True),
    "malformed JSON": (CHAT, _big({"messages": HI})[:-1], True),
    "not UTF-8": (CHAT, _big({"messages": HI}).replace(b'"hi"', b'"\xff\xfe"'), True),
    "a duplicate key": (CHAT, b'{"messages": [], ' + _big({"messages": HI})[1:], True),
    "messages not a list": (CHAT, _big({"messages": "hi"}), True),
    "a negative temperature": (CHAT, _big({"messages": HI, "temperature": -1.0}), True),
    "a schedule beyond the messages": (CHAT, _big({"messages": HI, "drop_message": {"0": [5]}}), True),
    "a request that fits": (CHAT, _big({"messages": HI, "max_tokens": 3}), False),
    "a score that fits": (SCORE, _big({"messages": HI, "candidates": [" a", " b"]}), False),
}


def _answers(tiny, tmp_path, intake_bytes: int, bodies=BODIES) -> tuple[dict[str, tuple[int, dict]], ServerThread]:
    eng = Engine(tiny.model, tiny.tokenizer, "gemma", max_context=512, name="tiny-random")
    app = create_app(eng, snapshot_dir=tmp_path, limits=ServerLimits(max_body_bytes=8 << 20, intake_bytes=intake_bytes))
    out = {}
    with ServerThread(app) as srv:
        for case, (route, raw, _) in bodies.items():
            r = httpx.post(srv.base_url + route, content=raw, headers={"Content-Type": "application/json"},
                           timeout=120)
            out[case] = (r.status_code, r.json())
    return out, app


def _comparable(status: int, answer: dict) -> tuple[int, dict]:
    """An answer without what differs between two runs of one request (ids, timings)."""
    if status != 200:
        return status, answer
    if answer.get("object") == "chat.completion":
        return status, {"content": answer["choices"][0]["message"]["content"], "usage": answer["usage"]}
    return status, {k: v for k, v in answer.items() if k != "id"}


@pytest.fixture(scope="module")
def both(tiny, tmp_path_factory):
    parsed_here: list[int] = []
    inner = body_module.parse_model

    def spy(raw, model, depth):
        parsed_here.append(len(raw))
        return inner(raw, model, depth)

    reference, _ = _answers(tiny, tmp_path_factory.mktemp("off"), 0)
    body_module.parse_model = spy  # only the server's process: the spawned child imports its own
    try:
        screened, app = _answers(tiny, tmp_path_factory.mktemp("on"), INTAKE)
    finally:
        body_module.parse_model = inner
    return reference, screened, app.state.intake, parsed_here


@pytest.mark.parametrize("case", list(BODIES))
def test_a_large_body_gets_the_answer_it_gets_without_the_intake(both, case):
    reference, screened, _, _ = both
    assert _comparable(*screened[case]) == _comparable(*reference[case])
    refused = BODIES[case][2]
    assert (screened[case][0] >= 400) == refused, screened[case]


def test_what_the_intake_refuses_is_never_parsed_in_the_server(both):
    _, _, intake, parsed_here = both
    refusals = sum(refused for _, _, refused in BODIES.values())
    assert (intake.screened, intake.refused, intake.failures) == (len(BODIES), refusals, 0)
    big_parses = [n for n in parsed_here if n >= INTAKE]
    assert sorted(big_parses) == sorted(len(raw) for _, raw, refused in BODIES.values() if not refused)


def test_the_child_runs_at_a_lower_priority_and_a_killed_one_is_replaced(tiny, tmp_path):
    eng = Engine(tiny.model, tiny.tokenizer, "gemma", max_context=512, name="tiny-random")
    app = create_app(eng, snapshot_dir=tmp_path, limits=ServerLimits(max_body_bytes=8 << 20, intake_bytes=INTAKE))
    intake = app.state.intake
    route, raw, _ = BODIES["5,000 messages"]
    with ServerThread(app) as srv:
        pid, nice = intake.warm()
        assert pid != os.getpid()
        assert nice == min(19, os.nice(0) + 10)

        def post() -> tuple[int, dict]:
            r = httpx.post(srv.base_url + route, content=raw, headers={"Content-Type": "application/json"}, timeout=120)
            return r.status_code, r.json()

        before = post()
        assert before[0] == 413 and intake.screened == 1
        os.kill(pid, signal.SIGKILL)
        assert post() == before  # the server parsed it itself
        assert intake.failures == 1 and intake.screened == 1
        assert post() == before  # a new child screened this one
        assert intake.screened == 2
        assert intake.warm()[0] != pid
    assert not intake.running  # the app's shutdown stopped the child


SERVER_THAT_DIES = """
from engine import Engine
from engine.layout import Renderer
from engine.server.intake import Intake
from engine.server.limits import ServerLimits
from engine.window import ContextWindow
tiny = Engine.from_pretrained("tiny-random")
intake = Intake(ContextWindow(512, Renderer(tiny.tokenizer, "gemma")), ServerLimits())
print(intake.warm()[0], flush=True)
input()
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc to tell a zombie from a live child")
def test_the_child_exits_when_its_server_is_killed_outright():
    server = subprocess.Popen([sys.executable, "-c", SERVER_THAT_DIES], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        assert server.stdout is not None
        child = int(server.stdout.readline())
        assert not gone(child, timeout=0.5), f"intake child {child} ended before its server did"
    finally:
        server.kill()  # SIGKILL: no shutdown runs in the server
        server.wait(timeout=30)
    assert gone(child, timeout=15), f"intake child {child} outlived its killed server"  # it polls every second


def test_the_threshold_is_checked_and_zero_turns_the_intake_off():
    assert ServerLimits(intake_bytes=0).intake_bytes == 0
    with pytest.raises(ValueError, match="intake_bytes must be a non-negative integer, got -1"):
        ServerLimits(intake_bytes=-1)


def test_health_says_where_the_intake_is(tiny, tmp_path):
    eng = Engine(tiny.model, tiny.tokenizer, "gemma", max_context=512, name="tiny-random")

    def intake_state(srv: ServerThread) -> str:
        return httpx.get(srv.base_url + "/health").json()["intake"]

    off = create_app(eng, snapshot_dir=tmp_path / "off", limits=ServerLimits(intake_bytes=0))
    with ServerThread(off) as srv:
        assert intake_state(srv) == "off"
    app = create_app(eng, snapshot_dir=tmp_path / "on", limits=ServerLimits(intake_bytes=INTAKE))
    with ServerThread(app) as srv:
        assert intake_state(srv) == "idle"  # nothing started it yet
        started = app.state.intake.start()  # what akv serve does: the server answers meanwhile
        assert intake_state(srv) in ("starting", "ready")
        pid, _ = started.result(timeout=120)
        assert intake_state(srv) == "ready" and not gone(pid, timeout=0.2)
        os.kill(pid, signal.SIGKILL)
        route, raw, _ = BODIES["5,000 messages"]
        r = httpx.post(srv.base_url + route, content=raw, headers={"Content-Type": "application/json"}, timeout=120)
        assert r.status_code == 413 and intake_state(srv) == "idle"  # found broken and discarded
