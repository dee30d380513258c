"""The LLM proposer: any OpenAI-compatible endpoint writes new policy programs.

The prompt carries the policy API (``search_spaces.api_doc()``), a parent program with its train
metrics and concrete feedback (per-family pass rates, the probes it failed and the evidence
messages it had dropped, its cost breakdown, its per-family pass-rate change against its own parent,
what it dropped that the hindsight oracle needed and kept that it did not, per train task, worst
first, and the reasons earlier proposals derived from it failed), and the answer format: a whole program in a
```python block, or SEARCH/REPLACE blocks against the parent. A program that fails the checker
or a smoke run goes back to the model once with the error; whatever comes back is proposed, so a
bad program ends as a recorded failure with its reason, never silently. Tokens and dollars are
counted from the endpoint's usage and capped by the config's budget.

Each proposal uses one of four prompt *variants* (:data:`VARIANTS`: ``refine`` one small change,
``repair`` the failed probes, ``rewrite`` with another idea, ``fragment``: merge one rule of the
fragment library, shown with its source), chosen by the same UCB1 bandit as the mutation
operators, rebuilt each generation from the outcomes of the variant's earlier offspring (valid,
entered the front, hypervolume gain). A proposal is recorded as ``llm:<variant>``; the report's
operator table has a row per variant and generation.

With ``mutate_instructions`` the proposer's own instruction text is one of the things that
evolves: each generation the model is asked to rewrite it given how its last proposals scored
(recursive self-improvement of the proposer), and every version is kept in the run directory.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rsi.archive import ArchiveView, CostPassScores, Record, Status
from rsi.config import ProposerConfig
from rsi.proposers.bandit import UCB1, bandit_from_archive, ref_cost_of
from rsi.proposers.base import ParentView, Proposal, Proposer
from rsi.proposers.mutation import source_hash
from search_spaces import Episode, api_doc, check_program, run_program
from search_spaces.cache.fragments import FRAGMENTS, missing

INSTRUCTIONS = """You improve KV-cache policies for long-running LLM agents. A policy drops the KV of
old messages (cheaper: dropped tokens are not re-read) but an agent that later needs a dropped fact
fails its task. Write a program that is cheaper than the parent at the same pass rate, or passes more
probes at the same cost. Keep what works; change one idea at a time."""

FORMAT = """Answer with the complete new program in one ```python block, or with SEARCH/REPLACE
blocks against the parent program:
<<<<<<< SEARCH
(exact lines of the parent)
=======
(replacement lines)
>>>>>>> REPLACE
Allowed modules: math, re, statistics. No other imports, no files, no dunder names."""

VARIANTS: dict[str, str] = {
    "refine": "This time: make one small change to the parent (a constant, a condition, a window) that "
              "lowers its cost without failing more probes.",
    "repair": "This time: look at the probes it failed and the evidence messages it had dropped, and change "
              "what it keeps so those facts stay attended, dropping other messages instead.",
    "rewrite": "This time: write a program around a different idea from the parent's (another rule for which "
               "messages stop being attended, or when), keeping only what the parent does well.",
    "fragment": "This time: merge the rule below into the parent's decisions (adapt the names; add its "
                "parameters to DEFAULTS and to space()), and keep the rest of the parent.",
}
"""Prompt variants: the line appended to the prompt for each (``fragment`` also shows a rule's source)."""
PREFIX = "llm:"

SHORT_SYSTEM = ("You edit small Python programs. Reply with the whole new program in one ```python block and "
                "nothing else.")
SHORT_API = """A policy program decides which earlier messages of an agent's conversation the model stops reading.
decide(request, params) returns request.plan() after calls to plan.drop(t, ids): after message t, the messages
ids (each <= t) are no longer read. Decide each t from messages up to t only, and drop a message at most once.
What a program can read: request.messages (each m has m.index, m.role, m.is_tool, m.is_assistant, m.is_user),
request.tokens[i] (tokens of message i), request.calls_before(i) (assistant messages before message i),
request.superseded_by(i) (a later tool message answering the same call as tool message i, or -1),
request.mentioned_by(i) (ids of later user or assistant messages naming a fact of message i, oldest first).
DEFAULTS lists every parameter and its default; space(trial) draws each one with trial.suggest_int(name, low,
high, log=False) or trial.suggest_categorical(name, choices). Allowed modules: math, re, statistics only."""
SHORT_FORMAT = "Answer with the whole program in one ```python block."
SHORT_EXAMPLE_PARENT = '''DEFAULTS = {"keep": 8}


def decide(request, params):
    plan = request.plan()
    tools = []
    for m in request.messages:
        if m.is_tool:
            tools.append(m.index)
            if len(tools) > params["keep"]:
                plan.drop(m.index, [tools.pop(0)])
    return plan


def space(trial):
    return {"keep": trial.suggest_int("keep", 1, 32)}
'''
SHORT_EXAMPLE_CHANGE = "Drop only tool messages with at least min_tokens tokens."
SHORT_EXAMPLE_CHILD = '''DEFAULTS = {"keep": 8, "min_tokens": 200}


def decide(request, params):
    plan = request.plan()
    tools = []
    for m in request.messages:
        if m.is_tool:
            tools.append(m.index)
            if len(tools) > params["keep"]:
                old = tools.pop(0)
                if request.tokens[old] >= params["min_tokens"]:
                    plan.drop(m.index, [old])
    return plan


def space(trial):
    return {"keep": trial.suggest_int("keep", 1, 32),
            "min_tokens": trial.suggest_int("min_tokens", 8, 4096, log=True)}
'''
SHORT_VARIANTS: dict[str, str] = {
    "length": "Drop only messages with at least min_tokens tokens (keep short ones); add min_tokens to DEFAULTS and "
              "to space() as trial.suggest_int(\"min_tokens\", 8, 4096, log=True).",
    "mentioned": "Never drop a tool message i that a later user or assistant message up to t mentions "
                 "(any id j <= t in request.mentioned_by(i)).",
    "stale": "Also drop a tool message i at t as soon as a later tool message answers the same call "
             "(0 <= request.superseded_by(i) <= t).",
    "assistant": "Also drop assistant messages older than the newest keep_turns assistant messages; add keep_turns "
                 "to DEFAULTS and to space() as trial.suggest_int(\"keep_turns\", 1, 16).",
    "task": "Never drop the first user message (the task), whatever the other rules say.",
}
"""The short prompt's variants (``proposer.prompt: short``): one concrete change each, for weak models."""

_BLOCK = re.compile(r"<<<<<<< SEARCH\n(.*?)\n=======\n(.*?)\n>>>>>>> REPLACE", re.DOTALL)
_CODE = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)


def apply_reply(reply: str, parent: str) -> tuple[str, str]:
    """The program a reply describes (SEARCH/REPLACE edits of ``parent``, or a whole program)
    and a one-line note; an unusable reply yields its own text, which the checker will refuse."""
    blocks = _BLOCK.findall(reply)
    if blocks:
        out = parent
        for search, replace in blocks:
            if out.count(search) != 1:
                return (f"# SEARCH block not found exactly once in the parent:\n# {search[:80]!r}\n",
                        "diff did not apply")
            out = out.replace(search, replace)
        return out, f"{len(blocks)} SEARCH/REPLACE edit(s)"
    code = _CODE.findall(reply)
    if code:
        return max(code, key=len), "whole program"
    return reply, "no code block in the reply"


def lineage_feedback(c: Record[CostPassScores], archive: ArchiveView[Record[CostPassScores]],
                     max_failures: int = 4) -> list[str]:
    """Prompt lines: ``c``'s per-family train pass-rate change against its first scored parent, and
    the most recent proposals derived from ``c`` that were refused or failed, with their reasons."""
    lines: list[str] = []
    scored = {x.id: x for x in archive.scored()}
    parent = next((scored[p] for p in c.parents if p in scored), None)
    if parent is not None and parent.train is not None and c.train is not None:
        fams = sorted(set(c.train.per_family) & set(parent.train.per_family))
        deltas = {f: round(c.train.per_family[f] - parent.train.per_family[f], 4) for f in fams}
        lines.append(f"Pass rate change per task family against its parent {parent.label}: "
                     f"{json.dumps(deltas)}")
    return lines + failed_children(c, archive, max_failures)


def failed_children(c: Record[Any], archive: ArchiveView[Record[Any]], max_failures: int = 4) -> list[str]:
    """Prompt lines: the most recent proposals derived from ``c`` that were refused or failed, with
    their reasons (either track's archive)."""
    children = [x for x in archive.candidates if c.id in x.parents and x.status is not Status.OK]
    if not children:
        return []
    return ["Earlier proposals derived from this program that failed (avoid repeating them):",
            *(f"- {x.label} ({x.proposer}): {x.status.value}: {x.reason[:200]}" for x in children[-max_failures:])]


def hindsight_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Prompt lines: per train task, worst first, what the parent dropped that the hindsight oracle
    needed and what it kept reading that the oracle did not (``rsi.cache.hindsight.report``)."""
    if not rows:
        return []
    out = ["Against the hindsight oracle (which knows the probes) on the train tasks, worst first:"]
    for k, r in enumerate(rows, 1):
        need = ", ".join(f"{m['id']} ({m['role']}{' ' + m['tool'] if m['tool'] else ''})"
                         for m in r["dropped_but_needed"]) or "none"
        waste = ", ".join(f"{m['id']} ({m['role']}{' ' + m['tool'] if m['tool'] else ''}, {m['token_reads']} "
                          f"token-reads)" for m in r["kept_but_not_needed"]) or "none"
        out.append(f"- task {k} ({r['messages']} messages): dropped but needed: {need}; kept but not needed, "
                   f"most costly first: {waste}")
    return out


GUARD_LINE = ("The evaluation runs under the frame guard: a drop of a message that is not the assistant's waits "
              "until an assistant turn after it has read it, and the system prompt and the first user message are "
              "never dropped. Rules that drop them earlier change nothing; spend rules elsewhere.")


def table_lines(table: dict[str, Any] | None, limit: int = 12) -> list[str]:
    """Prompt lines: the keep/drop table over role, tool and length that the hindsight supports
    (``rsi.cache.hindsight.hindsight_table``; cells written ``role:tool:length``, ``-`` for no tool)."""
    if not table or not (table.get("keep") or table.get("drop")):
        return []
    drop = table.get("drop") or []
    more = f" and {len(drop) - limit} more" if len(drop) > limit else ""
    return ["A probe-blind table that the hindsight supports on the train tasks (kinds of message by role:tool:"
            "length in tokens): keep for good " + (", ".join(table.get("keep") or []) or "nothing") + "; drop once "
            "an assistant turn has read them (most tokens saved first) " + (", ".join(drop[:limit]) or "nothing")
            + more + ". Kinds it never saw are better kept."]


class BudgetExhausted(Exception):
    pass


class LLMProposer(Proposer):
    """Proposes programs by asking an OpenAI-compatible endpoint (see the module docstring).

    A subclass for another kind of program (``rsi.survival.proposer.SurvivalLLMProposer``)
    overrides ``variants``, ``default_instructions``, :meth:`prompt`, :meth:`_problem`,
    :meth:`_bandit` and :meth:`_scored_line`; the endpoint, budget, retry and bandit loop stay here.
    """

    name = "llm"
    variants: dict[str, str] = VARIANTS
    default_instructions = INSTRUCTIONS

    def __init__(self, cfg: ProposerConfig, smoke: Sequence[Episode], run_dir: Path):
        super().__init__()
        from openai import OpenAI

        if not cfg.base_url or not cfg.model:
            from rsi.config import ConfigError
            raise ConfigError("proposer.kind=llm needs proposer.base_url and proposer.model",
                              field="proposer.base_url", value=cfg.base_url)
        self.cfg = cfg
        self.client = OpenAI(base_url=cfg.base_url, api_key=os.environ.get(cfg.api_key_env) or "unused",
                             timeout=cfg.timeout_s, max_retries=0)
        self.smoke = list(smoke)
        self.dir = run_dir / "proposer"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.instructions = self.default_instructions
        self.format = FORMAT
        if cfg.prompt == "short":
            self.variants, self.instructions, self.format = SHORT_VARIANTS, SHORT_SYSTEM, SHORT_FORMAT
        self.generation = 0
        self.log_path = self.dir / "calls.jsonl"
        self.bandit: UCB1 | None = None  # the last generation's variant bandit (for inspection)

    # ---------------------------------------------------------------- endpoint

    def _call(self, messages: list[dict[str, str]]) -> str:
        c = self.cfg
        if (c.budget_tokens and self.stats.prompt_tokens + self.stats.completion_tokens >= c.budget_tokens) or (
                c.budget_usd and self.stats.usd >= c.budget_usd):
            self.stats.budget_exhausted = True
            raise BudgetExhausted
        t0 = time.perf_counter()
        r = self.client.chat.completions.create(model=c.model, messages=messages,  # type: ignore[arg-type]
                                                max_tokens=c.max_tokens, temperature=c.temperature)
        seconds = time.perf_counter() - t0
        text = r.choices[0].message.content or ""
        usage = ({"prompt_tokens": r.usage.prompt_tokens, "completion_tokens": r.usage.completion_tokens}
                 if r.usage is not None else {})
        if r.usage is not None:
            self.stats.prompt_tokens += r.usage.prompt_tokens
            self.stats.completion_tokens += r.usage.completion_tokens
            self.stats.usd += (r.usage.prompt_tokens * c.price_in + r.usage.completion_tokens * c.price_out) / 1e6
        with open(self.log_path, "a") as fh:
            fh.write(json.dumps({"generation": self.generation, "seconds": round(seconds, 3), **usage,
                                 "messages": messages, "reply": text}) + "\n")
        return text

    # ---------------------------------------------------------------- prompts

    def prompt(self, parent: ParentView, archive: ArchiveView[Record[Any]] | None = None, variant: str = "refine",
               rng: random.Random | None = None) -> list[dict[str, str]]:
        """The messages for one proposal from ``parent`` with prompt ``variant`` (:data:`VARIANTS`);
        with ``archive``, also the parent's per-family pass-rate change against its own first parent
        and its children's failures. ``rng`` picks the ``fragment`` variant's rule. With
        ``proposer.prompt: short``, :meth:`short_prompt` instead."""
        if self.cfg.prompt == "short":
            return self.short_prompt(parent, variant)
        c = parent.candidate
        fb = parent.feedback
        train = fb.get("train") or {}
        lines = [f"Parent program {c.label} (params {json.dumps(c.params, sort_keys=True)}):",
                 "```python", parent.source.rstrip(), "```",
                 f"Train pass rate {train.get('pass_rate', float('nan')):.3f}, mean cost "
                 f"{train.get('cost_cents_mean', float('nan')):.4f} cents per task.",
                 f"Pass rate per task family: {json.dumps(train.get('per_family', {}))}",
                 f"Cost breakdown (cents per task): {json.dumps(train.get('cost_breakdown', {}))}"]
        failed = fb.get("failed_probes") or []
        if failed:
            lines.append("Probes it failed (the evidence messages it had dropped, if any):")
            lines += [f"- {f['family']} {f['kind']}: answer {f['answer']!r}, chose {f['chosen']!r}, evidence messages "
                      f"dropped {f['evidence_messages_dropped']}" for f in failed]
        lines += hindsight_lines(fb.get("hindsight") or [])
        lines += table_lines(fb.get("hindsight_table"))
        if fb.get("frame_guard"):
            lines.append(GUARD_LINE)
        if archive is not None:
            lines += lineage_feedback(c, archive)
        lines += ["", self.variants[variant]]
        if variant == "fragment":
            lines += _fragment_lines(parent.source, rng or random.Random(0))
        user = "\n".join([api_doc(), "", *lines, "", FORMAT])
        return [{"role": "system", "content": self.instructions}, {"role": "user", "content": user}]

    def short_prompt(self, parent: ParentView, variant: str) -> list[dict[str, str]]:
        """The prompt for weak models: a short API, one worked example, the parent's own code with its
        train pass rate and cost, and the one concrete change of ``variant`` (:data:`SHORT_VARIANTS`)."""
        train = parent.feedback.get("train") or {}
        user = "\n".join([
            SHORT_API, "", "Example. Program:", "```python", SHORT_EXAMPLE_PARENT.rstrip(), "```",
            f"Change: {SHORT_EXAMPLE_CHANGE}", "Answer:", "```python", SHORT_EXAMPLE_CHILD.rstrip(), "```", "",
            f"Your task. Program (train pass rate {train.get('pass_rate', float('nan')):.3f}, cost "
            f"{train.get('cost_cents_mean', float('nan')):.4f} cents per task; its parameters are tuned after your "
            "change):", "```python", parent.source.rstrip(), "```", f"Change: {self.variants[variant]}",
            "Answer with the whole new program."])
        return [{"role": "system", "content": self.instructions}, {"role": "user", "content": user}]

    # ---------------------------------------------------------------- proposing

    def _problem(self, source: str) -> str | None:
        check = check_program(source)
        if not check.ok:
            return check.reason
        if self.smoke:
            res = run_program(source, {}, self.smoke)
            if not res.ok:
                return res.reason
        return None

    def propose(self, parents: Sequence[ParentView], archive: ArchiveView[Record[Any]], n: int,
                rng: random.Random, seen: set[str]) -> list[Proposal]:
        self.generation += 1
        if self.cfg.mutate_instructions and self.generation > 1:
            self._evolve_instructions(archive)
        bandit = self.bandit = self._bandit(archive)
        out: list[Proposal] = []
        for i in range(n):
            parent = parents[i % len(parents)] if parents else None
            if parent is None:
                break
            variant = bandit.choose()
            try:
                source, note, problem = self._ask(parent, archive, variant, rng)
            except BudgetExhausted:
                break
            bandit.pulled(variant, problem is None, self.stats.operators)
            if source_hash(source) in seen:
                continue
            seen.add(source_hash(source))
            out.append(Proposal(source, (parent.candidate.id,), PREFIX + variant, note))
        return out

    def _bandit(self, archive: ArchiveView[Record[Any]]) -> UCB1:
        """The variant bandit rebuilt from ``archive`` (offspring recorded as ``llm:<variant>``)."""
        return bandit_from_archive(tuple(self.variants), archive, ref_cost_of(archive), PREFIX)

    def _ask(self, parent: ParentView, archive: ArchiveView[Record[Any]], variant: str,
             rng: random.Random) -> tuple[str, str, str | None]:
        """One proposal with ``variant``: the program, a note, and why it is refused (``None``: valid).
        A refused program goes back to the model once with the reason."""
        messages = self.prompt(parent, archive, variant, rng)
        reply = self._call(messages)
        source, note = apply_reply(reply, parent.source)
        problem = self._problem(source)
        self.stats.attempts += 1
        if problem is not None:
            retry = [*messages, {"role": "assistant", "content": reply},
                     {"role": "user", "content": f"That program was refused: {problem}\nFix it. {self.format}"}]
            source, note = apply_reply(self._call(retry), parent.source)
            problem = self._problem(source)
            note = f"{note} (after one retry)"
            self.stats.attempts += 1
        if problem is None:
            self.stats.valid += 1
        return source, f"{variant}: {note}", problem

    def _evolve_instructions(self, archive: ArchiveView[Record[Any]]) -> None:
        recent = [c for c in archive.candidates if c.proposer.startswith(PREFIX)][-6:]
        summary = "\n".join(f"- {c.label}: status {c.status.value}"
                            + (f", {self._scored_line(c)}" if c.train else f", reason: {c.reason[:120]}")
                            for c in recent) or "- (no proposals scored yet)"
        messages = [{"role": "system", "content": "You write instructions for a program-writing assistant."},
                    {"role": "user", "content": f"Current instructions:\n{self.instructions}\n\nHow the programs they "
                                                f"produced did:\n{summary}\n\nRewrite the instructions to get better "
                                                "programs. Reply with the new instructions only."}]
        try:
            text = self._call(messages).strip()
        except BudgetExhausted:
            return
        if 40 <= len(text) <= 4000:
            self.instructions = text
        (self.dir / f"instructions-g{self.generation}.txt").write_text(self.instructions)

    def _scored_line(self, c: Record[CostPassScores]) -> str:
        """How a scored candidate did, in a few words (for the instruction rewrite)."""
        assert c.train is not None
        return f"pass {c.train.pass_rate:.3f}, cost {c.train.cost_cents_mean:.4f}c"

    def __getstate__(self) -> dict[str, Any]:  # pragma: no cover - proposers stay in the driver
        raise TypeError("LLMProposer is not picklable")


def _fragment_lines(source: str, rng: random.Random) -> list[str]:
    """The ``fragment`` variant's rule: one the parent does not have yet (any when it has them all)."""
    frag = FRAGMENTS[rng.choice(missing(source) or list(FRAGMENTS))]
    return [f"Rule {frag.name}: {frag.doc}", f"Its parameters and defaults: {json.dumps(frag.defaults)}",
            "```python", frag.source.strip(), "```"]
