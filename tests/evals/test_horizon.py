"""The long-horizon suites: round counts, lengths, evidence depths, distractors, the held-out surface,
distinctive lead-ins, balanced candidates, determinism, and how much rolling drop K=12 drops.

Lengths are measured with the gemma tokenizer (it loads from the local cache in about a second);
the suite is generated once per session (about 6 s for both splits).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

import pytest

from evals.cache.probes import verbatim_lead_in
from evals.errors import TaskError
from evals.tasks import SUITES, Task, check_generated, generate_horizon_task, generate_split, get_suite_spec
from evals.tasks.horizon import HORIZON_FAMILIES, HORIZON_SUITES, KEEP_WINDOW, LENGTH_RATIO
from evals.tasks.render import SURFACE_FORMATS, SURFACE_TABLE_FORMATS
from search_spaces import Episode, get_policy

SURFACE_TOOLS = set(SURFACE_FORMATS) | set(SURFACE_TABLE_FORMATS)


def text_of(message: dict) -> str:
    """Everything a message says (independent of evals.tasks.schema.message_text)."""
    calls = " ".join(c["function"]["name"] + " " + c["function"]["arguments"] for c in message.get("tool_calls") or [])
    return "\n".join([message.get("content") or "", message.get("reasoning_content") or "", calls])


def has(text: str, value: str) -> bool:
    return re.search(r"(?<![A-Za-z0-9_])" + re.escape(value.lower()) + r"(?![A-Za-z0-9_])", text.lower()) is not None


@pytest.fixture(scope="session")
def horizon() -> dict[str, list[Task]]:
    spec = get_suite_spec("horizon")
    return {s: generate_split(spec, s) for s in ("train", "heldout")}


@pytest.fixture(scope="session")
def gemma_counts(horizon):
    """Per-message gemma token counts of every task (the engine's renderer, gemma template)."""
    from engine.layout import Renderer
    from engine.models.loading import load_tokenizer

    renderer = Renderer(load_tokenizer("gemma-3-270m"), "gemma")
    return {t.id: renderer.render(list(t.messages)).message_tokens for ts in horizon.values() for t in ts}


@pytest.mark.parametrize(("version", "per_family"), [(1, 8), (2, 16)])
def test_each_version_keeps_the_held_out_tasks_of_the_one_before(horizon, version, per_family):
    from dataclasses import replace

    from evals.tasks import select_tasks

    spec = replace(get_suite_spec("horizon"), version=version, tasks_per_family={"train": 8, "heldout": per_family})
    before = generate_split(spec, "heldout")
    kept = 6 * per_family
    for offset in range(0, kept, 8):  # what a config's heldout_tasks: 8 with heldout_offset 0, 8, ... selects
        old, new = select_tasks(before, 8, offset), select_tasks(horizon["heldout"], 8, offset)
        assert [(t.family, t.messages, t.probes) for t in old] == [(t.family, t.messages, t.probes) for t in new]
    added = select_tasks(horizon["heldout"], 0, kept)
    assert len({t.id for t in added}) == len(added) > 0  # and tasks that version did not have
    assert not {(t.family, str(t.messages)) for t in added} & {(t.family, str(t.messages)) for t in before}


def test_registered_and_versioned():
    spec = HORIZON_SUITES["horizon"]
    assert SUITES["horizon"] is spec and spec.version >= 1 and spec.evidence_style == "copyable"
    assert set(spec.families("train")) == set(spec.families("heldout")) == set(HORIZON_FAMILIES)
    assert spec.domains_of("heldout") == (*spec.domains, "support") and "support" not in spec.domains_of("train")
    assert SUITES["horizon-long"].min_tokens == 30_000 and SUITES["horizon-long"].max_tokens == 120_000


def test_structure_rounds_and_lengths(horizon, gemma_counts):
    spec = get_suite_spec("horizon")
    for split, tasks in horizon.items():
        assert len(tasks) == spec.tasks_per_family[split] * len(HORIZON_FAMILIES)
        for t in tasks:
            rounds = sum(1 for m in t.messages if m["role"] == "tool")
            assert rounds == t.meta["rounds"] and 30 <= rounds <= 80, (t.id, rounds)
            counts = gemma_counts[t.id]
            total = sum(counts)
            assert 3000 <= total <= 9000, (t.id, total)
            tool_tokens = [counts[i] for i, m in enumerate(t.messages) if m["role"] == "tool"]
            long_ids = set(t.meta["long_rounds"])
            short = [n for i, n in enumerate(tool_tokens) if i not in long_ids]
            # mostly short outputs (20-150 tokens), some long ones (pages, tables, logs)
            assert sum(20 <= n <= 200 for n in short) >= 0.9 * len(short), (t.id, sorted(short)[-5:])
            assert max(tool_tokens) >= 250, (t.id, max(tool_tokens))
            assert max(tool_tokens) <= 2000, (t.id, max(tool_tokens))
            assert check_generated(t) == []


def test_evidence_at_every_depth_and_kind(horizon):
    for split, tasks in horizon.items():
        seen = Counter((m["depth"], m["kind"]) for t in tasks for m in t.meta["probe_meta"])
        depths = Counter(d for d, _ in seen.elements())
        assert all(depths[d] >= 8 for d in ("old", "middle", "recent")), (split, depths)
        kinds = Counter(k for _, k in seen.elements())
        assert all(kinds[k] >= 8 for k in ("plain", "restated", "reversed", "multi-hop")), (split, kinds)
        for t in tasks:
            assert len(t.meta["probe_meta"]) == len(t.probes)
            for p, m in zip(t.probes, t.meta["probe_meta"]):
                assert m["evidence_ids"] == list(p.evidence_ids)
                # the tool age recomputed: tool responses from the youngest tool evidence to the probe
                tools = [i for i, msg in enumerate(t.messages[: p.after_message + 1]) if msg["role"] == "tool"]
                youngest = max(e for e in p.evidence_ids if t.messages[e]["role"] == "tool")
                age = len([i for i in tools if i >= youngest])
                assert m["tool_age"] == age
                assert m["depth"] == ("recent" if age <= 4 else "middle" if age <= KEEP_WINDOW else "old")
        for t in tasks:
            ages = [m["tool_age"] for m in t.meta["probe_meta"]]
            if t.family in ("evidence-in-old-tool-response", "evidence-restated", "multi-hop"):
                assert min(ages) > KEEP_WINDOW, (t.id, ages)  # far older than the last 12
                if t.family == "multi-hop":  # both hops old
                    (p,) = t.probes
                    first, _second = p.evidence_ids
                    assert len([i for i, m in enumerate(t.messages[: p.after_message + 1])
                                if m["role"] == "tool" and i >= first]) > KEEP_WINDOW
            elif t.family == "evidence-in-middle":
                assert all(4 < a <= KEEP_WINDOW for a in ages), (t.id, ages)
            elif t.family == "recent-only":
                assert all(a <= 4 for a in ages), (t.id, ages)


def test_distractors_of_the_same_kind_follow_the_evidence(horizon):
    """For nearly every old fact probe another value of its kind appears in a tool response after its
    evidence (so keeping every response shows look-alikes); for most middle ones too."""
    checked, hit, middle, middle_hits = 0, 0, 0, 0
    for t in horizon["train"] + horizon["heldout"]:
        for p in t.probes:
            if p.kind not in ("fact", "multi_hop"):
                continue
            later = [i for i in range(max(p.evidence_ids) + 1, p.after_message + 1) if t.messages[i]["role"] == "tool"]
            others = [c for c in p.candidates if c != p.answer]
            hits = [c for c in others if any(has(text_of(t.messages[i]), c) for i in later)]
            if p.answer.isdigit():  # numbers are fresh per record: any other number of the same width
                width = re.compile(rf"(?<![\w.-])\d{{{len(p.answer)}}}(?![\w.])")
                hits += [n for i in later for n in width.findall(text_of(t.messages[i])) if n != p.answer]
            age = len([i for i in range(max(p.evidence_ids), p.after_message + 1) if t.messages[i]["role"] == "tool"])
            if age > KEEP_WINDOW:
                checked, hit = checked + 1, hit + bool(hits)
            elif age > 4:
                middle, middle_hits = middle + 1, middle_hits + bool(hits)
    assert checked >= 60 and hit >= 0.9 * checked and middle_hits >= 0.6 * middle, (checked, hit, middle, middle_hits)


def test_surface_formats_only_in_heldout(horizon):
    train_tools = {m.get("name") for t in horizon["train"] for m in t.messages if m["role"] == "tool"}
    assert not train_tools & SURFACE_TOOLS
    assert not any(t.domain == "support" for t in horizon["train"])
    surface = [t for t in horizon["heldout"] if t.domain == "support"]
    assert len(surface) >= 8 and all(t.meta["surface"] for t in surface)
    used = {m.get("name") for t in surface for m in t.messages if m["role"] == "tool"}
    assert used >= SURFACE_TOOLS, used
    assert used <= SURFACE_TOOLS | {"update_record"}, used - SURFACE_TOOLS
    train_text = "\n".join(text_of(m) for t in horizon["train"] for m in t.messages)
    for marker in ("Thread view - queue", "Transcript chat-", "KB > ", "CRM / "):
        assert marker not in train_text
    assert all(m["surface"] for t in surface for m in t.meta["probe_meta"])


def test_lead_ins_are_distinctive(horizon):
    """A probe's verbatim lead-in is said in its evidence and in no other message before the probe."""
    for t in horizon["train"] + horizon["heldout"]:
        for p in t.probes:
            lead = verbatim_lead_in(t, p).strip()
            assert lead and not has(lead, p.answer), (t.id, lead)
            inside = [i for i in p.evidence_ids if lead in text_of(t.messages[i])]
            outside = [i for i in range(p.after_message + 1) if i not in p.evidence_ids
                       and lead in text_of(t.messages[i])]
            assert inside and not outside, (t.id, p.kind, lead, outside)


def test_candidates_have_similar_lengths(horizon):
    for t in horizon["train"] + horizon["heldout"]:
        for p in t.probes:
            lengths = [len(c) for c in p.candidates]
            assert 5 <= len(p.candidates) <= 6 and p.answer in p.candidates, (t.id, p.candidates)
            assert max(lengths) <= LENGTH_RATIO * min(lengths), (t.id, p.candidates)
            before = "\n".join(text_of(m) for m in t.messages[: p.after_message + 1])
            assert all(has(before, c) for c in p.candidates)


def test_deterministic_and_seed_sensitive():
    a = generate_horizon_task("multi-hop", "heldout", 7, domain="support", target_tokens=5000)
    b = generate_horizon_task("multi-hop", "heldout", 7, domain="support", target_tokens=5000)
    c = generate_horizon_task("multi-hop", "heldout", 8, domain="support", target_tokens=5000)

    def digest(t: Task) -> str:
        return hashlib.sha256(json.dumps(t.to_record(), sort_keys=True).encode()).hexdigest()

    assert digest(a) == digest(b) != digest(c)


def test_hostile_arguments():
    with pytest.raises(TaskError, match="held-out surface"):
        generate_horizon_task("recent-only", "train", 0, domain="support")
    with pytest.raises(TaskError, match="unknown horizon family 'nope'; valid: evidence-in-old"):
        generate_horizon_task("nope", "train", 0)
    with pytest.raises(TaskError, match="unknown task domain 'retail'"):
        generate_horizon_task("recent-only", "train", 0, domain="retail")
    with pytest.raises(TaskError, match="min rounds"):
        generate_horizon_task("recent-only", "train", 0, rounds=(10, 80))


def test_horizon_long_generates_at_gpu_scale():
    from evals.tasks.builder import CHARS_PER_TOKEN

    spec = HORIZON_SUITES["horizon-long"]
    t = generate_horizon_task("evidence-in-old-tool-response", "heldout", 1, domain="support", target_tokens=60_000,
                              rounds=spec.rounds)
    chars = sum(len(text_of(m)) for m in t.messages)
    assert 30_000 <= chars / CHARS_PER_TOKEN <= 120_000 and t.meta["rounds"] > 80
    assert check_generated(t) == []


def tool_drop_share(task: Task, counts: list[int], keep: int = KEEP_WINDOW) -> float:
    """Share of tool-response tokens before the task's last probe that rolling drop K=``keep`` has dropped there.

    The policy runs on the same episode the replay evaluator gives it (request points and probe
    cuts, gemma token counts); the dropped messages are those its schedule drops by the last probe.
    """
    from evals.cache.evaluator import _dropped_ids
    from search_spaces import request_points

    last = max(p.after_message for p in task.probes)
    cuts = sorted(set(request_points(list(task.messages))) | {p.after_message + 1 for p in task.probes})
    decisions = get_policy("rolling_drop", keep_tool_responses=keep).run_episodes(
        [Episode.of(list(task.messages), counts, cuts)])[0]
    decision = dict(zip(cuts, decisions))[last + 1]
    dropped = _dropped_ids(decision, last)
    tools = [i for i in range(last + 1) if task.messages[i]["role"] == "tool"]
    # independent reference: rolling drop keeps the newest `keep` tool responses, so the rest is gone
    assert dropped & set(tools) == set(tools[:-keep]), task.id
    return sum(counts[i] for i in tools if i in dropped) / sum(counts[i] for i in tools)


def test_rolling_drop_k12_drops_a_third_of_tool_tokens_on_heldout(horizon, gemma_counts):
    dropped = sum(tool_drop_share(t, gemma_counts[t.id]) * sum(
        gemma_counts[t.id][i] for i in range(max(p.after_message for p in t.probes) + 1)
        if t.messages[i]["role"] == "tool") for t in horizon["heldout"])
    total = sum(sum(gemma_counts[t.id][i] for i in range(max(p.after_message for p in t.probes) + 1)
                    if t.messages[i]["role"] == "tool") for t in horizon["heldout"])
    assert dropped / total >= 0.30, dropped / total
