"""The ``mixed`` suite: six agent workloads in one split, so that no single rule fits every task.

A coding agent re-reading files, a researcher wading through redundant search pages, an SRE reading
long logs, order -> warehouse -> carrier chains, decisions made in the agent's own reasoning, and
parallel status checks (:mod:`evals.tasks.mixed.kinds`). Each task holds one kind; both splits hold
every kind, with the same tools (a deployed agent keeps its tool set) and disjoint entities
(:mod:`evals.tasks.mixed.world`). Rounds and lengths are those of ``horizon`` or more: 30-60
rounds, 4,500-9,000 gemma tokens.

What differs per kind is the rule that would keep the evidence cheaply: drop a file read once the
same file is read again; keep a page the agent names and drop search pages; keep a log whose
host the agent then describes; keep the agent's reasoning and drop every tool output; keep the
line of a batch the agent calls out. A rolling drop keeps the newest K tool responses whatever
they are, and the evidence sits in the oldest half of every task, so its K must differ per kind.

Promises (checked at generation, :func:`check_mixed`; a draw that breaks one is redrawn):
every answer occurs, before its probe, only in its evidence; it has 5-6 candidates of its kind
(same unit, nearest size), each printed before the probe; the probe's lead-in names what is asked
before the answer on the evidence's line. Generation is deterministic.

Probes are scored as the other generated suites are (verbatim lead-in from the evidence, log-
likelihood over the candidates; ``evals.cache.probes``), fixed before any policy ran on the suite.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from evals.errors import TaskError
from evals.tasks.generator import GENERATOR_VERSION, MIN_CANDIDATES, SUITES, SuiteSpec
from evals.tasks.mixed.builder import MixedBuilder, Ref
from evals.tasks.mixed.kinds import KINDS
from evals.tasks.pools import SPLITS
from evals.tasks.schema import Probe, Task, mentions, message_text

MIXED_GENERATOR = "evals.tasks.mixed"
_ATTEMPTS = 20

TOOLS: dict[str, tuple[tuple[str, str], ...]] = {
    "coding-superseded-reads": (("list_dir", "path"), ("read_file", "path"), ("grep", "pattern"),
                                ("run_tests", "target"), ("git_pull", "")),
    "research-redundant-pages": (("web_search", "query"), ("fetch_page", "url")),
    "ops-long-logs": (("query_logs", "service, window"), ("get_metrics", "service"), ("describe_host", "host"),
                      ("list_alerts", "")),
    "multi-hop-chain": (("search_orders", "status"), ("lookup_order", "order_id"), ("lookup_warehouse", "name"),
                        ("lookup_carrier", "name")),
    "evidence-in-reasoning": (("run_query", "sql"), ("read_dashboard", "name")),
    "parallel-tool-batch": (("check_service", "name"), ("get_dependencies", "name"), ("read_runbook", "topic")),
}
ROLES = {"coding-superseded-reads": "a coding agent working in a service repository",
         "research-redundant-pages": "a research assistant compiling figures from public sources",
         "ops-long-logs": "an on-call SRE agent investigating an incident",
         "multi-hop-chain": "a logistics agent tracing delayed orders",
         "evidence-in-reasoning": "a data engineer agent planning a migration",
         "parallel-tool-batch": "an SRE agent checking the health of a service fleet"}
TASKS = {"train": {"coding-superseded-reads": "Fix the flaky retry tests; the team is pushing config changes today.",
                   "research-redundant-pages": "Write a one-page brief with the best-sourced figures on the topic.",
                   "ops-long-logs": "Find out why the checkout path degraded overnight and what failed first.",
                   "multi-hop-chain": "Find which carriers the delayed orders depend on.",
                   "evidence-in-reasoning": "Plan the storage migration and record the limits you choose.",
                   "parallel-tool-batch": "Sweep the fleet and find the services that are degrading."},
         "heldout": {"coding-superseded-reads": "Get the integration suite green again after this week's merges.",
                     "research-redundant-pages": "Summarise what the public studies say, with their numbers.",
                     "ops-long-logs": "Work out the root cause of the latency incident in the payments area.",
                     "multi-hop-chain": "Trace the held shipments back to the carriers responsible.",
                     "evidence-in-reasoning": "Prepare the reindex plan and settle its parameters.",
                     "parallel-tool-batch": "Check every service of the platform and flag the unhealthy ones."}}


def tool_specs(kind: str) -> tuple[dict[str, Any], ...]:
    return tuple({"type": "function", "function": {
        "name": name, "description": f"{name}({args})",
        "parameters": {"type": "object", "properties": {a.strip(): {"type": "string"} for a in args.split(",")
                                                        if a.strip()}}}} for name, args in TOOLS[kind])


def system_prompt(kind: str) -> str:
    tools = "\n".join(f"- {name}({args})" for name, args in TOOLS[kind])
    return (f"You are {ROLES[kind]}. Work step by step: say what you are about to do, call one tool or a "
            f"batch of tools, read what comes back, and keep going until the task is done. Tool outputs can "
            f"be long; quote what matters when you decide.\n# Tools\n{tools}")


def check_mixed(task: Task) -> list[str]:
    """The promises of the module docstring that ``task`` breaks (empty: it keeps them all)."""
    texts = [message_text(m) for m in task.messages]
    problems = []
    for j, p in enumerate(task.probes):
        where = f"probe {j}"
        if len(p.candidates) < MIN_CANDIDATES:
            problems.append(f"{where}: {len(p.candidates)} candidates")
        if not all(mentions(texts[e], p.answer) for e in p.evidence_ids[-1:]):
            problems.append(f"{where}: answer {p.answer!r} not in its evidence")
        leaks = [i for i in range(p.after_message + 1) if i not in p.evidence_ids and mentions(texts[i], p.answer)]
        if leaks:
            problems.append(f"{where}: answer {p.answer!r} also in messages {leaks}")
        before = "\n".join(texts[: p.after_message + 1])
        missing = [c for c in p.candidates if not mentions(before, c)]
        if missing:
            problems.append(f"{where}: candidates {missing} not shown before the probe")
        if p.cloze_prefix and not any(p.cloze_prefix in texts[e] for e in p.evidence_ids):
            problems.append(f"{where}: its lead {p.cloze_prefix!r} is in no evidence message")
    return problems


class _Redraw(Exception):
    pass


def _attempt(kind: str, split: str, seed: int, target_tokens: int, attempt: int, task_id: str) -> Task:
    rng = random.Random(f"mixed|{GENERATOR_VERSION}|{kind}|{split}|{seed}|{attempt}")
    write, per_round = KINDS[kind]
    rounds = max(30, min(60, round((target_tokens - 300) / per_round)))
    b = MixedBuilder(split, rng, system_prompt(kind), TASKS[split][kind], rounds)
    specs = write(b)
    messages = tuple(b.messages())
    ids = b.ids()
    texts = [message_text(m) for m in messages]
    after = len(messages) - 1
    probes = []
    for spec in specs:
        evidence = tuple(ids[r] for r in spec.evidence)
        cands = b.world.candidates(spec.answer, spec.unit, texts[: after + 1])
        probes.append(Probe(after, spec.question, spec.answer, spec.lead, cands, evidence, spec.kind))
    task = Task(id=task_id, messages=messages, probes=tuple(probes), family=kind, split=split, domain=kind,
                seed=seed, generator=MIXED_GENERATOR, generator_version=GENERATOR_VERSION, tools=tool_specs(kind),
                entities=(), meta={"attempt": attempt, "target_tokens": target_tokens, "rounds": len(b.rounds),
                                   "evidence_style": "keyed",
                                   "probe_meta": [{"evidence_ids": list(p.evidence_ids),
                                                   "tool_age": sum(1 for i, m in enumerate(messages)
                                                                   if m["role"] == "tool" and i >= min(p.evidence_ids))}
                                                  for p in probes]})
    problems = check_mixed(task)
    if problems:
        raise _Redraw("; ".join(problems))
    return task


def generate_mixed_task(kind: str, split: str, seed: int, *, target_tokens: int = 6000,
                        task_id: str | None = None) -> Task:
    """One ``mixed`` task of ``kind`` (deterministic in its arguments).

    Raises:
        TaskError: an unknown kind or split, or no valid draw in 20 attempts.
    """
    if kind not in KINDS:
        raise TaskError(f"unknown mixed kind {kind!r}; valid: {', '.join(KINDS)}", field="family", value=kind)
    if split not in SPLITS:
        raise TaskError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}", field="split", value=split)
    reasons = []
    for attempt in range(_ATTEMPTS):
        try:
            return _attempt(kind, split, seed, target_tokens, attempt, task_id or f"mixed/{split}/{kind}/{seed}")
        except _Redraw as err:
            reasons.append(str(err))
    raise TaskError(f"no valid {kind} task for seed {seed} in {_ATTEMPTS} attempts: {reasons[-1]}", field="seed",
                    value=seed)


@dataclass(frozen=True)
class MixedSpec(SuiteSpec):
    """A ``mixed`` suite; fields as :class:`SuiteSpec` (``heldout_only``, ``domains`` and
    ``evidence_style`` are not used: every kind is in both splits)."""

    def families(self, split: str) -> tuple[str, ...]:
        return tuple(KINDS)

    def seed_of(self, split: str, family: str, index: int) -> int:
        return (self.seed * 10_000_000 + SPLITS.index(split) * 5_000_000 + list(KINDS).index(family) * 100_000
                + index)

    def generate(self, split: str) -> list[Task]:
        """Every task of one split, kind by kind; lengths spread over the range."""
        tasks = []
        for f_index, kind in enumerate(KINDS):
            for i in range(self.tasks_per_family.get(split, 0)):
                frac = ((i + 0.5) * 0.6180339887 + f_index * 0.25) % 1.0
                target = round(self.min_tokens + frac * (self.max_tokens - self.min_tokens))
                tasks.append(generate_mixed_task(kind, split, self.seed_of(split, kind, i), target_tokens=target,
                                                 task_id=f"{self.name}-v{self.version}/{split}/{kind}/{i:03d}"))
        return tasks


MIXED_SUITES: dict[str, MixedSpec] = {s.name: s for s in (
    # Version 2 added held-out tasks 17-24 of each kind (blind runs had judged 95 of the 96): the
    # first 96 of the held-out split in select_tasks' order are v1's, unchanged (ids now mixed-v2/...).
    MixedSpec("mixed", 2, {"train": 8, "heldout": 24}, 4500, 8500, heldout_only=()),
)}
SUITES.update(MIXED_SUITES)

__all__ = ["KINDS", "MIXED_SUITES", "MixedSpec", "Ref", "check_mixed", "generate_mixed_task"]
