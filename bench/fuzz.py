"""Coverage-guided fuzzing of the parsers that take untrusted bytes, for a bounded time each.

    python -m bench.fuzz [--seconds 120] [--targets openai,atif,body,snapshot]

Needs the ``fuzz`` extra (``pip install -e ".[fuzz]"``: atheris, libFuzzer for Python). Each target
(``bench.fuzz_targets``: the OpenAI and ATIF log importers, the server's request-body path, the
snapshot loader) runs in a process of its own under atheris, its target modules instrumented,
starting from the project's sample files and from every input that ever crashed it. An input
that makes a target raise anything but its own refusal, or break an invariant, is a crash: it is
written to ``tests/fuzz/<target>/`` (one file per distinct exception type and place, named by its
hash) and fuzzing goes on; the tests replay that folder, so commit what it finds after fixing it.
A hang past ``--timeout`` seconds or a process killed (memory) ends that target; libFuzzer writes
the input there too. Outside CI (it is a benchmark: minutes, not a check).

Writes ``bench/results/fuzz.json``: per target, inputs tried, seconds, coverage reached, and crashes
found (new ones, with their exception and file).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench import RESULTS, write_result
from bench.fuzz_targets import CORPUS, TARGETS, corpus, seeds

MEASURES = ["evals/tasks", "engine/server", "engine/snapshot.py", "bench/fuzz_targets.py"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""

INSTRUMENTED = {
    "openai": ["evals.tasks.logs", "evals.tasks.schema", "engine.template"],
    "atif": ["evals.tasks.logs", "evals.tasks.schema", "engine.template", "atif"],
    "body": ["engine.server.body", "engine.server.schemas", "engine.server.prepare", "engine.schedule",
             "engine.template", "engine.window", "engine.toolcalls"],
    "snapshot": ["engine.snapshot", "engine.cache.radix"],
}
"""The modules whose branches guide each target's search (imported under atheris' instrumentation)."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=120, help="fuzzing time per target (default: 120)")
    p.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, of {', '.join(TARGETS)}")
    p.add_argument("--timeout", type=int, default=20, help="seconds one input may take (default: 20)")
    p.add_argument("--out", default=str(RESULTS / "fuzz.json"))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--stats", default=None, help=argparse.SUPPRESS)
    p.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.seconds, args.timeout, Path(args.stats), Path(args.work))
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    bad = [t for t in targets if t not in TARGETS]
    if bad or not targets:
        raise SystemExit(f"bench.fuzz: unknown target(s) {', '.join(bad) or '(none)'}; "
                         f"choose from {', '.join(TARGETS)}")
    if args.seconds <= 0 or args.timeout <= 0:
        raise SystemExit("bench.fuzz: --seconds and --timeout must be positive")
    try:
        import atheris  # noqa: F401
    except ImportError:
        raise SystemExit('bench.fuzz needs atheris: pip install -e ".[fuzz]"') from None
    rows = []
    for target in targets:
        print(f"fuzzing {target} for {args.seconds} s ...", flush=True)
        rows.append(drive(target, args.seconds, args.timeout))
        r = rows[-1]
        print(f"  {target}: {r['inputs']:,} inputs in {r['seconds']:.0f} s, coverage {r['coverage']}, "
              f"{len(r['crashes'])} new crash(es), {r['corpus_before']} committed before", flush=True)
    print("\n| target | inputs tried | inputs/s | coverage | new crashes | corpus before |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['target']} | {r['inputs']:,} | {r['inputs'] / max(r['seconds'], 1e-9):,.0f} | {r['coverage']} "
              f"| {len(r['crashes'])} | {r['corpus_before']} |")
    write_result(args.out, {"seconds_per_target": args.seconds, "timeout_s": args.timeout, "targets": rows,
                            "command": "python -m bench.fuzz " + " ".join(argv if argv is not None else sys.argv[1:])},
                 measures=MEASURES)
    return 1 if any(r["crashes"] for r in rows) else 0


def drive(target: str, seconds: int, timeout: int) -> dict[str, Any]:
    """Run one target's worker process and collect what it reports."""
    before = {p.name for p in corpus(target)}
    (CORPUS / target).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        stats = Path(d) / "stats.json"
        t0 = time.perf_counter()
        (Path(d) / "corpus").mkdir()  # the worker's growing corpus, removed with the folder
        proc = subprocess.run([sys.executable, "-m", "bench.fuzz", "--worker", target, "--seconds", str(seconds),
                               "--timeout", str(timeout), "--stats", str(stats), "--work", str(Path(d) / "corpus")],
                              capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        wall = time.perf_counter() - t0
        report: dict[str, Any] = json.loads(stats.read_text()) if stats.exists() else {"inputs": 0, "crashes": []}
    log = proc.stderr
    done = re.findall(r"Done (\d+) runs in (\d+) second", log)
    cov = re.findall(r"cov: (\d+)", log)
    inputs = int(done[-1][0]) if done else int(report["inputs"])
    crashes = list(report["crashes"])
    new_files = sorted({p.name for p in corpus(target)} - before - {c["file"] for c in crashes})
    crashes += [{"exception": "libFuzzer artifact (hang, memory or fatal signal)", "file": n} for n in new_files]
    if proc.returncode != 0 and not new_files and not done:
        crashes.append({"exception": f"worker exited {proc.returncode}", "file": "", "log_tail": log[-2000:]})
    return {"target": target, "inputs": inputs, "seconds": wall, "coverage": int(cov[-1]) if cov else None,
            "crashes": crashes, "corpus_before": len(before), "modules": INSTRUMENTED[target]}


def worker(target: str, seconds: int, timeout: int, stats: Path, work: Path) -> int:
    """Fuzz ``target`` in this process (``--worker``): libFuzzer drives ``one``; crashes are kept, not fatal."""
    import atheris

    from bench import fuzz_targets

    loaded = [name for name in INSTRUMENTED[target] if name in sys.modules]  # by the engine package's imports
    with atheris.instrument_imports(include=INSTRUMENTED[target]):
        for name in INSTRUMENTED[target]:
            __import__(name)
    for name in loaded:
        instrument_loaded(sys.modules[name])
    found: dict[str, dict[str, str]] = {}
    count = [0]
    last = [time.monotonic()]

    def write_stats() -> None:
        stats.write_text(json.dumps({"inputs": count[0], "crashes": list(found.values())}))

    def one(data: bytes) -> None:
        count[0] += 1
        try:
            fuzz_targets.run(target, data)
        except Exception as err:  # noqa: BLE001 (every unexpected exception is what we are looking for)
            tb = traceback.extract_tb(err.__traceback__)[-1]
            key = f"{type(err).__name__} at {Path(tb.filename).name}:{tb.lineno}"
            if key not in found:
                name = hashlib.sha256(data).hexdigest()[:16]
                (CORPUS / target / name).write_bytes(data)
                found[key] = {"exception": f"{key}: {str(err)[:300]}", "file": name}
                print(f"crash in {target}: {found[key]['exception']} -> tests/fuzz/{target}/{name}",
                      file=sys.stderr, flush=True)
                write_stats()
        if time.monotonic() - last[0] > 2:
            last[0] = time.monotonic()
            write_stats()

    for k, s in enumerate(seeds(target) + [p.read_bytes() for p in corpus(target)]):
        (work / f"seed{k}").write_bytes(s)
        # loads what the target loads once (the engine) before the clock starts; an input that still
        # crashes is found again by the fuzzer
        with contextlib.suppress(Exception):
            fuzz_targets.run(target, s)
    max_len = max(4096, max(len(p.read_bytes()) for p in work.iterdir()) * 2)
    atheris.Setup([sys.argv[0], str(work), f"-max_total_time={seconds}", f"-timeout={timeout}",
                   f"-max_len={max_len}", "-rss_limit_mb=6144", f"-report_slow_units={timeout}",
                   f"-artifact_prefix={CORPUS / target}/",
                   "-print_final_stats=1"], one)
    import atexit
    atexit.register(write_stats)
    atheris.Fuzz()
    return 0


def instrument_loaded(module: Any) -> None:
    """Instrument the functions and methods ``module`` defines (it was imported before atheris'
    import hook was in place, so the hook did not see it)."""
    import atheris

    for obj in list(vars(module).values()):
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        members = [obj] if inspect.isfunction(obj) else list(vars(obj).values()) if inspect.isclass(obj) else []
        for f in members:
            f = f.__func__ if isinstance(f, (staticmethod, classmethod)) else f
            if inspect.isfunction(f):
                atheris.instrument_func(f)


if __name__ == "__main__":
    sys.exit(main())
