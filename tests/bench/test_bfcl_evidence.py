"""bench.bfcl_evidence without a tokenizer: the counts of one suite and split, written with provenance."""

from __future__ import annotations

import json

from bench.bfcl_evidence import main


def test_the_counts_of_a_split_are_written_with_their_evidence(tmp_path, capsys):
    out = tmp_path / "e.json"
    main(["--suite", "bfcl-base", "--split", "heldout", "--no-headroom", "--out", str(out)])
    data = json.loads(out.read_text())
    c = data["suites"]["bfcl-base"]["heldout"]
    assert len(c["evidence"]) == c["tasks_with_evidence"] <= c["tasks"]
    assert c["turns_with_evidence"] == sum(len(turns) for turns in c["evidence"].values()) > 0
    assert "headroom" not in c and data["tokenizer"] is None and "provenance" in data
    assert "bfcl-base  heldout" in capsys.readouterr().out
