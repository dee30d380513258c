"""Suites on disk: build once into a versioned directory, load as typed tasks.

Layout of a built suite (an HF ``datasets.DatasetDict`` saved with ``save_to_disk``)::

    <root>/<name>-v<version>/          root: $AKV_CACHE_DIR/suites (default ~/.cache/akv-rsi/suites)
        dataset_dict.json  train/  heldout/     one row per task (columns: docs/tasks.md)
        manifest.json                           spec, generator, version, template digest, counts

Messages, tools and meta are JSON strings in the dataset (their shapes vary); probes are a list
of structs. :func:`load_suite` also reads a task set someone else wrote: a JSON-lines file (one
task per line, ``messages`` as a list) or a saved ``Dataset`` / ``DatasetDict`` with these columns.
``datasets`` is imported lazily (it is slow to import and only needed here).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from engine.files import atomic_dir
from engine.settings import settings
from evals.errors import TaskError
from evals.tasks.generator import GENERATOR, GENERATOR_VERSION, SUITES, SuiteSpec, generate_split, get_suite_spec
from evals.tasks.measure import measure, token_counter
from evals.tasks.pools import SPLITS
from evals.tasks.schema import Task
from evals.tasks.templates import load_probe_templates

SCHEMA = "akv-rsi/tasks/1"


@dataclass(frozen=True)
class SuiteInfo:
    """Where a suite lives and what it holds.

    Attributes:
        path: the suite directory.
        spec: the spec it was built from.
        counts: split -> number of tasks.
        built: False when an existing build was reused.
    """

    path: Path
    spec: SuiteSpec
    counts: Mapping[str, int]
    built: bool


def suites_root() -> Path:
    """Where suites are built by default: ``<cache_dir>/suites`` (``AKV_CACHE_DIR`` is honoured)."""
    return settings().cache_dir / "suites"


def suite_dir(name: str, version: int, root: str | Path | None = None) -> Path:
    """``<root>/<name>-v<version>`` (``root`` defaults to :func:`suites_root`)."""
    return (Path(root).expanduser() if root is not None else suites_root()) / f"{name}-v{version}"


def _features() -> Any:
    from datasets import Features, List, Value

    probe = {"after_message": Value("int64"), "question": Value("string"), "cloze_prefix": Value("string"),
             "answer": Value("string"), "candidates": List(Value("string")), "evidence_ids": List(Value("int64")),
             "kind": Value("string")}
    strings = ("id", "family", "split", "domain", "generator", "generator_version", "messages", "tools", "meta")
    return Features({**{k: Value("string") for k in strings}, "seed": Value("int64"), "probes": List(probe),
                     "entities": List(Value("string")), "n_tokens": Value("int64")})


def _row(task: Task) -> dict[str, Any]:
    rec = task.to_record()
    for key in ("messages", "tools", "meta"):
        rec[key] = json.dumps(rec[key], ensure_ascii=False, sort_keys=True)
    return rec


def build_suite(name: str = "default", version: int | None = None, out_dir: str | Path | None = None, *,
                spec: SuiteSpec | None = None, overwrite: bool = False, measure_tokens: bool = True) -> SuiteInfo:
    """Generate suite ``name`` (or ``spec``) and save it; reuse an existing build unless ``overwrite``.

    Args:
        name: a registered suite (:data:`evals.tasks.generator.SUITES`); ignored when ``spec`` is given.
        version: the version label (default: the spec's).
        out_dir: the directory the suite directory ``<name>-v<version>`` goes in (default
            :func:`suites_root`).
        spec: a custom :class:`SuiteSpec` (for other sizes or lengths).
        overwrite: rebuild even if the directory holds a suite.
        measure_tokens: record ``n_tokens`` with the gemma tokenizer (about 2 s to load).

    Raises:
        TaskError: unknown suite name, or an existing build from another generator version.
    """
    import datasets

    spec = spec or get_suite_spec(name)
    spec = replace(spec, version=version) if version is not None and version != spec.version else spec
    path = suite_dir(spec.name, spec.version, out_dir)
    manifest_file = path / "manifest.json"
    if manifest_file.exists() and not overwrite:
        manifest = json.loads(manifest_file.read_text())
        ours = (GENERATOR_VERSION, load_probe_templates(spec.probe_templates).digest)
        theirs = (manifest.get("generator_version"), manifest.get("probe_templates"))
        if theirs != ours:
            raise TaskError(f"{path} was built by generator {theirs[0]} with probe templates {theirs[1]}; this is "
                            f"{ours[0]} with {ours[1]}: bump the suite version or pass overwrite=True",
                            field="version", value=spec.version)
        return SuiteInfo(path, spec, manifest["counts"], built=False)
    splits = {s: generate_split(spec, s) for s in SPLITS}
    if measure_tokens:
        count = token_counter()
        splits = {s: measure(ts, count) for s, ts in splits.items()}
    dd = datasets.DatasetDict({s: datasets.Dataset.from_list([_row(t) for t in ts], features=_features())
                               for s, ts in splits.items()})
    bars = datasets.utils.are_progress_bars_disabled()
    try:
        datasets.disable_progress_bars()
        with atomic_dir(path) as tmp:
            dd.save_to_disk(str(tmp))
            counts = {s: len(ts) for s, ts in splits.items()}
            manifest = {"schema": SCHEMA, "name": spec.name, "version": spec.version, "generator": GENERATOR,
                        "generator_version": GENERATOR_VERSION, "spec": asdict(spec),
                        "probe_templates": load_probe_templates(spec.probe_templates).digest, "counts": counts,
                        "families": {s: list(spec.families(s)) for s in SPLITS}}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    finally:
        if not bars:
            datasets.enable_progress_bars()
    return SuiteInfo(path, spec, counts, built=True)


def _filter(tasks: list[Task], split: str | None, source: str) -> list[Task]:
    if split is None:
        return tasks
    have = sorted({t.split for t in tasks})
    if split not in have:
        raise TaskError(f"{source} has no split {split!r}; splits: {', '.join(have) or 'none'} (or split=None)",
                        field="split", value=split)
    return [t for t in tasks if t.split == split]


def _from_dataset(obj: Any, split: str | None, source: str) -> list[Task]:
    import datasets

    if isinstance(obj, datasets.DatasetDict):
        if split is not None and split not in obj:
            raise TaskError(f"{source} has no split {split!r}; splits: {', '.join(obj)}", field="split", value=split)
        parts = [obj[split]] if split is not None else [obj[s] for s in obj]
        return [Task.from_record(r) for part in parts for r in part]
    return _filter([Task.from_record(r) for r in obj], split, source)


def load_suite(name_or_path: str | Path = "default", split: str | None = "train", *, root: str | Path | None = None,
               build: bool = True) -> list[Task]:
    """The tasks of one split (``split=None``: all) of a registered suite or of a task set on disk.

    ``name_or_path`` is a registered suite name (looked up under ``root``, default
    :func:`suites_root`, and built there on first use unless ``build`` is false), a suite or
    dataset directory written by ``save_to_disk``, a BFCL suite (``bfcl-base``, ``bfcl-long``: made from
    the installed bfcl-eval by :mod:`evals.bfcl`), or a file: the project's JSON lines, or an agent
    log (OpenAI chat logs or ATIF trajectories, imported without probes by ``evals.tasks.logs``). Raises
    :class:`TaskError` for unknown names, missing paths, unknown splits, malformed tasks, and a
    registered suite built by another generator version.
    """
    import datasets

    path = Path(name_or_path).expanduser()
    if not path.exists() and str(name_or_path).startswith("bfcl-"):  # BFCL multi-turn (evals.bfcl; make bfcl)
        from evals.bfcl.data import load_bfcl_suite

        return load_bfcl_suite(str(name_or_path), split)
    if not path.exists() and str(name_or_path) in SUITES:
        spec = get_suite_spec(str(name_or_path))
        path = suite_dir(spec.name, spec.version, root)
        if not (path / "manifest.json").exists():
            if not build:
                raise TaskError(f"suite {spec.name!r} is not built at {path}; call build_suite({spec.name!r})",
                                field="suite", value=spec.name)
            build_suite(spec.name, out_dir=root)
        built_by = json.loads((path / "manifest.json").read_text()).get("generator_version")
        if built_by != GENERATOR_VERSION:  # a stale build: its text is not what this generator writes
            raise TaskError(f"{path} was built by generator {built_by}, this is {GENERATOR_VERSION}: rebuild it with "
                            f"build_suite({spec.name!r}, overwrite=True) or bump the suite's version",
                            field="version", value=spec.version)
    if path.is_file():  # the project's JSON lines, or an agent log (OpenAI chat, ATIF): evals.tasks.logs
        from evals.tasks.logs import load_log

        return _filter(load_log(path), split, str(path))
    if path.is_dir() and ((path / "dataset_dict.json").exists() or (path / "dataset_info.json").exists()):
        return _from_dataset(datasets.load_from_disk(str(path)), split, str(path))
    raise _no_task_set(name_or_path)


def check_suite_name(name_or_path: str | Path) -> None:
    """Refuse a suite that :func:`load_suite` could not find, without loading or building anything
    (a command checks it before slow work).

    Raises:
        TaskError: not a BFCL suite, a registered suite or an existing path.
    """
    text = str(name_or_path)
    if not (text.startswith("bfcl-") or text in SUITES or Path(text).expanduser().exists()):
        raise _no_task_set(name_or_path)


def _no_task_set(name_or_path: str | Path) -> TaskError:
    return TaskError(f"no task set at {str(name_or_path)!r}: not a registered suite ({', '.join(SUITES)}), a "
                     "JSON-lines file or a saved dataset directory", field="suite", value=str(name_or_path))


def save_jsonl(tasks: Iterable[Task], path: str | Path) -> Path:
    """Write ``tasks`` as JSON lines (the portable form of docs/tasks.md); returns the path."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for t in tasks:
            f.write(json.dumps(t.to_record(), ensure_ascii=False, sort_keys=True) + "\n")
    return path
