"""bench.render_results: every measured figure of README.md and the rendered docs equals its result file,
and none is typed outside the blocks; provenance on every result file; stale marks from git history;
claim words that follow intervals."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from bench import RESULTS, write_result
from bench.render_results import DOCUMENTS, ROOT, RenderError, blocks_in, differences, main, render
from bench.result_blocks import BLOCKS, STATUS_BLOCKS, Results, ResultsError, difference_words, goal_words
from bench.run_result import time_log
from rsi.provenance import Provenance, stale

BLOCK = re.compile(r"<!-- results:([a-z0-9-]+) -->\n.*?<!-- /results:\1 -->", re.S)


@pytest.fixture(scope="module")
def results() -> Results:
    return Results(RESULTS)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_committed_figures_are_what_the_result_files_say(document, results):
    text = (ROOT / document).read_text(encoding="utf-8")
    assert blocks_in(text, document), f"{document} has no rendered block"
    found = differences(text, document, results)
    assert not found, "\n".join(f"{d.block}:\n{d.diff}" for d in found) + "\nrun `make results`"


def test_every_block_is_used_and_every_file_it_reads_exists(results):
    used = {name for d in DOCUMENTS for name in blocks_in((ROOT / d).read_text(encoding="utf-8"), d)}
    assert used == set(BLOCKS), f"blocks no document shows: {set(BLOCKS) - used}"
    for block in BLOCKS.values():
        for name in block.sources:
            assert (RESULTS / name).is_file(), name


def test_a_changed_figure_is_caught_and_named(results):
    text = (ROOT / "docs/results.md").read_text(encoding="utf-8")
    body = re.search(r"<!-- results:search-mixed -->\n(.*?)<!-- /results:search-mixed -->", text, re.S).group(1)
    figure = re.search(r"-\d+\.\d%", body).group(0)
    edited = text.replace(body, body.replace(figure, "-99.9%", 1))
    found = differences(edited, "docs/results.md", results)
    assert [d.block for d in found] == ["search-mixed"]
    assert "-99.9%" in found[0].diff and figure in found[0].diff


def test_status_blocks_are_not_compared(results):
    text = "<!-- results:sources -->\nanything at all\n<!-- /results:sources -->\n"
    assert "sources" in STATUS_BLOCKS
    assert differences(text, "doc", results) == []


def test_a_missing_result_file_is_named(tmp_path):
    text = "x\n<!-- results:search-mixed -->\n<!-- /results:search-mixed -->\n"
    with pytest.raises(ResultsError, match=r"ablation-mixed-arms\.json: missing"):
        render(text, "doc", Results(tmp_path))


@pytest.mark.parametrize(("text", "message"), [
    ("<!-- results:speed -->\nno end\n", "unmatched markers"),
    ("<!-- /results:speed -->\n", "unmatched markers"),
    ("<!-- results:nope -->\n<!-- /results:nope -->\n", "no block is named 'nope'"),
    ("<!-- results:speed -->\n<!-- /results:speed -->\n<!-- results:speed -->\n<!-- /results:speed -->\n",
     "appears 2 times"),
])
def test_malformed_markers_are_refused_with_the_block_named(text, message):
    with pytest.raises(RenderError, match=message):
        blocks_in(text, "doc.md")


def test_the_command_rewrites_a_stale_block_and_check_fails_before(tmp_path, capsys, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text("# t\n<!-- results:speed -->\nold figures\n<!-- /results:speed -->\n", encoding="utf-8")
    monkeypatch.setattr("bench.render_results.ROOT", tmp_path)
    assert main(["--check", "doc.md"]) == 1
    assert "the block 'speed' differs" in capsys.readouterr().out
    assert main(["doc.md"]) == 0
    assert main(["--check", "doc.md"]) == 0
    assert "old figures" not in doc.read_text()
    assert main(["--check", "missing.md"]) == 2


# --- the words of a claim follow its interval (closed-form cases) ---------------------------------------

@pytest.mark.parametrize(("cost", "cost_ci", "pass_ci", "words"), [
    (-31.2, (-36.7, -25.8), (0.0, 0.1), "**met**"),
    (-12.7, (-21.0, -1.5), (0.0, 0.367), "at the point estimate (the cost interval reaches -1.5%): not met"),
    (-40.0, (-45.0, -35.0), (-0.2, 0.1), "at the point estimate (the pass interval reaches -0.200): not met"),
    (-3.0, (-13.6, 9.8), (-0.167, 0.0), "**not met**"),
    (-10.0, (-12.0, -10.0), (-0.05, 0.0), "**met**"),  # both edges exactly on the goal and the margin
])
def test_a_goal_is_met_only_when_its_interval_clears_it(cost, cost_ci, pass_ci, words):
    assert goal_words(cost, cost_ci, -10.0, pass_ci) == words


@pytest.mark.parametrize(("ci", "words"), [((-5.0, -0.1), "cheaper"), ((0.1, 3.0), "more expensive"),
                                            ((-5.0, 0.0), "no difference shown (interval includes 0)")])
def test_difference_words(ci, words):
    assert difference_words(ci) == words


FIGURE = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:%|x\b)|(?<![\w.])[-+]?\d+\.\d+(?!\w|\.\d)"
                    r"|(?<![\w.])\d[\d,]* of \d[\d,]*\b"
                    r"|(?<![\w.-])\d[\d,.]*(?:-\d[\d,.]*)? ?(?:ms|min|tokens/s|turns/s)\b")
"""What a measured figure looks like: a percentage, a ratio, a decimal, "N of M", a time or a speed."""

PROSE_ALLOWED = {
    "docs/results.md": {"-0.05", "10%", "95%"},  # the 95% intervals, the -10% goal, the -0.05 margin
    # workload generator parameters (mixes, sigmas, medians, arrivals), the hand-checked test's inputs,
    # the 0.8-1.25 timing band, the 20% goal, the 25% busy-machine threshold, the 10 ms idle threshold,
    # an example tool gap; "about 1 ms a decision" is an order of magnitude, not a quoted measurement
    "docs/survival.md": {"0.05", "0.10", "0.2", "0.30", "0.35", "0.4", "0.5", "0.6", "0.60", "0.7", "0.8", "1.01",
                         "1.25", "2.5", "3.0", "20%", "25%", "95%", "10 ms", "1 ms"},
    "docs/live.md": {"95%"},
    # calibration targets and chance, the length ratio, generator shares, a pinned numpy version
    "docs/tasks.md": {"0.10", "0.17", "0.25", "0.8", "0.80", "1.26", "1.6", "2.0", "15%", "40%", "60%", "95%"},
}
"""Each document whose measured figures are all rendered, and the only figure-like tokens its prose may hold."""


def test_prose_allowances_cover_every_rendered_document():
    assert set(PROSE_ALLOWED) == set(DOCUMENTS) - {"README.md"}


@pytest.mark.parametrize("document", sorted(PROSE_ALLOWED))
def test_a_document_types_no_measured_number_outside_its_blocks(document):
    """Outside the rendered blocks a document holds only definitions and parameters, never a measured
    figure: a figure without a result file is removed (or the document links to docs/results.md)."""
    text = BLOCK.sub("", (ROOT / document).read_text(encoding="utf-8"))
    figures = set(FIGURE.findall(text))
    assert figures <= PROSE_ALLOWED[document], sorted(figures - PROSE_ALLOWED[document])


def test_a_typed_figure_is_caught():
    text = "passing 7 of 8 with the full cache; a decode step 57-59 ms (~17 tokens/s), 3x faster"
    assert FIGURE.findall(text) == ["7 of 8", "57-59 ms", "17 tokens/s", "3x"]


# --- provenance -----------------------------------------------------------------------------------------

def test_every_result_file_carries_its_provenance():
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        prov = Provenance.from_dict(data["provenance"])
        assert prov.commit or prov.recorded_in, f"{path.name}: neither the commit it ran at nor the one storing it"
        if prov.recorded_in:  # written before provenance existed: what history could not recover is listed
            for field in ("command", "commit", "model", "dtype", "judge", "date", "load_average_start"):
                if getattr(prov, field) is None:
                    assert field in prov.unknown, f"{path.name}: {field} is neither given nor listed as unknown"
        else:  # written with it: what ran, where and when (model, dtype and judge only where they apply)
            assert prov.command and prov.date and prov.commit, path.name
        for module in prov.measures:
            assert (ROOT / module).exists(), f"{path.name}: measures {module}, which is not in the repository"


def test_write_result_records_the_command_commit_and_modules(tmp_path):
    out = write_result(tmp_path / "r.json", {"model": "tiny-random", "rows": []}, measures=["engine"])
    prov = json.loads(out.read_text())["provenance"]
    assert prov["model"] == "tiny-random" and prov["measures"][0] == "engine"
    assert prov["date"] and len(prov["load_average_start"]) == 3 and prov["command"]
    with pytest.raises(ValueError, match="measures is empty"):
        write_result(tmp_path / "s.json", {}, measures=[])
    with pytest.raises(ValueError, match="JSON object"):
        write_result(tmp_path / "t.json", [1, 2], measures=["engine"])
    with pytest.raises(ValueError, match="not a path inside"):
        write_result(tmp_path / "u.json", {}, measures=["../elsewhere"])


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_a_result_is_stale_after_a_change_to_a_module_it_measures_and_cleared_by_a_later_rerun(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "a.py").write_text("x = 1\n")
    (tmp_path / "docs.md").write_text("a\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "one")
    made = _git(tmp_path, "rev-parse", "HEAD")
    prov = Provenance(command="python -m bench.x", commit=made, dirty=False, configs={}, model=None, dtype=None,
                      judge=None, load_average_start=None, date=None, measures=("engine",))
    assert stale(prov, root=tmp_path).stale is False
    (tmp_path / "docs.md").write_text("b\n")
    _git(tmp_path, "commit", "-qam", "docs only")
    assert stale(prov, root=tmp_path).stale is False
    (tmp_path / "engine" / "a.py").write_text("x = 2\n")
    _git(tmp_path, "commit", "-qam", "code")
    state = stale(prov, root=tmp_path)
    assert state.stale and len(state.changes) == 1 and state.known
    assert stale(prov, cleared_at=_git(tmp_path, "rev-parse", "HEAD"), root=tmp_path).stale is False
    unknown = Provenance(**{**prov.__dict__, "commit": None})
    assert stale(unknown, root=tmp_path).known is False


def test_the_time_log_gives_wall_time_and_peak_memory(tmp_path):
    log = tmp_path / "time.log"
    log.write_text("\tElapsed (wall clock) time (h:mm:ss or m:ss): 7:20.41\n"
                   "\tMaximum resident set size (kbytes): 7226112\n")
    got = time_log(log)
    assert got["wall_s"] == pytest.approx(440.41) and got["wall"] == "7 min 20 s"
    assert got["peak_rss_gb"] == pytest.approx(7226112 * 1024 / 1e9)
    log.write_text("nothing here\n")
    with pytest.raises(SystemExit, match="not a GNU time -v log"):
        time_log(log)
