"""The copyable evidence style: every probe's evidence has a key-first sentence line, and the lead-in finds it."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from evals.cache.probes import lead_candidates, verbatim_lead_in
from evals.errors import TaskError
from evals.tasks import SUITES, SuiteSpec, generate_split, generate_task, message_text
from evals.tasks.domains import DOMAINS
from tests.evals.conftest import SPEC

STRUCTURE = set('{}|"=,[]')
SENTENCE_END = re.compile(r"[^.?!\n]*\.[ \t]*$")
IDENT = re.compile(r"[A-Za-z]*\d[\w-]*|\w+-\w+|[A-Z][a-z]+(?: [A-Z][a-z]+)*")


@pytest.fixture(scope="module")
def copyable() -> list:
    spec = replace(SPEC, evidence_style="copyable")
    return generate_split(spec, "train") + generate_split(spec, "heldout")


def probe_key(p) -> str:
    """The record the probe asks about: the identifier of its question that its cloze prefix names too."""
    (key,) = {m.lower() for m in IDENT.findall(p.question) if m in p.cloze_prefix}
    return key


def prose(before: str) -> bool:
    """No table or JSON syntax before the answer (a list marker or a log line's stamp and source aside)."""
    before = re.sub(r"^\s*(\[[^\]]*\]|[-*])\s+", "", before.rsplit(" | ", 1)[-1])
    return not STRUCTURE & set(before)


def lines_of(task, p) -> list[str]:
    return [line for i in p.evidence_ids for line in message_text(task.messages[i]).splitlines()]


def test_registered_suites_choose_a_style():
    assert SUITES["default"].evidence_style == SUITES["smoke"].evidence_style == "copyable"
    assert SUITES["long"].evidence_style == "varied"
    with pytest.raises(TaskError, match="evidence_style must be one of varied, copyable"):
        SuiteSpec("x", 1, evidence_style="plain")
    with pytest.raises(TaskError, match="evidence_style"):
        generate_task("recent-only", "train", 0, evidence_style="plain")


def test_every_field_has_key_first_sentences():
    for domain in DOMAINS.values():
        for rtype in domain.types.values():
            for f in rtype.fields:
                for split in ("train", "heldout"):
                    assert f.key_first(split), (domain.name, rtype.name, f.name, split)
                    assert all(t.index("{key}") < t.index("{value}") for t in f.key_first(split))


def test_each_probe_has_a_key_first_sentence_in_its_evidence(copyable):
    """An evidence line names the probe's record (for multi-hop: the middle record) before the answer."""
    for t in copyable:
        assert t.meta["evidence_style"] == "copyable"
        for p in t.probes:
            found = [line for line in lines_of(t, p) if p.answer in line
                     and SENTENCE_END.match(line[line.index(p.answer) + len(p.answer):])
                     and prose(line[: line.index(p.answer)])]
            assert found, (t.id, p.kind, p.answer)
            if p.kind != "multi_hop":
                key = probe_key(p)
                assert any(key in line[: line.index(p.answer)].lower() for line in found), (t.id, key, found)


def test_verbatim_lead_in_picks_the_sentence(copyable):
    for t in copyable:
        for p in t.probes:
            lead = verbatim_lead_in(t, p)
            last = lead.splitlines()[-1]
            assert p.answer not in lead, (t.id, lead)
            assert any(line.startswith(last + p.answer) and SENTENCE_END.match(line[len(last + p.answer):])
                       for line in lines_of(t, p)), (t.id, p.kind, lead)
            assert prose(last), (t.id, lead)
            if p.kind != "multi_hop":
                assert probe_key(p) in last.lower(), (t.id, lead)
            best = max(lead_candidates(t, p), key=lambda c: c.score)
            assert best.sentence and best.lead == lead


def test_reversal_confirmations_start_with_the_change(copyable):
    for t in copyable:
        if t.family != "decision-then-reversal":
            continue
        by = {p.kind: p for p in t.probes}
        key = probe_key(by["status_now"])
        hold_line = t.messages[by["status_before"].evidence_ids[-1]]["content"].splitlines()[0]
        release_line = t.messages[by["status_now"].evidence_ids[-1]]["content"].splitlines()[0]
        assert key in hold_line.lower() and hold_line.lower().index(key) < hold_line.index(by["status_before"].answer)
        assert hold_line.endswith(f"{by['original_reason'].answer}.")
        assert release_line.endswith(f"{by['status_before'].answer} to {by['status_now'].answer}.")


def test_lead_in_reaches_back_without_the_answer(copyable):
    """With ``min_chars`` the lead-in takes earlier lines too, but never one holding the answer."""
    for t in copyable[::3]:
        for p in t.probes:
            lead = verbatim_lead_in(t, p, max_chars=160, min_chars=60)
            assert p.answer not in lead and 0 < len(lead) <= 160
            assert verbatim_lead_in(t, p).endswith(lead.splitlines()[-1])


def test_copyable_lines_do_not_single_out_the_evidence(copyable):
    """Outputs without evidence carry notes blocks and copy lines too, so a policy cannot spot the evidence."""
    tables = {True: [], False: []}
    for t in copyable:
        evidence = {i for p in t.probes for i in p.evidence_ids}
        for i, m in enumerate(t.messages):
            if m.get("name") in ("sql_query", "get_record"):
                tables[i in evidence].append(re.search(r"^(Notes|remarks):$", m["content"], re.MULTILINE) is not None)
    assert all(tables[True]) and tables[False]
    assert sum(tables[False]) >= 0.8 * len(tables[False]), (sum(tables[False]), len(tables[False]))


def test_varied_style_writes_no_copyable_blocks(split_tasks):
    for t in split_tasks["train"] + split_tasks["heldout"]:
        if t.meta["evidence_style"] != "varied":
            return
        for m in t.messages:
            assert not re.search(r"^(Notes|remarks):$", m["content"] or "", re.MULTILINE)
            if m.get("name") == "update_record":
                assert m["content"].startswith("{")


def test_copyable_generation_is_deterministic():
    a = generate_task("evidence-restated", "heldout", 11, target_tokens=2500, evidence_style="copyable")
    b = generate_task("evidence-restated", "heldout", 11, target_tokens=2500, evidence_style="copyable")
    assert a.to_record() == b.to_record()
    c = generate_task("evidence-restated", "heldout", 11, target_tokens=2500)
    assert c.messages != a.messages and c.meta["evidence_style"] == "varied"


def test_copy_wording_occurs_only_in_the_evidence(copyable):
    """The lead-in's wording (its line without the key) is said nowhere else before the probe."""
    for t in copyable:
        for p in t.probes:
            if p.kind == "multi_hop":
                continue
            key = probe_key(p)
            line = verbatim_lead_in(t, p).splitlines()[-1]
            line = re.sub(r"^(\s*(\[[^\]]*\]|[-*])\s+|\S+Z [A-Z]+ [\w-]+: )", "", line.rsplit(" | ", 1)[-1])
            parts = re.split(re.escape(key), line, flags=re.IGNORECASE)
            wording = max((s.strip(" :#") for s in parts), key=len)
            assert len(wording) >= 4, (t.id, line)
            elsewhere = [i for i in range(p.after_message + 1) if i not in p.evidence_ids
                         and wording.lower() in message_text(t.messages[i]).lower()]
            assert elsewhere == [], (t.id, p.kind, wording, elsewhere)


def test_checker_catches_a_missing_copy_line(copyable):
    from evals.tasks import check_generated

    t = next(t for t in copyable if t.family == "recent-only")
    p = t.probes[0]
    msgs = [dict(m) for m in t.messages]
    (ev,) = p.evidence_ids
    msgs[ev]["content"] = re.sub(rf"{re.escape(p.answer)}([^.\n]*)\.", rf"{p.answer}\1", msgs[ev]["content"])
    assert check_generated(t) == []
    assert any("no copy line" in s for s in check_generated(replace(t, messages=tuple(msgs))))
