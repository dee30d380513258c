"""``rolling_drop`` means what the public AKV policy means: a differential test against an
independent re-implementation of the reference (``akv_reference.py``) over 600 seeded random
trajectories, through the in-framework policy (named with the reference's parameters) and through
a module exported for an AKV harness; and the reference's parameter names refused by its rules."""

from __future__ import annotations

import ast
import json
import random
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from search_spaces import ParameterError, export_policy, get_policy, request_points
from search_spaces.cache.families.rolling_akv import REFERENCE_NAMES
from tests.exported import load_exported
from tests.search_spaces import akv_reference as ref

N_TRAJECTORIES = 600
WORDS = ["order", "warehouse", "carrier", "invoice", "hold", "shipped", "pallet", "customs", "quota", "route"]


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) + str(rng.randint(0, 999)) for _ in range(n))


def random_trajectory(rng: random.Random) -> tuple[list[dict[str, Any]], set[int], dict[int, int]]:
    """Messages, the user messages a harness would declare as observations (after an assistant turn
    without tool calls), and the controller suffixes (a user message right after a tool batch)."""
    msgs: list[dict[str, Any]] = [{"role": rng.choice(["system", "developer"]), "content": _text(rng, 6)},
                                  {"role": "user", "content": _text(rng, 4)}]
    observations, suffixes, cid = set(), {}, 0
    for _ in range(rng.randint(2, 14)):
        kind = rng.choices(["batch", "observe", "suffix"], weights=[8, 1.5, 1.5])[0]
        if kind == "suffix" and msgs[-1]["role"] != "tool":
            kind = "batch"
        if kind == "suffix":
            suffixes[len(msgs) - 1] = len(msgs)
            msgs.append({"role": "user", "content": "Continue. " + _text(rng, 2)})
            continue
        a: dict[str, Any] = {"role": "assistant"}
        if rng.random() < 0.7:  # content: absent, None, "" or text
            a["content"] = rng.choice([None, "", _text(rng, 3)])
        if rng.random() < 0.6:  # reasoning: absent, None or text
            a["reasoning_content"] = rng.choice([None, _text(rng, 5), _text(rng, 9)])
        if kind == "observe":
            a["content"] = _text(rng, 3)
            msgs.append(a)
            observations.add(len(msgs))
            msgs.append({"role": "user", "content": "Observation: " + _text(rng, 5)})
            continue
        calls: list[dict[str, Any]] = []
        for _ in range(rng.choice([1, 1, 1, 2, 3, 4])):
            calls.append({"id": f"call_{cid}", "type": "function",
                          "function": {"name": rng.choice(["search", "read"]), "arguments": json.dumps({"q": cid})}})
            cid += 1
        a["tool_calls"] = calls
        msgs.append(a)
        order = list(calls)
        if rng.random() < 0.3:
            rng.shuffle(order)  # responses may come in any order
        for call in order:
            t: dict[str, Any] = {"role": "tool", "tool_call_id": call["id"]}
            if rng.random() < 0.5:
                t["name"] = call["function"]["name"]
            body = _text(rng, rng.randint(3, 30))
            t["content"] = [{"type": "text", "text": body}] if rng.random() < 0.2 else body
            msgs.append(t)
    return msgs, observations, suffixes


def random_config(rng: random.Random) -> dict[str, Any]:
    """A configuration the reference accepts, in its names (None = unset, sometimes spelled out)."""
    k = rng.randint(1, 5)
    cfg: dict[str, Any] = {"keep_tool_responses": k}
    if rng.random() < 0.2:
        cfg["mode"] = "kv_drop"
    trigger = rng.choice([None, None, "after", "tokens", "responses"])
    target = rng.choice(["tool", "assistant", "both"]) if trigger is None else "tool"
    if target != "tool" or rng.random() < 0.5:
        cfg["rolling_drop_target"] = target
    if trigger == "after":
        cfg["drop_after_call"] = rng.randint(1, 4)
        cfg["drop_interval_calls"] = rng.choice([None, 1, 2, 3])
        if rng.random() < 0.3:
            cfg["drop_target_tokens"] = rng.randint(100, 1500)
    elif trigger == "tokens":
        cfg["drop_trigger_tokens"] = rng.randint(200, 2500)
        if rng.random() < 0.5:
            cfg["drop_target_tokens"] = rng.randint(1, cfg["drop_trigger_tokens"] - 1)
    elif trigger == "responses":
        if rng.random() < 0.4:
            cfg["drop_target_tokens"] = rng.randint(100, 1500)
            cfg["drop_trigger_responses"] = rng.randint(1, 8)
        else:
            cfg["drop_trigger_responses"] = rng.randint(k + 1, k + 5)
    reposition = rng.choice([None, "after", "tokens"])
    if reposition == "after":
        cfg["reposition_after_call"] = rng.randint(1, 4)
        cfg["reposition_interval_calls"] = rng.choice([None, 1, 2, 3])
    elif reposition == "tokens":
        cfg["reposition_trigger_tokens"] = rng.randint(100, 3000)
    else:
        cfg["reposition_after_call"] = None
    assert ref.config_error(cfg) is None, cfg
    return cfg


def _native_ends(msgs: list[dict[str, Any]]) -> list[int]:
    return [unit[-1] for unit in ref.units(msgs) if len(unit) > 1]


def _ours(wire: dict[str, Any]) -> tuple[dict[int, tuple[int, ...]] | None, tuple[int, ...] | None]:
    drops = {int(t): tuple(ids) for t, ids in wire["drop_message"].items()}
    return drops or None, tuple(wire["reposition"]) or None


def _reference(cfg, msgs, **kw):
    try:
        return ref.decide(cfg, msgs, **kw)
    except ValueError as err:
        return err


def _harness(policy, request):
    try:
        d = policy.decide(request)
    except ValueError as err:
        return err
    for t, ids in (d.drop_message or {}).items():  # ints, as the reference produces them
        assert type(t) is int and type(ids) is tuple and all(type(i) is int for i in ids)
    assert d.messages is None and (d.reposition is None or type(d.reposition) is tuple)
    return d.drop_message, d.reposition


class Exported:
    """Exported modules, each imported once per text outside its ``PARAMS`` line: the exports of one
    program differ only there (checked on every file), so a module already imported serves another
    file with that file's parameters, and the test compiles a few modules instead of hundreds."""

    def __init__(self) -> None:
        self.modules: dict[str, Any] = {}

    def load(self, path: Path, params: dict[str, Any]) -> Any:
        lines = path.read_text().splitlines()
        [at] = [i for i, line in enumerate(lines) if line.startswith("PARAMS = ")]
        assert lines[at] == f"PARAMS = {json.loads(json.dumps(params))!r}", lines[at]
        rest = "\n".join(lines[:at] + lines[at + 1:])
        if rest not in self.modules:
            self.modules[rest] = load_exported(path)
        module = self.modules[rest]
        module.PARAMS = ast.literal_eval(lines[at].removeprefix("PARAMS = "))  # this file's own value
        return module


def test_rolling_drop_decides_like_the_akv_reference(tmp_path):
    rng = random.Random(20261216)
    exported = Exported()
    stats: Counter[str] = Counter()
    for case in range(N_TRAJECTORIES):
        msgs, observations, suffixes = random_trajectory(rng)
        cfg = random_config(rng)
        counts = [rng.randint(1, 300) for _ in msgs]
        counter = ref.Counter(counts, prefix=rng.randint(0, 20), generation=rng.randint(0, 6),
                              with_counts=rng.random() < 0.5)
        # what our policies count: message 0 carries the prompt prefix and the generation header
        layout = counter.message_layout(msgs, (), enable_thinking=None, reasoning_effort=None, api_style=None)
        ours_counts = [layout.message_ends[0] + layout.generation_tokens, *counts[1:]]
        policy = get_policy("rolling_drop", **cfg)  # the reference's names
        module = exported.load(export_policy(policy, tmp_path / f"p{case}.py", format="akv-harness"), policy.params)
        harness = module.HarnessPolicy(token_counter=counter)
        native = _native_ends(msgs)
        for n in request_points(msgs):
            prefix = msgs[:n]
            ends = [b for b in native if b < n]
            expected = _reference(cfg, prefix, call_index=len(ends), boundaries=ends, counter=counter)
            got = _ours(policy.decide(prefix, token_counts=ours_counts[:n]))
            if isinstance(expected, ValueError):
                # the one refusal we do not copy: token reposition past the current generation boundary
                assert "generation boundary" in str(expected), (case, cfg, n, expected)
                stats["reference refused, ours decided"] += 1
                continue
            assert got == expected, (case, cfg, n)
            request = module.request_from_payload({"model": "m", "messages": prefix})
            assert _harness(harness, request) == expected, (case, cfg, n)
            bare = SimpleNamespace(messages=prefix)  # no optional attribute: the reference's defaults
            assert _harness(harness, bare) == _reference(cfg, prefix, counter=counter), (case, cfg, n)
            stats["requests"] += 1
            stats["with drops"] += bool(expected[0])
            stats["with repositions"] += bool(expected[1])
            dropped = {i for ids in (expected[0] or {}).values() for i in ids}
            stats["assistant drops"] += any(prefix[i]["role"] == "assistant" for i in dropped)
        # a harness that declares user observations as call ends and controller suffixes as prompt ends
        declared = sorted(set(native) | observations)
        for n in range(1, len(msgs) + 1):
            ends = [b for b in declared if b < n]
            prompt_ends = {b: e for b, e in suffixes.items() if e < n}
            if not ends or (n - 1 != ends[-1] and prompt_ends.get(ends[-1]) != n - 1):
                continue
            prefix = msgs[:n]
            expected = _reference(cfg, prefix, call_index=len(ends), boundaries=ends, prompt_ends=prompt_ends,
                                  counter=counter)
            request = module.request_from_payload({"messages": prefix}, completed_call_message_ids=ends,
                                                  prompt_end_message_ids=prompt_ends)
            got = _harness(harness, request)
            if isinstance(expected, ValueError):
                assert isinstance(got, ValueError), (case, cfg, n, expected)
                stats["both refused"] += 1
            else:
                assert got == expected, (case, cfg, n)
                stats["declared requests"] += 1
    # the comparison exercised every behaviour, not only empty schedules
    assert stats["requests"] > 4000 and stats["declared requests"] > 2000, stats
    for what in ("with drops", "with repositions", "assistant drops", "both refused"):
        assert stats[what] > 100, stats
    assert stats["reference refused, ours decided"] < stats["requests"] / 10, stats


def test_each_trigger_and_reposition_mode_fires_in_the_differential_sample():
    """The sample above is not dominated by one mode: every drop trigger and reposition mode of the
    reference is drawn and fires on some request (checked on the reference itself)."""
    rng = random.Random(20261216)
    fired: Counter[str] = Counter()
    for _ in range(N_TRAJECTORIES):
        msgs, _, _ = random_trajectory(rng)
        cfg = random_config(rng)
        counts = [rng.randint(1, 300) for _ in msgs]
        counter = ref.Counter(counts, prefix=rng.randint(0, 20), generation=rng.randint(0, 6),
                              with_counts=rng.random() < 0.5)
        ends = _native_ends(msgs)
        out = _reference(cfg, msgs, call_index=len(ends), boundaries=ends, counter=counter)
        if isinstance(out, ValueError):
            continue
        mode = next((n for n in ("drop_after_call", "drop_trigger_tokens", "drop_trigger_responses")
                     if cfg.get(n) is not None), "rolling")
        fired[mode + (" + target" if cfg.get("drop_target_tokens") else "")] += bool(out[0])
        fired["reposition calls"] += bool(out[1]) and cfg.get("reposition_after_call") is not None
        fired["reposition tokens"] += bool(out[1]) and cfg.get("reposition_trigger_tokens") is not None
    for mode in ("rolling", "drop_after_call", "drop_after_call + target", "drop_trigger_tokens",
                 "drop_trigger_tokens + target", "drop_trigger_responses", "drop_trigger_responses + target",
                 "reposition calls", "reposition tokens"):
        assert fired[mode] >= 10, fired


# ---------------------------------------------------------------- the reference's names and its refusals

def test_reference_names_translate_to_ours():
    p = get_policy("rolling_drop", keep_tool_responses=8, drop_after_call=4, drop_interval_calls=2,
                   drop_target_tokens=900, reposition_after_call=3)
    assert p.params | {} == {**get_policy("rolling_drop").params, "keep_tool_responses": 8, "trigger": "calls",
                             "first_call": 4, "every_calls": 2, "target_tokens": 900, "reposition": "calls",
                             "reposition_start": 3, "reposition_every": 0}
    q = get_policy("rolling_drop", keep_tool_responses=12, rolling_drop_target="both", mode="kv_drop",
                   reposition_trigger_tokens=4096, drop_after_call=None)
    assert (q.params["target"], q.params["reposition"], q.params["reposition_tokens"]) == ("both", "tokens", 4096)
    assert get_policy("rolling_drop", keep_tool_responses=5, drop_trigger_responses=9).params["trigger_responses"] == 9


REFUSALS = [
    ({"keep_tool_responses": 0, "rolling_drop_target": "tool"}, "keep_tool_responses", "positive"),
    ({"keep_tool_responses": True, "drop_after_call": 2}, "keep_tool_responses", "positive"),
    ({"mode": "summary"}, "mode", "kv_drop or text_drop"),
    ({"mode": "text_drop"}, "mode", "not offered"),
    ({"rolling_drop_target": "user"}, "rolling_drop_target", "tool, assistant or both"),
    ({"drop_after_call": 0}, "drop_after_call", "positive integer or None"),
    ({"drop_trigger_tokens": "4000"}, "drop_trigger_tokens", "positive integer or None"),
    ({"reposition_interval_calls": -2, "reposition_after_call": 1}, "reposition_interval_calls", "positive"),
    ({"drop_after_call": 2, "drop_trigger_tokens": 4000}, "drop_trigger_tokens", "mutually exclusive"),
    ({"drop_trigger_tokens": 4000, "drop_trigger_responses": 20}, "drop_trigger_responses", "mutually exclusive"),
    ({"drop_interval_calls": 2}, "drop_interval_calls", "requires drop_after_call"),
    ({"drop_after_call": 2, "rolling_drop_target": "both"}, "rolling_drop_target", "tool-only"),
    ({"drop_trigger_tokens": 4000, "rolling_drop_target": "assistant"}, "rolling_drop_target", "tool-only"),
    ({"drop_target_tokens": 1000, "rolling_drop_target": "tool"}, "drop_target_tokens", "requires a drop trigger"),
    ({"drop_trigger_tokens": 4000, "drop_target_tokens": 4000}, "drop_target_tokens", "below drop_trigger_tokens"),
    ({"drop_trigger_tokens": 4000, "drop_target_tokens": 5000}, "drop_target_tokens", "below drop_trigger_tokens"),
    ({"keep_tool_responses": 12, "drop_trigger_responses": 12}, "drop_trigger_responses", "exceed"),
    ({"reposition_interval_calls": 4}, "reposition_interval_calls", "requires reposition_after_call"),
    ({"reposition_after_call": 4, "reposition_trigger_tokens": 8000}, "reposition_trigger_tokens", "either token"),
    ({"drop_after_call": 2, "target": "tool"}, "target", "not an AKV reference parameter"),
    ({"rolling_drop_target": "tool", "token_counter": object()}, "token_counter", "not an AKV reference parameter"),
]


@pytest.mark.parametrize(("params", "field", "why"), REFUSALS)
def test_reference_names_are_refused_by_the_reference_rules(params, field, why):
    with pytest.raises(ParameterError) as err:
        get_policy("rolling_drop", **params)
    message = str(err.value)
    assert err.value.field == field and why in message and "\n" not in message
    assert f"{field}=" in message  # names the bad value
    reason = ref.config_error({"keep_tool_responses": 12, **params})
    if field not in ("target", "token_counter") and params.get("mode") != "text_drop":
        assert reason is not None, params  # the reference refuses it too


def test_refusals_agree_with_the_reference_on_random_configurations():
    """Random values, valid or not, for every reference name: ours refuses exactly what the
    reference refuses (mode text_drop aside, which the reference accepts and we do not offer)."""
    rng = random.Random(7)
    values = [None, None, None, 0, 1, 2, 3, 5, 12, 13, 900, 1500, 4000, -1, True, "3", 2.0]
    agreed = refused = 0
    for _ in range(3000):
        cfg: dict[str, Any] = {"keep_tool_responses": rng.choice([1, 2, 12, 12, 0, -3, True])}
        for name in rng.sample(REFERENCE_NAMES[3:], rng.randint(1, 4)):
            cfg[name] = rng.choice(values)
        if rng.random() < 0.3:
            cfg["rolling_drop_target"] = rng.choice(["tool", "assistant", "both", "user"])
        if rng.random() < 0.1:
            cfg["mode"] = rng.choice(["kv_drop", "other"])
        theirs = ref.config_error(cfg)
        try:
            get_policy("rolling_drop", **cfg)
            ours: str | None = None
        except ParameterError as err:
            ours = str(err)
            assert "\n" not in ours
        assert (theirs is None) == (ours is None), (cfg, theirs, ours)
        agreed += 1
        refused += theirs is not None
    assert agreed == 3000 and 500 < refused < 2800


def test_our_names_keep_their_own_rules():
    with pytest.raises(ParameterError, match=r"'target'.*both_newest"):
        get_policy("rolling_drop", target="both", trigger="calls")
    with pytest.raises(ParameterError, match=r"'target_tokens'.*call-end trigger"):
        get_policy("rolling_drop", target_tokens=100)
    with pytest.raises(ParameterError, match="'every_calls'"):
        get_policy("rolling_drop", trigger="calls", every_calls=0)
    with pytest.raises(ParameterError, match="'trigger_responses'"):
        get_policy("rolling_drop", trigger="response_count", trigger_responses=12)
    # ours allow what the reference does not name: K = 0, both_newest with a call trigger
    assert get_policy("rolling_drop", keep_tool_responses=0, target="both_newest", trigger="calls").params
