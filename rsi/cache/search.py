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

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import AKVError
from evals.cache.evaluator import PolicySpec
from evals.cache.fidelity import check_fidelity
from evals.tasks import select_tasks
from evals.tasks.schema import Task
from rsi.cache.archive import Archive
from rsi.cache.cascade import Cascade
from rsi.cache.config import PLACEMENT, SearchConfig, config_from_dict
from rsi.cache.evaluations import Evaluations
from rsi.cache.expert_tuning import Experts
from rsi.cache.feedback import Feedback, proposer_hindsight
from rsi.cache.hindsight import Hindsight
from rsi.cache.niches import NicheMap, choose_parents, niche_map, write_niches
from rsi.cache.outputs import pareto_rows, ref_cost, write_outputs
from rsi.cache.program_tuning import ProgramTuning
from rsi.cache.progress import SearchProgress, plan_evaluations
from rsi.cache.protocol import judge_heldout
from rsi.cache.task_sets import load_tasks
from rsi.config import ConfigError
from rsi.loop import admit, generation
from rsi.proposers.base import ParentView, Proposal, Proposer
from rsi.rundir import CACHE, RunDir, RunDirError
from rsi.store import EvalStore
from rsi.tracking import MLflowTracker, Tracker
from search_spaces import CheckResult, Episode, check_program, seed_source

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
    ``rsi.cache.expert_tuning``), :attr:`feedback` (what proposers read, ``rsi.cache.feedback``) and
    :attr:`tuning` (each admitted program's study, its behaviour duplicates and the refused programs,
    ``rsi.cache.program_tuning``); the frozen picks' held-out scoring is ``rsi.cache.protocol``'s and
    the outputs ``rsi.cache.outputs``'. The search runs the loop and keeps the archive.
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
        self.tracker = tracker if tracker is not None else MLflowTracker(self.run_dir, config.name,
                                                                          config.tracking_uri)
        self.cascade = Cascade(config, self.evals, self.files, self.state, self.say)
        self.experts = Experts(config.experts, self.evals, self.tracker, self.say)
        self.tuning = ProgramTuning(config, self.evals, self.cascade, self.tracker, self.state, self.say, proposer)
        self.archive = Archive()
        self.seen: set[str] = set()
        self.niches: NicheMap | None = None  # diversity niches, rebuilt as each generation closes
        self.hindsight: Hindsight | None = None  # the oracle's view of train (oracle.feedback), for proposers
        self.feedback = Feedback(self.evals, None)  # (made again once the hindsight is known)
        self.headroom: dict[str, Any] | None = None  # the held-out headroom's summary (oracle.heldout)
        self.train: list[Task] = []  # the tasks, read when the search runs
        self.guide: list[Task] = []  # train-split tasks the proposer reads at zero forwards (data.guide_tasks)
        self.heldout: list[Task] = []
        self.plan = plan_evaluations(config, 0, 0)  # (replaced by run() once the tasks are known)
        self._progress_enabled = progress
        self._outputs_generation = self._written_generation()

    @property
    def progress(self) -> SearchProgress:
        return self.evals.progress

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
        """The proposer given to the search, else the config's, made once (the program tuning's too)."""
        if self.tuning.proposer is None:
            from rsi.cache.proposers import make_proposer

            # (the synthesis proposer fingerprints its candidates as the search does: on every train episode)
            grammar = ("synthesis", "random", "hillclimb")
            smoke = self.tuning.smoke if self.config.proposer.kind in grammar else smoke
            screen = self.cascade.program_screen(self.train + self.guide) if self.cascade.proxy is not None else None
            self.tuning.proposer = make_proposer(
                self.config, smoke, self.run_dir, hindsight=self.hindsight, screen=screen,
                check=self.cascade.model_check(self.train[:self.config.proposer.check_last]),
                known=set(self.tuning.fingerprints), source_of=self.files.program)
        return self.tuning.proposer

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
                self.experts.tune(self.archive, self.train, storage=self.tuning.storage, sampler=cfg.optuna.sampler,
                                  seed=cfg.seed, n_trials=cfg.optuna.trials, attempt=self.state["attempt"])
            if cfg.cascade.enabled:
                self.cascade.start(self.archive, self.experts.trials, self.train, self.guide)
            smoke = self.tuning.smoke = [Episode.of(list(t.messages), self.evals.counts(t)) for t in self.train]
            self.evals.phase = "seeds"
            self._generation_zero()
            self.hindsight = proposer_hindsight(cfg, self.evals, self.cascade.proxy, self.train, self.guide, self.say)
            self.feedback = Feedback(self.evals, self.hindsight)
            proposer = self.proposer(smoke[:1])
            self.evals.phase = "generations"
            for g in range(1, cfg.generations + 1):
                generation(self, g, proposer)
            if cfg.arms:
                from rsi.cache.ablation import run_arms

                run_arms(self, cfg, self.evals, smoke, self.say)
            self.evals.phase = "heldout"
            judge_heldout(cfg, self.archive, self.evals, self.files, self.tracker, self.say, self.plan.heldout)
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
            self.tracker.finish(pareto_rows(self.archive) if status == "FINISHED" else [], figures, status)
            self.state["status"] = status.lower()
            self.state["seconds"] = self.state.get("seconds", 0) + time.perf_counter() - t0
            self.files.write_state(self.state)
            self.evals.close()
            self.files.close(log)
        return SearchResult(self.run_dir, self.archive, time.perf_counter() - t0)

    def say(self, text: str) -> None:
        self.progress.write(text)

    def _generation_zero(self) -> None:
        for name in self.config.seeds:
            self.tune_program(seed_source(name), f"seed:{name}", 0, (), "seed")
        if self.config.seed_from:
            imported = RunDir(self.config.seed_from).front_programs()
            self.progress.replan(len(imported) * self.plan.per_program)
            for c in imported:
                self.tune_program(c[1], f"import:{c[0]}", 0, (), "import")
        self.close_generation(0)

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

    def check(self, source: str) -> CheckResult:
        return check_program(source)

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
        self.tuning.refused(self.archive, sha, label, g, parents, proposer, reason, source)

    def tune_program(self, source: str, label: str, g: int, parents: tuple[str, ...], proposer: str,
                     note: str = "") -> None:
        """Admit ``source`` (``rsi.loop.admit``: saved, checked) and tune it into the current archive
        (the search's, or a baseline arm's while it runs)."""
        with self.progress.unit(self.plan.per_program):
            admitted = admit(self, source, label, g, parents, proposer)
            if admitted is not None:
                self.tuning.tune(self.archive, admitted[0], source, label, g, parents, proposer, note)

    def close_generation(self, g: int) -> None:
        front = self.archive.front()
        ref = ref_cost(self.archive)
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

    def _write_outputs(self) -> None:
        write_outputs(self.config, self.archive, self.evals, self.cascade, self.files, self.headroom)

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
    """``raw`` without the executor fields a resumed run may change (``rsi.cache.config.PLACEMENT``)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("executor"), dict):
        return raw
    return {**raw, "executor": {k: v for k, v in raw["executor"].items() if k not in PLACEMENT}}


def load_run_config(run_dir: str | Path, executor: Mapping[str, Any] | None = None) -> SearchConfig:
    """The config a run directory was started with (for ``--resume``), with its ``executor`` fields
    replaced by ``executor`` (fields of ``rsi.cache.config.PLACEMENT``: where evaluations run never changes
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
