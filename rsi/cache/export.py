"""``akv export``: write an archived policy as a standalone module (see ``search_spaces.export``);
``akv eval --run``: the same pick as a policy to evaluate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.errors import AKVError
from evals.cache.evaluator import PolicySpec
from rsi.cache.archive import Archive, Candidate
from rsi.rundir import RunDir
from search_spaces import Policy, PolicyError, export_policy, get_policy


def load_archive(run_dir: Path) -> Archive:
    """The archive of the run in ``run_dir``.

    Raises:
        AKVError: ``run_dir`` is not a directory, has no ``archive.json`` yet (a search writes it
            when its first candidates are scored), or the archive is not readable JSON.
    """
    if not run_dir.is_dir():
        raise AKVError(f"{run_dir} is not a run directory (akv search --run-dir DIR makes one)", field="run_dir",
                       value=str(run_dir))
    path = run_dir / "archive.json"
    if not path.is_file():
        raise AKVError(f"{run_dir} has no archive.json yet: the search has not scored any candidate (wait for the "
                       "first generation, or resume it with akv search --resume)", field="run_dir", value=str(run_dir))
    try:
        return Archive.load(path)
    except AKVError:
        raise
    except (KeyError, TypeError, ValueError) as err:  # ValueError: also json.JSONDecodeError
        raise AKVError(f"{path} is not a readable archive ({type(err).__name__}: {err})", field="run_dir",
                       value=str(run_dir)) from None


def pick(archive: Archive, name: str) -> Candidate:
    """A candidate by id (or a unique start of one, 4 characters or more), label, or ``best`` (highest
    held-out pass rate, then lowest cost). ``headline`` is resolved by :func:`pick_spec` (it needs the
    run directory)."""
    if name == "best":
        scored = [c for c in archive.scored() if c.heldout is not None and c.heldout.ok] or archive.scored()
        if not scored:
            raise AKVError("this run has no scored evolved policy yet; pick an expert by label (akv report lists "
                           "them) or wait for the first generation", field="pick", value=name)
        return max(scored, key=lambda c: (c.shown.pass_rate, -c.shown.cost_cents_mean))
    for c in archive.candidates:
        if name in (c.id, c.label):
            return c
    prefixed = [c for c in archive.candidates if len(name) >= 4 and c.id.startswith(name)]
    if len(prefixed) == 1:
        return prefixed[0]
    if prefixed:
        raise AKVError(f"{name!r} is the start of {len(prefixed)} candidate ids ({', '.join(c.id for c in prefixed)}); "
                       "give more of it", field="pick", value=name)
    labels = ", ".join(sorted({c.label for c in archive.candidates}))
    raise AKVError(f"no candidate {name!r} in this run; valid picks: best, an id, or one of: {labels}",
                   field="pick", value=name)


def _source(run_dir: Path, c: Candidate) -> str:
    path = run_dir / "programs" / f"{c.program}.py"
    if not path.is_file():
        raise AKVError(f"{c.label} ({c.id}): its program {path} is missing from the run directory", field="pick",
                       value=c.id)
    return path.read_text(encoding="utf-8")


def run_frame_guard(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` was evaluated under the frame guard (its config's
    ``eval.frame_guard``; no ``config.json``, or a survival run: not guarded).

    Raises:
        RunDirError: ``config.json`` is not a valid search config (naming the file).
    """
    run = RunDir(run_dir)
    if not run.has_config() or run.is_survival:
        return False
    return run.cache_config.eval.frame_guard


def run_eval_settings(run_dir: Path) -> dict[str, Any]:
    """What ``akv eval --run`` takes from the run in ``run_dir`` (its ``config.json``): ``suite``, and
    its held-out tasks as ``split`` ``heldout``, ``limit`` and ``offset``; ``model``, ``template``,
    ``dtype`` (unless ``auto``); ``scoring``, ``rates``, ``frame_guard``. Only what the config holds
    (a run written before a field existed leaves that setting to the command line, not to today's
    default); none for a survival run.

    Raises:
        RunDirError: ``config.json`` is not a valid search config (naming the file).
    """
    run = RunDir(run_dir)
    if not run.has_config() or run.is_survival:
        return {}
    config = run.cache_config  # checks every section
    raw = run.raw_config()
    data, model, ev = (raw.get(name) or {} for name in ("data", "model", "eval"))
    out: dict[str, Any] = {}
    if "suite" in data:
        out |= {"suite": data["suite"], "split": "heldout", "limit": int(data.get("heldout_tasks", 0)),
                "offset": int(data.get("heldout_offset", 0))}
    out |= {k: model[src] for k, src in (("model", "name"), ("template", "template")) if model.get(src)}
    if model.get("dtype") in ("auto", "fast"):  # as the run resolved it (on this machine)
        out["dtype"] = config.dtype
    elif model.get("dtype") is not None:
        out["dtype"] = model["dtype"]
    out |= {k: ev[k] for k in ("scoring", "rates") if ev.get(k)}
    if "frame_guard" in ev:
        out["frame_guard"] = bool(ev["frame_guard"])
    return out


def pick_spec(run_dir: Path, name: str) -> PolicySpec:
    """The candidate ``name`` of the run in ``run_dir`` (see :func:`pick`) as a policy to evaluate:
    a program (run in the sandbox) or a family with its parameters.

    Raises:
        AKVError: no archive yet, an unknown pick, or a missing program file.
    """
    if name == "headline":
        name = headline_choice(run_dir)
    return spec_of(run_dir, pick(load_archive(run_dir), name))


def headline_choice(run_dir: Path) -> str:
    """The id of the choice ``headline.json`` of ``run_dir`` reports (the evolved pick, made on train);
    ``best`` when the run has no headline yet (a search still running), said on stdout."""
    from rsi.cache.headline import read_headline

    rows = read_headline(run_dir)
    if not rows:
        print(f"{run_dir} has no headline.json yet (the search has not finished): picking 'best'", flush=True)
        return "best"
    return rows[0].policy_id


def spec_of(run_dir: Path, c: Candidate) -> PolicySpec:
    """Candidate ``c`` of the run in ``run_dir`` as a policy to evaluate (see :func:`pick_spec`)."""
    if c.spec == "program":
        return PolicySpec("program", c.params, source=_source(run_dir, c), label=c.label or c.id)
    return PolicySpec(c.spec, c.params, label=c.label or c.spec)


def export_pick(run_dir: Path, name: str, out: Path, format: str = "module", frame_guard: bool | None = None,
                ) -> Path:
    """Write candidate ``name`` of ``run_dir`` to ``out`` in ``format`` (``module``, or
    ``akv-harness`` for an AKV harness; see ``search_spaces.export_policy`` and docs/export.md);
    ``frame_guard``: its decisions guarded in the file (``None``: as the run was evaluated, its
    config's ``eval.frame_guard``). A cache run's pick; ``rsi.survival.export.export_survival_pick``
    exports a survival run's (``akv export`` chooses by the run's track).

    Raises:
        AKVError: no archive yet, an unknown pick, a missing program file; ``PolicyError`` (an
            ``AKVError``) when the pick cannot be exported (a text baseline, relevance needed, a
            reasoning-dropping family in the harness format).
    """
    c = pick(load_archive(run_dir), headline_choice(run_dir) if name == "headline" else name)
    if c.spec == "program":
        policy = Policy.from_program(_source(run_dir, c), c.params)
    else:
        policy = get_policy(c.spec, **c.params)
    try:
        export_policy(policy, out, format, run_frame_guard(run_dir) if frame_guard is None else frame_guard)
    except PolicyError as err:
        raise PolicyError(f"cannot export {c.label} ({c.id}): {err}", field="pick", value=name) from err
    return out
