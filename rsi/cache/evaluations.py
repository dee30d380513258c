"""The model evaluations of a search and their ledger.

:class:`Evaluations` asks the model (through the executor: in process, a local server, Ray
replicas) for a policy's results on tasks; a result already in the store (``evaluations.jsonl``)
is read, never recomputed. It keeps the ledger every budget of a search is counted in:
:attr:`Evaluations.spent`, per :attr:`Evaluations.phase`, the train policy-task evaluations asked of
the model, stored or not (the budget a fresh run pays; the baseline arms spend what the generations
spent, ``rsi.cache.ablation``); :attr:`Evaluations.speed`, the seconds of the evaluations computed
this attempt (``fidelity.json``); and the progress bar, which advances once per distinct
evaluation (``rsi.cache.progress``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.layout import Renderer
from evals.cache.evaluator import PolicySpec, TaskResult
from evals.cache.fidelity import DryEngine, FidelitySpeed
from evals.tasks.schema import Task
from rsi.cache.archive import Candidate
from rsi.cache.config import SearchConfig
from rsi.cache.executors.base import EvalRequest, Executor
from rsi.cache.progress import SearchProgress
from rsi.rundir import RunDir
from rsi.store import EvalStore, eval_key


class Evaluations:
    """The model's evaluations in ``files``' run (``store``), with ``engine`` (an already loaded
    Engine for the local executor: tests, notebooks) or the configured executor.

    The train and held-out tasks are known once the search has read its suite (:meth:`use_tasks`);
    until then no evaluation counts as train. ``progress`` is replaced by the search once it knows
    its plan."""

    def __init__(self, config: SearchConfig, store: EvalStore, files: RunDir, engine: Any = None):
        self.config = config
        self.store = store
        self.files = files
        self.engine = engine
        self.eval_config = config.eval_config()
        self.model_id = config.model_id
        self.train: list[Task] = []
        self.heldout: list[Task] = []
        self._train_ids: frozenset[str] = frozenset()
        self._executor: Executor | None = None
        self.spent: dict[str, int] = {}  # phase -> train policy-task evaluations asked of the model (stored or not)
        self.phase = "experts"
        self.speed = FidelitySpeed()  # policy-task evaluations and their seconds per fidelity, this attempt
        self.progress = SearchProgress(0, enabled=False)  # replaced by the search once the tasks are known
        store.listeners.append(lambda key: self.progress.advance(key))

    def use_tasks(self, train: list[Task], heldout: list[Task]) -> None:
        """The search's train and held-out tasks (train evaluations count in :attr:`spent`)."""
        self.train, self.heldout = train, heldout
        self._train_ids = frozenset(t.id for t in train)

    # ------------------------------------------------------------------ the executor

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            if self.engine is not None:
                from rsi.cache.executors.local import LocalExecutor

                self._executor = LocalExecutor(self.engine, self.eval_config, self.store,
                                               progress=not self.progress.drawn)
            else:
                from rsi.cache.executors import make_executor

                self._executor = make_executor(self.config, self.eval_config, self.store, self.files.path,
                                               progress=not self.progress.drawn)
        return self._executor

    def executor_stats(self) -> Any:
        """The executor's stats (``replicas.json``), ``None`` when no evaluation has made one."""
        return self._executor.stats() if self._executor is not None else None

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()

    def dry_engine(self) -> DryEngine:
        """An engine that renders and accounts without weights (this search's engine's renderer when
        it has one, else the configured model's tokenizer): what the proxy and the bounds run on."""
        return (DryEngine.of(self.engine) if self.engine is not None
                else DryEngine.load(self.config.model.name, self.config.model.template))

    def counts(self, task: Task) -> list[int]:
        """Tokens per message as the evaluating engine counts them (its model and template)."""
        renderer = (self.engine.renderer if self.engine is not None
                    else Renderer.for_model(self.config.model.name, self.config.model.template))
        return renderer.render(list(task.messages)).message_tokens

    # ------------------------------------------------------------------ evaluation

    def requests(self, spec: PolicySpec, tasks: Sequence[Task]) -> list[EvalRequest]:
        return [EvalRequest(spec, t, eval_key(spec.key, t.id, self.model_id, self.eval_config.digest)) for t in tasks]

    def evaluate(self, spec: PolicySpec, tasks: Sequence[Task]) -> list[TaskResult]:
        """``spec`` on ``tasks`` with the model (stored results are read, not recomputed); train tasks
        count toward :attr:`spent` of the current :attr:`phase` either way (the budget a fresh run pays)."""
        self.spent[self.phase] = self.spent.get(self.phase, 0) + sum(1 for t in tasks if t.id in self._train_ids)
        requests = self.requests(spec, tasks)
        for r in requests:  # results from the store count as done (new ones count when stored)
            if r.key in self.store:
                self.progress.advance(r.key)
        fresh = {r.key for r in requests if r.key not in self.store}
        results = self.executor.run(requests)
        self.speed.add("model", [r.seconds for r, q in zip(results, requests) if q.key in fresh and r.ok])
        return results

    def stored(self, spec: PolicySpec, tasks: Sequence[Task]) -> list[TaskResult | None]:
        """``spec``'s stored results on ``tasks`` (``None`` where there is none; nothing is run)."""
        return [self.store.get(r.key) for r in self.requests(spec, tasks)]

    def candidate_spec(self, c: Candidate) -> PolicySpec:
        """The policy that candidate ``c`` of the archive names (a program's source read from the run)."""
        if c.spec != "program":
            return PolicySpec(c.spec, c.params, label=c.label)
        return PolicySpec("program", c.params, source=self.files.program(c.program), label=c.label)

    def train_results(self, c: Candidate) -> list[TaskResult]:
        """``c``'s stored train results (those evaluated; nothing is run)."""
        return [r for r in self.stored(self.candidate_spec(c), self.train) if r is not None]

    def heldout_results(self, c: Candidate) -> list[TaskResult] | None:
        """``c``'s per-task held-out results from the store (``None`` when one is missing)."""
        results = self.stored(self.candidate_spec(c), self.heldout)
        return None if any(r is None for r in results) else [r for r in results if r is not None]
