"""Diversity niches: behaviour descriptors from usage records, bucketing, elites against a brute
force, and parents drawn from the front and the niches."""

from __future__ import annotations

import itertools
import random

import pytest

from evals.cache.cost import CostBreakdown
from evals.cache.evaluator import ProbeResult, RequestCost, TaskResult
from rsi.cache.archive import Archive, Candidate
from rsi.cache.metrics import Metrics
from rsi.cache.niches import (
    DROPPED_EDGES,
    EVIDENCE_EDGES,
    REPOSITION_EDGES,
    Behaviour,
    behaviour,
    choose_parents,
    niche_map,
)


def _probe(dropped: tuple[int, ...]) -> ProbeResult:
    return ProbeResult(0, "fact", 5, "a", "", False, False, "a", True, True, dropped, True)


def _req(prompt: int, skipped: int, repos: int) -> RequestCost:
    usage = {"prompt_tokens": prompt, "prefill_tokens": 0, "cached_tokens": 0, "drop_skipped_tokens": skipped,
             "repos_tokens": repos, "completion_tokens": 1}
    return RequestCost(3, usage, 0.0)


def _task(requests: list[RequestCost], probes: list[ProbeResult], ok: bool = True) -> TaskResult:
    return TaskResult("t", "fam", "train", "program", "k", {}, ok, None if ok else "x", tuple(probes),
                      tuple(requests), CostBreakdown(), 0.0)


def test_behaviour_is_the_documented_ratio() -> None:
    a = _task([_req(100, 0, 0), _req(200, 50, 10), _req(300, 100, 0)], [_probe(()), _probe((3,))])
    b = _task([_req(400, 250, 5)], [_probe(()), _probe(()), _probe(())])
    failed = _task([_req(10_000, 10_000, 1)], [_probe((1,))], ok=False)
    got = behaviour([a, b, failed])
    assert got == Behaviour(dropped_share=400 / 1000, repositions=(1 + 1) / 2, evidence_kept=4 / 5)
    assert got is not None and got.cell == (3, 1, 1)
    assert behaviour([failed]) is None and behaviour([]) is None


def test_cells_follow_the_bucket_edges() -> None:
    def slow(v: float, edges: tuple[float, ...]) -> int:
        for i, e in enumerate(edges):
            if v <= e:
                return i
        return len(edges)

    for v in [0.0, 1e-9, 0.1, 0.10001, 0.25, 0.3, 0.5, 0.9, 1.0, 2.0, 4.0, 4.5, 0.8, 0.95, 0.96]:
        b = Behaviour(v, v, v)
        assert b.cell == (slow(v, DROPPED_EDGES), slow(v, REPOSITION_EDGES), slow(v, EVIDENCE_EDGES))


def _cand(i: int, cost: float, pass_rate: float) -> Candidate:
    return Candidate(f"c{i}", f"p{i}", f"c{i}", {}, 1, proposer="mutation:constant",
                     train=Metrics(pass_rate, cost, 1, 1))


def test_elites_match_a_brute_force() -> None:
    rng = random.Random(0)
    archive = Archive()
    shown: dict[str, Behaviour] = {}
    for i in range(60):
        c = archive.add(_cand(i, round(rng.uniform(0.1, 1.0), 2), round(rng.uniform(0.3, 0.9), 1)))
        shown[c.id] = Behaviour(rng.choice([0.0, 0.05, 0.3, 0.7]), rng.choice([0.0, 2.0]), 0.9)
    results = {cid: [_task([_req(1000, round(b.dropped_share * 1000), 1)] * int(b.repositions) +
                           [_req(1000, round(b.dropped_share * 1000), 0)] * (2 - int(b.repositions)),
                           [_probe(())] * 9 + [_probe((1,))])] for cid, b in shown.items()}
    nm = niche_map(archive, lambda c: results[c.id])
    for c in archive.candidates:
        assert nm.behaviours[c.id].cell == shown[c.id].cell
    for cell, members in itertools.groupby(sorted(archive.candidates, key=lambda c: shown[c.id].cell),
                                           key=lambda c: shown[c.id].cell):
        group = list(members)
        best = max(group, key=lambda c: (c.point[1], -c.point[0], -archive.candidates.index(c)))
        assert nm.elites[cell] == best.id
        assert nm.occupancy[cell] == len(group)
    rows = nm.rows(archive)
    assert [tuple(r["cell"]) for r in rows] == sorted(nm.elites)


def test_parents_come_from_the_front_then_the_niches() -> None:
    archive = Archive()
    front_a = archive.add(_cand(0, 0.2, 0.5))
    front_b = archive.add(_cand(1, 0.5, 0.8))
    niche = archive.add(_cand(2, 0.9, 0.4))     # dominated, but alone in its cell
    strong = archive.add(_cand(3, 0.6, 0.75))   # dominated, same cell as front_b
    weak = archive.add(_cand(4, 0.95, 0.3))     # dominated, same cell as niche
    cells = {front_a.id: 0.05, front_b.id: 0.3, strong.id: 0.3, niche.id: 0.7, weak.id: 0.7}
    nm = niche_map(archive, lambda c: [_task([_req(1000, round(cells[c.id] * 1000), 0)], [_probe(())])])
    got = choose_parents(archive, nm, 3)
    assert [c.id for c in got] == [front_a.id, front_b.id, niche.id]
    # Without niches the old rule: the front, then the best pass rates.
    assert [c.id for c in choose_parents(archive, None, 3)] == [front_a.id, front_b.id, strong.id]
    assert len(choose_parents(archive, nm, 1)) == 2  # never fewer than the front


@pytest.mark.parametrize("k", [0, 10])
def test_parents_never_repeat(k: int) -> None:
    archive = Archive()
    for i in range(5):
        archive.add(_cand(i, 0.1 * (i + 1), 0.1 * (i + 1)))
    nm = niche_map(archive, lambda c: [_task([_req(100, 0, 0)], [_probe(())])])
    got = choose_parents(archive, nm, k)
    assert len({c.id for c in got}) == len(got) == max(min(k, 5), len(archive.front()))


def test_a_finished_search_writes_the_niche_map_and_the_operator_table(finished) -> None:
    import json

    from rsi.cache.proposer_report import niche_rows, operator_rows

    archive = Archive.load(finished / "archive.json")
    niches = json.loads((finished / "niches.json").read_text())
    assert niches["axes"] == ["dropped_share", "repositions", "evidence_kept"]
    rows = niche_rows(finished)
    assert rows and sum(r["candidates"] for r in rows) == len(archive.scored())
    mutation = {(c.generation, c.program) for c in archive.candidates if c.proposer.startswith("mutation:")}
    assert sum(r["offspring"] for r in operator_rows(archive)) == len(mutation)
    page = (finished / "report.html").read_text()
    assert "Operators by generation" in page and "Niche map" in page
    assert (finished / "figures" / "niches.png").stat().st_size > 0
