"""A library of policy fragments: small rules in the program language that compose with any program.

Programs cannot import this package, so a fragment is *source*: :func:`compose` splices it into a
program. The first splice renames the program's ``decide`` to ``base_decide`` and its ``space`` to
``base_space``, and adds a wrapper ``decide`` that turns the base decision into a schedule (drops per
trigger, reasoning drops per trigger, repositions), passes it through every fragment present (in
the order they were added) and builds the plan; the wrapper ``space`` adds each fragment's
parameters to the base space. Every fragment walks the triggers in order and decides each one from
the messages up to it only, so the composed program stays *stable* whenever its base is.

The fragments (``FRAGMENTS``; each rule is exact, the tests compare it with a direct reference):

- ``keep_mentioned``: a tool response is not dropped at trigger ``t`` when a user or assistant
  message after it and up to ``t`` mentions at least ``keep_mentions_min`` of its entities
  (``request.entities``). A kept response stays kept: the base believes it dropped it.
- ``supersede``: at each tool response ``t``, every earlier tool response from the same tool
  called with the same arguments (the same record read again) and not yet dropped is dropped at
  ``t``. A response's call is the ``j``-th tool call of the nearest assistant message before it,
  ``j`` being how many tool responses lie between the two; a response without one is never
  superseded.
- ``protect_first_user``: the first user message (the task) is never dropped.
- ``reposition_after``: positions are compacted at the first trigger where the tokens dropped
  since the last reposition (the base's or this rule's) reach ``reposition_after_tokens``.

Every splice passes :func:`search_spaces.check_program`; the schedule a composed program returns
is normalised (a message dropped at most once, at its first trigger; repositions strictly
increasing).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from search_spaces.errors import PolicyError


@dataclass(frozen=True)
class Fragment:
    """One rule: its name, source (functions prefixed ``frag_``), parameters and their space lines.

    Attributes:
        name: the fragment (``frag_<name>`` is its entry point: ``(request, params, sched) -> sched``).
        source: the function definitions spliced into a program.
        defaults: parameters the fragment adds to ``DEFAULTS``.
        space: ``name -> expression`` drawing each parameter from ``trial``.
        doc: the rule in one line.
    """

    name: str
    source: str
    defaults: dict[str, Any]
    space: dict[str, str]
    doc: str


HELPERS = '''
def frag_schedule(request, decision):
    wire = decision if isinstance(decision, dict) else decision.wire()
    drops = {}
    thinking = {}
    rules = wire.get("drop_rule")
    tables = []
    if "drop_message" in wire:
        tables.append(("message_drop", wire["drop_message"]))
    if isinstance(rules, dict):
        rules = [rules]
    for rule in rules or []:
        tables.append((rule.get("type", "message_drop"), rule.get("drop_messages", {})))
    for kind, table in tables:
        target = thinking if kind == "thinking_drop" else drops
        for key in table:
            target.setdefault(int(key), []).extend(int(i) for i in table[key])
    return {"drops": drops, "thinking": thinking, "repos": [int(t) for t in wire.get("reposition", [])]}


def frag_plan(request, sched):
    plan = request.plan()
    done = set()
    for t in sorted(sched["drops"]):
        ids = []
        for i in sched["drops"][t]:
            if i not in done and i <= t:
                done.add(i)
                ids.append(i)
        plan.drop(t, ids)
    for t in sorted(sched["thinking"]):
        plan.drop_reasoning(t, sched["thinking"][t])
    for t in sorted(set(sched["repos"])):
        plan.reposition(t)
    return plan
'''

KEEP_MENTIONED = Fragment("keep_mentioned", '''
def frag_keep_mentioned(request, params, sched):
    need = params["keep_mentions_min"]
    out = {}
    for t in sorted(sched["drops"]):
        ids = []
        for i in sched["drops"][t]:
            keep = False
            if request.messages[i].is_tool:
                mine = request.entities(i)
                for j in range(i + 1, t + 1):
                    m = request.messages[j]
                    if (m.is_user or m.is_assistant) and len(mine & request.entities(j)) >= need:
                        keep = True
                        break
            if not keep:
                ids.append(i)
        out[t] = ids
    return {"drops": out, "thinking": sched["thinking"], "repos": sched["repos"]}
''', {"keep_mentions_min": 1}, {"keep_mentions_min": 'trial.suggest_int("keep_mentions_min", 1, 4)'},
    "keep a tool response whose entities a later user or assistant message mentions")

SUPERSEDE = Fragment("supersede", '''
def frag_record_key(request, i):
    j = 0
    a = i - 1
    while a >= 0 and not request.messages[a].is_assistant:
        if request.messages[a].is_tool:
            j += 1
        a -= 1
    if a < 0 or j >= len(request.messages[a].tool_calls):
        return None
    call = request.messages[a].tool_calls[j]
    return (request.messages[i].name or call[0], call[0], call[1])


def frag_supersede(request, params, sched):
    drops = {t: list(ids) for t, ids in sched["drops"].items()}
    done = set()
    seen = {}
    for t in range(request.n):
        done.update(drops.get(t, []))
        if not request.messages[t].is_tool:
            continue
        key = frag_record_key(request, t)
        if key is None:
            continue
        older = [i for i in seen.get(key, []) if i not in done]
        if older:
            drops.setdefault(t, []).extend(older)
            done.update(older)
        seen.setdefault(key, []).append(t)
    return {"drops": drops, "thinking": sched["thinking"], "repos": sched["repos"]}
''', {}, {}, "drop a tool response once the same tool is called again with the same arguments")

PROTECT_FIRST_USER = Fragment("protect_first_user", '''
def frag_protect_first_user(request, params, sched):
    users = request.user_messages()
    if not users:
        return sched
    first = users[0]
    drops = {t: [i for i in ids if i != first] for t, ids in sched["drops"].items()}
    return {"drops": drops, "thinking": sched["thinking"], "repos": sched["repos"]}
''', {}, {}, "never drop the first user message")

REPOSITION_AFTER = Fragment("reposition_after", '''
def frag_reposition_after(request, params, sched):
    limit = params["reposition_after_tokens"]
    base = set(sched["repos"])
    repos = []
    done = set()
    pending = 0
    for t in range(request.n):
        for i in sched["drops"].get(t, []):
            if i not in done:
                done.add(i)
                pending += request.tokens[i]
        if t in base or pending >= limit:
            repos.append(t)
            pending = 0
    return {"drops": sched["drops"], "thinking": sched["thinking"], "repos": repos}
''', {"reposition_after_tokens": 1024},
    {"reposition_after_tokens": 'trial.suggest_int("reposition_after_tokens", 128, 8192, log=True)'},
    "compact positions once the tokens dropped since the last reposition reach a threshold")

FRAGMENTS: dict[str, Fragment] = {f.name: f for f in (KEEP_MENTIONED, SUPERSEDE, PROTECT_FIRST_USER,
                                                       REPOSITION_AFTER)}


class FragmentError(PolicyError):
    """A fragment cannot be spliced into a program (unknown name, or a program without ``decide``)."""


def _funcs(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def present(source: str) -> list[str]:
    """The fragments spliced into ``source``, in the order they were added."""
    tree = ast.parse(source)
    return [name[len("frag_"):] for name in _funcs(tree) if name[len("frag_"):] in FRAGMENTS]


def missing(source: str) -> list[str]:
    """The fragments not yet spliced into ``source``, in ``FRAGMENTS`` order (``source`` parsed once)."""
    have = set(present(source))
    return [f for f in FRAGMENTS if f not in have]


def _defaults_node(tree: ast.Module) -> ast.Dict | None:
    for node in tree.body:
        value: ast.expr | None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "DEFAULTS":
            return value if isinstance(value, ast.Dict) else None
    return None


def _rename_calls(tree: ast.AST, old: str, new: str) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == old:
            node.id = new


def _wrapper(names: list[str]) -> str:
    steps = "".join(f"    sched = frag_{n}(request, params, sched)\n" for n in names)
    extra = "".join(f"    out[{k!r}] = {expr}\n" for n in names for k, expr in FRAGMENTS[n].space.items())
    return (f"def decide(request, params):\n    sched = frag_schedule(request, base_decide(request, params))\n"
            f"{steps}    return frag_plan(request, sched)\n\n\n"
            f"def space(trial):\n    out = dict(base_space(trial))\n{extra}    return out\n")


def compose(source: str, name: str) -> str:
    """``source`` with fragment ``name`` spliced in (after the fragments it already has).

    Raises:
        FragmentError: ``name`` is not a fragment, it is already present, or ``source`` does not
            parse or lacks ``decide``/``space``.
    """
    if name not in FRAGMENTS:
        raise FragmentError(f"unknown fragment {name!r}; valid fragments: {', '.join(FRAGMENTS)}",
                            field="fragment", value=name)
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise FragmentError(f"the program does not parse: {err}", field="source", value=None) from err
    funcs = _funcs(tree)
    if "decide" not in funcs or "space" not in funcs:
        raise FragmentError("a program needs decide() and space() to take a fragment", field="source", value=None)
    names = present(source)
    if name in names:
        raise FragmentError(f"fragment {name!r} is already in the program", field="fragment", value=name)
    if "base_decide" in funcs:  # wrapped before: drop the old wrapper, it is regenerated below
        tree.body = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name in ("decide", "space"))]
    else:
        _rename_calls(tree, "decide", "base_decide")
        _rename_calls(tree, "space", "base_space")
        funcs["decide"].name, funcs["space"].name = "base_decide", "base_space"
        tree.body.extend(ast.parse(HELPERS).body)
    fragment = FRAGMENTS[name]
    tree.body.extend(ast.parse(fragment.source).body)
    if fragment.defaults:
        defaults = _defaults_node(tree)
        if defaults is None:
            tree.body.insert(0, ast.parse(f"DEFAULTS = {fragment.defaults!r}").body[0])
        else:
            for k, v in fragment.defaults.items():
                defaults.keys.append(ast.Constant(k))
                defaults.values.append(ast.Constant(v))
    tree.body.extend(ast.parse(_wrapper([*names, name])).body)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"
