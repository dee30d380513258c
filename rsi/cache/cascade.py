"""The evaluation cascade of a search (``cascade.enabled``): the zero-forward proxy, its screens and
the record of its fidelity.

:meth:`Cascade.start` evaluates the two model controls on train (``full`` and ``drop_evidence``,
stored like any evaluation), fits the proxy (``evals.cache.fidelity.ProxyReplay``) on them and
predicts every expert and every setting the experts' tuning ran beside its model numbers (the
first points of the fidelity check). Each program's tuning then screens its trials on the proxy
(:meth:`Cascade.screen`: ``cascade.trials`` proxy trials, the ``cascade.promote`` sets no other beats
by ``cascade.margin``, anchored at the experts' predicted pass, meet the model); every promoted
trial the model finished is a (predicted, model) pair (:meth:`Cascade.record`). After the held-out
split, :meth:`Cascade.sample` has the model evaluate ``cascade.check`` screened sets it never
promoted, spread over the predicted pass. Everything goes to ``fidelity.json`` (:meth:`Cascade.write`:
the pairs, the Spearman check and both speeds).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from evals.cache.evaluator import DIAGNOSTIC, PolicySpec, TaskResult
from evals.cache.fidelity import EvidenceTable, ProxyReplay, check_fidelity
from evals.tasks.schema import Task
from rsi.archive import candidate_id
from rsi.cache.archive import Archive
from rsi.cache.config import SearchConfig
from rsi.cache.evaluations import Evaluations
from rsi.cache.metrics import aggregate
from rsi.cache.tuning import Screen
from rsi.rundir import RunDir
from rsi.tuning import TuneResult, make_storage

Check = Callable[[str, Any], "tuple[float, float] | None"]
"""``(source, params) -> (cost, pass)`` of a program, or ``None`` when it failed."""


class Cascade:
    """The cascade of one search (see the module docstring); its proxy is ``None`` until
    :meth:`start` (and stays so when ``cascade.enabled`` is off). ``state`` is the run's
    ``state.json`` object (``screened`` is kept in it)."""

    def __init__(self, config: SearchConfig, evals: Evaluations, files: RunDir, state: dict[str, Any],
                 say: Callable[[str], None]):
        self.config = config
        self.evals = evals
        self.files = files
        self.state = state
        self.say = say
        self.proxy: ProxyReplay | None = None  # the zero-forward fidelity (cascade.enabled)
        self.fidelity_pairs: dict[str, tuple[float, float]] = {}  # policy -> (predicted, model) pass on train
        self.screened = 0  # proxy trials this attempt
        self.screen_pool: dict[str, tuple[str, dict[str, Any], float]] = {}  # id -> (program, params, predicted)
        self.fidelity_sampled: set[str] = set()  # pairs added by sample

    @functools.cached_property
    def proxy_storage(self) -> Any:
        """Where the proxy studies are written (``optuna-proxy.journal``), made once: a journal storage
        reads the whole file when made, and every program adds a screen to it."""
        return make_storage("journal", self.files.path, "optuna-proxy")

    def start(self, archive: Archive, expert_trials: Sequence[tuple[PolicySpec, float]], train: list[Task],
              guide: list[Task]) -> ProxyReplay:
        """The proxy: the two model controls on train, the evidence table fitted on them (``guide``'s
        outcomes assumed), then the prediction of every expert of ``archive`` and every setting of
        ``expert_trials`` (the ids of tuning trials are the ids their settings would have as experts)."""
        progress = self.evals.progress
        with progress.unit(2 * len(train)):
            progress.replan(2 * len(train))
            full = self.evals.evaluate(PolicySpec("full"), train)
            dropped = self.evals.evaluate(PolicySpec(DIAGNOSTIC), train)
        table = EvidenceTable.fit(full, dropped).merged(EvidenceTable.assumed(guide))
        proxy = ProxyReplay(self.evals.dry_engine(), table, self.evals.eval_config)
        for c in archive.candidates:  # (not ``full``: the proxy reproduces its control by construction)
            if c.expert and c.spec != "full" and c.train is not None and c.train.ok:
                predicted = aggregate(proxy.evaluate_many(self.evals.candidate_spec(c), train))
                if predicted.ok:
                    self.fidelity_pairs[c.id] = (predicted.pass_rate, c.train.pass_rate)
        for spec, measured in expert_trials:  # every other setting the experts' tuning ran on train
            key = candidate_id(spec.name, dict(spec.params))
            if key not in self.fidelity_pairs:
                predicted = aggregate(proxy.evaluate_many(spec, train))
                if predicted.ok:
                    self.fidelity_pairs[key] = (predicted.pass_rate, measured)
        self.write()  # (before the proxy is kept: this file says it reused no accounting yet)
        self.proxy = proxy
        return proxy

    def program_screen(self, tasks: list[Task]) -> Check:
        """A program's (cost, predicted pass) on ``tasks`` at zero forwards (the proxy; the guide
        tasks' probes at their assumed outcomes)."""
        proxy = self.proxy
        assert proxy is not None

        def screen(source: str, params: Any) -> tuple[float, float] | None:
            m = aggregate(proxy.evaluate_many(PolicySpec("program", dict(params), source=source), tasks))
            return (m.cost_cents_mean, m.pass_rate) if m.ok else None

        return screen

    def model_check(self, tasks: list[Task]) -> Check:
        """A program's (cost, pass) on ``tasks`` with the model (evaluations counted in the budget like
        any other), for the synthesis chain's last step (``proposer.check_last``)."""

        def check(source: str, params: Any) -> tuple[float, float] | None:
            m = aggregate(self.evals.evaluate(PolicySpec("program", dict(params), source=source), tasks))
            return (m.cost_cents_mean, m.pass_rate) if m.ok else None

        return check

    def screen(self, source: str, label: str, archive: Archive) -> Screen | None:
        """The screen of one program's tuning (``None`` without a proxy), anchored at the predicted
        pass of ``archive``'s experts."""
        proxy, cfg = self.proxy, self.config.cascade
        if proxy is None:
            return None

        evaluated = [0]  # policy-task evaluations of this screen

        def predict(params: dict[str, Any], tasks: Sequence[Task]) -> list[TaskResult]:
            results = proxy.evaluate_many(PolicySpec("program", params, source=source, label=label), tasks)
            evaluated[0] += len(results)
            return results

        def timed(seconds: float) -> None:  # the whole screen, space() and Optuna included
            self.evals.speed.add("proxy", [seconds / max(1, evaluated[0])] * evaluated[0])

        experts = (c.id for c in archive.candidates if c.expert and c.id in self.fidelity_pairs)
        anchors = tuple(self.fidelity_pairs[cid][0] for cid in experts) if cfg.promote > 1 else ()
        return Screen(predict, cfg.trials, cfg.promote, cfg.margin, anchors, timed, self.proxy_storage)

    def record(self, sha: str, result: TuneResult) -> None:
        """Pairs of (predicted, model) train pass rate of every promoted trial the model finished."""
        if not result.screened:
            return
        self.screened += len(result.screened)
        self.evals.progress.bar.set_postfix(screened=self.screened, refresh=False)
        for o in result.trials:
            if o.state == "complete" and o.proxy is not None and o.train is not None:
                self.fidelity_pairs[candidate_id(sha, o.params)] = (o.proxy.pass_rate, o.train.pass_rate)
        for o in result.screened:
            if o.proxy is not None and o.proxy.ok:
                self.screen_pool.setdefault(candidate_id(sha, o.params), (sha, o.params, o.proxy.pass_rate))
        self.write()

    def sample(self, n: int, train: list[Task], planned: int) -> None:
        """Evaluate with the model, on all of ``train``, ``n`` screened parameter sets it has not
        evaluated there, at evenly spaced ranks of their predicted pass (ties broken by id, so a
        resumed run picks the same ones), and add them to the proxy's fidelity pairs. They check
        the proxy only: they are not candidates, and the front and the headline never see them.
        ``planned``: the evaluations the progress plan holds for them."""
        pool = sorted((pred, cid, sha, params) for cid, (sha, params, pred) in self.screen_pool.items()
                      if cid not in self.fidelity_pairs)
        picks = sorted({round(i * (len(pool) - 1) / max(1, n - 1)) for i in range(n)}) if pool else []
        self.say(f"fidelity check: the model evaluates {len(picks)} of {len(pool)} screened parameter sets "
                 f"it had not, spread over the predicted pass range")
        with self.evals.progress.unit(planned):
            for i in picks:
                pred, cid, sha, params = pool[i]
                spec = PolicySpec("program", params, source=self.files.program(sha), label=f"check:{sha[:8]}")
                measured = aggregate(self.evals.evaluate(spec, train))
                if measured.ok:
                    self.fidelity_pairs[cid] = (pred, measured.pass_rate)
                    self.fidelity_sampled.add(cid)
        self.write()

    def write(self) -> None:
        """``fidelity.json`` (and ``screened`` in the state)."""
        check = check_fidelity(self.fidelity_pairs)
        self.state["screened"] = self.screened
        self.files.write("fidelity.json", {
            "policies": check.policies, "spearman": check.spearman, "target": check.target,
            "enough": check.enough, "summary": check.summary(), "screened_trials": self.screened,
            "speed": self.evals.speed.to_dict(),
            "accounting_reused": self.proxy.accounting_hits if self.proxy is not None else 0,
            "pairs": {k: {"predicted_pass": p, "model_pass": m} for k, (p, m) in sorted(self.fidelity_pairs.items())},
            "sampled": sorted(self.fidelity_sampled),
        })
