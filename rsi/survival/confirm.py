"""``--confirm-replay N``: the best candidates on held-out replayed on the real engine.

The simulator cannot be trusted on faith: the top ``N`` (evolved and tuned families together)
are replayed on the real engine on every held-out trace, and ``confirm.json`` sets the replayed
metrics beside the simulated ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.errors import AKVError
from rsi.rundir import RunDir, RunDirError, write_json
from rsi.survival.archive import (
    SurvivalArchive,
    score_of,
)
from rsi.survival.evolve import KEPT_METRICS, SimStore, policy_key


def spread(ids: list[tuple[str, int]], n: int) -> list[tuple[str, int]]:
    """The first ``n`` of ``ids`` (kind, seed) taken a seed of each kind in turn, so a few traces
    still cover every kind (0: all of them, in their own order)."""
    if n <= 0 or n >= len(ids):
        return list(ids)
    kinds = list(dict.fromkeys(k for k, _ in ids))
    by_kind = {k: [x for x in ids if x[0] == k] for k in kinds}
    turns = [by_kind[k][i] for i in range(max(map(len, by_kind.values()))) for k in kinds if i < len(by_kind[k])]
    return turns[:n]


def check_traces(traces: Any) -> None:
    """Refuse a ``--confirm-traces`` / ``traces`` value that is not an integer >= 0 (0: every one).

    Raises:
        AKVError: naming the value.
    """
    if isinstance(traces, bool) or not isinstance(traces, int) or traces < 0:
        raise AKVError(f"--confirm-traces must be an integer >= 0 (0: every held-out trace), got {traces!r}",
                       field="confirm_traces", value=traces)


def confirm_replay(run_dir: str | Path, top: int, model: str, clock: str = "wall",
                   engine: Any = None, say: Callable[[str], None] | None = None,
                   traces: int = 0) -> list[dict[str, Any]]:
    """Replay the ``top`` best candidates on held-out (evolved and tuned families together, by mean
    p95 resume TTFT then recompute tokens on held-out) on the real engine, on every held-out trace
    (or on ``traces`` of them, spread over the kinds: :func:`spread`), and write ``confirm.json``:
    per candidate the simulated and replayed means over the replayed traces and per-trace metrics
    (rewritten after each candidate, so a crash keeps the candidates done). ``say`` hears a line
    before and after each replay (a wall-clock replay lasts as long as the trace's tool gaps).

    Raises:
        RunDirError: ``run_dir`` holds no finished survival run.
        AKVError: ``traces`` not an integer >= 0 (:func:`check_traces`).
    """
    check_traces(traces)
    from evals.survival import ReplayConfig, load_trace, replay

    run = Path(run_dir)
    archive = SurvivalArchive.load(run / "archive.json")
    config = RunDir(run).survival_config
    held = [c for c in archive.candidates if c.heldout is not None and c.heldout.ok]
    if not held:
        raise RunDirError(f"{run} has no candidate with a held-out result; run the search first", field="run_dir",
                          value=str(run))
    ranked = sorted(held, key=lambda c: (c.heldout.resume_ttft_p95_s, c.heldout.recompute_tokens, c.label))  # type: ignore[union-attr]
    chosen_ids = spread(config.heldout.ids(), traces)
    replayed = [(f"heldout-{k}-s{s}", load_trace(run / "traces" / f"heldout-{k}-s{s}.jsonl")) for k, s in chosen_ids]
    store = SimStore(run / "evaluations.jsonl")
    rcfg = ReplayConfig(model=model, pool_tokens=config.pool_tokens, host_tokens=config.host_tokens,
                        max_batch=config.max_batch, clock=clock)
    if engine is None:
        from engine import Engine

        engine = Engine.from_pretrained(model)
    rows: list[dict[str, Any]] = []
    chosen = ranked[:top]
    for rank, c in enumerate(chosen, 1):
        source = (run / "programs" / f"{c.program}.py").read_text() if c.spec == "program" else None
        spec = {"source": source, "params": c.params} if source is not None else {"name": c.spec, "params": c.params}
        per: list[dict[str, Any]] = []
        for tid, tr in replayed:
            done = len(rows) * len(replayed) + len(per)
            step = f"replay {done + 1}/{len(chosen) * len(replayed)}: #{rank} {c.label} on {tid}"
            if say is not None:
                say(f"{step} ({clock} clock)...")
            t0 = time.perf_counter()
            r = replay(tr, spec, rcfg, engine=engine)
            per.append({"trace": tid, **{k: r.get(k) for k in KEPT_METRICS}})
            if say is not None:
                say(f"{step}: done in {time.perf_counter() - t0:.0f} s")
        rs = score_of(per)
        sims = [store.get(f"{policy_key(c.spec, c.program, c.params)}/{tid}") for tid, _ in replayed]
        simulated = (score_of([r for r in sims if r is not None]).to_dict() if all(r is not None for r in sims)
                     else None)
        rows.append({"rank": rank, "label": c.label, "id": c.id, "expert": c.expert, "model": model, "clock": clock,
                     "traces": [tid for tid, _ in replayed], "simulated": simulated, "replayed": rs.to_dict(),
                     "simulated_all_heldout": c.heldout.to_dict() if c.heldout else None, "per_trace": per})
        write_json(run / "confirm.json", rows)
    return rows
