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

from rsi.rundir import RunDirError, read_json, write_json
from rsi.survival.archive import (
    SurvivalArchive,
    score_of,
)
from rsi.survival.config import config_from_dict_json
from rsi.survival.evolve import KEPT_METRICS


def confirm_replay(run_dir: str | Path, top: int, model: str, clock: str = "wall",
                   engine: Any = None, say: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Replay the ``top`` best candidates on held-out (evolved and tuned families together, by mean
    p95 resume TTFT then recompute tokens on held-out) on the real engine, on every held-out trace,
    and write ``confirm.json``: per candidate the simulated and replayed means and per-trace metrics
    (rewritten after each candidate, so a crash keeps the candidates done). ``say`` hears a line
    before and after each replay (a wall-clock replay lasts as long as the trace's tool gaps).

    Raises:
        RunDirError: ``run_dir`` holds no finished survival run.
    """
    from evals.survival import ReplayConfig, load_trace, replay

    run = Path(run_dir)
    archive = SurvivalArchive.load(run / "archive.json")
    config = config_from_dict_json(read_json(run / "config.json", dict))
    held = [c for c in archive.candidates if c.heldout is not None and c.heldout.ok]
    if not held:
        raise RunDirError(f"{run} has no candidate with a held-out result; run the search first", field="run_dir",
                          value=str(run))
    ranked = sorted(held, key=lambda c: (c.heldout.resume_ttft_p95_s, c.heldout.recompute_tokens, c.label))  # type: ignore[union-attr]
    traces = [(f"heldout-{k}-s{s}", load_trace(run / "traces" / f"heldout-{k}-s{s}.jsonl"))
              for k, s in config.heldout.ids()]
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
        for tid, tr in traces:
            done = len(rows) * len(traces) + len(per)
            step = f"replay {done + 1}/{len(chosen) * len(traces)}: #{rank} {c.label} on {tid}"
            if say is not None:
                say(f"{step} ({clock} clock)...")
            t0 = time.perf_counter()
            r = replay(tr, spec, rcfg, engine=engine)
            per.append({"trace": tid, **{k: r.get(k) for k in KEPT_METRICS}})
            if say is not None:
                say(f"{step}: done in {time.perf_counter() - t0:.0f} s")
        rs = score_of(per)
        rows.append({"rank": rank, "label": c.label, "id": c.id, "expert": c.expert, "model": model, "clock": clock,
                     "simulated": c.heldout.to_dict() if c.heldout else None, "replayed": rs.to_dict(),
                     "per_trace": per})
        write_json(run / "confirm.json", rows)
    return rows
