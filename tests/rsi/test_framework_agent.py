"""A framework's agent, unchanged but for base URL, key and model name (``examples/framework_agent.py``,
pydantic-ai), played against ``akv serve --policy k1=rolling_drop:keep_tool_responses=1`` on
tiny-random: the drops show in its usage, and each request it made, sent again to plain tiny-random
with the schedule computed client-side, gets the same reply and, on a fresh server, the same usage.

tiny-random never calls a tool, so the episode starts after the task's first three recorded page
reads (``--warm-pages``) and its turns are pydantic-ai's own retries."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from engine.server import ServerThread, create_app
from evals.cache.cli import select_suite
from tests.engine.test_engine import fresh
from tests.rsi.test_serve_policies import akv_serve_app

pytest.importorskip("pydantic_ai", reason="the example extra is not installed (pip install -e '.[example]')")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "framework_agent.py"
POLICY = "k1=rolling_drop:keep_tool_responses=1"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("framework_agent", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_a_pydantic_ai_agent_runs_under_a_served_policy_and_its_replies_replay(example, tiny, tmp_path,
                                                                               monkeypatch):
    app = akv_serve_app(monkeypatch, "--model", "tiny-random", "--port", "0", "--snapshot-dir",
                        str(tmp_path / "a"), "--intake-bytes", "0", "--policy", POLICY)
    tasks = select_suite(str(EXAMPLE.parent / "live-pages-end.jsonl"), "heldout", 1)
    config = example.PlayConfig(max_steps=3, max_tokens=6, warm_pages=3)
    with ServerThread(app) as served:
        data = asyncio.run(example.play(served.base_url + "/v1", "unused", "tiny-random@k1", tasks,
                                        tmp_path / "run", config))
    (episode,) = data["episodes"]
    assert episode["steps"] == 3 and episode["error"].startswith("UsageLimitExceeded")  # it never called a tool
    assert episode["cost_cents"] > 0 and episode["usage"]["drop_skipped_tokens"] == sum(episode["dropped_tokens"])
    # pages 1 and 2 dropped: the first request still computes them (page 3 attended to them), the next skip them
    assert episode["dropped_tokens"][0] == 0 and min(episode["dropped_tokens"][1:]) > 0
    recorded = [json.loads(line) for line in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    assert len(recorded) == 3
    for x in recorded:  # the framework's own request: only the model name says AKV
        assert x["request"]["model"] == "tiny-random@k1" and x["request"]["tool_choice"] == "required"
        assert not {"drop_message", "reposition", "drop_rule", "cache"} & set(x["request"])
        assert x["response"]["usage"]["akv_policy"] == {"name": "k1", "ok": True}

    with ServerThread(create_app(fresh(tiny), snapshot_dir=tmp_path / "b")) as plain:
        same = example.check(tmp_path / "run", plain.base_url + "/v1", "unused", "tiny-random", POLICY)
    assert (same.requests, same.equal, same.usage_equal, same.differences) == (3, 3, 3, [])
    # another policy's schedules are told apart (by the usage: tiny-random's replies hardly depend on the cache)
    with ServerThread(create_app(fresh(tiny), snapshot_dir=tmp_path / "c")) as plain:
        other = example.check(tmp_path / "run", plain.base_url + "/v1", "unused", "tiny-random",
                              "k1=rolling_drop:keep_tool_responses=3")
    assert other.usage_equal < other.requests
