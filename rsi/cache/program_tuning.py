"""The tuning of one program a search admitted (a seed, an import, a proposal or an arm's program).

:meth:`ProgramTuning.tune` first asks whether the program decides as one the search already has on
the train episodes (``rsi.cache.fingerprint.behaviour``): a twin is recorded as a duplicate and not
evaluated (a program tuned again, as the tuning-only arm does, is allowed). Otherwise an Optuna
study (``rsi.cache.tuning.tune``, named ``<label>-<sha8>-a<attempt>``) tunes its parameters on train,
its trials screened by the cascade and pruned against the current front; the study's best trials
enter the archive it is given (the search's, or a baseline arm's), and a program with no scored
trial is recorded as failed. :meth:`ProgramTuning.refused` records a program the checker refused.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from evals.cache.evaluator import PolicySpec, TaskResult
from evals.tasks.schema import Task
from rsi.archive import Status, candidate_id
from rsi.cache.archive import Archive, Candidate
from rsi.cache.cascade import Cascade
from rsi.cache.config import SearchConfig
from rsi.cache.evaluations import Evaluations
from rsi.cache.fingerprint import behaviour
from rsi.cache.metrics import Metrics, aggregate
from rsi.cache.protocol import program_size
from rsi.cache.synthesis import SynthesisProposer
from rsi.cache.tuning import tune
from rsi.proposers.base import Proposer
from rsi.proposers.mutation import source_hash
from rsi.tracking import Tracker
from rsi.tuning import make_storage
from search_spaces import Episode


class ProgramTuning:
    """The program tuning of one search (see the module docstring). ``state`` is the run's
    ``state.json`` object (``duplicates`` is kept in it); ``proposer``: the search's proposer once it
    is made (a synthesis proposer learns every new fingerprint, so it does not propose a twin)."""

    def __init__(self, config: SearchConfig, evals: Evaluations, cascade: Cascade, tracker: Tracker,
                 state: dict[str, Any], say: Callable[[str], None], proposer: Proposer | None = None):
        self.config = config
        self.evals = evals
        self.cascade = cascade
        self.tracker = tracker
        self.state = state
        self.say = say
        self.proposer = proposer
        self.smoke: list[Episode] = []  # the train episodes: behaviour fingerprints are made on them
        self.fingerprints: dict[str, str] = {}  # behaviour fingerprint (decisions on the smoke episode) -> program
        self.duplicates = 0  # proposals refused because they behave as a program the search already has

    @functools.cached_property
    def storage(self) -> Any:
        """The Optuna storage of the model studies, the experts' tuning included (made once: a
        database storage checks its schema when made). The cascade's proxy studies go to its own."""
        return make_storage(self.config.optuna.storage, self.evals.files.path)

    def refused(self, archive: Archive, sha: str, label: str, g: int, parents: tuple[str, ...], proposer: str,
                reason: str, source: str) -> None:
        """Record in ``archive`` a program the checker refused."""
        c = Candidate(candidate_id(sha, {}), sha, label, {}, g, parents, proposer, status=Status.REFUSED,
                      reason=reason)
        archive.add(c)
        self.tracker.candidate(c, source, [])
        self.say(f"  {label:14s} refused: {reason}")

    def tune(self, archive: Archive, sha: str, source: str, label: str, g: int, parents: tuple[str, ...],
             proposer: str, note: str) -> None:
        """Tune the admitted program ``source`` (hash ``sha``) into ``archive`` (module docstring)."""
        known = any(c.program == source_hash(source) for c in archive.candidates)  # tuning again: allowed
        twin = self._behaves_as(sha, source)
        if twin is not None and not known:
            c = Candidate(candidate_id(sha, {}), sha, label, {}, g, parents, proposer, status=Status.DUPLICATE,
                          reason=f"decides as program {twin[:12]} on the train episodes: not evaluated")
            archive.add(c)
            self.duplicates += 1
            self.state["duplicates"] = self.duplicates
            self.say(f"  {label:14s} not evaluated: behaves as program {twin[:12]}")
            return
        cfg = self.config

        def evaluate(params: dict[str, Any], tasks: Sequence[Task]) -> list[TaskResult]:
            return self.evals.evaluate(PolicySpec("program", params, source=source, label=label), tasks)

        study = f"{label}-{sha[:8]}-a{self.state['attempt']}"
        result = tune(source, study, seed_name=f"{label}-{sha[:8]}",
                      storage=self.storage, sampler=cfg.optuna.sampler,
                      seed=cfg.seed, n_trials=cfg.optuna.trials, tasks=self.evals.train,
                      fidelity_tasks=cfg.optuna.fidelity_tasks, evaluate=evaluate,
                      reference=functools.partial(self._reference, archive),
                      screen=self.cascade.screen(source, label, archive))
        self.cascade.record(sha, result)
        if result.failed:
            reason = next((t.reason for t in result.trials if t.state == "failed"), "every trial was pruned")
            status = Status.FAILED if any(t.state == "failed" for t in result.trials) else Status.OK
            if status is Status.FAILED:
                c = Candidate(candidate_id(sha, {}), sha, label, {}, g, parents, proposer, status=status, reason=reason)
                archive.add(c)
                self.tracker.candidate(c, source, [])
            self.say(f"  {label:14s} no scored trial: {reason}")
            return
        shown: set[tuple[float, float]] = set()
        size = program_size(source)
        for o in result.best:
            assert o.train is not None
            c = archive.add(Candidate(candidate_id(sha, o.params), sha, label, o.params, g, parents, proposer,
                                      train=o.train, reason=note, size=size))
            self.tracker.candidate(c, source, evaluate(o.params, self.evals.train))
            if c.point not in shown:
                shown.add(c.point)
                self.say(f"  {label:14s} pass {o.train.pass_rate:.3f} cost {o.train.cost_cents_mean:.4f}c "
                         f"({proposer}{': ' + note if note else ''})")

    def _reference(self, archive: Archive, tasks: Sequence[Task]) -> list[Metrics]:
        """``archive``'s front's metrics on exactly ``tasks`` (all from the store)."""
        out = []
        for c in archive.front():
            results = self.evals.stored(self.evals.candidate_spec(c), tasks)
            if all(r is not None and r.ok for r in results):
                out.append(aggregate([r for r in results if r is not None]))
        return out

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
            if isinstance(self.proposer, SynthesisProposer):
                self.proposer.known.add(mark)
            return None
        return twin
