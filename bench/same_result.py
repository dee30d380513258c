"""Is a rerun's result the committed one? Compare two run directories (or two pooled result files)
value by value, wall-clock fields and the runs' own paths aside.

    python -m bench.same_result runs/horizon-arms1 /tmp/rerun/horizon-arms1 [--out FILE]
    python -m bench.same_result bench/results/ablation-horizon-arms.json /tmp/rerun/ablation-horizon-arms.json

For run directories it compares the files that carry a search's result: ``headline.json``,
``archive.json``, ``pareto.json``, ``pick.json`` and every ``evaluations.jsonl`` row (the cache
track's, or the survival track's simulations; a record's checksum is not compared, its row is),
the ones present in either. A value is the same
when it is equal after each side's run directory (and, in pooled files, each listed run
directory) is replaced by ``<run>``; fields that record when or how long something ran
(``frozen_at``, ``seconds``, ``*_at``, ``*_seconds``, ``wall_s``, a speed's rates) are skipped and
counted. Prints one line per file; with ``--out``, writes the comparison as JSON
(``bench.write_result``). Exit status 0 only when everything is the same.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import write_result

MEASURES = ["engine", "evals", "search_spaces", "rsi"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""

RESULT_FILES = ("headline.json", "archive.json", "pareto.json", "pick.json", "evaluations.jsonl")
CLOCK_KEYS = frozenset({"seconds", "frozen_at", "started", "finished", "timestamp", "wall_s", "start_time",
                        "end_time", "created"})
"""Fields that say when or how long something ran: never the same twice, never a result (nor is a file's
``provenance``: where and when it was made, ``rsi.provenance``)."""


def _clock(key: str) -> bool:
    return key in CLOCK_KEYS or key.endswith(("_seconds", "_at")) or key == "provenance"


def _normalized(value: Any, skipped: set[str], where: str = "") -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if _clock(k):
                skipped.add(f"{where}.{k}")
            elif k == "speed" and isinstance(v, dict):  # the counts are results; the rates are wall clock
                skipped.update(f"{where}.speed.{j}" for j in v if j != "counts")
                out[k] = {"counts": _normalized(v.get("counts"), skipped, f"{where}.speed")}
            else:
                out[k] = _normalized(v, skipped, f"{where}.{k}")
        return out
    if isinstance(value, list):
        return [_normalized(v, skipped, f"{where}[]") for v in value]
    return value


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SystemExit(f"{path}: cannot be read ({type(err).__name__}: {err})") from None


def _json(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise SystemExit(f"{path}: not JSON ({err})") from None


def _load(path: Path, runs: list[str]) -> Any:
    text = _text(path)
    for run in sorted(runs, key=len, reverse=True):  # the longest first: one run's path may hold another's
        text = text.replace(run, "<run>")
    if path.suffix == ".jsonl":  # a store's records: the row is compared; its checksum covers the row's clock too
        records = [_json(line, path) for line in text.splitlines() if line.strip()]
        return [{k: v for k, v in r.items() if k != "sha256"} if isinstance(r, dict) and "row" in r else r
                for r in records]
    return _json(text, path)


def differences(a: Any, b: Any, where: str = "") -> Iterator[str]:
    """Where ``a`` and ``b`` differ (a key path per difference: ``.comparisons[0].delta``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                yield f"{where}.{k} (only in {'the first' if k in a else 'the second'})"
            else:
                yield from differences(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{where} ({len(a)} vs {len(b)} items)"
        for i, (x, y) in enumerate(zip(a, b)):
            yield from differences(x, y, f"{where}[{i}]")
    elif a != b and not (isinstance(a, float) and isinstance(b, float) and a != a and b != b):  # NaN == NaN here
        yield where or "(the value)"


def _run_dirs_in(path: Path) -> list[str]:
    """The run directories a pooled result names (``runs`` and each comparison's ``run_dir``)."""
    text = _text(path)
    return sorted(set(re.findall(r'"run_dir":\s*"([^"]+)"', text)) | set(_listed_runs(_json(text, path))))


def _listed_runs(data: Any) -> list[str]:
    runs = data.get("runs") if isinstance(data, dict) else None
    return [r for r in runs if isinstance(r, str)] if isinstance(runs, list) else []


def compare(first: Path, second: Path) -> dict[str, Any]:
    """The comparison of two run directories, or of two result files."""
    missing = [str(p) for p in (first, second) if not p.exists()]
    if missing:
        raise SystemExit(f"no such run directory or file: {', '.join(missing)}")
    if first.is_dir() != second.is_dir():
        raise SystemExit(f"compare two run directories or two files, not {first} and {second}")
    if first.is_dir():
        names = [n for n in RESULT_FILES if (first / n).is_file() or (second / n).is_file()]
        pairs = [(n, first / n, second / n, [str(first), str(first.resolve())], [str(second), str(second.resolve())])
                 for n in names]
    else:
        pairs = [(first.name, first, second, _run_dirs_in(first), _run_dirs_in(second))]
    if not pairs:
        raise SystemExit(f"neither {first} nor {second} holds any of {', '.join(RESULT_FILES)}")
    files: list[dict[str, Any]] = []
    skipped: set[str] = set()
    for name, a, b, runs_a, runs_b in pairs:
        if not a.is_file() or not b.is_file():
            only = "the first" if a.is_file() else "the second"
            files.append({"file": name, "same": False, "differences": [f"only in {only}"]})
            continue
        found = list(differences(_normalized(_load(a, runs_a), skipped), _normalized(_load(b, runs_b), skipped)))
        files.append({"file": name, "same": not found, "differences": found[:20], "n_differences": len(found)})
    return {"first": str(first), "second": str(second), "same": all(f["same"] for f in files), "files": files,
            "skipped_clock_fields": sorted({re.sub(r"\[\]", "", s) for s in skipped})}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("first", type=Path, help="a run directory, or a pooled result file (akv pool --out)")
    p.add_argument("second", type=Path, help="the rerun's (the same kind as the first)")
    p.add_argument("--out", type=Path, help="write the comparison here as JSON")
    args = p.parse_args(argv)
    result = compare(args.first, args.second)
    for f in result["files"]:
        line = "same" if f["same"] else f"DIFFERENT at {f.get('n_differences', 1)} places, first: {f['differences'][0]}"
        print(f"{f['file']:20s} {line}")
    print(f"{'SAME' if result['same'] else 'DIFFERENT'}: {args.first} vs {args.second} "
          f"({len(result['skipped_clock_fields'])} wall-clock fields skipped)")
    if args.out:
        write_result(args.out, result, measures=MEASURES)
    return 0 if result["same"] else 1


if __name__ == "__main__":
    sys.exit(main())
