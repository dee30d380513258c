"""Many live episodes at once: several policies against one endpoint, N episodes in flight, and two
runs of the same episodes compared turn by turn.

:func:`run_policies` plays every (policy, task, probe) episode of :func:`evals.cache.live.run_episode`
on a pool of ``concurrency`` threads (an episode waits on HTTP nearly all its time, so threads
suffice; the server batches their decode steps, ``engine.server.scheduler``). Each policy keeps its
own run directory and checkpoints, so a rerun resumes every episode where it stopped, whatever
order they finished in; the episodes of all policies share the one server, hence its prefix tree.
Results come back sorted by (task, probe) within each policy, in the order the policies were given,
never in completion order.

:func:`compare_runs` pairs a run's episodes with a reference run's (the same policy played again,
say sequentially against concurrently) and counts the answers, verdicts, replies and tokens that
differ: batching may change a greedy token where two logits nearly tie.

Not for: one episode's loop (``evals.cache.live``) or the command line (``evals.cache.cli.live_cli``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.durable import CheckpointStore, StepKind, StepRecord
from evals.cache.live import LiveConfig, LiveResult, run_episode, session_name
from evals.errors import AKVError
from evals.tasks.schema import Task


@dataclass(frozen=True)
class LivePolicy:
    """One policy of a live run.

    Attributes:
        label: the name its results and checkpoints are filed under (unique in a run).
        policy: anything with ``decide(messages)`` giving the schedule, or ``None`` for the full cache.
        run_dir: its checkpoints (``run_dir/sessions``); unique in a run.
    """

    label: str
    policy: Any
    run_dir: Path


class _OneAtATime:
    """``policy.decide`` called by one thread at a time: a policy, its tokenizer or its sandbox child
    is not made to be shared by the episodes in flight (deciding is short next to a reply)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self._lock = threading.Lock()

    def decide(self, messages: Sequence[Mapping[str, Any]]) -> Any:
        with self._lock:
            return self.policy.decide(messages)


@dataclass(frozen=True)
class _Job:
    entry: LivePolicy
    policy: Any
    store: CheckpointStore
    task: Task
    probe: int


def check_concurrency(concurrency: Any) -> int:
    """``concurrency`` as episodes in flight.

    Raises:
        AKVError: not an integer of at least 1 (the message names the value).
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise AKVError(f"--concurrency must be an integer >= 1 (episodes in flight at once), got {concurrency!r}",
                       field="concurrency", value=concurrency)
    return concurrency


def run_policies(engine: Any, policies: Sequence[LivePolicy], tasks: Sequence[Task],
                 config: LiveConfig | None = None, *, probes_per_task: int = 1, concurrency: int = 1,
                 progress: bool = True, on_result: Callable[[LiveResult], None] | None = None,
                 ) -> dict[str, list[LiveResult]]:
    """Every policy's episodes for the first ``probes_per_task`` probes of every task, ``concurrency``
    in flight at once against ``engine`` (see the module docstring).

    Args:
        engine: as :func:`evals.cache.live.run_episode`'s; shared by the threads (``RemoteEngine``
            is: one HTTP client, one tokenizer).
        config: the episodes' knobs (default ``LiveConfig()``).
        on_result: called on this thread as each episode finishes, in completion order.

    Returns:
        ``label -> results`` in the order of ``policies``, each list sorted by (task id, probe).

    Raises:
        AKVError: ``concurrency`` below 1, or two policies with one label or run directory. What an
            episode raises outside the endpoint's errors (which it records) propagates once the
            episodes already running have checkpointed; those not started are not.
    """
    check_concurrency(concurrency)
    for what, values in (("label", [p.label for p in policies]), ("run directory", [str(p.run_dir) for p in policies])):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise AKVError(f"each policy of a live run needs its own {what}; given twice: {', '.join(twice)}",
                           field="policy", value=twice[0])
    prepared = [(entry, _OneAtATime(entry.policy) if entry.policy is not None and concurrency > 1 else entry.policy,
                 CheckpointStore(entry.run_dir / "sessions")) for entry in policies]
    # task-major order: a task's episodes of every policy start together and share their prefix on the server
    queue = [_Job(entry, policy, store, task, i) for task in tasks
             for i in range(min(probes_per_task, len(task.probes))) for entry, policy, store in prepared]
    out: dict[str, list[LiveResult]] = {p.label: [] for p in policies}
    label = policies[0].label if len(policies) == 1 else f"{len(policies)} policies"
    for r in _played(engine, queue, config or LiveConfig(), concurrency, progress, f"live {label}"):
        out[r.policy].append(r)
        if on_result is not None:
            on_result(r)
    return {k: sorted(v, key=lambda r: (r.task_id, r.probe)) for k, v in out.items()}


def _played(engine: Any, queue: Sequence[_Job], config: LiveConfig, concurrency: int, progress: bool,
            desc: str) -> Iterator[LiveResult]:
    """The results of ``queue``'s episodes as they finish, at most ``concurrency`` in flight."""
    from tqdm import tqdm

    def play(job: _Job) -> LiveResult:
        return run_episode(engine, job.policy, job.entry.label, job.task, job.probe, job.store, config)

    with tqdm(total=len(queue), desc=desc, unit="episode", disable=None if progress else True) as bar:
        if concurrency == 1:  # today's path: every episode on the calling thread
            for job in queue:
                yield play(job)
                bar.update()
            return
        pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="akv-live")
        try:
            pending: set[Future[LiveResult]] = {pool.submit(play, job) for job in queue}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield fut.result()
                    bar.update()
        finally:  # on an error (or a consumer that stops), start nothing new; running episodes checkpoint
            pool.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True)
class RunDiff:
    """A run's episodes against a reference run's (:func:`compare_runs`).

    Attributes:
        episodes: episodes both runs have (paired by policy, task and probe).
        unpaired: the run's episodes the reference lacks.
        answers_differ, verdicts_differ: paired episodes whose answer, or exact-match verdict, differs.
        turns: assistant turns compared (paired by index; a turn only one run has counts too).
        turns_differ: turns whose reply tokens differ.
        tokens_differ: over the differing turns, the tokens from the first that differs to the end
            of the longer reply (a turn only one run has: all its tokens).
        examples: up to five differing turns, ``"<session> turn <k>: token <i>"``.
    """

    episodes: int
    unpaired: int
    answers_differ: int
    verdicts_differ: int
    turns: int
    turns_differ: int
    tokens_differ: int
    examples: tuple[str, ...] = ()

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


def _replies(store: CheckpointStore, session: str, tokenize: Callable[[str], Sequence[int]]) -> list[list[int]]:
    """The tokens of the assistant replies a session's finished steps recorded, in order: as the
    server generated them where the step kept them, else ``tokenize``'s of the reply text."""
    if not store.exists(session):
        return []
    steps = [StepRecord.from_wire(s) for s in store.latest(session).state.get("steps") or []]
    return [[int(t) for t in s.meta["token_ids"]] if "token_ids" in s.meta else list(tokenize(str(s.result)))
            for s in steps if s.kind is StepKind.LLM and s.result is not None]


def compare_runs(reference_dir: Path, run_dir: Path, results: Sequence[LiveResult],
                 tokenize: Callable[[str], Sequence[int]]) -> RunDiff:
    """``results`` (episodes checkpointed under ``run_dir``) against the episodes of the same policy
    under ``reference_dir`` (its ``live.json`` and checkpoints). Replies are compared by the token ids
    the server generated (kept in each step's checkpoint); ``tokenize`` (the served model's tokenizer,
    text to token ids) stands in for a step recorded without them.

    Raises:
        OSError, ValueError: ``reference_dir/live.json`` cannot be read as an ``akv live`` result.
    """
    rows = {(r["policy"], r["task_id"], int(r["probe"])): r
            for r in json.loads((reference_dir / "live.json").read_text())["episodes"]}
    ours, theirs = CheckpointStore(run_dir / "sessions"), CheckpointStore(reference_dir / "sessions")
    episodes = answers = verdicts = turns = turns_differ = tokens = 0
    examples: list[str] = []
    for r in results:
        ref = rows.get((r.policy, r.task_id, r.probe))
        if ref is None:
            continue
        episodes += 1
        answers += r.answer != ref["answer"]
        verdicts += r.exact != bool(ref["exact"])
        name = session_name(r.policy, r.task_id, r.probe)
        a, b = _replies(theirs, name, tokenize), _replies(ours, name, tokenize)
        for k in range(max(len(a), len(b))):
            turns += 1
            x, y = a[k] if k < len(a) else [], b[k] if k < len(b) else []
            if k < len(a) and k < len(b) and x == y:
                continue
            same = next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
            turns_differ += 1
            tokens += max(len(x), len(y)) - same
            if len(examples) < 5:
                examples.append(f"{name} turn {k}: token {same}")
    return RunDiff(episodes, len(results) - episodes, answers, verdicts, turns, turns_differ, tokens, tuple(examples))
