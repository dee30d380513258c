"""``mixed`` grows like ``horizon``: a new version adds held-out tasks and keeps every earlier one,
so a config's ``heldout_offset`` selects the same tasks it did (only the version in the ids moves)."""

from __future__ import annotations

from dataclasses import replace

from evals.tasks import generate_split, get_suite_spec, select_tasks


def test_version_2_keeps_the_held_out_tasks_of_version_1():
    now = get_suite_spec("mixed")
    assert now.version == 2 and now.tasks_per_family["heldout"] == 24
    v1 = replace(now, version=1, tasks_per_family={"train": 8, "heldout": 16})
    before, after = generate_split(v1, "heldout"), generate_split(now, "heldout")
    for offset in range(0, 96, 8):  # heldout_tasks: 8 at heldout_offset 0, 8, ..., 88
        old, new = select_tasks(before, 8, offset), select_tasks(after, 8, offset)
        assert [(t.family, t.messages, t.probes) for t in old] == [(t.family, t.messages, t.probes) for t in new]
        assert [t.id.replace("mixed-v1/", "mixed-v2/") for t in old] == [t.id for t in new]
    added = select_tasks(after, 0, 96)
    assert len(added) == 48 and len({t.id for t in added}) == 48
    assert {t.family for t in added} == {t.family for t in before}
    assert not {str(t.messages) for t in added} & {str(t.messages) for t in before}  # tasks v1 did not have
