"""``akv serve --policy NAME=SPEC``: a built-in policy, an exported module and a run's pick served as
``MODEL@NAME`` to the plain openai client, token for token as the client-side schedule; hostile
modules contained, refused ones refused at start in one line; the command line's wiring."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openai import OpenAI

from engine.server import ServerThread, create_app
from engine.server.policies import Policies
from evals.cache.served import ReplayPolicy
from rsi.cache.export import pick_spec
from rsi.cache.serving import served_policies
from rsi.cli import main
from search_spaces import Policy, export_policy, get_policy, request_points
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh
from tests.engine.test_server import wait_idle
from tests.exported import load_exported
from tests.rsi.test_cli_errors import fake_run, one_line
from tests.search_spaces.test_export import DUNDER_WALK, FORMAT_WALK, SHADOWED_OPEN, _export_unchecked
from tests.search_spaces.test_sandbox import HOSTILE, KINDS


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """An exported module (rolling_drop, K=1) and a run whose pick g1-p1 is rolling_drop's program (K=0)."""
    root = tmp_path_factory.mktemp("served")
    module = export_policy(get_policy("rolling_drop", keep_tool_responses=1), root / "k1.py")
    return {"module": module, "run": fake_run(root / "run")}


@pytest.fixture(scope="module")
def servers(tiny, files, tmp_path_factory):
    """A server with the three policies and a plain one the client sends its own schedules to."""
    policies = served_policies(["builtin=rolling_drop:keep_tool_responses=1", f"module={files['module']}",
                                f"pick={files['run']}#g1-p1"], time_limit_s=10)
    served = ServerThread(create_app(fresh(tiny), snapshot_dir=tmp_path_factory.mktemp("a"),
                                     policies=Policies(policies, time_limit_s=30)))
    plain = ServerThread(create_app(fresh(tiny), snapshot_dir=tmp_path_factory.mktemp("b")))
    with served, plain:
        yield served, plain, {p.name: p for p in policies}


def _client(srv) -> OpenAI:
    return OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)


def _usage(r) -> dict:
    out = r.usage.model_dump()
    out.pop("akv_policy", None)
    return out


@pytest.mark.parametrize("name", ["builtin", "module", "pick"])
def test_served_schedules_equal_the_client_side_ones_over_a_tool_conversation(servers, files, tiny, name):
    served, plain, policies = servers
    msgs = trajectory(5)
    if name == "module":  # what a harness does with the exported file
        module = load_exported(files["module"])
        client_side = lambda m, counts: module.decide(m, counts)  # noqa: E731
    else:
        policy = get_policy("rolling_drop", keep_tool_responses=1) if name == "builtin" else \
            pick_spec(files["run"], "g1-p1").build()
        client_side = lambda m, counts: policy.run_episode(m, token_counts=counts)[-1].wire  # noqa: E731
    a, b = _client(served), _client(plain)
    dropped = 0
    for n in request_points(msgs):
        counts = tiny.render(msgs[:n]).message_tokens
        schedule = client_side(msgs[:n], counts)
        assert policies[name].schedule(msgs[:n], counts) == schedule, n
        mine = a.chat.completions.create(model=f"tiny-random@{name}", messages=msgs[:n], max_tokens=4,
                                         extra_body={"session_id": f"conv-{name}", "return_token_ids": True})
        theirs = b.chat.completions.create(model="tiny-random", messages=msgs[:n], max_tokens=4,
                                           extra_body={"session_id": f"conv-{name}", "return_token_ids": True,
                                                       **schedule})
        assert mine.model_dump()["choices"][0]["token_ids"] == theirs.model_dump()["choices"][0]["token_ids"], n
        assert mine.choices[0].message.content == theirs.choices[0].message.content
        assert _usage(mine) == _usage(theirs), n
        assert mine.usage.model_dump()["akv_policy"] == {"name": name, "ok": True}
        dropped = max(dropped, mine.usage.prompt_tokens_details.drop_skipped_tokens)
    assert dropped > 0  # the policy dropped something by the last turn


def test_hostile_modules_never_escape_and_the_server_keeps_serving(tiny, tmp_path, monkeypatch):
    import search_spaces.cache.program as program_module
    from search_spaces import CheckResult

    canary = tmp_path / "canary"
    sources = [HOSTILE.format(canary=str(canary), kind=k) for k in KINDS] + [
        p.format(canary=str(canary)) for p in (SHADOWED_OPEN, DUNDER_WALK, FORMAT_WALK)]
    # as if the static check had a gap: the sandbox's walls must hold on their own
    monkeypatch.setattr(program_module, "check_program", lambda text: CheckResult(True, "ok", str(hash(text))))
    policies = [ReplayPolicy(f"h{i}", Policy.from_program(s, {})) for i, s in enumerate(sources)]
    eng = fresh(tiny)
    with ServerThread(create_app(eng, snapshot_dir=tmp_path / "snaps", policies=Policies(policies))) as srv:
        for p in policies:
            r = httpx.post(srv.base_url + "/v1/chat/completions", timeout=60,
                           json={"model": f"tiny-random@{p.name}", "messages": trajectory(3), "max_tokens": 2})
            assert r.status_code == 200, r.text
            report = r.json()["usage"]["akv_policy"]
            assert not canary.exists(), (p.name, report)
            assert "root:" not in r.text, (p.name, report)
            assert report["ok"] is False or report == {"name": p.name, "ok": True}, report
        wait_idle(eng)
        eng.check_integrity()
        ok = httpx.post(srv.base_url + "/v1/chat/completions", timeout=60,
                        json={"model": "tiny-random", "messages": trajectory(2), "max_tokens": 2})
        assert ok.status_code == 200


def test_refused_policies_are_one_line_at_start(tmp_path, monkeypatch, capsys):
    hostile = _export_unchecked(monkeypatch, SHADOWED_OPEN.format(canary=str(tmp_path / "c")), tmp_path / "bad.py")
    monkeypatch.undo()  # the server's own checker again
    cases = [([f"h={hostile}"], [str(hostile), "refused"]),
             (["rolling_drop=rolling_drop"], ["'rolling_drop' is a built-in policy's"]),
             (["k=standard"], ["text baseline"]),
             (["k=nosuch"], ["nosuch"]),
             (["k=rolling_drop", "k=full"], ["given twice"]),
             (["k"], ["NAME=SPEC"]),
             ([f"k={tmp_path / 'missing'}#best"], ["missing"])]
    for entries, words in cases:
        argv = ["serve", "--model", "no-such-model-is-loaded"]
        for e in entries:
            argv += ["--policy", e]
        one_line(main(argv), capsys.readouterr().err, "akv serve", *words)


def akv_serve_app(monkeypatch, *args: str) -> Any:
    """The app ``akv serve ARGS`` builds, in this process, for the caller to run on a thread
    (``ServerThread``) instead of in the foreground."""
    import engine.server

    apps = []
    monkeypatch.setattr(engine.server, "serve", lambda app, host, port: apps.append(app))
    assert main(["serve", *args]) == 0
    return apps[0]


def test_akv_serve_with_a_policy_answers_the_openai_client(tiny, tmp_path, monkeypatch, capsys):
    """``akv serve --model tiny-random --policy k1=...``."""
    app = akv_serve_app(monkeypatch, "--model", "tiny-random", "--port", "0", "--snapshot-dir", str(tmp_path),
                        "--intake-bytes", "0", "--policy", "k1=rolling_drop:keep_tool_responses=1")
    assert "model tiny-random@k1: ReplayPolicy('k1'" in capsys.readouterr().out
    with ServerThread(app) as srv:
        client = _client(srv)
        assert [m.id for m in client.models.list()] == ["tiny-random", "tiny-random@k1"]
        msgs = trajectory(4)
        counts = tiny.render(msgs).message_tokens
        schedule = get_policy("rolling_drop", keep_tool_responses=1).run_episode(msgs, token_counts=counts)[-1].wire
        own = [client.chat.completions.create(model="tiny-random", messages=msgs, max_tokens=5, extra_body=schedule)
               for _ in range(2)]  # the second reads the cache as the served one will
        served = client.chat.completions.create(model="tiny-random@k1", messages=msgs, max_tokens=5)
        assert served.choices[0].message.content == own[1].choices[0].message.content
        assert _usage(served) == _usage(own[1]) and served.usage.prompt_tokens_details.drop_skipped_tokens > 0


def test_akv_live_decides_with_the_served_model_s_counts(tiny):
    """``akv live``'s policy (``CountedPolicy``): the replay over the session with the served model's
    token counts, as the server decides for ``MODEL@NAME`` (not gemma's counts, not one-shot)."""
    from evals.cache.served import CountedPolicy

    msgs = trajectory(5)
    served = ReplayPolicy("k1", get_policy("rolling_drop", keep_tool_responses=1))
    live = CountedPolicy(served, tiny.render)
    counts = tiny.render(msgs).message_tokens
    assert live.decide(msgs) == served.schedule(msgs, counts) == \
        get_policy("rolling_drop", keep_tool_responses=1).run_episode(msgs, token_counts=counts)[-1].wire
