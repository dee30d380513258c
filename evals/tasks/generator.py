"""Deterministic task generation: one task from (family, split, seed), and whole suites from a spec.

A task is a pure function of its arguments: the same call gives the same task in any process
(string seeds go through ``random.Random``'s SHA-512 seeding, and nothing iterates a set). Every
generated task is checked against the families' promises (:func:`check_generated`); a draw that
breaks one (an accidental mention, too few candidates) is redrawn from the next attempt's seed,
and the attempt is recorded in ``meta``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from evals.errors import TaskError
from evals.tasks.builder import EVIDENCE_STYLES, Builder
from evals.tasks.domains import DOMAINS, get_domain
from evals.tasks.families import FAMILIES, ProbeSpec
from evals.tasks.phrasing import TOOLS
from evals.tasks.pools import SPLITS
from evals.tasks.schema import Probe, Task, mentions, message_text
from evals.tasks.templates import ProbeTemplates, load_probe_templates

GENERATOR = "evals.tasks.generator"
GENERATOR_VERSION = "1.1.0"
MIN_CANDIDATES, MAX_CANDIDATES = 5, 6
RECENT_WINDOW = 4  # recent-only evidence lies within this many newest tool responses
_ATTEMPTS = 20


class _Redraw(Exception):
    """A generated task broke a family promise; try the next attempt's seed."""


def _family(name: str) -> str:
    if name not in FAMILIES:
        raise TaskError(f"unknown task family {name!r}; valid: {', '.join(FAMILIES)}", field="family", value=name)
    return name


@dataclass(frozen=True)
class SuiteSpec:
    """What a suite holds.

    Attributes:
        name, version: the suite is stored as ``<name>-v<version>``.
        tasks_per_family: split -> tasks per family.
        min_tokens, max_tokens: target length range (gemma tokens; targets spread evenly over it).
        heldout_only: families generated only for the held-out split.
        seed: base seed; train and held-out seeds never overlap.
        domains: domains to cycle through.
        probe_templates: a probe wording YAML file ("" = the packaged table).
        evidence_style: ``varied`` (a probe's evidence only in the output's own format) or
            ``copyable`` (also as a sentence naming the key before the answer, on its own line: what a
            small base model can copy; see :mod:`evals.tasks.builder`).
    """

    name: str
    version: int
    tasks_per_family: Mapping[str, int] = field(default_factory=lambda: {"train": 30, "heldout": 15})
    min_tokens: int = 1000
    max_tokens: int = 6000
    heldout_only: tuple[str, ...] = ("multi-hop",)
    seed: int = 0
    domains: tuple[str, ...] = tuple(DOMAINS)
    probe_templates: str = ""
    evidence_style: str = "varied"

    def __post_init__(self) -> None:
        if self.evidence_style not in EVIDENCE_STYLES:
            raise TaskError(f"evidence_style must be one of {', '.join(EVIDENCE_STYLES)}, got {self.evidence_style!r}",
                            field="evidence_style", value=self.evidence_style)
        if not 200 <= self.min_tokens <= self.max_tokens:
            raise TaskError(f"need 200 <= min_tokens <= max_tokens, got {self.min_tokens}, {self.max_tokens}",
                            field="min_tokens", value=self.min_tokens)
        for name in self.heldout_only:
            _family(name)
        for name in self.domains:
            get_domain(name)
        if set(self.tasks_per_family) - set(SPLITS):
            raise TaskError(f"tasks_per_family keys must be splits {SPLITS}, got {sorted(self.tasks_per_family)}",
                            field="tasks_per_family", value=dict(self.tasks_per_family))

    def families(self, split: str) -> tuple[str, ...]:
        return tuple(f for f in FAMILIES if split == "heldout" or f not in self.heldout_only)

    def seed_of(self, split: str, family: str, index: int) -> int:
        return self.seed * 10_000_000 + SPLITS.index(split) * 5_000_000 + list(FAMILIES).index(family) * 100_000 + index


SUITES: dict[str, SuiteSpec] = {s.name: s for s in (
    SuiteSpec("default", 2, evidence_style="copyable"),  # calibrated for gemma-3-270m on CPU (docs/tasks.md)
    SuiteSpec("long", 2, {"train": 12, "heldout": 6}, 6000, 24000),  # for larger models (GPU scale)
    SuiteSpec("smoke", 2, {"train": 2, "heldout": 2}, 800, 2000, evidence_style="copyable"),
)}


def get_suite_spec(name: str) -> SuiteSpec:
    """The registered suite ``name``; the error lists the valid names."""
    try:
        return SUITES[name]
    except KeyError:
        raise TaskError(f"unknown suite {name!r}; valid: {', '.join(SUITES)} (or a path to a task set)",
                        field="suite", value=name) from None


def _candidates(spec: ProbeSpec, b: Builder, context: str, rng: random.Random) -> tuple[str, ...]:
    low = context.lower()
    others = [v for v in dict.fromkeys(b.world.values_of(spec.pool))
              if v != spec.answer and v.lower() in low and mentions(context, v)]
    if len(others) < MIN_CANDIDATES - 1:
        raise _Redraw(f"only {len(others)} distractors of pool {spec.pool} before message {spec.after}")
    picked = [*rng.sample(others, min(len(others), MAX_CANDIDATES - 1)), spec.answer]
    rng.shuffle(picked)
    return tuple(picked)


def _attempt(family: str, split: str, seed: int, domain: str, target_tokens: int, attempt: int,
             templates: ProbeTemplates, task_id: str, evidence_style: str) -> Task:
    rng = random.Random(f"{GENERATOR_VERSION}|{family}|{split}|{seed}|{attempt}")
    fam = FAMILIES[family]
    b = Builder(get_domain(domain), split, rng, target_tokens, fam.min_rounds, evidence_style)
    specs = fam.run(b)
    messages = b.messages()
    texts = [message_text(m) for m in messages]
    probes = []
    for spec in specs:
        words = templates.wording(split, spec.kind, domain, spec.template, spec.key)
        cands = _candidates(spec, b, "\n".join(texts[: spec.after + 1]), rng)
        probes.append(Probe(spec.after, words.question, spec.answer, words.cloze, cands, spec.evidence, spec.kind))
    task = Task(id=task_id, messages=tuple(messages), probes=tuple(probes), family=family, split=split, domain=domain,
                seed=seed, generator=GENERATOR, generator_version=GENERATOR_VERSION, tools=TOOLS,
                entities=tuple(b.world.used), meta={"attempt": attempt, "target_tokens": target_tokens,
                                                    "probe_templates": templates.digest,
                                                    "rounds": len(b.rounds), "evidence_style": evidence_style})
    problems = check_generated(task)
    if problems:
        raise _Redraw("; ".join(problems))
    return task


def generate_task(family: str, split: str, seed: int, *, domain: str | None = None, target_tokens: int = 3000,
                  task_id: str | None = None, probe_templates: str = "", evidence_style: str = "varied") -> Task:
    """Generate one task (deterministic in all arguments).

    Args:
        family: one of :data:`evals.tasks.schema.FAMILIES`.
        split: ``"train"`` or ``"heldout"`` (pools and phrasings differ).
        seed: the task's seed.
        domain: a domain name; by default one is drawn from the seed.
        target_tokens: approximate length in gemma tokens (the knob for longer tasks).
        task_id: the id to record (default ``<split>/<family>/<seed>``).
        probe_templates: a probe wording YAML file ("" = packaged).
        evidence_style: ``varied`` or ``copyable`` (see :class:`SuiteSpec`).

    Raises:
        TaskError: unknown family, split, domain or evidence style, or no valid draw in 20 attempts.
    """
    _family(family)
    if evidence_style not in EVIDENCE_STYLES:
        raise TaskError(f"evidence_style must be one of {', '.join(EVIDENCE_STYLES)}, got {evidence_style!r}",
                        field="evidence_style", value=evidence_style)
    if split not in SPLITS:
        raise TaskError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}", field="split", value=split)
    domain = domain or random.Random(f"domain|{seed}").choice(list(DOMAINS))
    templates = load_probe_templates(probe_templates)
    reasons = []
    for attempt in range(_ATTEMPTS):
        try:
            return _attempt(family, split, seed, domain, target_tokens, attempt, templates,
                            task_id or f"{split}/{family}/{seed}", evidence_style)
        except _Redraw as err:
            reasons.append(str(err))
    raise TaskError(f"no valid {family} task for seed {seed} in {_ATTEMPTS} attempts: {reasons[-1]}",
                    field="seed", value=seed)


def generate_split(spec: SuiteSpec, split: str) -> list[Task]:
    """Every task of one split of ``spec``, in a fixed order (family, then index).

    A spec with its own ``generate`` method (:class:`evals.tasks.horizon.HorizonSpec`) makes its tasks itself.
    """
    own = getattr(spec, "generate", None)
    if own is not None:
        return list(own(split))
    tasks = []
    count = spec.tasks_per_family.get(split, 0)
    for f_index, family in enumerate(spec.families(split)):
        for i in range(count):
            frac = ((i + 0.5) * 0.6180339887 + f_index * 0.25) % 1.0  # low-discrepancy spread over the range
            target = round(spec.min_tokens + frac * (spec.max_tokens - spec.min_tokens))
            tasks.append(generate_task(family, split, spec.seed_of(split, family, i),
                                       domain=spec.domains[(i + f_index) % len(spec.domains)], target_tokens=target,
                                       task_id=f"{spec.name}-v{spec.version}/{split}/{family}/{i:03d}",
                                       probe_templates=spec.probe_templates, evidence_style=spec.evidence_style))
    return tasks


def _copy_line(text: str, answer: str) -> bool:
    """Whether ``text`` has a line on which ``answer`` is followed only by the end of its sentence."""
    return re.search(rf"(?<!\w){re.escape(answer)}[^.?!\n]*\.[ \t]*$", text, re.MULTILINE) is not None


def check_generated(task: Task) -> list[str]:
    """The families' promises that ``task`` breaks (empty when it keeps them all); see docs/tasks.md."""
    texts = [message_text(m) for m in task.messages]
    copyable = task.meta.get("evidence_style") == "copyable"
    problems = []
    tool_ids = [i for i, m in enumerate(task.messages) if m["role"] == "tool"]
    for j, p in enumerate(task.probes):
        where = f"probe {j} ({p.kind})"
        if len(p.candidates) < MIN_CANDIDATES:
            problems.append(f"{where}: {len(p.candidates)} candidates")
        if not p.evidence_ids or max(p.evidence_ids) >= p.after_message:
            problems.append(f"{where}: evidence {p.evidence_ids} not before message {p.after_message}")
        if not any(mentions(texts[i], p.answer) for i in p.evidence_ids if i < len(texts)):
            problems.append(f"{where}: answer {p.answer!r} in no evidence message")
        if p.kind in ("fact", "multi_hop", "original_reason"):
            leaks = [i for i in range(p.after_message + 1) if i not in p.evidence_ids and mentions(texts[i], p.answer)]
            if leaks:
                problems.append(f"{where}: answer {p.answer!r} also in messages {leaks}")
        if copyable and not any(_copy_line(texts[i], p.answer) for i in p.evidence_ids if i < len(texts)):
            problems.append(f"{where}: no copy line of {p.answer!r} in the evidence")
        if task.family == "evidence-restated" and not all(mentions(texts[i], p.answer) for i in p.evidence_ids):
            problems.append(f"{where}: not restated")
        if task.family == "recent-only":
            recent = [i for i in tool_ids if i <= p.after_message][-RECENT_WINDOW:]
            if not set(p.evidence_ids) <= set(recent):
                problems.append(f"{where}: evidence {p.evidence_ids} not among the newest tool responses {recent}")
    return problems
