"""Reading and writing the small files of a search run directory.

Every JSON file a resume reads (``state.json``, ``config.json``, ``proposals/g*.json``,
``mlflow_runs.json``, ``archive.json``) goes through :func:`read_json`, so a truncated or edited
file is a :class:`RunDirError` that names the file and the line, not a traceback. Every file the
search writes goes through :func:`write_json` / :func:`write_text` (temporary file, fsync,
rename): a kill leaves the old file or the new one, never half of one. The evaluation store
(``evaluations.jsonl``) has its own checks (``rsi.store``). Not for the run's databases (Optuna,
MLflow), beyond :func:`check_sqlite`.

:class:`RunDir` is the one place that says what a run directory is: its track (cache or survival
search) and its typed config, read once.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import AKVError, show
from engine.files import atomic_write, read_text

if TYPE_CHECKING:
    from rsi.cache.config import SearchConfig
    from rsi.survival.config import EvolveConfig

CACHE = "cache"
"""The cache-policy search's track (``akv search``: ``rsi.cache.search.Search``)."""
SURVIVAL = "survival"
"""The survival-policy evolution's track (``akv survival-search --evolve``: ``rsi.survival.evolve``)."""
TRACKS = (CACHE, SURVIVAL)
CONFIG_FILE = "config.json"
RUN_FILE = "run.json"
"""The run's own record, written when it starts: ``{"track": "cache" | "survival"}``."""


class RunDirError(AKVError):
    """A run-directory file that is missing, not JSON, or not of the expected shape (names the file)."""


def read_json(path: str | Path, kind: type = object) -> Any:
    """The JSON content of ``path``, which must be an instance of ``kind`` (``dict``, ``list``...).

    Raises:
        RunDirError: the file is missing or unreadable, is not UTF-8 JSON (with the line, and the
            column of a JSON problem), or holds another type than ``kind``.
    """
    p = Path(path)
    text = read_text(p, "run file", RunDirError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        what = "empty" if not text.strip() else f"not valid JSON ({err.msg})"
        raise RunDirError(f"{p}: line {err.lineno} column {err.colno}: {what}", field=str(p),
                          value=show(text[max(0, err.pos - 20): err.pos + 20])) from err
    if not isinstance(data, kind):
        raise RunDirError(f"{p}: expected a JSON {_kind_name(kind)}, got {type(data).__name__} {show(data)}",
                          field=str(p), value=show(data))
    return data


def _kind_name(kind: type) -> str:
    names: dict[type, str] = {dict: "object", list: "array", str: "string"}
    return names.get(kind, kind.__name__)


def distinct_run_dirs(run_dirs: Sequence[str | Path], unit: str) -> list[Path]:
    """The run directories to pool, refused when there is none or one is given twice (its ``unit``,
    e.g. tasks or traces, would count twice).

    Raises:
        AKVError: naming the run.
    """
    runs = [Path(r) for r in run_dirs]
    if not runs:
        raise AKVError("give at least one run directory to pool", field="run_dirs", value=[])
    twice = next((r for i, r in enumerate(runs) if r.resolve() in {q.resolve() for q in runs[:i]}), None)
    if twice is not None:
        raise AKVError(f"{twice} is given twice: its {unit} would count twice", field="run_dirs", value=str(twice))
    return runs


def write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (``engine.files.atomic_write``)."""
    atomic_write(Path(path), text.encode("utf-8"))


def write_json(path: str | Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=1))


def check_sqlite(path: str | Path) -> None:
    """Raise :class:`RunDirError` if ``path`` exists and is not an intact SQLite database."""
    p = Path(path)
    if not p.exists():
        return
    try:
        # Read-write: after a kill, opening rolls back a hot journal (SQLite's own recovery, which the
        # search's first query would do anyway); a read-only connection cannot, and fails.
        con = sqlite3.connect(p, timeout=30)
        try:
            rows = con.execute("PRAGMA quick_check").fetchall()
        finally:
            con.close()
    except sqlite3.Error as err:
        raise RunDirError(f"{p}: not a readable SQLite database ({err})", field=str(p), value=None) from err
    if rows != [("ok",)]:
        raise RunDirError(f"{p}: SQLite integrity check failed: {show(rows)}", field=str(p), value=show(rows))


class RunDir:
    """All the state of one search run directory behind one object, as Optuna keeps a study's
    behind its storage: where every file lives, checked reads, atomic writes, the resume checks,
    and what the run is: its :attr:`track` and its typed config (:attr:`config`).

    Layout::

        run.json  config.json  state.json  search.log  evaluations.jsonl (rsi.store)
        programs/<sha256>.py     proposals/g<N>.json
        archive.json  pareto.json  headline.json  niches.json  fidelity.json  proposer_stats.json
        replicas.json  report.html  optuna.db  optuna-proxy.journal  mlflow.db  mlflow_runs.json

    What marks each track:

    - ``run.json`` ``{"track": ...}``: the record each track writes when a run starts
      (:meth:`record_track`, from ``Search`` and ``SurvivalEvolution``); it decides when present.
    - A survival run (``rsi.survival.evolve.SurvivalEvolution``) writes ``config.json`` as
      ``rsi.survival.config.EvolveConfig.to_dict`` (top-level ``train`` and ``heldout`` trace sets and
      ``families``), an ``archive.json`` with ``"kind": "survival"`` and a ``headline.json`` with
      ``"unit": "trace"``.
    - A cache run (``rsi.cache.search.Search``) writes ``config.json`` as
      ``rsi.cache.config.SearchConfig.to_dict`` (sections ``model``, ``data``, ``eval``...; no ``families``),
      an ``archive.json`` without ``kind`` and a ``headline.json`` of per-task ``comparisons``.

    A directory without ``run.json`` (a run started before the record existed) is a survival run when
    any of the survival marks is there, which no cache run writes: ``config.json`` names
    ``families``, ``archive.json`` says ``"kind": "survival"``, ``headline.json`` says
    ``"unit": "trace"`` (the rule of the two ``is_survival_run`` this replaces: the archive's
    kind; the headline's unit or the config's families). Anything else is a cache run. A file that
    is missing or unreadable marks nothing here; reading the config says what is wrong with it.

    Nothing here knows the search's logic; ``rsi.cache.search.Search`` decides what to write and when.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._raw: dict[str, Any] | None = None
        self._track: str | None = None
        self._config: Any = None

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __str__(self) -> str:
        return str(self.path)

    # ------------------------------------------------------------------ what the run is

    @property
    def config_path(self) -> Path:
        return self / CONFIG_FILE

    def has_config(self) -> bool:
        """Whether the run has written its ``config.json`` (a search writes it as it starts)."""
        return self.config_path.is_file()

    def raw_config(self) -> dict[str, Any]:
        """``config.json`` as the run wrote it (read once; the caller must not change it).

        Raises:
            RunDirError: the directory holds no ``config.json``, or it is not a JSON object (naming
                the file and the line).
        """
        if self._raw is None:
            if not self.has_config():
                raise RunDirError(f"{self.path} is not a search run directory: it holds no {CONFIG_FILE}",
                                  field="run_dir", value=str(self.path))
            self._raw = read_json(self.config_path, dict)
        return self._raw

    @property
    def track(self) -> str:
        """:data:`CACHE` or :data:`SURVIVAL` (how it is decided: the class docstring).

        Raises:
            RunDirError: a ``run.json`` that is not ``{"track": "cache" | "survival"}``.
        """
        if self._track is None:
            self._track = self._recorded_track() or self._marked_track()
        return self._track

    @property
    def is_survival(self) -> bool:
        return self.track == SURVIVAL

    def _recorded_track(self) -> str | None:
        path = self / RUN_FILE
        if not path.exists():
            return None
        track = read_json(path, dict).get("track")
        if track not in TRACKS:
            raise RunDirError(f"{path}: 'track' must be one of {', '.join(TRACKS)}, got {show(track)}",
                              field=str(path), value=show(track))
        return str(track)

    def _marked_track(self) -> str:
        def peek(name: str) -> dict[str, Any]:
            try:
                return self.raw_config() if name == CONFIG_FILE else read_json(self / name, dict)
            except RunDirError:
                return {}

        marked = ("families" in peek(CONFIG_FILE) or peek("archive.json").get("kind") == SURVIVAL
                  or peek("headline.json").get("unit") == "trace")
        return SURVIVAL if marked else CACHE

    def record_track(self, track: str) -> None:
        """Write ``run.json`` for a run of ``track`` starting here (kept when it says the same).

        Raises:
            RunDirError: the directory already records a run of the other track.
        """
        if track not in TRACKS:
            raise ValueError(f"track must be one of {TRACKS}, got {track!r}")
        recorded = self._recorded_track()
        if recorded is not None and recorded != track:
            raise RunDirError(f"{self / RUN_FILE}: {self.path} holds a {recorded} run, not a {track} one; use a new "
                              "run directory", field="run_dir", value=str(self.path))
        if recorded is None:
            self.write(RUN_FILE, {"track": track})
        self._track = track

    @property
    def config(self) -> SearchConfig | EvolveConfig:
        """The run's config, typed by its track (:attr:`cache_config` or :attr:`survival_config`)."""
        return self.survival_config if self.is_survival else self.cache_config

    @property
    def cache_config(self) -> SearchConfig:
        """The cache search's ``rsi.cache.config.SearchConfig`` (read once).

        Raises:
            RunDirError: a survival run, no ``config.json``, or one that is not a valid search config
                (naming the file and the field).
        """
        from rsi.cache.config import config_from_dict

        self._expect(CACHE)
        if self._config is None:
            self._config = self._parse(config_from_dict)
        return self._config

    @property
    def survival_config(self) -> EvolveConfig:
        """The survival evolution's ``rsi.survival.config.EvolveConfig`` (read once).

        Raises:
            RunDirError: a cache run, no ``config.json``, or one that is not a survival config.
        """
        from rsi.survival.config import config_from_dict_json

        self._expect(SURVIVAL)
        if self._config is None:
            self._config = self._parse(config_from_dict_json)
        return self._config

    def _expect(self, track: str) -> None:
        if self.track != track:
            raise RunDirError(f"{self.path} holds a {self.track} run, not a {track} one", field="run_dir",
                              value=str(self.path))

    def _parse(self, parse: Callable[[dict[str, Any]], Any]) -> Any:
        raw = self.raw_config()
        try:
            return parse(raw)
        except AKVError as err:
            raise RunDirError(f"{self.config_path}: {err}", field=str(self.config_path),
                              value=getattr(err, "value", None)) from err
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise RunDirError(f"{self.config_path}: not a {self.track} config ({type(err).__name__}: {err})",
                              field=str(self.config_path), value=None) from err

    # ------------------------------------------------------------------ resume

    def next_state(self, config: dict[str, Any], normalize: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
        """The state of the next attempt, read and checked (the caller writes it once all checks pass).

        ``normalize`` reads a stored config through today's schema, so fields added since it was
        written (with their defaults) do not make a resumed run look like another one.

        Raises:
            RunDirError: a bad ``state.json`` or ``config.json``, or a run of another config.
        """
        path = self / "state.json"
        state = read_json(path, dict) if path.exists() else {"attempt": 0}
        attempt = state.get("attempt")
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
            raise RunDirError(f"{path}: 'attempt' must be a non-negative integer, got {show(attempt)}",
                              field="attempt", value=attempt)
        state["attempt"] += 1
        stored = self.config_path
        if stored.exists() and normalize(read_json(stored, dict)) != json.loads(json.dumps(config)):
            raise RunDirError(f"{self.path} holds a run with another config; use a new run directory",
                              field="run_dir", value=str(self.path))
        return state

    def check_resume(self, *, optuna_sqlite: bool, mlflow_local: bool) -> None:
        """Read every other file a resume reads, so a bad one fails now, before anything is written."""
        for path in sorted((self / "proposals").glob("g*.json")):
            read_proposals(path)
        runs = self / "mlflow_runs.json"
        if runs.exists():
            read_json(runs, dict)
        if optuna_sqlite:
            check_sqlite(self / "optuna.db")
        if mlflow_local:
            check_sqlite(self / "mlflow.db")

    def open(self, log: logging.Logger) -> None:
        """Start an attempt (after the resume checks): the folders, and ``log`` also to ``search.log``
        until :meth:`close`."""
        (self / "programs").mkdir(exist_ok=True)
        (self / "proposals").mkdir(exist_ok=True)
        self.close(log)
        handler = logging.FileHandler(self / "search.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)

    def close(self, log: logging.Logger) -> None:
        """End an attempt: ``log`` no longer writes to this run's ``search.log`` (a later search in the
        same process logs to its own run only)."""
        path = str((self / "search.log").absolute())
        for handler in [h for h in log.handlers if isinstance(h, logging.FileHandler) and h.baseFilename == path]:
            log.removeHandler(handler)
            handler.close()

    def write_state(self, state: dict[str, Any]) -> None:
        self.write("state.json", state)

    # ------------------------------------------------------------------ records and outputs

    def write(self, name: str, data: Any) -> Path:
        """Replace the JSON file ``name`` (a path relative to the run directory) atomically."""
        write_json(self / name, data)
        if name in (CONFIG_FILE, RUN_FILE):  # read again when next asked
            self._raw, self._track, self._config = None, None, None
        return self / name

    def save_program(self, sha: str, source: str) -> None:
        write_text(self / "programs" / f"{sha}.py", source)

    def program(self, sha: str) -> str:
        return (self / "programs" / f"{sha}.py").read_text()

    def front_programs(self) -> list[tuple[str, str]]:
        """(label, source) of the evolved programs this run's ``pareto.json`` lists (read when a search
        seeds from this run: ``seed_from``); a row whose program file is missing is left out.

        Raises:
            RunDirError: a row of ``pareto.json`` without a ``program``.
        """
        out = []
        for row in read_json(self / "pareto.json", list):
            if not isinstance(row, dict) or not isinstance(row.get("program"), str):
                raise RunDirError(f"{self / 'pareto.json'}: expected rows with a 'program', got {show(row)}",
                                  field="seed_from", value=str(self.path))
            if not row.get("expert") and (self / "programs" / f"{row['program']}.py").exists():
                out.append((row["label"], self.program(row["program"])))
        return out

    def proposals_of(self, generation: int) -> list[dict[str, Any]] | None:
        """The saved proposals of ``generation`` (``None``: none saved yet)."""
        path = self / "proposals" / f"g{generation}.json"
        return read_proposals(path) if path.exists() else None

    def save_proposals(self, generation: int, rows: list[dict[str, Any]]) -> None:
        self.write(f"proposals/g{generation}.json", rows)


def read_proposals(path: Path) -> list[dict[str, Any]]:
    """The saved proposals of one generation (``proposals/g<N>.json``), each checked.

    Raises:
        RunDirError: a proposal that is not an object with ``source``, ``parents`` and ``proposer``.
    """
    rows = read_json(path, list)
    for i, p in enumerate(rows):
        if not (isinstance(p, dict) and isinstance(p.get("source"), str) and isinstance(p.get("parents"), list)
                and isinstance(p.get("proposer"), str)):
            raise RunDirError(f"{path}: proposal {i} must be an object with 'source', 'parents' and 'proposer', "
                              f"got {show(p)}; delete the file to propose this generation again",
                              field=str(path), value=show(p))
    return list(rows)
