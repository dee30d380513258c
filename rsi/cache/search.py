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
from engine.layout import Renderer
from evals.cache.evaluator import DIAGNOSTIC, PolicySpec, Replay, TaskResult
from evals.cache.fidelity import DryEngine, EvidenceTable, FidelitySpeed, ProxyReplay, check_fidelity
from evals.tasks import load_suite, select_tasks
from evals.tasks.logs import is_log_task
from evals.tasks.schema import Task
from rsi.archive import Archive, Candidate, Status, candidate_id
from rsi.cache.executors.base import EvalRequest, Executor
from rsi.cache.expert_tuning import tunable, tune_expert
from rsi.cache.fingerprint import behaviour
from rsi.cache.headline import TrainMatch, build_headline, heldout_targets, write_headline
from rsi.cache.hindsight import Hindsight, build_hindsight
from rsi.cache.niches import NicheMap, choose_parents, niche_map, write_niches
from rsi.cache.progress import SearchProgress, plan_evaluations
from rsi.cache.protocol import PICK_FILE, Pick, freeze, program_size, sha256, verify
from rsi.cache.synthesis import SynthesisProposer
from rsi.config import PLACEMENT, ConfigError, SearchConfig, config_from_dict
from rsi.loop import admit, generation
from rsi.metrics import aggregate
from rsi.proposers.base import ParentView, Proposal, Proposer
from rsi.proposers.mutation import source_hash
from rsi.rundir import CACHE, RunDir, RunDirError, read_json
from rsi.store import EvalStore, eval_key
from rsi.tracking import MLflowTracker, Tracker
from rsi.tuning import Screen, TuneResult, make_storage, tune
from search_spaces import Episode, run_program, seed_source

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
        self.eval_config = config.eval_config()
        self.model_id = config.model_id
        self._engine = engine  # an already loaded Engine for the local executor (tests, notebooks)
        self._executor: Executor | None = None
        self._proposer = proposer
        self.tracker = tracker if tracker is not None else MLflowTracker(self.run_dir, config.name,
                                                                          config.tracking_uri)
        self.archive = Archive()
        self.seen: set[str] = set()
        self.niches: NicheMap | None = None  # diversity niches, rebuilt as each generation closes
        self._proxy: ProxyReplay | None = None  # the cascade's zero-forward fidelity (cascade.enabled)
        self.fidelity_pairs: dict[str, tuple[float, float]] = {}  # policy -> (predicted, model) pass on train
        self.expert_trials: list[tuple[PolicySpec, float]] = []  # expert-tuning trials finished: model train pass
        self.screened = 0  # proxy trials this attempt
        self.screen_pool: dict[str, tuple[str, dict[str, Any], float]] = {}  # id -> (program, params, predicted)
        self.fidelity_sampled: set[str] = set()  # pairs added by fidelity_sample
        self.speed = FidelitySpeed()  # policy-task evaluations and their seconds per fidelity, this attempt
        self.spent: dict[str, int] = {}  # phase -> train policy-task evaluations asked of the model (stored or not)
        self.phase = "experts"
        self.fingerprints: dict[str, str] = {}  # behaviour fingerprint (decisions on the smoke episode) -> program
        self.duplicates = 0  # proposals refused because they behave as a program the search already has
        self.hindsight: Hindsight | None = None  # the oracle's view of train (oracle.feedback), for proposers
        self.smoke: list[Episode] = []  # the train episodes: behaviour fingerprints are made on them
        self.guide: list[Task] = []  # train-split tasks the proposer reads at zero forwards (data.guide_tasks)
        self._progress_enabled = progress
        self._outputs_generation = self._written_generation()
        self.progress = SearchProgress(0, enabled=False)  # replaced by run() once the tasks are known
        self.store.listeners.append(lambda key: self.progress.advance(key))

    @functools.cached_property
    def optuna_storage(self) -> Any:
        """The Optuna storage of the model studies (made once: a database storage checks its
        schema when made). The cascade's proxy studies go to :attr:`proxy_storage`."""
        return make_storage(self.config.optuna.storage, self.run_dir)

    @functools.cached_property
    def proxy_storage(self) -> Any:
        """Where the cascade's proxy studies are written (``optuna-proxy.journal``), made once: a
        journal storage reads the whole file when made, and every program adds a screen to it."""
        return make_storage("journal", self.run_dir, "optuna-proxy")

    # ------------------------------------------------------------------ state

    def _written_generation(self) -> int:
        """The last generation whose outputs (archive.json, pareto.json) are on disk (-1: none)."""
        if isinstance(self.state.get("outputs_generation"), int):
            return int(self.state["outputs_generation"])
        try:  # a run directory of an older version: the archive says how far it got
            return max((int(h["generation"]) for h in Archive.load(self.files / "archive.json").hv_history),
                       default=-1)
        except (RunDirError, KeyError, TypeError, ValueError):
            return -1

    # ------------------------------------------------------------------ components

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            if self._engine is not None:
                from rsi.cache.executors.local import LocalExecutor

                self._executor = LocalExecutor(self._engine, self.eval_config, self.store,
                                               progress=not self.progress.drawn)
            else:
                from rsi.cache.executors import make_executor

                self._executor = make_executor(self.config, self.eval_config, self.store, self.run_dir,
                                               progress=not self.progress.drawn)
        return self._executor

    def proposer(self, smoke: Sequence[Episode]) -> Proposer:
        if self._proposer is None:
            from rsi.proposers import make_proposer

            # (the synthesis proposer fingerprints its candidates as the search does: on every train episode)
            grammar = ("synthesis", "random", "hillclimb")
            smoke = self.smoke if self.config.proposer.kind in grammar else smoke
            self._proposer = make_proposer(self.config, smoke, self.run_dir, hindsight=self.hindsight,
                                           screen=self._program_screen() if self._proxy is not None else None,
                                           check=self._model_check(),
                                           known=set(self.fingerprints), source_of=self._source)
        return self._proposer

    def _program_screen(self) -> Any:
        """A program's (cost, predicted pass) on train and the guide tasks at zero forwards (the
        cascade's proxy; the guide tasks' probes at their assumed outcomes), or None."""
        proxy = self._proxy
        assert proxy is not None

        def screen(source: str, params: Any) -> tuple[float, float] | None:
            m = aggregate(proxy.evaluate_many(PolicySpec("program", dict(params), source=source),
                                              self.train + self.guide))
            return (m.cost_cents_mean, m.pass_rate) if m.ok else None

        return screen

    def _model_check(self) -> Any:
        """A program's (cost, pass) on the first ``proposer.check_last`` train tasks with the model
        (evaluations counted in the budget like any other), for the synthesis chain's last step."""
        n = self.config.proposer.check_last

        def check(source: str, params: Any) -> tuple[float, float] | None:
            m = aggregate(self.evaluate(PolicySpec("program", dict(params), source=source), self.train[:n]))
            return (m.cost_cents_mean, m.pass_rate) if m.ok else None

        return check

    def _hindsight(self) -> Hindsight | None:
        """The oracle's view of the train tasks for proposers that read it (``oracle.feedback``)."""
        mode = self.config.oracle.feedback
        if mode == "none" or self.config.proposer.kind not in ("synthesis", "llm"):
            return None
        fulls = self.evaluate(PolicySpec("full"), self.train)
        episodes = [Episode.of(list(t.messages), self._counts(t)) for t in self.train]
        guide_fulls: list[TaskResult] = []
        if self.guide:  # the full cache at its assumed outcomes: every probe required
            assumed = self._proxy or ProxyReplay(self.dry_engine(), EvidenceTable.assumed(self.guide),
                                                 self.eval_config)
            guide_fulls = assumed.evaluate_many(PolicySpec("full"), self.guide)
        replay = Replay(self.dry_engine(), self.eval_config)  # type: ignore[arg-type]  # (accounts only)

        def cost(spec: PolicySpec, task: Task) -> float:
            return replay.cost(spec, task).cents

        def judge(spec: PolicySpec, task: Task) -> TaskResult:
            return self.evaluate(spec, [task])[0]

        if mode == "model":
            self.progress.replan(self.config.oracle.budget * len(self.train))
        found = build_hindsight(self.train, episodes, fulls, cost, judge if mode == "model" else None,
                                self.config.oracle.budget)
        guided = ""
        if self.guide:
            more = build_hindsight(self.guide, [Episode.of(list(t.messages), self._counts(t)) for t in self.guide],
                                   guide_fulls, cost)
            found = found + more
            guided = f" + evidence on {len(self.guide)} guide tasks"
        self.say(f"hindsight for the proposer: {found.source} on {len(self.train)} train tasks{guided} "
                  f"({sum(len(n) for n in found.needed)} needed messages)")
        return found

    def dry_engine(self) -> DryEngine:
        """An engine that renders and accounts without weights (this search's engine's renderer when
        it has one, else the configured model's tokenizer): what the proxy and the bounds run on."""
        return (DryEngine.of(self._engine) if self._engine is not None
                else DryEngine.load(self.config.model.name, self.config.model.template))

    # ------------------------------------------------------------------ evaluation

    def _requests(self, spec: PolicySpec, tasks: Sequence[Task]) -> list[EvalRequest]:
        return [EvalRequest(spec, t, eval_key(spec.key, t.id, self.model_id, self.eval_config.digest)) for t in tasks]

    def evaluate(self, spec: PolicySpec, tasks: Sequence[Task]) -> list[TaskResult]:
        """``spec`` on ``tasks`` with the model (stored results are read, not recomputed); train tasks
        count toward :attr:`spent` of the current :attr:`phase` either way (the budget a fresh run pays)."""
        train = {t.id for t in getattr(self, "train", ())}
        self.spent[self.phase] = self.spent.get(self.phase, 0) + sum(1 for t in tasks if t.id in train)
        requests = self._requests(spec, tasks)
        for r in requests:  # results from the store count as done (new ones count when stored)
            if r.key in self.store:
                self.progress.advance(r.key)
        fresh = {r.key for r in requests if r.key not in self.store}
        results = self.executor.run(requests)
        self.speed.add("model", [r.seconds for r, q in zip(results, requests) if q.key in fresh and r.ok])
        return results

    def _reference(self, tasks: Sequence[Task]) -> list[tuple[float, float]]:
        """The current front's (cost, pass) on exactly ``tasks`` (all from the store)."""
        out = []
        for c in self.archive.front():
            spec = self.candidate_spec(c)
            results = [self.store.get(r.key) for r in self._requests(spec, tasks)]
            if all(r is not None and r.ok for r in results):
                m = aggregate([r for r in results if r is not None])
                out.append((m.cost_cents_mean, m.pass_rate))
        return out

    def candidate_spec(self, c: Candidate) -> PolicySpec:
        """The policy that candidate ``c`` of the archive names (a program's source read from the run)."""
        if c.spec != "program":
            return PolicySpec(c.spec, c.params, label=c.label)
        return PolicySpec("program", c.params, source=self._source(c.program), label=c.label)

    def _source(self, sha: str) -> str:
        return self.files.program(sha)

    # ------------------------------------------------------------------ the loop

    def run(self) -> SearchResult:
        t0 = time.perf_counter()
        cfg = self.config
        self.tracker.start(cfg.to_dict())
        log.info("search %s attempt %d in %s; config %s", cfg.name, self.state["attempt"], self.run_dir,
                 json.dumps(cfg.to_dict()))
        self.train = select_tasks(self._suite("train"), cfg.data.train_tasks)
        self.guide = self._guide_tasks()
        self.heldout = self._heldout_tasks()
        self._check_log_suite()
        guided = f" (+{len(self.guide)} guide tasks at zero forwards)" if self.guide else ""
        self.progress.write(f"search {cfg.name}: {len(self.train)} train{guided} / {len(self.heldout)} held-out tasks, "
                            f"{cfg.generations} generations, run dir {self.run_dir}")
        check = self.store.check
        if check.loaded or not check.clean:
            self.progress.write(f"  {check.summary()}")
        self.plan = plan_evaluations(cfg, len(self.train), len(self.heldout))
        self.progress = SearchProgress(self.plan.total, enabled=self._progress_enabled)
        status = "FAILED"
        try:
            self._experts()
            if cfg.tune_experts:
                self._tune_experts()
            if cfg.cascade.enabled:
                self._proxy = self._make_proxy()
            self.smoke = [Episode.of(list(t.messages), self._counts(t)) for t in self.train]
            self.phase = "seeds"
            self._generation_zero()
            self.hindsight = self._hindsight()
            proposer = self.proposer(self.smoke[:1])
            self.phase = "generations"
            for g in range(1, cfg.generations + 1):
                generation(self, g, proposer)
            if cfg.arms:
                from rsi.cache.ablation import run_arms

                run_arms(self)
            self.phase = "heldout"
            self.judge_heldout()
            if cfg.oracle.heldout:
                from rsi.cache.headroom import measure_search_headroom

                self.phase = "headroom"
                self.headroom = measure_search_headroom(self)
            self.phase = "check"
            if self._proxy is not None and cfg.cascade.check:
                self.fidelity_sample(cfg.cascade.check)
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
                if self._proxy is not None:
                    self.progress.write(check_fidelity(self.fidelity_pairs).summary())
            else:  # outputs stay as the last finished generation wrote them; a resume replays the rest
                log.error("search %s attempt %d failed (%s); archive.json, pareto.json and the report are left "
                          "as the last finished generation wrote them", cfg.name, self.state["attempt"],
                          self.state.get("error", "interrupted"))
            # A failed attempt adds no rows to the tracked front (they would be a replayed, partial front).
            self.tracker.finish(self.pareto_rows() if status == "FINISHED" else [], figures, status)
            self.state["status"] = status.lower()
            self.state["seconds"] = self.state.get("seconds", 0) + time.perf_counter() - t0
            self.files.write_state(self.state)
            if self._executor is not None:
                self._executor.close()
        return SearchResult(self.run_dir, self.archive, time.perf_counter() - t0)

    def say(self, text: str) -> None:
        self.progress.write(text)

    def _suite(self, split: str) -> list[Task]:
        tasks = load_suite(self.config.data.suite, split)
        cap = self.config.data.max_task_tokens
        if cap:
            tasks = [t for t in tasks if t.n_tokens is None or t.n_tokens <= cap]
        return tasks

    def _guide_tasks(self) -> list[Task]:
        """``data.guide_tasks`` train-split tasks after the evaluated ones (``select_tasks`` order)."""
        n = self.config.data.guide_tasks
        if n == 0:
            return []
        pool = self._suite("train")
        if len(pool) <= len(self.train):
            raise ConfigError(f"data.guide_tasks: the train split has {len(pool)} tasks and data.train_tasks uses "
                              "them all; lower train_tasks or set guide_tasks to 0", field="data.guide_tasks", value=n)
        guide = select_tasks(pool, n, len(self.train))
        if len(guide) < n:
            log.warning("data.guide_tasks: %d asked, the train split has %d after the evaluated tasks", n, len(guide))
        return guide

    def _check_log_suite(self) -> None:
        """A suite of agent logs (imported sessions, judged by fidelity: ``eval.fidelity_bound``) has no
        evidence for the zero-forward screen, the oracle or guide tasks: refuse those settings by name."""
        if not any(is_log_task(t) for t in self.train + self.heldout):  # (the replay's test, one place)
            return
        cfg = self.config
        for on, key, value in ((cfg.cascade.enabled, "cascade.enabled", "false"),
                               (cfg.oracle.feedback != "none", "oracle.feedback", "none"),
                               (cfg.oracle.heldout, "oracle.heldout", "false"),
                               (cfg.data.guide_tasks > 0, "data.guide_tasks", "0")):
            if on:
                raise ConfigError(f"{key}: the suite {cfg.data.suite!r} is agent logs without probes (judged by "
                                  f"fidelity); set {key}: {value}", field=key, value=cfg.data.suite)

    def _counts(self, task: Task) -> list[int]:
        """Tokens per message as the evaluating engine counts them (its model and template)."""
        renderer = (self._engine.renderer if self._engine is not None
                    else Renderer.for_model(self.config.model.name, self.config.model.template))
        return renderer.render(list(task.messages)).message_tokens

    def _experts(self) -> None:
        """Each configured expert on train (its held-out evaluation waits for the frozen picks)."""
        for text in self.config.experts:
            spec = parse_expert(text)
            with self.progress.unit(len(self.train)):
                train = self.evaluate(spec, self.train)
            m_train = aggregate(train)
            status = Status.OK if m_train.ok else Status.FAILED
            c = Candidate(candidate_id(spec.name, dict(spec.params)), spec.name, spec.display, dict(spec.params), 0,
                          proposer="expert", train=m_train, status=status,
                          reason="" if m_train.ok else "expert evaluation failed", expert=True, spec=spec.name)
            self.archive.add(c)
            self.tracker.candidate(c, None, train)
            self.say(f"  expert {spec.display:44s} train pass {m_train.pass_rate:.3f} cost "
                      f"{m_train.cost_cents_mean:.4f}c")

    def _tune_experts(self) -> None:
        """Tune each tunable expert's setting on train (``rsi.cache.expert_tuning``); the choice is
        evaluated on held-out with the other frozen picks."""
        seen: set[str] = set()
        for text in self.config.experts:
            spec = parse_expert(text)
            if not tunable(spec) or spec.name in seen:
                continue
            seen.add(spec.name)
            planned = self.config.optuna.trials * len(self.train)
            self.progress.replan(planned)
            with self.progress.unit(planned):
                tuned = tune_expert(spec, study_name=f"expert-tuned:{spec.name}-a{self.state['attempt']}",
                                    storage=self.optuna_storage,
                                    sampler=self.config.optuna.sampler, seed=self.config.seed,
                                    n_trials=self.config.optuna.trials,
                                    evaluate=lambda s: self.evaluate(s, self.train))
                self.expert_trials += [(PolicySpec(spec.name, t.params), t.train.pass_rate) for t in tuned.trials
                                       if t.train is not None and t.train.ok]
                if tuned.best is None or tuned.best.train is None:
                    reason = next((t.reason for t in tuned.trials if t.reason), "no trial finished")
                    self.say(f"  expert {tuned.label:44s} not tuned: {reason}")
                    continue
                best = PolicySpec(spec.name, tuned.best.params, label=tuned.label)
            c = Candidate(candidate_id(f"{spec.name}:tuned", tuned.best.params), spec.name, tuned.label,
                          tuned.best.params, 0, proposer="expert-tuned", train=tuned.best.train,
                          expert=True, spec=spec.name,
                          reason=f"tuned {tuned.tuned} on train with {len(tuned.trials)} trials")
            self.archive.add(c)
            self.tracker.candidate(c, None, self.evaluate(best, self.train))
            self.say(f"  expert {tuned.label:44s} train pass {tuned.best.train.pass_rate:.3f} cost "
                      f"{tuned.best.train.cost_cents_mean:.4f}c ({tuned.setting()})")

    def _make_proxy(self) -> ProxyReplay:
        """The cascade's zero-forward fidelity: the two model controls on train (``full`` and
        ``drop_evidence``, stored like any evaluation), then the prediction of every expert and every
        setting the experts' tuning ran beside its model numbers (the first points of the fidelity
        check; the ids of tuning trials are the ids their settings would have as experts)."""
        with self.progress.unit(2 * len(self.train)):
            self.progress.replan(2 * len(self.train))
            full = self.evaluate(PolicySpec("full"), self.train)
            dropped = self.evaluate(PolicySpec(DIAGNOSTIC), self.train)
        table = EvidenceTable.fit(full, dropped).merged(EvidenceTable.assumed(self.guide))
        proxy = ProxyReplay(self.dry_engine(), table, self.eval_config)
        for c in self.archive.candidates:  # (not ``full``: the proxy reproduces its control by construction)
            if c.expert and c.spec != "full" and c.train is not None and c.train.ok:
                predicted = aggregate(proxy.evaluate_many(self.candidate_spec(c), self.train))
                if predicted.ok:
                    self.fidelity_pairs[c.id] = (predicted.pass_rate, c.train.pass_rate)
        for spec, measured in self.expert_trials:  # every other setting the experts' tuning ran on train
            key = candidate_id(spec.name, dict(spec.params))
            if key not in self.fidelity_pairs:
                predicted = aggregate(proxy.evaluate_many(spec, self.train))
                if predicted.ok:
                    self.fidelity_pairs[key] = (predicted.pass_rate, measured)
        self._write_fidelity()
        return proxy

    def _screen(self, source: str, label: str) -> Screen | None:
        proxy, cfg = self._proxy, self.config.cascade
        if proxy is None:
            return None

        evaluated = [0]  # policy-task evaluations of this screen

        def predict(params: dict[str, Any], tasks: Sequence[Task]) -> list[TaskResult]:
            results = proxy.evaluate_many(PolicySpec("program", params, source=source, label=label), tasks)
            evaluated[0] += len(results)
            return results

        def timed(seconds: float) -> None:  # the whole screen, space() and Optuna included
            self.speed.add("proxy", [seconds / max(1, evaluated[0])] * evaluated[0])

        experts = (c.id for c in self.archive.candidates if c.expert and c.id in self.fidelity_pairs)
        anchors = tuple(self.fidelity_pairs[cid][0] for cid in experts) if cfg.promote > 1 else ()
        return Screen(predict, cfg.trials, cfg.promote, cfg.margin, anchors, timed, self.proxy_storage)

    def _record_fidelity(self, sha: str, result: TuneResult) -> None:
        """Pairs of (predicted, model) train pass rate of every promoted trial the model finished."""
        if not result.screened:
            return
        self.screened += len(result.screened)
        self.progress.bar.set_postfix(screened=self.screened, refresh=False)
        for o in result.trials:
            if o.state == "complete" and o.proxy is not None and o.train is not None:
                self.fidelity_pairs[candidate_id(sha, o.params)] = (o.proxy.pass_rate, o.train.pass_rate)
        for o in result.screened:
            if o.proxy is not None and o.proxy.ok:
                self.screen_pool.setdefault(candidate_id(sha, o.params), (sha, o.params, o.proxy.pass_rate))
        self._write_fidelity()

    def fidelity_sample(self, n: int) -> None:
        """Evaluate with the model, on all of train, ``n`` screened parameter sets it has not
        evaluated there, at evenly spaced ranks of their predicted pass (ties broken by id, so a
        resumed run picks the same ones), and add them to the proxy's fidelity pairs. They check
        the proxy only: they are not candidates, and the front and the headline never see them."""
        pool = sorted((pred, cid, sha, params) for cid, (sha, params, pred) in self.screen_pool.items()
                      if cid not in self.fidelity_pairs)
        picks = sorted({round(i * (len(pool) - 1) / max(1, n - 1)) for i in range(n)}) if pool else []
        self.say(f"fidelity check: the model evaluates {len(picks)} of {len(pool)} screened parameter sets "
                  f"it had not, spread over the predicted pass range")
        with self.progress.unit(self.plan.check):
            for i in picks:
                pred, cid, sha, params = pool[i]
                spec = PolicySpec("program", params, source=self._source(sha), label=f"check:{sha[:8]}")
                measured = aggregate(self.evaluate(spec, self.train))
                if measured.ok:
                    self.fidelity_pairs[cid] = (pred, measured.pass_rate)
                    self.fidelity_sampled.add(cid)
        self._write_fidelity()

    def _write_fidelity(self) -> None:
        check = check_fidelity(self.fidelity_pairs)
        self.state["screened"] = self.screened
        self.files.write("fidelity.json", {
            "policies": check.policies, "spearman": check.spearman, "target": check.target,
            "enough": check.enough, "summary": check.summary(), "screened_trials": self.screened,
            "speed": self.speed.to_dict(),
            "accounting_reused": self._proxy.accounting_hits if self._proxy is not None else 0,
            "pairs": {k: {"predicted_pass": p, "model_pass": m} for k, (p, m) in sorted(self.fidelity_pairs.items())},
            "sampled": sorted(self.fidelity_sampled),
        })

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
        return [ParentView(c, self._source(c.program), self.feedback(c)) for c in chosen]

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
            return self.evaluate(PolicySpec("program", params, source=source, label=label), tasks)

        study = f"{label}-{sha[:8]}-a{self.state['attempt']}"
        result = tune(source, study, seed_name=f"{label}-{sha[:8]}",
                      storage=self.optuna_storage, sampler=cfg.optuna.sampler,
                      seed=cfg.seed, n_trials=cfg.optuna.trials, tasks=self.train,
                      fidelity_tasks=cfg.optuna.fidelity_tasks, evaluate=evaluate, reference=self._reference,
                      screen=self._screen(source, label))
        self._record_fidelity(sha, result)
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
        self.niches = niche_map(self.archive, self.train_results)
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
        match = TrainMatch(self.train_results, self.config.bootstrap_samples, self.config.seed)
        evolved = heldout_targets(self.archive.front(), comparators, self.config.heldout_front, match)
        targets = [*comparators, *evolved]
        picks = [Pick(c.id, c.label, "comparator" if c.expert else "evolved", c.spec,
                      sha256(self._source(c.program)) if c.spec == "program" else "", dict(c.params), c.size)
                 for c in targets]
        frozen = freeze(self.run_dir, picks, [t.id for t in self.heldout])
        self.say(f"picks frozen in {PICK_FILE} before any held-out task is read: {len(evolved)} evolved, "
                  f"{len(comparators)} comparators")
        with self.progress.unit(self.plan.heldout):
            for c in targets:
                if c.heldout is not None:
                    continue
                verify(frozen, c.id, self._source(c.program) if c.spec == "program" else None)
                held = aggregate(self.evaluate(self.candidate_spec(c), self.heldout))
                self.archive.with_heldout(c.id, held)
                self.tracker.heldout(self.archive.get(c.id))
                self.say(f"  held-out {c.label:40s} pass {held.pass_rate:.3f} cost {held.cost_cents_mean:.4f}c")

    def _heldout_tasks(self) -> list[Task]:
        """``data.heldout_tasks`` held-out tasks after the first ``data.heldout_offset`` (``select_tasks``).

        Raises:
            ConfigError: the offset leaves no held-out task.
        """
        pool, data = self._suite("heldout"), self.config.data
        try:
            return select_tasks(pool, data.heldout_tasks, data.heldout_offset)
        except ValueError as err:
            raise ConfigError(f"data.heldout_offset: {err}", field="data.heldout_offset",
                              value=data.heldout_offset) from None

    def train_results(self, c: Candidate) -> list[TaskResult]:
        """``c``'s stored train results (those evaluated; nothing is run)."""
        found = (self.store.get(r.key) for r in self._requests(self.candidate_spec(c), self.train))
        return [r for r in found if r is not None]

    def _ref_cost(self) -> float:
        """Reference cost of the hypervolume: 1.1 x the full-cache expert's train cost (fixed per run)."""
        experts = [c for c in self.archive.candidates if c.expert and c.proposer == "expert" and c.train
                   and c.train.ok]  # the fixed experts only, so tuning experts leaves the reference as it was
        costs = [c.train.cost_cents_mean for c in experts if c.train] or [1.0]
        return 1.1 * max(costs)

    # ------------------------------------------------------------------ outputs

    def feedback(self, c: Candidate) -> dict[str, Any]:
        """What a proposer learns about ``c``: per-family pass rates, cost breakdown, failed probes."""
        results = [self.store.get(r.key) for r in self._requests(self.candidate_spec(c), self.train)]
        failed = []
        for r in results:
            if r is None:
                continue
            for p in r.probes:
                if not p.passed:
                    failed.append({"task": r.task_id, "family": r.family, "kind": p.kind, "answer": p.answer,
                                   "chosen": p.choice, "evidence_messages_dropped": list(p.evidence_dropped)})
        out: dict[str, Any] = {"train": c.train.to_dict() if c.train else None, "failed_probes": failed[:8]}
        if self.eval_config.frame_guard:
            out["frame_guard"] = True
        if self.hindsight is not None and c.spec == "program":
            out["hindsight"] = self._hindsight_report(c)
            out["hindsight_table"] = self._hindsight_table()
        return out

    def _hindsight_table(self) -> dict[str, list[str]]:
        """The rule table read off the hindsight: the cells to keep, and the ones to drop once read, the
        most token reads saved first (what the synthesis proposer's ``table`` operator writes)."""
        from rsi.cache.hindsight import TaskFeatures, hindsight_table

        assert self.hindsight is not None
        if not hasattr(self, "_features"):
            self._features = [TaskFeatures(e) for e in self.hindsight.episodes]
        table = hindsight_table(self.hindsight, self._features)
        dropped = sorted(table.dropped.items(), key=lambda x: (-x[1], str(x[0])))
        return {"keep": sorted(str(c) for c in table.kept), "drop": [str(c) for c, _ in dropped]}

    def _hindsight_report(self, c: Candidate) -> list[dict[str, Any]]:
        """What ``c`` kept that the oracle dropped and dropped that it needed, per train task, worst first."""
        from rsi.cache.hindsight import TaskFeatures, drops_of, report

        assert self.hindsight is not None
        run = run_program(self._source(c.program), dict(c.params), list(self.hindsight.episodes))
        if not run.ok:
            return []
        if not hasattr(self, "_features"):
            self._features = [TaskFeatures(e) for e in self.hindsight.episodes]
        drops = [drops_of(ep[-1].wire) if ep else {} for ep in run.decisions]
        return report(self.hindsight, drops, self._features)

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
        write_headline(self.run_dir, build_headline(self.archive, self._heldout_results, self.train_results,
                                                    samples=self.config.bootstrap_samples, seed=self.config.seed),
                       getattr(self, "headroom", None))
        if self.config.cascade.enabled:  # the speed counts include the held-out evaluations made after the screens
            self._write_fidelity()
        if self._executor is not None:
            self.files.write("replicas.json", self._executor.stats())

    def _heldout_results(self, c: Candidate) -> list[TaskResult] | None:
        """``c``'s per-task held-out results from the store (``None`` when one is missing)."""
        results = [self.store.get(r.key) for r in self._requests(self.candidate_spec(c), self.heldout)]
        return None if any(r is None for r in results) else [r for r in results if r is not None]

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
