"""The search's headline: the best evolved policy against each expert on held-out, paired over tasks.

``RUN_DIR/headline.json`` is an object: ``comparisons``, a list with one object per expert that has
a held-out result (the fixed experts in config order, then the tuned ones, then ``tuning-only``, the
ablation arm's choice, when the search ran it; experts absent from the config are absent here), and
``headroom`` (``rsi.cache.headroom``: the oracle, the rolling-drop bounds and the share of the headroom
captured on held-out; ``null`` unless ``oracle.heldout``). Runs before the headroom wrote the list
alone, which :func:`read_headline` still reads. Each comparison has ``policy``, ``versus``,
``cost_delta_pct``, ``cost_delta_ci95`` (``[low, high]``), ``pass_delta``, ``pass_delta_ci95``,
``heldout_tasks``, ``significant``, and ``policy_id``, ``versus_id``, ``matched_pass``. The
statistics and the significance rule are ``evals.paired``'s: ratios of sums over the held-out tasks
both policies were evaluated on, 95% percentile intervals of a paired bootstrap over tasks
(``bootstrap_samples`` resamples, ``numpy.random.default_rng(seed)`` with the search's seed, so
every comparison with the same tasks uses the same resamples and the same config gives the same
file); significant: the cost interval excludes 0, the pass interval's lower bound is >= -0.05, and
at least 5 tasks were paired.

Which evolved policy (per expert) is chosen on train, never on held-out (choosing on the split
that is then reported would flatter it): among evolved candidates with a held-out result, the
cheapest on train (train mean cost, then program size, then label) that *matches* the expert on train (``matched_pass``
true); when none does, the one with the highest train pass rate, then the lowest cost
(``matched_pass`` false: nothing matched the expert's accuracy). Matching (:class:`TrainMatch`) is
the held-out significance rule applied to train: a train pass rate at least the expert's, and the
lower bound of the paired 95% interval of the train pass difference at or above
``evals.paired.PASS_MARGIN`` (-0.05). The point comparison alone picked, on a 6-task train split, a
policy that won two tasks and lost two (interval -0.43 to +0.67) and then lost 33 points on held-out.
The search evaluates exactly these choices on held-out (:func:`heldout_targets`). An empty list
means there is nothing to compare; :func:`empty_reason` says why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.cache.evaluator import TaskResult
from evals.paired import MIN_TASKS, PASS_MARGIN, PairedDelta, PairingError, pair_results, paired_bootstrap
from rsi.cache.archive import Archive, Candidate
from rsi.rundir import RunDir, RunDirError, read_json, write_json

HEADLINE_FILE = "headline.json"


@dataclass(frozen=True)
class HeadlineRow:
    """One paired comparison (see the module docstring for the fields)."""

    policy: str
    policy_id: str
    versus: str
    versus_id: str
    matched_pass: bool
    cost_delta_pct: float
    cost_delta_ci95: tuple[float, float]
    pass_delta: float
    pass_delta_ci95: tuple[float, float]
    heldout_tasks: int
    significant: bool

    @classmethod
    def of(cls, policy: Candidate, versus: Candidate, matched_pass: bool, d: PairedDelta) -> HeadlineRow:
        """The row of ``policy`` against ``versus`` from their paired statistics."""
        return cls(policy.label, policy.id, versus.label, versus.id, matched_pass, d.cost_delta_pct, d.cost_delta_ci95,
                   d.pass_delta, d.pass_delta_ci95, d.n_tasks, d.significant)

    @property
    def beats(self) -> bool:
        """Matched the expert's pass rate and is significantly cheaper (the whole cost interval below 0)."""
        return self.matched_pass and self.significant and self.cost_delta_ci95[1] < 0

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "versus": self.versus, "cost_delta_pct": self.cost_delta_pct,
                "cost_delta_ci95": list(self.cost_delta_ci95), "pass_delta": self.pass_delta,
                "pass_delta_ci95": list(self.pass_delta_ci95), "heldout_tasks": self.heldout_tasks,
                "significant": self.significant, "policy_id": self.policy_id, "versus_id": self.versus_id,
                "matched_pass": self.matched_pass}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HeadlineRow:
        return cls(d["policy"], d.get("policy_id", ""), d["versus"], d.get("versus_id", ""),
                   bool(d.get("matched_pass", True)), float(d["cost_delta_pct"]),
                   (float(d["cost_delta_ci95"][0]), float(d["cost_delta_ci95"][1])), float(d["pass_delta"]),
                   (float(d["pass_delta_ci95"][0]), float(d["pass_delta_ci95"][1])), int(d["heldout_tasks"]),
                   bool(d["significant"]))


def _heldout_ok(c: Candidate) -> bool:
    return c.heldout is not None and c.heldout.ok


Results = Callable[[Candidate], Sequence[TaskResult] | None]
"""A candidate's per-task results on one split (``None`` when some are not stored)."""


@dataclass(frozen=True)
class TrainMatch:
    """Whether an evolved candidate matches an expert's accuracy on train (module docstring).

    Attributes:
        results: per-task train results; a candidate without results on every task the expert has
            never matches.
        samples, seed: of the paired bootstrap (as the headline's).
    """

    results: Results
    samples: int = 2000
    seed: int = 0

    def __call__(self, c: Candidate, versus: Candidate) -> bool:
        if c.train is None or versus.train is None or c.point[1] < versus.point[1]:
            return False
        a, b = self.results(c), self.results(versus)
        if not a or not b:
            return False
        try:
            d = paired_bootstrap(pair_results(a, b), samples=self.samples, seed=self.seed)
        except PairingError:
            return False
        return d.pass_delta_ci95[0] >= PASS_MARGIN


def choose_on_train(candidates: Sequence[Candidate], versus: Candidate,
                    match: TrainMatch) -> tuple[Candidate, bool] | None:
    """The cheapest of ``candidates`` on train that ``match``es ``versus`` (and ``True``), else the
    most accurate on train (and ``False``); ``None`` when there is nothing to choose from. Equal
    train cost and pass: the smaller program (``Candidate.size``), then the label."""
    scored = [c for c in candidates if c.train is not None and c.train.ok]
    if not scored or versus.train is None or not versus.train.ok:
        return None
    by_cost = sorted(scored, key=lambda c: (c.point[0], c.size, c.label, c.id))  # (equal cost: the smaller program)
    matched = next((c for c in by_cost if match(c, versus)), None)
    if matched is not None:
        return matched, True
    return min(scored, key=lambda c: (-c.point[1], c.point[0], c.size, c.label, c.id)), False


def pick_policy(evolved: Sequence[Candidate], versus: Candidate, match: TrainMatch) -> tuple[Candidate, bool] | None:
    """The evolved candidate compared with ``versus`` on held-out, and whether it matched its pass
    rate on train (module docstring)."""
    if not _heldout_ok(versus):
        return None
    return choose_on_train([c for c in evolved if _heldout_ok(c)], versus, match)


def heldout_targets(front: Sequence[Candidate], experts: Sequence[Candidate], best: int,
                    match: TrainMatch) -> list[Candidate]:
    """The front members a generation evaluates on held-out: the ``best`` most accurate on train,
    then each expert's match on train (:func:`choose_on_train`), each once, in that order."""
    chosen = sorted(front, key=lambda c: (-c.point[1], c.point[0], c.size, c.id))[:best]
    for versus in experts:
        picked = choose_on_train(front, versus, match)
        if picked is not None and picked[0] not in chosen:
            chosen.append(picked[0])
    return chosen


def empty_reason(archive: Archive) -> str:
    """Why a run's headline has no comparison ("" when it could have one)."""
    if not any(_heldout_ok(c) for c in archive.scored()):
        return "no evolved policy has a held-out result"
    if not any(c.expert and _heldout_ok(c) for c in archive.candidates):
        return "no expert has a held-out result"
    return ""


def build_headline(archive: Archive, heldout_results: Results, train_results: Results, *,
                   samples: int, seed: int) -> list[HeadlineRow]:
    """The comparisons of ``archive`` (module docstring).

    Args:
        heldout_results: a candidate's per-task held-out results (``None`` when some are not stored;
            that comparison is left out).
        train_results: a candidate's per-task train results (for the choice, :class:`TrainMatch`).
        samples, seed: of the bootstrap (``evals.paired.paired_bootstrap``), on both splits.
    """
    match = TrainMatch(train_results, samples, seed)
    evolved = archive.scored()
    rows = []
    for versus in (c for c in archive.candidates if c.expert and _heldout_ok(c)):
        picked = pick_policy(evolved, versus, match)
        if picked is None:
            continue
        policy, matched = picked
        a, b = heldout_results(policy), heldout_results(versus)
        if a is None or b is None:
            continue
        d = paired_bootstrap(pair_results(a, b), samples=samples, seed=seed)
        rows.append(HeadlineRow.of(policy, versus, matched, d))
    return rows


def compare_picks(run_dir: str | Path, a: str, b: str, split: str = "heldout") -> HeadlineRow:
    """Any two candidates of a run (id, label or ``best``, as ``akv export --pick``) paired over the
    tasks of ``split`` both were evaluated on, from the run's evaluation store (nothing is run),
    with the run's bootstrap settings. ``matched_pass`` is ``True``: the caller chose the pair, so
    a choice made after looking at held-out results is the caller's to declare.

    Raises:
        AKVError: an unknown pick, or a pair without paired results on ``split``.
    """
    from engine.errors import AKVError
    from rsi.cache.export import load_archive, pick
    from rsi.store import EvalStore

    run = Path(run_dir)
    archive = load_archive(run)
    config = RunDir(run).cache_config
    rows = EvalStore(run / "evaluations.jsonl").rows()
    picked = [(c, stored_results(run, c, rows, split)) for c in (pick(archive, a), pick(archive, b))]
    (ca, ra), (cb, rb) = picked
    shared = sorted(set(ra) & set(rb))
    if not shared:
        raise AKVError(f"{ca.label} and {cb.label} share no {split} task", field="pick", value=f"{a} {b}")
    d = paired_bootstrap(pair_results([ra[t] for t in shared], [rb[t] for t in shared]),
                         samples=config.bootstrap_samples, seed=config.seed)
    return HeadlineRow.of(ca, cb, True, d)


def stored_results(run_dir: Path, c: Candidate, rows: Sequence[dict[str, Any]], split: str) -> dict[str, TaskResult]:
    """Candidate ``c``'s successful results on ``split`` among a run's evaluation ``rows``, by task id.

    Raises:
        AKVError: it has none.
    """
    from engine.errors import AKVError
    from evals.cache.evaluator import result_from_row
    from rsi.cache.export import spec_of

    key = spec_of(run_dir, c).key
    results = {r["task_id"]: result_from_row(r) for r in rows
               if r["policy_key"] == key and r["split"] == split and r["ok"]}
    if not results:
        raise AKVError(f"{c.label} ({c.id}) has no stored {split} results in {run_dir}", field="pick", value=c.id)
    return results


def write_headline(run_dir: str | Path, rows: Sequence[HeadlineRow], headroom: dict[str, Any] | None = None) -> Path:
    path = Path(run_dir) / HEADLINE_FILE
    write_json(path, {"comparisons": [r.to_dict() for r in rows], "headroom": headroom})
    return path


def _headline_file(run_dir: str | Path) -> tuple[list[Any], dict[str, Any] | None] | None:
    path = Path(run_dir) / HEADLINE_FILE
    if not path.exists():
        return None
    data = read_json(path)
    if isinstance(data, list):  # a run from before the headroom
        return data, None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: expected a JSON object or array, got {type(data).__name__}", field=str(path),
                          value=type(data).__name__)
    rows, headroom = data.get("comparisons"), data.get("headroom")
    if not isinstance(rows, list) or not (headroom is None or isinstance(headroom, dict)):
        raise RunDirError(f"{path}: expected {{'comparisons': [...], 'headroom': {{...}} or null}}", field=str(path),
                          value=sorted(data))
    return rows, headroom


def read_headroom(run_dir: str | Path) -> dict[str, Any] | None:
    """``headroom`` of ``run_dir``'s headline.json (``None``: none measured, or an older run)."""
    found = _headline_file(run_dir)
    return found[1] if found is not None else None


def read_headline(run_dir: str | Path) -> list[HeadlineRow] | None:
    """The comparisons of ``run_dir``'s headline.json (``None`` when the run has none, e.g. an older run).

    Raises:
        RunDirError: the file is not JSON, not of either form, or an entry lacks a field or has one of
            the wrong type.
    """
    found = _headline_file(run_dir)
    if found is None:
        return None
    path = Path(run_dir) / HEADLINE_FILE
    rows = []
    for i, d in enumerate(found[0]):
        try:
            rows.append(HeadlineRow.from_dict(d))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            raise RunDirError(f"{path}: entry {i} is not a headline row ({type(err).__name__}: {err})",
                              field=str(path), value=i) from err
    return rows


def interval(v: tuple[float, float], fmt: str) -> str:
    """A 95% interval as ``[low, high]``, each end in ``fmt``."""
    return f"[{format(v[0], fmt)}, {format(v[1], fmt)}]"


def verdict(d: PairedDelta | HeadlineRow) -> str:
    """Whether a comparison is significant, in words (the reason when it is not)."""
    n = d.n_tasks if isinstance(d, PairedDelta) else d.heldout_tasks
    if d.significant:
        return "significantly " + ("cheaper" if d.cost_delta_ci95[1] < 0 else "more expensive")
    if n < MIN_TASKS:
        return f"not significant (only {n} held-out tasks; at least {MIN_TASKS} are needed)"
    if d.cost_delta_ci95[0] <= 0 <= d.cost_delta_ci95[1]:
        return "not significant (the cost interval includes 0)"
    return "not significant (the pass interval allows a loss of more than 5 points)"


def describe(row: HeadlineRow) -> str:
    """One comparison in words."""
    numbers = (f"cost {row.cost_delta_pct:+.1f}% (95% CI {interval(row.cost_delta_ci95, '+.1f')}), "
               f"pass rate {row.pass_delta:+.3f} (95% CI {interval(row.pass_delta_ci95, '+.3f')}) "
               f"over {row.heldout_tasks} held-out tasks")
    if not row.matched_pass:
        return (f"Nothing matched {row.versus}'s train pass rate; the most accurate evolved policy on train, "
                f"{row.policy}: {numbers}; {verdict(row)}.")
    return f"{row.policy} vs {row.versus}: {numbers}; {verdict(row)}."


DEMONSTRATION = ("A demonstration, not a blind result: every run of this config judges the same held-out tasks "
                 "(data.heldout_reused), so they are not unseen; blind results pool runs judged on tasks no "
                 "earlier run saw (akv pool, docs/results.md).")


def headline_lines(rows: Sequence[HeadlineRow] | None, archive: Archive, *, heldout_reused: bool = False) -> list[str]:
    """The report's headline: a verdict first, then each comparison in words; with ``heldout_reused``,
    after the sentence saying it is a demonstration."""
    if heldout_reused:
        return [DEMONSTRATION, *headline_lines(rows, archive)]
    if rows is None:
        return ["No headline.json in this run (written by searches since paired comparisons were added)."]
    if not rows:
        return [f"No headline comparison: {empty_reason(archive) or 'no paired held-out results were stored'}."]
    beaten = [r.versus for r in rows if r.beats]
    if beaten:
        first = (f"Significant: an evolved policy is cheaper than {', '.join(beaten)} at matched accuracy (chosen on "
                 "train at the expert's pass rate; on held-out its pass rate is at most 5 points lower, 95% interval).")
        rest = [r.versus for r in rows if not r.beats]
        if rest:
            first += f" Not against {', '.join(rest)}."
    else:
        first = ("Nothing beat the experts: no evolved policy matched on train is significantly cheaper than an expert "
                 "on held-out with its held-out pass rate at most 5 points lower (95% interval).")
    return [first] + [describe(r) for r in rows]


def headroom_line(headroom: dict[str, Any]) -> str:
    share = headroom.get("share_captured")
    seed, evolved = headroom.get("tuned_seed") or {}, headroom.get("evolved") or {}
    if share is None:
        return "Share of the headroom captured: not defined (no tuned seed, or the oracle is not cheaper than it)."
    line = (f"Share of the headroom captured by {evolved.get('label', '?')} over the tuned seed program "
            f"({seed.get('label', '?')}): {100 * share:.0f}% = (tuned seed - evolved) / (tuned seed - oracle), "
            f"summed cost over {headroom.get('tasks', 0)} held-out tasks.")
    table = headroom.get("share_of_table_gap")
    if table is not None:
        line += (f" Against the probe-blind rule table (role, tool, length) chosen with hindsight: {100 * table:.0f}% "
                 "of the tuned seed's gap to it.")
    return line


def run_headline(run_dir: str | Path) -> list[str]:
    """:func:`headline_lines` of a run directory, and its headroom line when it has one (what ``akv
    search`` and ``akv report`` print)."""
    reused = RunDir(run_dir).cache_config.data.heldout_reused
    lines = headline_lines(read_headline(run_dir), Archive.load(Path(run_dir) / "archive.json"),
                           heldout_reused=reused)
    headroom = read_headroom(run_dir)
    return lines + ([headroom_line(headroom)] if headroom else [])
