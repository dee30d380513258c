"""Entity pools and vocabularies are split-disjoint; every domain's probes have wording."""

from __future__ import annotations

import pytest

from evals.errors import TaskError
from evals.tasks import load_probe_templates
from evals.tasks.domains import DOMAINS, get_domain
from evals.tasks.pools import NUMBER_POOLS, WORD_POOLS, number_pool, word_pool


@pytest.mark.parametrize("name", WORD_POOLS)
def test_word_pools_are_disjoint_and_large(name):
    train, held = set(word_pool(name, "train")), set(word_pool(name, "heldout"))
    assert len(train) >= 20 and len(held) >= 20 and not train & held


def test_number_pools_do_not_overlap():
    for name in NUMBER_POOLS:
        a, b = number_pool(name, "train"), number_pool(name, "heldout")
        assert a.high < b.low, name


def test_vocabularies_are_disjoint_across_splits():
    for vocab in ("statuses", "reasons"):
        train = {v for d in DOMAINS.values() for v in getattr(d, vocab)["train"]}
        held = {v for d in DOMAINS.values() for v in getattr(d, vocab)["heldout"]}
        assert not train & held, vocab


def test_probe_templates(tmp_path):
    t = load_probe_templates()
    t.check()
    assert t.wording("train", "fact", "logistics", "order.warehouse", "4821").cloze == \
        "Order 4821 ships from warehouse"
    partial = tmp_path / "probes.yaml"
    partial.write_text("train: {fact: {logistics: {}}}\n")
    with pytest.raises(TaskError, match=r"no probe wording at train\.fact\.logistics\.order"):
        load_probe_templates(str(partial))
    with pytest.raises(TaskError, match="valid: logistics, itops, procurement"):
        get_domain("retail")
