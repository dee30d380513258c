"""The synthesis proposer: new rule structures over message features, guided by the oracle's hindsight.

Programs are written in the rule grammar of ``search_spaces.cache.rules`` (drop / keep rules,
first match wins, over role, tool, ages, tokens, mentions by later messages, supersession, batch
place, overlap with the task, composed with and / or / not); their thresholds are parameters that
Optuna tunes inside the candidate, as for any program. Operators (:data:`OPERATORS`), chosen by the
same UCB1 bandit as the mutation operators (``rsi.proposers.bandit``, proposals recorded as
``synthesis:<op>``):

- ``grow``: add a drop rule. Candidates are conjunctions of a role or tool test and one or two
  numeric or flag tests; each is scored on the train tasks against the hindsight oracle
  (:func:`rsi.cache.hindsight.drop_gain`: token-reads saved on messages the oracle drops,
  needed messages newly harmed), and the best ones are tried.
- ``protect``: add a keep rule in front, scored by the needed messages the parent drops that it
  would protect and the reads it would add (:func:`rsi.cache.hindsight.keep_gain`).
- ``mutate``: replace a subtree of one rule (another feature, the other comparison, a negation,
  a widened or narrowed tool set).
- ``crossover``: the parent's rules with a rule of a second synthesized parent.
- ``prune``: remove a rule or one part of a conjunction.
- ``table``: a structure of its own, read off the hindsight rather than edited from the parent:
  the cheapest keep/drop table over role, tool and length (``evals.cache.table_bound``) that keeps,
  on every hindsight task, each needed hop and one copy of each probe's evidence, costed in token
  reads; every cell it saw and does not keep becomes a drop rule (once read: after an assistant
  turn; its length bounds and that delay are thresholds Optuna tunes), cells it never saw are kept.
  Made twice, with tools told apart and by role and length only; the screen chooses.

A parent that is a seed dropping whole messages (``rules.BASE_SEEDS``) becomes the *base* of a
structure with no rule yet, at its tuned parameters: every rule is then added on top of the tuned
seed, which decides wherever no rule does (its repositions kept). Any other program is read as the
expert's structure (``rules.rolling``: drop a tool response once K newer ones arrived, K its own
``keep_tool_responses`` when it has one) and edited from there. Each operator makes up to
``candidates`` structures; every one is rendered, checked, smoke-run, and its behaviour
fingerprinted (``rsi.cache.fingerprint``: its decisions on the smoke episodes at its defaults and
at two draws of its space): a structure whose fingerprint equals a program the search already has
is discarded and counted (``ProposerStats.operators[op]``, ``duplicates``). The rest are screened
without a forward (``screen``: the cascade's proxy on the train tasks, cost and predicted pass),
and the one whose point the archive's proxy points dominate least, cheapest first, is proposed.
Without hindsight or a screen the proposer still works: it ranks by the simulated gain alone, or
proposes the first valid candidate.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import optuna

from evals.cache.table_bound import LENGTH_EDGES, Cell, length_bucket
from rsi.archive import ArchiveView, Record
from rsi.cache.fingerprint import behaviour
from rsi.cache.hindsight import Hindsight, TaskFeatures, drop_gain, drops_of, hindsight_table, keep_gain
from rsi.proposers.bandit import UCB1, bandit_from_archive, ref_cost_of
from rsi.proposers.base import ParentView, Proposal, Proposer
from rsi.proposers.mutation import source_hash
from search_spaces import Episode, check_program, run_program, suggest_params
from search_spaces.cache import rules
from search_spaces.cache.seeds import seed_source

OPERATORS = ("table", "grow", "protect", "mutate", "crossover", "prune")
DRAWS = 3  # seeded draws of a candidate's space screened beside its defaults
DRAW_SEED = 7
PREFIX = "synthesis:"
Screen = Callable[[str, Mapping[str, Any]], tuple[float, float] | None]
"""(program source, parameters) -> (cost, predicted pass) on the train tasks at zero forwards, or None."""

NUMERIC_TESTS: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("age_tools", ">=", (0, 1, 2, 4, 8, 16)),
    ("age_calls", ">=", (1, 2, 4, 8)),
    ("tokens", ">=", (64, 128, 256, 512)),
    ("mentions", "<", (1, 2)),
    ("mentions2", "<", (1,)),
    ("task_overlap", "<", (1,)),
    ("batch_size", ">=", (2, 3)),
)
KEEP_TESTS: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("mentions", ">=", (1, 2)),
    ("mentions2", ">=", (1,)),
    ("task_overlap", ">=", (1, 2)),
    ("age_tools", "<", (4, 8, 16)),
    ("tokens", "<", (64, 128)),
)


def as_structure(source: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A parent's structure: its own if it is a rule program (its tuned thresholds as the defaults);
    a seed that drops whole messages as the base of a structure with no rule yet (at its tuned
    parameters: the child decides as the parent until rules are added); any other program as the
    expert's rolling drop (K = its ``keep_tool_responses`` when it has one)."""
    found = rules.read(source)
    if found is not None:
        s = copy.deepcopy(found)
        s["defaults"] = {**s.get("defaults", {}), **{k: int(v) for k, v in params.items()
                                                     if isinstance(v, int) and not isinstance(v, bool)}}
        return s
    seed = next((name for name in rules.BASE_SEEDS if source == seed_source(name)), None)
    if seed is not None:
        structure: dict[str, Any] = {"rules": [], "reposition": None, "defaults": {},
                                     "base": {"seed": seed, "params": dict(params)}}
        try:
            rules.check(structure)
            return structure
        except rules.RuleError:
            pass  # (parameters the grammar cannot carry: read as the expert below)
    keep = params.get("keep_tool_responses", 12)
    return rules.rolling(int(keep) if isinstance(keep, int) and not isinstance(keep, bool) else 12)


class SynthesisProposer(Proposer):
    """Rule-structure synthesis (see the module docstring).

    Args:
        smoke: episodes each candidate is smoke-run and fingerprinted on.
        hindsight: the oracle's view of the train tasks (``None``: no guidance).
        screen: zero-forward scoring of a candidate on train (``None``: no screening).
        candidates: structures made per proposal before one is chosen.
        known: fingerprints of programs the search already has (the proposer adds its own).
        tools: tool names for tool tests (default: the hindsight tasks' tools, most tokens first).
    """

    name = "synthesis"
    operators: tuple[str, ...] = OPERATORS

    def __init__(self, smoke: Sequence[Episode], hindsight: Hindsight | None = None, screen: Screen | None = None,
                 candidates: int = 6, known: set[str] | None = None, inner: int = 1,
                 tools: Sequence[str] | None = None, check: Screen | None = None) -> None:
        super().__init__()
        self.tool_names = list(tools) if tools is not None else None
        self.smoke = list(smoke)
        self.hindsight = hindsight
        self.features = [TaskFeatures(e) for e in hindsight.episodes] if hindsight is not None else []
        self.screen = screen
        self.candidates = candidates
        self.inner = inner
        self.check = check
        self.known: set[str] = known if known is not None else set()
        self.bandit: UCB1 | None = None
        self.points: list[tuple[float, float]] = []  # proxy points of screened programs (the screen's front)

    # ------------------------------------------------------------------ proposing

    def propose(self, parents: Sequence[ParentView], archive: ArchiveView[Record[Any]], n: int,
                rng: random.Random, seen: set[str]) -> list[Proposal]:
        if not parents:
            return []
        bandit = self.bandit = bandit_from_archive(self.operators, archive, ref_cost_of(archive), prefix=PREFIX)
        out: list[Proposal] = []
        for _ in range(n):
            for _attempt in range(2 * len(self.operators)):
                op = bandit.choose()
                parent = parents[rng.randrange(len(parents))]
                other = parents[rng.randrange(len(parents))] if len(parents) > 1 else None
                made = self._propose_one(op, parent, other, rng, seen)
                self.stats.operators.setdefault(op, {"attempts": 0, "valid": 0, "duplicates": 0})
                bandit.pulled(op, made is not None, self.stats.operators)
                if made is None:
                    continue
                source, notes = self._chain(made, op, parent, rng, seen)
                extra = (other.candidate.id,) if op == "crossover" and other is not None else ()
                note = "; then ".join(notes)[:400]
                out.append(Proposal(source, (parent.candidate.id, *extra), f"{PREFIX}{op}", note))
                seen.add(source_hash(source))
                break
        return out

    def _chain(self, made: tuple[str, str, dict[str, Any]], op: str, parent: ParentView, rng: random.Random,
               seen: set[str]) -> tuple[str, list[str]]:
        """``inner - 1`` more zero-forward steps from what ``op`` made (grow, protect or prune, as the
        hindsight suggests), each kept when its screened point is at least as good; with ``check`` (the
        model on a few train tasks), the last kept step is kept only when the model finds it loses no
        probe and costs no more than the program before it. Returns the final source and every kept
        step's note. Only the first operator is credited (its arm gets the reward)."""
        source, note, params = made
        notes = [f"{op}: {note}"]
        before: tuple[str, dict[str, Any]] | None = None
        point = self._best_point(source, params)[0] if self.screen is not None else None
        for _ in range(self.inner - 1):
            step = rng.choice(("grow", "protect", "prune"))
            view = ParentView(replace(parent.candidate, params=params), source, {})
            nxt = self._propose_one(step, view, None, rng, seen)
            if nxt is None:
                continue
            new_point = self._best_point(nxt[0], nxt[2])[0] if self.screen is not None else None
            if point is not None and new_point is not None and (new_point[1] < point[1] or (
                    new_point[1] == point[1] and new_point[0] > point[0])):
                continue  # the step made it worse at zero forwards
            before = (source, params)
            source, params, point = nxt[0], nxt[2], new_point
            notes.append(f"{step}: {nxt[1]}")
        if self.check is not None and before is not None:
            source, params, notes = self._check_last(before, (source, params), notes)
        return source, notes

    def _check_last(self, before: tuple[str, dict[str, Any]], after: tuple[str, dict[str, Any]],
                    notes: list[str]) -> tuple[str, dict[str, Any], list[str]]:
        """The chain's result, or the program before its last step when the model (``check``) finds
        that step loses a probe or adds cost; the verdict is recorded in ``stats.checks``."""
        assert self.check is not None
        was, now = self.check(*before), self.check(*after)
        keep = was is None or (now is not None and now[1] >= was[1] and now[0] <= was[0])
        self.stats.checks.append({"step": notes[-1][:200], "before": was, "after": now, "kept": keep})
        if keep:
            return (*after, notes)
        return (*before, [*notes[:-1], f"(model check undid: {notes[-1][:160]})"])

    def edit(self, op: str, parent: ParentView, rng: random.Random,
             seen: set[str]) -> tuple[str, str, dict[str, Any]] | None:
        """One structure made by operator ``op`` from ``parent`` alone (rendered, checked, smoke-run,
        not a known behaviour): ``(source, note, its best screened parameters)``, or ``None``."""
        return self._propose_one(op, parent, None, rng, seen)

    def _propose_one(self, op: str, parent: ParentView, other: ParentView | None, rng: random.Random,
                     seen: set[str]) -> tuple[str, str, dict[str, Any]] | None:
        """(source, note, the best screened parameters) of ``op``'s chosen structure, or ``None``."""
        base = as_structure(parent.source, parent.candidate.params)
        second = rules.read(other.source) if other is not None and other.source != parent.source else None
        made = self._structures(op, base, second, parent, rng)
        valid: list[tuple[str, str, str]] = []
        for structure, note in made[: self.candidates]:
            if structure == base:
                continue  # (no edit: the parent itself)
            try:
                source = rules.render(structure)
            except rules.RuleError:
                continue
            if source_hash(source) in seen:
                continue
            self.stats.attempts += 1
            if not check_program(source).ok:
                continue
            mark = behaviour(source, {}, self.smoke) if self.smoke else ""
            if mark is None:
                continue  # it does not run on the smoke episode
            if mark in self.known:
                self.stats.operators.setdefault(op, {"attempts": 0, "valid": 0, "duplicates": 0})
                self.stats.operators[op]["duplicates"] = self.stats.operators[op].get("duplicates", 0) + 1
                continue
            self.stats.valid += 1
            valid.append((source, note, mark))
        if not valid:
            return None
        source, note, mark, params = self._choose(valid)
        if mark:
            self.known.add(mark)
        return source, note, params

    def _best_point(self, source: str, defaults: Mapping[str, Any]) -> tuple[tuple[float, float] | None,
                                                                          dict[str, Any]]:
        """The most accurate, then cheapest, zero-forward point of ``source`` over its defaults and
        :data:`DRAWS` seeded draws of its space, and the parameters that gave it."""
        assert self.screen is not None
        tries: list[dict[str, Any]] = [dict(defaults)]
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=DRAW_SEED))
        for _ in range(DRAWS):
            drawn = suggest_params(source, study.ask())
            if drawn.ok:
                tries.append({**dict(defaults), **dict(drawn.params or {})})
        best: tuple[tuple[float, float] | None, dict[str, Any]] = (None, dict(defaults))
        for params in tries:
            point = self.screen(source, params)
            if point is not None and (best[0] is None or (point[1], -point[0]) > (best[0][1], -best[0][0])):
                best = (point, params)
        return best

    def _choose(self, valid: Sequence[tuple[str, str, str]]) -> tuple[str, str, str, dict[str, Any]]:
        """The candidate (source, note, fingerprint, its best screened parameters) to propose: without a
        screen the first (they come best first); with one, the one whose best zero-forward point
        (:meth:`_best_point`) the fewest screened points dominate (those of earlier proposals
        included), then the most accurate, then the cheapest."""
        if self.screen is None:
            return (*valid[0], {})
        scored = [self._best_point(source, {}) for source, _, _ in valid]
        points = [p for p, _ in scored]
        pool = self.points + [p for p in points if p is not None]

        def rank(k: int) -> tuple[float, ...]:
            p = points[k]
            if p is None:
                return (float("inf"), 0.0, 0.0, k)
            beaten = sum(1 for q in pool if q[0] <= p[0] and q[1] >= p[1] and q != p)
            return (float(beaten), -p[1], p[0], k)

        best = min(range(len(valid)), key=rank)
        self.points += [p for p in points if p is not None]
        return (*valid[best], scored[best][1])

    # ------------------------------------------------------------------ operators

    def _structures(self, op: str, base: dict[str, Any], second: dict[str, Any] | None, parent: ParentView,
                    rng: random.Random) -> list[tuple[dict[str, Any], str]]:
        if op == "grow":
            return self._grow(base, parent, rng)
        if op == "protect":
            return self._protect(base, parent, rng)
        if op == "crossover":
            return _crossover(base, second, rng) if second is not None else []
        if op == "prune":
            return _prune(base, rng)
        if op == "table":
            return self._table()
        return [(_mutate(base, self._tools(), rng), "mutated a rule") for _ in range(self.candidates)]

    def _table(self) -> list[tuple[dict[str, Any], str]]:
        """The ``table`` operator (module docstring): nothing without hindsight."""
        if self.hindsight is None:
            return []
        made = []
        for tools in (True, False):
            table = hindsight_table(self.hindsight, self.features, tools)
            structure = table_structure(table.dropped, tools)
            if structure is not None:
                what = "role, tool and length" if tools else "role and length"
                made.append((structure, f"a table over {what} from the hindsight: kept {len(table.kept)} of "
                                        f"{len(table.cost)} cells"))
        return made

    def _tools(self) -> list[str]:
        if self.tool_names is not None:
            return list(self.tool_names)
        names: dict[str, float] = {}
        for f in self.features:
            for i, t in enumerate(f.tool):
                if t and f.role[i] == "tool":
                    names[t] = names.get(t, 0.0) + float(f.tokens[i])
        return [t for t, _ in sorted(names.items(), key=lambda x: -x[1])]

    def _parent_drops(self, parent: ParentView) -> list[dict[int, int]] | None:
        if self.hindsight is None:
            return None
        run = run_program(parent.source, dict(parent.candidate.params), list(self.hindsight.episodes))
        if not run.ok:
            return None
        return [drops_of(ep[-1].wire) if ep else {} for ep in run.decisions]

    def _targets(self) -> list[dict[str, Any]]:
        return [{"f": "role", "is": r} for r in ("tool", "assistant")] + [
            {"f": "tool", "in": [t]} for t in self._tools()[:6]]

    def _grow(self, base: dict[str, Any], parent: ParentView, rng: random.Random) -> list[tuple[dict[str, Any], str]]:
        drops = self._parent_drops(parent)
        out = []
        k = len(base["rules"])
        have = _tested(base)
        for target in self._targets():
            key = json.dumps(target, sort_keys=True)
            for feature, op, values in NUMERIC_TESTS:
                if (key, feature) in have:
                    continue  # (a threshold the parent already has: Optuna's to tune, not a new rule)
                for v in values:
                    name = f"r{k}_{feature}"
                    out.append(([target, {"f": feature, "op": op, "param": name}], {name: v}))
            if (key, "superseded") not in have:
                out.append(([target, {"f": "superseded"}], {}))
            for v in (1, 2, 4):  # dropped once it is old, unless something later named it
                for unless in ("mentions", "mentions2", "task_overlap"):
                    a, b = f"r{k}_age_calls", f"r{k}_{unless}"
                    out.append(([target, {"f": "age_calls", "op": ">=", "param": a},
                                 {"f": unless, "op": "<", "param": b}], {a: v, b: 1}))
        ranked: list[tuple[float, int, list[Any], dict[str, int]]] = []
        for n, (conds, params) in enumerate(out):
            if drops is None:
                ranked.append((rng.random(), n, conds, params))
                continue
            saved, harm = drop_gain(self.features, self.hindsight, drops, {"all": conds},  # type: ignore[arg-type]
                                    params)
            if saved > 0:
                ranked.append((-(saved / (1 + 4 * harm)), n, conds, params))
        ranked.sort(key=lambda x: (x[0], x[1]))
        made = []
        for _, _, conds, params in ranked[: self.candidates]:
            s = copy.deepcopy(base)
            s["rules"].append({"action": "drop", "when": {"all": conds}})
            s["defaults"] = {**s.get("defaults", {}), **params}
            if len(s["rules"]) <= rules.MAX_RULES:
                made.append((s, "added '" + _rule_words("drop", {"all": conds}) + "'"))
        return made

    def _protect(self, base: dict[str, Any], parent: ParentView,
                 rng: random.Random) -> list[tuple[dict[str, Any], str]]:
        drops = self._parent_drops(parent)
        k = len(base["rules"])
        options: list[tuple[list[Any], dict[str, int]]] = []
        for target in [None, *self._targets()]:
            for feature, op, values in KEEP_TESTS:
                for v in values:
                    name = f"r{k}_{feature}"
                    test = {"f": feature, "op": op, "param": name}
                    options.append(([test] if target is None else [target, test], {name: v}))
        options.append(([{"f": "role", "is": "assistant"}], {}))
        options.append(([{"f": "first_user"}], {}))
        options.append(([{"f": "role", "is": "tool"}, {"not": {"f": "superseded"}}], {}))
        ranked: list[tuple[float, int, list[Any], dict[str, int]]] = []
        for n, (conds, params) in enumerate(options):
            if drops is None:
                ranked.append((rng.random(), n, conds, params))
                continue
            fixed, added = keep_gain(self.features, self.hindsight, drops,  # type: ignore[arg-type]
                                     {"all": conds} if len(conds) > 1 else conds[0], params)
            if fixed > 0:
                ranked.append((-(fixed / (1.0 + added / 20000.0)), n, conds, params))
        ranked.sort(key=lambda x: (x[0], x[1]))
        made = []
        for _, _, conds, params in ranked[: self.candidates]:
            s = copy.deepcopy(base)
            when = {"all": conds} if len(conds) > 1 else conds[0]
            s["rules"].insert(0, {"action": "keep", "when": when})
            s["defaults"] = {**s.get("defaults", {}), **params}
            if len(s["rules"]) <= rules.MAX_RULES:
                made.append((s, "added '" + _rule_words("keep", when) + "' first"))
        return made


TABLE_PARAMS = {"tab_read": 1, **{f"tab_len{e}": e for e in LENGTH_EDGES}}
"""The thresholds of a table's rules and their defaults: the delay in assistant turns, the length edges."""


def table_structure(dropped: Mapping[Cell, float], tools: bool) -> dict[str, Any] | None:
    """Drop rules for the ``dropped`` cells (cell -> the token reads dropping it saves), at most
    ``rules.MAX_RULES`` (the ones that save most), or ``None`` when there is nothing to drop.

    Cells of one role whose dropped lengths form one run share a rule (their tools listed, unless
    ``tools`` is off or the role has no tool); a cell the table never saw matches no rule, so it is kept.
    """
    order = [length_bucket(0)] + [length_bucket(e) for e in LENGTH_EDGES]
    runs: dict[tuple[str, str], list[int]] = {}
    for cell in dropped:
        runs.setdefault((cell.role, cell.tool), []).append(order.index(cell.length))
    groups: dict[tuple[str, int, int], tuple[list[str], float]] = {}
    for (role, tool), idx in sorted(runs.items()):
        idx.sort()
        start = idx[0]
        for a, b in zip(idx, [*idx[1:], None]):
            if b != a + 1:  # a run of lengths [start, a] ends here
                names, saved = groups.get((role, start, a), ([], 0.0))
                gain = sum(v for c, v in dropped.items() if (c.role, c.tool) == (role, tool)
                           and start <= order.index(c.length) <= a)
                groups[(role, start, a)] = ([*names, tool], saved + gain)
                start = b if b is not None else start
    ranked = sorted(groups.items(), key=lambda g: (-g[1][1], g[0]))[: rules.MAX_RULES]
    made = []
    for (role, lo, hi), (names, _) in sorted(ranked, key=lambda g: g[0]):
        conds: list[dict[str, Any]] = [{"f": "role", "is": role}]
        if tools and role in ("tool", "assistant"):
            conds.append({"f": "tool", "in": sorted(set(names))})
        if lo > 0:
            conds.append({"f": "tokens", "op": ">=", "param": f"tab_len{LENGTH_EDGES[lo - 1]}"})
        if hi < len(LENGTH_EDGES):
            conds.append({"f": "tokens", "op": "<", "param": f"tab_len{LENGTH_EDGES[hi]}"})
        if role != "assistant":
            conds.append({"f": "age_calls", "op": ">=", "param": "tab_read"})
        made.append({"action": "drop", "when": {"all": conds} if len(conds) > 1 else conds[0]})
    if not made:
        return None
    structure = {"rules": made, "reposition": None, "defaults": dict(TABLE_PARAMS)}
    structure["defaults"] = {k: v for k, v in TABLE_PARAMS.items() if k in rules.params_of(structure)}
    return structure


def _rule_words(action: str, when: Mapping[str, Any]) -> str:
    return rules.describe({"rules": [{"action": action, "when": when}]}).removesuffix("; else keep")


def _tested(structure: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(target, feature) pairs the structure's conjunctions already test (a target: a role or tool test)."""
    out = set()
    for rule in structure["rules"]:
        parts = rule["when"].get("all", [rule["when"]])
        targets = [json.dumps(p, sort_keys=True) for p in parts if p.get("f") in ("role", "tool")]
        for t in targets:
            out |= {(t, str(p.get("f"))) for p in parts if p.get("f") not in ("role", "tool", None)}
    return out


def _crossover(base: dict[str, Any], other: dict[str, Any], rng: random.Random) -> list[tuple[dict[str, Any], str]]:
    made = []
    for k, rule in enumerate(other["rules"]):
        s = copy.deepcopy(base)
        taken = copy.deepcopy(rule)
        names = rules.params_of({"rules": [taken]})
        renamed = {}
        for name in names:  # its thresholds keep the second parent's values under new names
            fresh = f"x{len(s['rules'])}_{name}"
            renamed[name] = fresh
        for c in rules.conditions({"rules": [taken]}):
            if "param" in c:
                c["param"] = renamed[c["param"]]  # type: ignore[index]
        s["rules"].insert(0 if rule["action"] == "keep" else len(s["rules"]), taken)
        s["defaults"] = {**s.get("defaults", {}), **{renamed[n]: v for n, v in other.get("defaults", {}).items()
                                                     if n in renamed}}
        if len(s["rules"]) <= rules.MAX_RULES:
            made.append((s, f"took rule {k} of the second parent"))
    rng.shuffle(made)
    return made


def _prune(base: dict[str, Any], rng: random.Random) -> list[tuple[dict[str, Any], str]]:
    made = []
    if len(base["rules"]) > (0 if base.get("base") else 1):  # (a structure on a base may have no rule)
        for k in range(len(base["rules"])):
            s = copy.deepcopy(base)
            del s["rules"][k]
            made.append((s, f"removed rule {k}"))
    for k, rule in enumerate(base["rules"]):
        parts = rule["when"].get("all")
        if parts and len(parts) > 1:
            for j in range(len(parts)):
                s = copy.deepcopy(base)
                del s["rules"][k]["when"]["all"][j]
                if len(s["rules"][k]["when"]["all"]) == 1:
                    s["rules"][k]["when"] = s["rules"][k]["when"]["all"][0]
                made.append((s, f"removed part {j} of rule {k}"))
    rng.shuffle(made)
    return made


def _mutate(base: dict[str, Any], tools: Sequence[str], rng: random.Random) -> dict[str, Any]:
    """One random edit of one condition node (module docstring)."""
    s = copy.deepcopy(base)
    nodes: list[Any] = list(rules.conditions(s))
    if not nodes:  # (a seed's base with no rule yet: nothing to edit, and the unedited parent is not proposed)
        return s
    node: dict[str, Any] = rng.choice(nodes)
    f = node.get("f")
    if f in rules.NUMERIC and rng.random() < 0.5:
        node["op"] = "<" if node["op"] == ">=" else ">="
    elif f in rules.NUMERIC:
        old = node["param"]
        feature = rng.choice(list(rules.NUMERIC))
        node["f"], node["param"] = feature, f"m{rng.randrange(1000)}_{feature}"
        s.setdefault("defaults", {}).pop(old, None)
    elif f == "tool" and tools:
        extra = rng.choice(list(tools))
        node["in"] = sorted(set(node["in"]) ^ {extra}) or [extra]
    elif f == "role":
        node["is"] = rng.choice([r for r in rules.ROLES if r != node["is"]])
    else:
        inner = copy.deepcopy(node)
        node.clear()
        node["not"] = inner
    return s
