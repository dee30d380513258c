"""Rule programs: a small grammar of drop / keep rules over message features, written out as policy programs.

A *structure* is plain data (JSON-able), so a proposer can build, mutate and cross it over::

    {"rules": [{"action": "keep", "when": COND}, {"action": "drop", "when": COND}, ...],
     "reposition": null | {"param": "rep_tokens"},
     "base": null | {"seed": "rolling_drop", "params": {...}}}
    COND = {"all": [COND, ...]} | {"any": [COND, ...]} | {"not": COND}
         | {"f": FEATURE, "op": ">=" | "<", "param": NAME}        numeric, threshold tuned
         | {"f": "role", "is": ROLE} | {"f": "tool", "in": [NAMES]} | {"f": FLAG}

At every trigger ``t`` (each message, in order) every message ``i <= t`` still attended is judged:
the first rule whose condition holds decides (``drop`` it at ``t``, or ``keep`` it for now); no
rule: kept, or, with a ``base``, dropped once the base drops it. A base is a seed program at fixed
parameters (a tuned parent), written into the program under ``seed_``-prefixed names; its
repositions are kept too. So rules grow new structure *on top of* a tuned seed: a drop rule drops
what the seed keeps, a keep rule protects what it drops, and with no rule the program decides as
the seed does. Features of ``(i, t)`` (:data:`NUMERIC`, :data:`FLAGS`, ``role``, ``tool``) read only
messages up to ``t``, so the schedule is cumulative and stable by construction. With
``reposition``, positions are compacted at the first trigger where the tokens dropped since the
last compaction reach the threshold.

:func:`render` writes a structure as a checked policy program: ``STRUCTURE`` (this data, read back
by :func:`read`), ``DEFAULTS`` and ``space`` (every threshold, with its feature's range), the
feature functions and ``decide`` (which continues from ``request.previous`` at
``request.previous_n``, so each request judges only its new triggers). :func:`describe` says
what a structure does in one line.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Numeric:
    """A numeric feature: its code (``request``, ``i``, ``t``, ``ctx`` in scope), its range and log scale."""

    code: str
    low: int
    high: int
    log: bool
    doc: str


NUMERIC: dict[str, Numeric] = {
    "age_tools": Numeric("request.tools_between(i + 1, t + 1)", 0, 64, False, "tool responses since it"),
    "age_calls": Numeric("ctx['calls'][t + 1] - ctx['calls'][i + 1]", 0, 40, False, "assistant turns since it"),
    "tokens": Numeric("request.tokens[i]", 8, 4096, True, "its tokens"),
    "mentions": Numeric("mentions(request, i, t, 1)", 0, 4, False, "later user/assistant messages naming it"),
    "mentions2": Numeric("mentions(request, i, t, 2)", 0, 4, False,
                         "later user/assistant messages naming two of its entities"),
    "batch_size": Numeric("request.batch_of(i)[1]", 0, 8, False, "calls in its tool batch"),
    "batch_pos": Numeric("request.batch_of(i)[0]", 0, 7, False, "its place in its tool batch"),
    "task_overlap": Numeric("task_overlap(request, i, ctx)", 0, 4, False, "entities it shares with the task"),
}
FLAGS: dict[str, tuple[str, str]] = {
    "superseded": ("0 <= request.superseded_by(i) <= t", "a later response answers the same call"),
    "first_user": ("i == ctx['first_user']", "it is the task"),
}
ROLES = ("system", "user", "assistant", "tool")
ACTIONS = ("drop", "keep")
MAX_RULES = 12

HELPERS = '''
def mentions(request, i, t, least):
    count = 0
    for j in request.mentioned_by(i, least):
        if j > t:
            break
        count += 1
    return count


def task_overlap(request, i, ctx):
    u = ctx["first_user"]
    if u < 0 or u == i:
        return 0
    return len(request.entities(i) & request.entities(u))


def tool_of(request, i):
    m = request.messages[i]
    if m.is_tool:
        return m.name or (request.call_of(i) or ("", ""))[0]
    return m.tool_calls[0][0] if m.tool_calls else ""
'''

BASED = '''
def base_plan(request):
    wire = seed_decide(request, {**seed_DEFAULTS, **BASE_PARAMS}).wire()
    if "drop_message" not in wire:
        raise ValueError("the base seed dropped reasoning parts; a rule program's base drops whole messages")
    at = {}
    for key in wire["drop_message"]:
        for i in wire["drop_message"][key]:
            at[i] = min(at.get(i, int(key)), int(key))
    return at, set(wire["reposition"])
'''

# The opening both decide() templates share: replay the previous plan, count calls, restart the
# reposition budget. Programs are self-contained text, so it is pasted into each.
_DECIDE_HEAD = '''
def decide(request, params):
    plan = request.plan()
    calls = [0]
    for m in request.messages:
        calls.append(calls[-1] + (1 if m.is_assistant else 0))
    users = request.user_messages()
    ctx = {"calls": calls, "first_user": users[0] if users else -1}
    dropped = set()
    last_repos = -1
    start = request.previous_n
    previous = request.previous if start > 0 else None
    if previous is not None:
        table = previous.get("drop_message", {})
        for key in table:
            plan.drop(int(key), table[key])
            dropped.update(table[key])
        for t in previous.get("reposition", []):
            plan.reposition(t)
            last_repos = t
    since = 0
    if REPOSITION is not None:
        table = previous.get("drop_message", {}) if previous is not None else {}
        since = sum(request.tokens[i] for key in table if int(key) > last_repos for i in table[key])
'''

DECIDE = _DECIDE_HEAD + '''    alive = [i for i in range(start) if i not in dropped]
    for t in range(start, request.n):
        alive.append(t)
        victims = [i for i in alive if judge(request, i, t, params, ctx)]
        if victims:
            plan.drop(t, victims)
            gone = set(victims)
            alive = [i for i in alive if i not in gone]
            since += sum(request.tokens[i] for i in victims)
        if REPOSITION is not None and since > 0 and since >= params[REPOSITION]:
            plan.reposition(t)
            since = 0
    return plan
'''

DECIDE_BASED = _DECIDE_HEAD + '''    base_at, base_repos = base_plan(request)
    alive = [i for i in range(start) if i not in dropped]
    for t in range(start, request.n):
        alive.append(t)
        victims = []
        for i in alive:
            verdict = judge(request, i, t, params, ctx)
            if verdict or (verdict is None and base_at.get(i, t + 1) <= t):
                victims.append(i)
        if victims:
            plan.drop(t, victims)
            gone = set(victims)
            alive = [i for i in alive if i not in gone]
            since += sum(request.tokens[i] for i in victims)
        if t in base_repos or (REPOSITION is not None and since > 0 and since >= params[REPOSITION]):
            plan.reposition(t)
            since = 0
    return plan
'''


class RuleError(ValueError):
    """A structure outside the grammar (the message names the offending part)."""


def _check_cond(cond: Any, where: str) -> None:
    if not isinstance(cond, Mapping):
        raise RuleError(f"{where}: a condition must be an object, got {cond!r}")
    if "all" in cond or "any" in cond:
        key = "all" if "all" in cond else "any"
        items = cond[key]
        if set(cond) != {key} or not isinstance(items, list) or not items:
            raise RuleError(f"{where}: {key!r} takes a non-empty list and nothing else")
        for k, c in enumerate(items):
            _check_cond(c, f"{where}.{key}[{k}]")
        return
    if "not" in cond:
        if set(cond) != {"not"}:
            raise RuleError(f"{where}: 'not' takes one condition and nothing else")
        _check_cond(cond["not"], f"{where}.not")
        return
    f = cond.get("f")
    if f in NUMERIC:
        if set(cond) != {"f", "op", "param"} or cond["op"] not in (">=", "<") or not _name(cond["param"]):
            raise RuleError(f"{where}: a numeric test is {{'f', 'op' ('>=' or '<'), 'param'}}, got {dict(cond)}")
    elif f == "role":
        if set(cond) != {"f", "is"} or cond["is"] not in ROLES:
            raise RuleError(f"{where}: a role test is {{'f': 'role', 'is': one of {', '.join(ROLES)}}}")
    elif f == "tool":
        names = cond.get("in")
        if set(cond) != {"f", "in"} or not isinstance(names, list) or not names or not all(
                isinstance(n, str) and n.isprintable() and len(n) <= 64 for n in names):
            raise RuleError(f"{where}: a tool test is {{'f': 'tool', 'in': [tool names]}}")
    elif f in FLAGS:
        if set(cond) != {"f"}:
            raise RuleError(f"{where}: a flag test is {{'f': {f!r}}} alone")
    else:
        raise RuleError(f"{where}: unknown feature {f!r}; valid: {', '.join([*NUMERIC, *FLAGS, 'role', 'tool'])}")


def _name(value: Any) -> bool:
    return isinstance(value, str) and value.isidentifier() and not value.startswith("_") and len(value) <= 40


#: Seeds a structure may build on (those that drop whole messages).
BASE_SEEDS = ("rolling_drop", "scored_drop")


def _check_base(base: Any) -> None:
    if not isinstance(base, Mapping) or set(base) != {"seed", "params"} or base["seed"] not in BASE_SEEDS:
        raise RuleError(f"'base' is {{'seed': one of {', '.join(BASE_SEEDS)}, 'params': {{...}}}}, got {base!r}")
    params = base["params"]
    if not isinstance(params, Mapping) or not all(
            _name(k) and (v is None or isinstance(v, bool | int | str) or (isinstance(v, float) and math.isfinite(v)))
            for k, v in params.items()):
        raise RuleError("'base.params' maps parameter names to numbers, strings, booleans or null")


def embedded_seed(name: str) -> str:
    """Seed ``name``'s program with every top-level name prefixed ``seed_`` and its docstrings
    dropped, to sit inside a rule program as its base."""
    from search_spaces.cache.seeds import seed_source

    tree = ast.parse(seed_source(name))
    top = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)} | {
        t.id for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign)
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}

    class Prefix(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            if node.id in top:
                node.id = "seed_" + node.id
            return node

        def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
            if node.name in top:
                node.name = "seed_" + node.name
            if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
                node.body = node.body[1:] or [ast.Pass()]
            self.generic_visit(node)
            return node

    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    return ast.unparse(Prefix().visit(ast.Module(body=body, type_ignores=[])))


def check(structure: Any) -> None:
    """Raise :class:`RuleError` unless ``structure`` is in the grammar (module docstring)."""
    if not isinstance(structure, Mapping) or set(structure) - {"rules", "reposition", "defaults", "base"}:
        raise RuleError("a structure is {'rules': [...], 'reposition': ..., 'defaults': {...}, 'base': ...}")
    base = structure.get("base")
    if base is not None:
        _check_base(base)
    rules = structure.get("rules")
    least = 0 if base is not None else 1
    if not isinstance(rules, list) or not least <= len(rules) <= MAX_RULES:
        raise RuleError(f"'rules' must be a list of {least} to {MAX_RULES} rules")
    for k, rule in enumerate(rules):
        if not isinstance(rule, Mapping) or set(rule) != {"action", "when"} or rule["action"] not in ACTIONS:
            raise RuleError(f"rules[{k}]: a rule is {{'action': 'drop' or 'keep', 'when': condition}}")
        _check_cond(rule["when"], f"rules[{k}].when")
    rep = structure.get("reposition")
    if rep is not None and (not isinstance(rep, Mapping) or set(rep) != {"param"} or not _name(rep["param"])):
        raise RuleError("'reposition' is null or {'param': NAME}")
    defaults = structure.get("defaults", {})
    if not isinstance(defaults, Mapping) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in defaults.values()):
        raise RuleError("'defaults' maps threshold names to integers")


def params_of(structure: Mapping[str, Any]) -> dict[str, str]:
    """Every threshold of ``structure``: name -> its feature (``reposition`` for the compaction one)."""
    out: dict[str, str] = {}

    def walk(c: Mapping[str, Any]) -> None:
        for key in ("all", "any"):
            for sub in c.get(key, ()):
                walk(sub)
        if "not" in c:
            walk(c["not"])
        if c.get("f") in NUMERIC:
            out.setdefault(c["param"], c["f"])

    for rule in structure["rules"]:
        walk(rule["when"])
    if structure.get("reposition"):
        out.setdefault(structure["reposition"]["param"], "reposition")
    return out


def _range(feature: str) -> tuple[int, int, bool]:
    if feature == "reposition":
        return 256, 8192, True
    n = NUMERIC[feature]
    return n.low, n.high, n.log


def default_of(structure: Mapping[str, Any], name: str, feature: str) -> int:
    low, high, log = _range(feature)
    given = structure.get("defaults", {}).get(name)
    if isinstance(given, int):
        return min(high, max(low, given))
    return round((low * high) ** 0.5) if log else (low + high) // 2


def _say(c: Mapping[str, Any], leaf: Callable[[Mapping[str, Any]], str], both: str, either: str,
         negate: str) -> str:
    """``c`` written out: its leaves by ``leaf``, joined by ``both`` / ``either``, negated by ``negate``."""
    if "all" in c:
        return "(" + both.join(_say(x, leaf, both, either, negate) for x in c["all"]) + ")"
    if "any" in c:
        return "(" + either.join(_say(x, leaf, both, either, negate) for x in c["any"]) + ")"
    if "not" in c:
        return "(" + negate + _say(c["not"], leaf, both, either, negate) + ")"
    return leaf(c)


def _code_leaf(c: Mapping[str, Any]) -> str:
    f = c["f"]
    if f in NUMERIC:
        return f"({NUMERIC[f].code} {c['op']} params[{c['param']!r}])"
    if f == "role":
        return f"(request.messages[i].role == {c['is']!r})"
    if f == "tool":
        return f"(tool_of(request, i) in {tuple(c['in'])!r})"
    return f"({FLAGS[f][0]})"


def _word_leaf(c: Mapping[str, Any]) -> str:
    f = c["f"]
    if f in NUMERIC:
        return f"{f} {c['op']} {c['param']}"
    if f == "role":
        return f"{'an' if c['is'][:1] in 'aeiou' else 'a'} {c['is']} message"
    if f == "tool":
        return "from " + "/".join(c["in"])
    return f


def _code(c: Mapping[str, Any]) -> str:
    return _say(c, _code_leaf, " and ", " or ", "not ")


def _words(c: Mapping[str, Any]) -> str:
    text = _say(c, _word_leaf, " and ", " or ", "not ")
    return text[1:-1] if text.startswith("(") and text.endswith(")") and "all" in c else text


def describe(structure: Mapping[str, Any]) -> str:
    """The rules in one line, first match first."""
    parts = [f"{r['action']} if {_words(r['when'])}" for r in structure["rules"]]
    if structure.get("reposition"):
        parts.append(f"reposition every {structure['reposition']['param']} dropped tokens")
    base = structure.get("base")
    if base:
        return "; ".join([f"on top of seed {base['seed']}", *parts]) + "; else as the seed"
    return "; ".join(parts) + "; else keep"


def render(structure: Mapping[str, Any]) -> str:
    """The policy program of ``structure`` (module docstring).

    Raises:
        RuleError: ``structure`` is outside the grammar.
    """
    check(structure)
    data = json.loads(json.dumps(structure))
    thresholds = params_of(data)
    defaults = {name: default_of(data, name, f) for name, f in thresholds.items()}
    data["defaults"] = defaults
    said = describe(data).replace("\\", "/").replace('"', "'")  # (tool names are data: never end the docstring)
    lines = [f'"""Rule program (search_spaces.cache.rules): {said}."""', "",
             f"STRUCTURE = {data!r}", "", f"DEFAULTS = {defaults!r}", "",
             f"REPOSITION = {data['reposition']['param']!r}" if data.get("reposition") else "REPOSITION = None",
             HELPERS]
    base = data.get("base")
    if base:
        lines += [f"BASE_PARAMS = {base['params']!r}", "", embedded_seed(base["seed"]), BASED]
    lines.append("def judge(request, i, t, params, ctx):")
    for rule in data["rules"]:
        lines.append(f"    if {_code(rule['when'])}:")
        lines.append(f"        return {rule['action'] == 'drop'}")
    lines.append("    return None" if base else "    return False")  # (None: the base decides)
    lines.append(DECIDE_BASED if base else DECIDE)
    lines.append("def space(trial):")
    lines.append("    return {")
    for name, f in thresholds.items():
        low, high, log = _range(f)
        lines.append(f"        {name!r}: trial.suggest_int({name!r}, {low}, {high}{', log=True' if log else ''}),")
    lines.append("    }")
    return "\n".join(lines) + "\n"


def read(source: str) -> dict[str, Any] | None:
    """The structure of a program :func:`render` wrote (``None`` for any other program, or one edited
    since: its source must be exactly what its structure renders to)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "STRUCTURE"):
            try:
                data = ast.literal_eval(node.value)
                return dict(data) if render(data) == source else None
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                return None
    return None


def rolling(keep: int = 12) -> dict[str, Any]:
    """The expert policy as a structure: drop a tool response once ``keep`` newer ones arrived."""
    return {"rules": [{"action": "drop", "when": {"all": [{"f": "role", "is": "tool"},
                                                         {"f": "age_tools", "op": ">=", "param": "r_keep"}]}}],
            "reposition": None, "defaults": {"r_keep": keep}}


def conditions(structure: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    """Every condition node of ``structure`` (each rule's, then their parts), in order."""
    def walk(c: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
        yield c
        for key in ("all", "any"):
            for sub in c.get(key, ()):
                yield from walk(sub)
        if "not" in c:
            yield from walk(c["not"])

    for rule in structure["rules"]:
        yield from walk(rule["when"])
