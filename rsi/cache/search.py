"""The recursive self-improvement loop.

Per generation: the proposer reads the archive's front and feedback and writes programs; each
is checked (a refused program is a recorded failure); an Optuna study tunes its parameters on
the train split (cost down, pass rate up); the study's best trials enter the archive; the
front's members are evaluated on the held-out split. Generation 0 tunes the seed programs (the
built-in families, plus an earlier search's front when ``seed_from`` is set); the experts are
evaluated once on both splits for comparison.

Resume: every evaluation is stored as it finishes (``rsi.store``) and proposals are saved before
they are tuned, so ``--resume`` replays the loop deterministically: finished evaluations come
from the store, studies are rebuilt with the same seeds, and the search ends with the same
archive as an uninterrupted run.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import AKVError, show
from evals.cache.evaluator import PolicySpec, TaskResult
from evals.cache.fidelity import check_fidelity
from evals.tasks import select_tasks
from evals.tasks.schema import Task
from rsi.archive import Archive, Candidate, Status, candidate_id
from rsi.cache.cascade import Cascade
from rsi.cache.evaluations import Evaluations
from rsi.cache.expert_tuning import Experts
from rsi.cache.feedback import Feedback, proposer_hindsight
from rsi.cache.fingerprint import behaviour
from rsi.cache.headline import TrainMatch, build_headline, heldout_targets, write_headline
from rsi.cache.hindsight import Hindsight
from rsi.cache.niches import NicheMap, choose_parents, niche_map, write_niches
from rsi.cache.progress import SearchProgress, plan_evaluations
from rsi.cache.protocol import PICK_FILE, Pick, freeze, program_size, sha256, verify
from rsi.cache.synthesis import SynthesisProposer
from rsi.cache.task_sets import load_tasks
from rsi.config import PLACEMENT, ConfigError, SearchConfig, config_from_dict
from rsi.loop import admit, generation
from rsi.metrics import aggregate
from rsi.proposers.base import ParentView, Proposal, Proposer
from rsi.proposers.mutation import source_hash
from rsi.rundir import CACHE, RunDir, RunDirError, read_json
from rsi.store import EvalStore
from rsi.tracking import MLflowTracker, Tracker
from rsi.tuning import make_storage, tune
from search_spaces import Episode, seed_source

log = logging.getLogger("akv.search")
parse_expert = PolicySpec.parse  # (the expert notation belongs to evals; kept here for callers of rsi.cache.search)
__all__ = ["Search", "SearchResult", "load_run_config", "parse_expert", "select_tasks"]


@dataclass(frozen=True)
class SearchResult:
    run_dir: Path
    archive: Archive
    seconds: float


class Search:
    """One search run in ``run_dir`` (created, or resumed when it holds a started run).

    Before it writes anything, a resume checks the files it will read (``state.json``,
    ``config.json``, ``proposals/g*.json``, ``mlflow_runs.json``, the SQLite databases): a bad one
    raises :class:`rsi.rundir.RunDirError` naming the file and line, and the directory is left as
    it was. ``progress``: draw a progress bar (``None``: only on a terminal).

    Its parts, each with one job: :attr:`evals` (the model evaluations and their budget ledger,
    ``rsi.cache.evaluations``), :attr:`cascade` (the zero-forward proxy, its screens and
    ``fidelity.json``, ``rsi.cache.cascade``), :attr:`experts` (fixed and tuned,
    ``rsi.cache.expert_tuning``) and :attr:`feedback` (what proposers read, ``rsi.cache.feedback``);
    the search runs the loop and keeps the archive.
    """

    def __init__(self, config: SearchConfig, run_dir: str | Path, *, engine: Any = None,
                 proposer: Proposer | None = None, tracker: Tracker | None = None, progress: bool | None = None):
        self.config = config
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.files = RunDir(self.run_dir)
        self.state = self.files.next_state(_without_placement(config.to_dict()),
                                           lambda raw: _without_placement(_normalized(raw)))
        self.files.check_resume(optuna_sqlite=config.optuna.storage == "sqlite",
                                mlflow_local=not config.tracking_uri)
        self.files.open(log)
        self.store = EvalStore(self.files / "evaluations.jsonl")
        self.state["store_check"] = self.store.check.to_dict() | {"attempt": self.state["attempt"]}
        self.files.record_track(CACHE)
        self.files.write("config.json", config.to_dict())
        self.files.write_state(self.state)
        self.evals = Evaluations(config, self.store, self.files, engine)
        self._proposer = proposer
        self.tracker = tracker if tracker is not None else MLflowTracker(self.run_dir, config.name,
                                                                          config.tracking_uri)
        self.cascade = Cascade(config, self.evals, self.files, self.state, self.say)
        self.experts = Experts(config.experts, self.evals, self.tracker, self.say)
        self.archive = Archive()
        self.seen: set[str] = set()
        self.niches: NicheMap | None = None  # diversity niches, rebuilt as each generation closes
        self.fingerprints: dict[str, str] = {}  # behaviour fingerprint (decisions on the smoke episode) -> program
        self.duplicates = 0  # proposals refused because they behave as a program the search already has
        self.hindsight: Hindsight | None = None  # the oracle's view of train (oracle.feedback), for proposers
        self.feedback = Feedback(self.evals, None)  # (made again once the hindsight is known)
        self.headroom: dict[str, Any] | None = None  # the held-out headroom's summary (oracle.heldout)
        self.train: list[Task] = []  # the tasks, read when the search runs
        self.guide: list[Task] = []  # train-split tasks the proposer reads at zero forwards (data.guide_tasks)
        self.heldout: list[Task] = []
        self.plan = plan_evaluations(config, 0, 0)  # (replaced by run() once the tasks are known)
        self.smoke: list[Episode] = []  # the train episodes: behaviour fingerprints are made on them
        self._progress_enabled = progress
        self._outputs_generation = self._written_generation()

    @property
    def progress(self) -> SearchProgress:
        return self.evals.progress

    @functools.cached_property
    def optuna_storage(self) -> Any:
        """The Optuna storage of the model studies (made once: a database storage checks its
        schema when made). The cascade's proxy studies go to its own storage."""
        return make_storage(self.config.optuna.storage, self.run_dir)

    def _written_generation(self) -> int:
        """The last generation whose outputs (archive.json, pareto.json) are on disk (-1: none)."""
        if isinstance(self.state.get("outputs_generation"), int):
            return int(self.state["outputs_generation"])
        try:  # a run directory of an older version: the archive says how far it got
            return max((int(h["generation"]) for h in Archive.load(self.files / "archive.json").hv_history),
                       default=-1)
        except (RunDirError, KeyError, TypeError, ValueError):
            return -1

    def proposer(self, smoke: Sequence[Episode]) -> Proposer:
        if self._proposer is None:
            from rsi.proposers import make_proposer

            # (the synthesis proposer fingerprints its candidates as the search does: on every train episode)
            grammar = ("synthesis", "random", "hillclimb")
            smoke = self.smoke if self.config.proposer.kind in grammar else smoke
            screen = self.cascade.program_screen(self.train + self.guide) if self.cascade.proxy is not None else None
            self._proposer = make_proposer(self.config, smoke, self.run_dir, hindsight=self.hindsight, screen=screen,
                                           check=self.cascade.model_check(self.train[:self.config.proposer.check_last]),
                                           known=set(self.fingerprints), source_of=self.files.program)
        return self._proposer

    def _reference(self, tasks: Sequence[Task]) -> list[tuple[float, float]]:
        """The current front's (cost, pass) on exactly ``tasks`` (all from the store)."""
        out = []
        for c in self.archive.front():
            results = self.evals.stored(self.evals.candidate_spec(c), tasks)
            if all(r is not None and r.ok for r in results):
                m = aggregate([r for r in results if r is not None])
                out.append((m.cost_cents_mean, m.pass_rate))
        return out

    # ------------------------------------------------------------------ the loop

    def run(self) -> SearchResult:
        t0 = time.perf_counter()
        cfg = self.config
        self.tracker.start(cfg.to_dict())
        log.info("search %s attempt %d in %s; config %s", cfg.name, self.state["attempt"], self.run_dir,
                 json.dumps(cfg.to_dict()))
        tasks = load_tasks(cfg)
        self.train, self.guide, self.heldout = tasks.train, tasks.guide, tasks.heldout
        self.evals.use_tasks(self.train, self.heldout)
        guided = f" (+{len(self.guide)} guide tasks at zero forwards)" if self.guide else ""
        self.progress.write(f"search {cfg.name}: {len(self.train)} train{guided} / {len(self.heldout)} held-out tasks, "
                            f"{cfg.generations} generations, run dir {self.run_dir}")
        check = self.store.check
        if check.loaded or not check.clean:
            self.progress.write(f"  {check.summary()}")
        self.plan = plan_evaluations(cfg, len(self.train), len(self.heldout))
        self.evals.progress = SearchProgress(self.plan.total, enabled=self._progress_enabled)
        status = "FAILED"
        try:
            self.experts.evaluate(self.archive, self.train)
            if cfg.tune_experts:
                self.experts.tune(self.archive, self.train, storage=self.optuna_storage, sampler=cfg.optuna.sampler,
                                  seed=cfg.seed, n_trials=cfg.optuna.trials, attempt=self.state["attempt"])
            if cfg.cascade.enabled:
                self.cascade.start(self.archive, self.experts.trials, self.train, self.guide)
            self.smoke = [Episode.of(list(t.messages), self.evals.counts(t)) for t in self.train]
            self.evals.phase = "seeds"
            self._generation_zero()
            self.hindsight = proposer_hindsight(cfg, self.evals, self.cascade.proxy, self.train, self.guide, self.say)
            self.feedback = Feedback(self.evals, self.hindsight)
            proposer = self.proposer(self.smoke[:1])
            self.evals.phase = "generations"
            for g in range(1, cfg.generations + 1):
                generation(self, g, proposer)
            if cfg.arms:
                from rsi.cache.ablation import run_arms

                run_arms(self, cfg, self.evals, self.smoke, self.say)
            self.evals.phase = "heldout"
            self.judge_heldout()
            if cfg.oracle.heldout:
                from rsi.cache.headroom import measure_search_headroom

                self.evals.phase = "headroom"
                self.headroom = measure_search_headroom(cfg, self.archive, self.evals, self.files, self.say)
            self.evals.phase = "check"
            if self.cascade.proxy is not None and cfg.cascade.check:
                self.cascade.sample(cfg.cascade.check, self.train, self.plan.check)
            status = "FINISHED"
        except BaseException as err:
            self.state["error"] = f"{type(err).__name__}: {err}"
            raise
        finally:
            self.progress.close()
            figures: list[Path] = []
            if status == "FINISHED":
                self.state.pop("error", None)
                self._write_outputs()
                figures = self._report()
                if self.cascade.proxy is not None:
                    self.progress.write(check_fidelity(self.cascade.fidelity_pairs).summary())
            else:  # outputs stay as the last finished generation wrote them; a resume replays the rest
                log.error("search %s attempt %d failed (%s); archive.json, pareto.json and the report are left "
                          "as the last finished generation wrote them", cfg.name, self.state["attempt"],
                          self.state.get("error", "interrupted"))
            # A failed attempt adds no rows to the tracked front (they would be a replayed, partial front).
            self.tracker.finish(self.pareto_rows() if status == "FINISHED" else [], figures, status)
            self.state["status"] = status.lower()
            self.state["seconds"] = self.state.get("seconds", 0) + time.perf_counter() - t0
            self.files.write_state(self.state)
            self.evals.close()
        return SearchResult(self.run_dir, self.archive, time.perf_counter() - t0)

    def say(self, text: str) -> None:
        self.progress.write(text)

    def _generation_zero(self) -> None:
        for name in self.config.seeds:
            self.tune_program(seed_source(name), f"seed:{name}", 0, (), "seed")
        if self.config.seed_from:
            imported = self._imported_front(Path(self.config.seed_from))
            self.progress.replan(len(imported) * self.plan.per_program)
            for c in imported:
                self.tune_program(c[1], f"import:{c[0]}", 0, (), "import")
        self.close_generation(0)

    def _imported_front(self, other: Path) -> list[tuple[str, str]]:
        """(label, source) of an earlier search's evolved front (recursive seeding)."""
        pareto = read_json(other / "pareto.json", list)
        out = []
        for row in pareto:
            if not isinstance(row, dict) or not isinstance(row.get("program"), str):
                raise RunDirError(f"{other / 'pareto.json'}: expected rows with a 'program', got {show(row)}",
                                  field="seed_from", value=str(other))
            if not row.get("expert") and (other / "programs" / f"{row['program']}.py").exists():
                out.append((row["label"], (other / "programs" / f"{row['program']}.py").read_text()))
        return out

    # ------------------------------------------------------------------ the Track of rsi.loop

    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def per_generation(self) -> int:
        return self.config.proposer.per_generation

    @property
    def generations(self) -> int:
        return self.config.generations

    def parents(self) -> list[ParentView]:
        # The front, then diversity niches' elites (rsi.cache.niches), then the best by pass rate.
        chosen = choose_parents(self.archive, self.niches, self.config.proposer.parents)
        return [ParentView(c, self.files.program(c.program), self.feedback.of(c)) for c in chosen]

    def proposed(self, proposals: Sequence[Proposal], proposer: Proposer) -> None:
        self.progress.replan((len(proposals) - self.config.proposer.per_generation) * self.plan.per_program)
        self.say(f"generation {len(self.archive.hv_history)}: {len(proposals)} proposals "
                  f"(proposer validity {proposer.stats.validity_rate:.2f})")

    def refused(self, sha: str, label: str, g: int, parents: tuple[str, ...], proposer: str, reason: str,
                source: str) -> None:
        c = Candidate(candidate_id(sha, {}), sha, label, {}, g, parents, proposer, status=Status.REFUSED,
                      reason=reason)
        self.archive.add(c)
        self.tracker.candidate(c, source, [])
        self.say(f"  {label:14s} refused: {reason}")

    def tune_program(self, source: str, label: str, g: int, parents: tuple[str, ...], proposer: str,
                     note: str = "") -> None:
        with self.progress.unit(self.plan.per_program):
            self._tune_program(source, label, g, parents, proposer, note)

    def _tune_program(self, source: str, label: str, g: int, parents: tuple[str, ...], proposer: str,
                      note: str) -> None:
        known = any(c.program == source_hash(source) for c in self.archive.candidates)  # tuning again: allowed
        admitted = admit(self, source, label, g, parents, proposer)
        if admitted is None:
            return
        sha, _ = admitted
        twin = self._behaves_as(sha, source)
        if twin is not None and not known:
            c = Candidate(candidate_id(sha, {}), sha, label, {}, g, parents, proposer, status=Status.DUPLICATE,
                          reason=f"decides as program {twin[:12]} on the train episodes: not evaluated")
            self.archive.add(c)
            self.duplicates += 1
            self.state["duplicates"] = self.duplicates
            self.say(f"  {label:14s} not evaluated: behaves as program {twin[:12]}")
            return
        cfg = self.config

        def evaluate(params: dict[str, Any], tasks: Sequence[Task]) -> list[TaskResult]:
            return self.evals.evaluate(PolicySpec("program", params, source=source, label=label), tasks)

        study = f"{label}-{sha[:8]}-a{self.state['attempt']}"
        result = tune(source, study, seed_name=f"{label}-{sha[:8]}",
                      storage=self.optuna_storage, sampler=cfg.optuna.sampler,
                      seed=cfg.seed, n_trials=cfg.optuna.trials, tasks=self.train,
                      fidelity_tasks=cfg.optuna.fidelity_tasks, evaluate=evaluate, reference=self._reference,
                      screen=self.cascade.screen(source, label, self.archive))
        self.cascade.record(sha, result)
        if result.failed:
            reason = next((t.reason for t in result.trials if t.state == "failed"), "every trial was pruned")
            status = Status.FAILED if any(t.state == "failed" for t in result.trials) else Status.OK
            if status is Status.FAILED:
                c = Candidate(candidate_id(sha, {}), sha, label, {}, g, parents, proposer, status=status, reason=reason)
                self.archive.add(c)
                self.tracker.candidate(c, source, [])
            self.say(f"  {label:14s} no scored trial: {reason}")
            return
        shown: set[tuple[float, float]] = set()
        size = program_size(source)
        for o in result.best:
            assert o.train is not None
            c = self.archive.add(Candidate(candidate_id(sha, o.params), sha, label, o.params, g, parents, proposer,
                                           train=o.train, reason=note, size=size))
            self.tracker.candidate(c, source, evaluate(o.params, self.train))
            if c.point not in shown:
                shown.add(c.point)
                self.say(f"  {label:14s} pass {o.train.pass_rate:.3f} cost {o.train.cost_cents_mean:.4f}c "
                          f"({proposer}{': ' + note if note else ''})")

    def _behaves_as(self, sha: str, source: str) -> str | None:
        """The program already in the search that decides as ``source`` does on the train episodes
        (``rsi.cache.fingerprint.behaviour``), or ``None``; ``source``'s fingerprint is recorded."""
        if not self.smoke:
            return None
        mark = behaviour(source, {}, self.smoke)
        if mark is None:
            return None  # tuning will record why it fails
        twin = self.fingerprints.get(mark)
        if twin is None or twin == sha:
            self.fingerprints[mark] = sha
            if isinstance(self._proposer, SynthesisProposer):
                self._proposer.known.add(mark)
            return None
        return twin

    def close_generation(self, g: int) -> None:
        front = self.archive.front()
        ref = self._ref_cost()
        hv = self.archive.hypervolume(ref)
        self.archive.hv_history.append({"generation": g, "hypervolume": hv, "front_size": len(front),
                                        "candidates": len(self.archive.candidates), "ref_cost": ref})
        self.tracker.generation(g, {"hypervolume": hv, "front_size": float(len(front)),
                                    "failures": float(len(self.archive.failures()))})
        self.niches = niche_map(self.archive, self.evals.train_results)
        write_niches(self.files / "niches.json", self.archive, self.niches, g)
        if g > self._outputs_generation:  # a resume replaying older generations keeps the newer outputs
            self._write_outputs()
            self._outputs_generation = self.state["outputs_generation"] = g
            self.files.write_state(self.state)
        best = max(front, key=lambda c: c.point[1], default=None)
        self.say(f"  generation {g} done: front {len(front)}, hypervolume {hv:.5f}"
                  + (f", best pass {best.point[1]:.3f} at {best.point[0]:.4f}c" if best else ""))

    def judge_heldout(self) -> None:
        """Freeze the picks, then score them on held-out (``rsi.cache.protocol``): every comparator
        (expert, tuned expert, baseline arm's choice), the ``heldout_front`` most accurate front
        members and each comparator's match on train (``rsi.cache.headline.heldout_targets``)."""
        comparators = self.archive.scored(experts=True)
        match = TrainMatch(self.evals.train_results, self.config.bootstrap_samples, self.config.seed)
        evolved = heldout_targets(self.archive.front(), comparators, self.config.heldout_front, match)
        targets = [*comparators, *evolved]
        picks = [Pick(c.id, c.label, "comparator" if c.expert else "evolved", c.spec,
                      sha256(self.files.program(c.program)) if c.spec == "program" else "", dict(c.params), c.size)
                 for c in targets]
        frozen = freeze(self.run_dir, picks, [t.id for t in self.heldout])
        self.say(f"picks frozen in {PICK_FILE} before any held-out task is read: {len(evolved)} evolved, "
                  f"{len(comparators)} comparators")
        with self.progress.unit(self.plan.heldout):
            for c in targets:
                if c.heldout is not None:
                    continue
                verify(frozen, c.id, self.files.program(c.program) if c.spec == "program" else None)
                held = aggregate(self.evals.evaluate(self.evals.candidate_spec(c), self.heldout))
                self.archive.with_heldout(c.id, held)
                self.tracker.heldout(self.archive.get(c.id))
                self.say(f"  held-out {c.label:40s} pass {held.pass_rate:.3f} cost {held.cost_cents_mean:.4f}c")

    def _ref_cost(self) -> float:
        """Reference cost of the hypervolume: 1.1 x the full-cache expert's train cost (fixed per run)."""
        experts = [c for c in self.archive.candidates if c.expert and c.proposer == "expert" and c.train
                   and c.train.ok]  # the fixed experts only, so tuning experts leaves the reference as it was
        costs = [c.train.cost_cents_mean for c in experts if c.train] or [1.0]
        return 1.1 * max(costs)

    # ------------------------------------------------------------------ outputs

    def pareto_rows(self) -> list[dict[str, Any]]:
        rows = []
        experts = [c for c in self.archive.candidates if c.expert]
        for c in self.archive.front() + experts:
            rows.append({
                "id": c.id, "label": c.label, "program": c.program, "params": c.params, "expert": c.expert,
                "generation": c.generation, "proposer": c.proposer, "parents": list(c.parents),
                "train": ({"pass_rate": c.train.pass_rate, "cost_cents_mean": c.train.cost_cents_mean}
                          if c.train else None),
                "heldout": ({"pass_rate": c.heldout.pass_rate, "cost_cents_mean": c.heldout.cost_cents_mean}
                            if c.heldout else None),
                "train_pass_rate": c.train.pass_rate if c.train else None,
                "train_cost_cents_mean": c.train.cost_cents_mean if c.train else None,
                "heldout_pass_rate": c.heldout.pass_rate if c.heldout else None,
                "heldout_cost_cents_mean": c.heldout.cost_cents_mean if c.heldout else None,
                "fidelity": "model",  # every number here was answered by the model (proxy numbers: fidelity.json)
            })
        return rows

    def _write_outputs(self) -> None:
        self.archive.save(self.files / "archive.json")
        self.files.write("pareto.json", self.pareto_rows())
        write_headline(self.run_dir, build_headline(self.archive, self.evals.heldout_results, self.evals.train_results,
                                                    samples=self.config.bootstrap_samples, seed=self.config.seed),
                       self.headroom)
        if self.config.cascade.enabled:  # the speed counts include the held-out evaluations made after the screens
            self.cascade.write()
        stats = self.evals.executor_stats()
        if stats is not None:
            self.files.write("replicas.json", stats)

    def _report(self) -> list[Path]:
        from rsi.cache.report import write_report

        try:
            return write_report(self.run_dir)
        except Exception:
            log.exception("report failed")
            return []


def _normalized(raw: dict[str, Any]) -> Any:
    try:
        return json.loads(json.dumps(config_from_dict(raw).to_dict()))
    except AKVError:
        return raw  # not a config of this schema: it differs


def _without_placement(raw: Any) -> Any:
    """``raw`` without the executor fields a resumed run may change (``rsi.config.PLACEMENT``)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("executor"), dict):
        return raw
    return {**raw, "executor": {k: v for k, v in raw["executor"].items() if k not in PLACEMENT}}


def load_run_config(run_dir: str | Path, executor: Mapping[str, Any] | None = None) -> SearchConfig:
    """The config a run directory was started with (for ``--resume``), with its ``executor`` fields
    replaced by ``executor`` (fields of ``rsi.config.PLACEMENT``: where evaluations run never changes
    their results, so a search started on Ray may resume in-process, and the other way round).

    Raises:
        RunDirError: ``run_dir`` holds no ``config.json`` (not a search run) or a corrupt one.
    """
    fixed = sorted(set(executor or {}) - set(PLACEMENT))
    if fixed:
        raise ConfigError(f"a resumed search keeps its executor.{fixed[0]} (only {', '.join(PLACEMENT)} may change)",
                          field=f"executor.{fixed[0]}")
    stored = RunDir(run_dir).cache_config
    if not executor:
        return stored
    # a bad new value is the caller's (ConfigError naming the field), not the run directory's
    return config_from_dict(stored.to_dict(), {f"executor.{k}": v for k, v in executor.items()})
