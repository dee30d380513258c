"""The LLM proposer against real OpenAI-compatible servers: a scripted one, and ``akv serve``."""

from __future__ import annotations

import json

import pytest

from engine.server import ServerThread
from rsi.archive import Status
from rsi.cache.archive import Archive
from rsi.cache.search import Search
from rsi.proposers.llm import apply_reply
from search_spaces import seed_source
from tests.rsi.conftest import tiny_config
from tests.rsi.scripted import scripted_app

GOOD = seed_source("rolling_drop").replace('"keep_tool_responses": 12', '"keep_tool_responses": 3')
BROKEN = "def decide(request, params)\n    return {}\n"
MALICIOUS = ("import os\n\ndef decide(request, params):\n    os.system('echo pwned')\n    return {}\n\n"
             "def space(trial):\n    return {}\n")
DIFF = ('<<<<<<< SEARCH\n    "keep_tool_responses": 12,\n=======\n    "keep_tool_responses": 5,\n'
        '>>>>>>> REPLACE\n')


def test_apply_reply_formats():
    parent = seed_source("rolling_drop")
    src, note = apply_reply(DIFF, parent)
    assert '"keep_tool_responses": 5' in src and "1 SEARCH/REPLACE" in note
    src, _ = apply_reply(f"Here:\n```python\n{GOOD}```\nDone.", parent)
    assert src == GOOD
    _, note = apply_reply("<<<<<<< SEARCH\nnot in parent\n=======\nx\n>>>>>>> REPLACE", parent)
    assert note == "diff did not apply"


def test_scripted_endpoint_good_broken_and_malicious_programs(tmp_path, tiny_plain):
    # Proposal 1: good. Proposal 2: broken, then broken again after the retry. Proposal 3: malicious twice.
    # Proposal 4: a SEARCH/REPLACE diff.
    replies = iter([f"```python\n{GOOD}```", BROKEN, BROKEN, f"```python\n{MALICIOUS}```",
                    f"```python\n{MALICIOUS}```", DIFF])
    seen: list[dict] = []
    with ServerThread(scripted_app(replies, seen)) as srv:
        cfg = tiny_config(proposer={"kind": "llm", "base_url": srv.base_url + "/v1", "model": "scripted",
                                    "per_generation": 4, "price_in": 1.0, "price_out": 2.0, "budget_usd": 1.0})
        run = tmp_path / "llm"
        Search(cfg, run, engine=tiny_plain).run()
    archive = Archive.load(run / "archive.json")
    llm = [c for c in archive.candidates if c.proposer.startswith("llm:")]
    refused = [c for c in llm if c.status is Status.REFUSED]
    assert len(refused) == 2, [(c.label, c.status, c.reason) for c in llm]
    reasons = " | ".join(c.reason for c in refused)
    assert "syntax" in reasons.lower() and "os" in reasons
    scored = [c for c in llm if c.status is Status.OK]
    assert scored, "the good program and the diff should be tuned and scored"
    # The prompt carried the API, the parent program, its metrics and feedback; the retry carried the error.
    first = seen[0]["messages"][-1]["content"]
    assert "Writing a KV-cache policy program" in first and "Train pass rate" in first and "def decide" in first
    assert "Against the hindsight oracle" in first and "probe-blind table" in first  # (oracle.feedback: evidence)
    retry = seen[2]["messages"][-1]["content"]
    assert "refused" in retry
    stats = json.loads((run / "proposer_stats.json").read_text())
    assert stats["prompt_tokens"] == 1000 * len(seen) and stats["usd"] == pytest.approx(len(seen) * 1200 / 1e6)


def test_budget_caps_proposing(tmp_path, tiny_plain):
    seen: list[dict] = []
    with ServerThread(scripted_app(iter([f"```python\n{GOOD}```"] * 10), seen)) as srv:
        cfg = tiny_config(proposer={"kind": "llm", "base_url": srv.base_url + "/v1", "model": "scripted",
                                    "per_generation": 4, "budget_tokens": 2000}, eval={"frame_guard": True})
        Search(cfg, tmp_path / "budget", engine=tiny_plain).run()
    assert len(seen) == 2  # 1100 tokens per call: the third call would pass the 2000-token budget
    assert "runs under the frame guard" in seen[0]["messages"][-1]["content"]  # the search's eval.frame_guard
    assert json.loads((tmp_path / "budget" / "proposer_stats.json").read_text())["budget_exhausted"]


@pytest.mark.slow
def test_llm_proposer_against_akv_serve_with_the_default_model(tmp_path, tiny_plain):
    """A real client on a real server: gemma-3-270m writes unusable programs, all recorded as failures."""
    from engine import Engine
    from engine.server import create_app

    gemma = Engine.from_pretrained("gemma-3-270m")
    with ServerThread(create_app(gemma, snapshot_dir=tmp_path / "snaps")) as srv:
        cfg = tiny_config(proposer={"kind": "llm", "base_url": srv.base_url + "/v1", "model": "gemma-3-270m",
                                    "per_generation": 1, "max_tokens": 48, "temperature": 0.0})
        run = tmp_path / "gemma"
        Search(cfg, run, engine=tiny_plain).run()
    archive = Archive.load(run / "archive.json")
    llm = [c for c in archive.candidates if c.proposer.startswith("llm:")]
    assert llm, "the model's proposal must be recorded"
    for c in llm:
        assert c.status is not Status.OK and c.reason, (c.label, c.status, c.reason)
    assert gemma.stats.requests >= 2  # the proposal and its one retry


def test_prompt_carries_family_deltas_and_failures_of_the_parent(tmp_path):
    from rsi.cache.archive import Candidate
    from rsi.cache.metrics import Metrics
    from rsi.proposers.base import ParentView
    from rsi.proposers.llm import lineage_feedback

    a = Archive()
    a.add(Candidate("p", "p", "seed:x", {}, 0, train=Metrics(0.5, 1.0, 2, 4, per_family={"f1": 0.5, "f2": 1.0})))
    c = a.add(Candidate("c", "c", "g1-p0", {}, 1, ("p",), "mutation:constant",
                        train=Metrics(0.6, 0.9, 2, 4, per_family={"f1": 0.75, "f2": 0.5})))
    a.add(Candidate("bad", "b", "g2-p3", {}, 2, ("c",), "llm:refine", status=Status.REFUSED,
                    reason="line 1: import of 'os'"))
    lines = lineage_feedback(c, a)
    assert 'against its parent seed:x: {"f1": 0.25, "f2": -0.5}' in lines[0]
    assert lines[-1] == "- g2-p3 (llm:refine): refused: line 1: import of 'os'"
    assert lineage_feedback(a.get("p"), a) == []  # a seed: no parent, no failed children
    # The prompt carries them (no endpoint needed to build a prompt).
    from rsi.proposers.llm import LLMProposer

    cfg = tiny_config(proposer={"kind": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "m"})
    prompt = LLMProposer(cfg.proposer, [], tmp_path).prompt(ParentView(c, GOOD, {}), a)
    assert "Pass rate change per task family" in prompt[-1]["content"] and "import of 'os'" in prompt[-1]["content"]
    assert "probe-blind table" not in prompt[-1]["content"]  # no hindsight, no table
    table = {"keep": ["tool:read_file:<100"], "drop": [f"tool:t{i}:>=1000" for i in range(14)]}
    prompt = LLMProposer(cfg.proposer, [], tmp_path).prompt(ParentView(c, GOOD, {"hindsight_table": table}), a)
    text = prompt[-1]["content"]
    assert "keep for good tool:read_file:<100" in text and "tool:t11:>=1000 and 2 more" in text
    assert "tool:t12" not in text
    assert "frame guard" not in text
    guarded = LLMProposer(cfg.proposer, [], tmp_path).prompt(ParentView(c, GOOD, {"frame_guard": True}), a)
    assert "runs under the frame guard" in guarded[-1]["content"]


def test_prompt_variants_are_chosen_by_a_bandit_over_their_offspring(tmp_path, tiny_plain):
    """Generation 1 tries each variant once (UCB1 pulls untried arms in order); only ``refine``'s
    program is valid, so generation 2 asks with ``refine`` first. The report's operator table has a
    row per variant."""
    from rsi.cache.proposer_report import operator_rows
    from rsi.proposers.llm import VARIANTS

    # refine good; repair, rewrite, fragment refused twice (distinct programs: repeats are not proposed)
    first = [f"```python\n{GOOD}```"] + [f"{BROKEN}# {i}\n" for i in range(6)]
    seen: list[dict] = []
    with ServerThread(scripted_app(iter([*first, DIFF]), seen)) as srv:
        cfg = tiny_config(generations=2, proposer={"kind": "llm", "base_url": srv.base_url + "/v1",
                                                   "model": "scripted", "per_generation": 4})
        run = tmp_path / "variants"
        Search(cfg, run, engine=tiny_plain).run()
    asked = [body["messages"][-1]["content"] for body in seen if len(body["messages"]) == 2]
    order = [next(v for v, line in VARIANTS.items() if line in text) for text in asked]
    assert order[:4] == ["refine", "repair", "rewrite", "fragment"] and order[4] == "refine", order
    fragment_prompt = asked[3]
    assert "Rule " in fragment_prompt and "def frag_" in fragment_prompt  # the rule's source is shown
    archive = Archive.load(run / "archive.json")
    made = {c.proposer for c in archive.candidates if c.generation == 1 and not c.expert}
    assert made >= {"llm:refine", "llm:repair", "llm:rewrite", "llm:fragment"}
    rows = {(r["generation"], r["operator"]): r for r in operator_rows(archive)}
    assert rows[(1, "llm:refine")]["valid_rate"] == 1.0 and rows[(1, "llm:repair")]["valid_rate"] == 0.0
    stats = json.loads((run / "proposer_stats.json").read_text())["operators"]
    assert stats["refine"]["valid"] >= 1 and stats["repair"]["attempts"] >= 1 and stats["repair"]["valid"] == 0


def test_the_short_prompt_for_weak_models(tmp_path, tiny_plain):
    # proposer.prompt: short: a short API, a worked example, the parent's code and one concrete change;
    # whole programs only (the retry asks for one), proposals recorded per change.
    from rsi.proposers.llm import SHORT_EXAMPLE_CHILD, SHORT_VARIANTS

    seen: list[dict] = []
    with ServerThread(scripted_app(iter([BROKEN, f"```python\n{GOOD}```", f"```python\n{GOOD}```"]), seen)) as srv:
        cfg = tiny_config(proposer={"kind": "llm", "base_url": srv.base_url + "/v1", "model": "scripted",
                                    "per_generation": 2, "prompt": "short"})
        run = tmp_path / "short"
        Search(cfg, run, engine=tiny_plain).run()
    first = seen[0]["messages"]
    assert "whole new program" in first[0]["content"]
    user = first[-1]["content"]
    assert "## The schedule you return" not in user  # not the 7,700-character API doc
    assert len(user) < len(seed_source("rolling_drop")) + 3000
    assert SHORT_EXAMPLE_CHILD.strip() in user and seed_source("rolling_drop").strip() in user
    change = user.rsplit("Change: ", 1)[1].split("\n")[0]
    assert change in SHORT_VARIANTS.values()
    assert "SEARCH/REPLACE" not in seen[1]["messages"][-1]["content"]  # the retry asks for a whole program
    llm = [c for c in Archive.load(run / "archive.json").candidates if c.proposer.startswith("llm:")]
    assert llm and {c.proposer.removeprefix("llm:") for c in llm} <= set(SHORT_VARIANTS)
    calls = [json.loads(line) for line in (run / "proposer" / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == len(seen) and all(c["seconds"] > 0 and c["completion_tokens"] > 0 for c in calls)


def test_an_unknown_prompt_kind_is_refused_by_name():
    from rsi.config import ConfigError
    with pytest.raises(ConfigError, match=r"proposer\.prompt.*full or short"):
        tiny_config(proposer={"kind": "llm", "base_url": "http://x/v1", "model": "m", "prompt": "tiny"})
