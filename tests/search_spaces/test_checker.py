"""The static checker: hostile programs are refused with a one-line reason; good ones pass."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from search_spaces import PolicyError, check_program

GOOD = '''
"""Keep the last few tool responses."""
import math
from statistics import mean

DEFAULTS = {"keep": 3, "label": "x"}
NEEDS = {"relevance": ["w"]}


def decide(request, params):
    plan = request.plan()
    tools = request.tool_responses()
    keep = params["keep"]
    sizes = [request.tokens[i] for i in tools] or [0]
    avg = mean(sizes) if sizes else 0.0
    for j, t in enumerate(tools):
        if j >= keep and not math.isnan(avg):
            plan.drop(t, [tools[j - keep]])
    try:
        ok = f"{len(tools)}".isdigit()
    except ValueError as err:
        ok = bool(err)
    found = {e for e in request.entities(0) if re_like(e)}
    return plan if ok or found else {"drop_message": {}, "reposition": []}


def re_like(text):
    return sorted(text, key=lambda c: ord(c))[:1] == ["a"]


def space(trial):
    return {"keep": trial.suggest_int("keep", 1, 8)}
'''

FOOTER = "\n\ndef space(trial):\n    return {}\n"


def program(body: str) -> str:
    return body + FOOTER


def test_good_program_passes_and_reads_literals():
    r = check_program(GOOD)
    assert r.ok, r.reason
    assert r.reason == "ok"
    assert r.sha256 == hashlib.sha256(GOOD.encode()).hexdigest()
    assert dict(r.defaults or {}) == {"keep": 3, "label": "x"}
    assert dict(r.needs) == {"relevance": ("w",)}
    assert check_program(GOOD).sha256 == r.sha256


DECIDE = "def decide(request, params):\n    {}\n    return request.plan()\n"


@pytest.mark.parametrize(("source", "reason"), [
    ("import os\n" + DECIDE.format("pass"), "import of 'os' is not allowed"),
    ("import subprocess\n" + DECIDE.format("pass"), "import of 'subprocess'"),
    ("import socket\n" + DECIDE.format("pass"), "import of 'socket'"),
    ("from os import system\n" + DECIDE.format("pass"), "import from 'os'"),
    ("import math as _m\n" + DECIDE.format("pass"), "alias '_m'"),
    ("from math import sys\n" + DECIDE.format("pass"), "math.sys is not available"),
    ("from . import x\n" + DECIDE.format("pass"), "import from '.'"),
    (DECIDE.format("x = __import__('os')"), "'__import__'"),
    (DECIDE.format("x = ().__class__.__bases__[0].__subclasses__()"), "'__class__'"),
    (DECIDE.format("x = decide.__globals__"), "'__globals__'"),
    (DECIDE.format("x = getattr(request, '__cl' + 'ass__')"), "name 'getattr' is not defined or not allowed"),
    (DECIDE.format("x = eval('1')"), "name 'eval'"),
    (DECIDE.format("exec('x = 1')"), "name 'exec'"),
    (DECIDE.format("x = compile('1', 'f', 'eval')"), "name 'compile'"),
    (DECIDE.format("x = open('/etc/passwd').read()"), "name 'open'"),
    (DECIDE.format("x = vars(request)"), "name 'vars'"),
    (DECIDE.format("x = '{0.__class__}'.format(request)"), "attribute 'format'"),
    (DECIDE.format("x = (i for i in []).gi_frame.f_globals"), "attribute 'gi_frame'"),
    (DECIDE.format("request.n = 3"), "assigning or deleting attribute 'n'"),
    (DECIDE.format("_x = 1"), "name '_x'"),
    (DECIDE.format("x = request._prefix"), "attribute '_prefix'"),
    (DECIDE.format("x = [y for y in ().__class__.mro()]"), "attribute '__class__'"),
    (DECIDE.format("global x"), "global statements are not allowed"),
    (DECIDE.format("with request: pass"), "with statements are not allowed"),
    (DECIDE.format("yield 1"), "yield are not allowed"),
    ("class A:\n    pass\n" + DECIDE.format("pass"), "class definitions at the top level"),
    (DECIDE.format("class A: pass"), "class definitions are not allowed"),
    ("@staticmethod\n" + DECIDE.format("pass"), "decorators are not allowed"),
    ("while True:\n    pass\n" + DECIDE.format("pass"), "While at the top level is not allowed"),
    ("print('hi')\n" + DECIDE.format("pass"), "expressions at the top level"),
    (DECIDE.format("print('hi')"), "name 'print'"),
    ("def decide(request):\n    return {}\n", "decide must take exactly 2 positional parameters"),
    ("def decide(request, params, *more):\n    return {}\n", "decide must take exactly 2"),
    ("def decide(request, params):\n    return {}\ndef space():\n    return {}\n", "space must take exactly 1"),
    ("def space(trial):\n    return {}\n", "must define decide(request, params)"),
    ("def decide(request, params)\n    return {}\n", "syntax error"),
    ("DEFAULTS = {'k': [1]}\n" + DECIDE.format("pass"), "DEFAULTS['k'] must be"),
    ("DEFAULTS = dict(k=1)\n" + DECIDE.format("pass"), "DEFAULTS must be a literal dict"),
    ("NEEDS = {'network': []}\n" + DECIDE.format("pass"), "NEEDS must be a dict whose only key"),
    ("x = 1\n" * 5000 + DECIDE.format("pass"), "the limit is 20000"),
    (DECIDE.format("x = " + "(" * 300 + ")" * 300), "line"),
])
def test_hostile_programs_are_refused(source, reason):
    r = check_program(program(source) if "def space" not in source else source)
    assert not r.ok
    assert reason in r.reason, r.reason
    assert "\n" not in r.reason and len(r.reason) <= 300


def test_reason_counts_further_problems():
    r = check_program(program(DECIDE.format("x = eval(open('f'))")))
    assert not r.ok and "line 2" in r.reason and "(and 1 more problems)" in r.reason


def test_non_string_source_is_a_caller_mistake():
    with pytest.raises(PolicyError):
        check_program(b"def decide(r, p): pass")  # type: ignore[arg-type]


# A binding of a builtin's name anywhere made that name look defined everywhere (the name check is
# scope-blind), so `open` passed the checker; the sandbox raised NameError, a try/except hid it and
# the exported module (then run with every builtin) read /etc/passwd.
SHADOWED_OPEN = '''
def helper():
    open = None
    return open


def decide(request, params):
    try:
        return {"drop_message": {}, "reposition": [], "x": list(open("/etc/passwd"))}
    except Exception:
        return request.plan()
'''


@pytest.mark.parametrize(("binding", "name"), [
    ("    open = None", "open"),
    ("    getattr += 1", "getattr"),
    ("    eval: int = 1", "eval"),
    ("    for exec in []:\n        pass", "exec"),
    ("    try:\n        pass\n    except Exception as compile:\n        pass", "compile"),
    ("    import math as vars", "vars"),
    ("    from re import compile", "compile"),
    ("    def type(x):\n        return x", "type"),
    ("    f = lambda locals: locals", "locals"),
    ("    def g(a, *, memoryview=1):\n        return a", "memoryview"),
    ("    def g(*breakpoint, **globals):\n        return 1", "breakpoint"),
    ("    return (setattr := 1)", "setattr"),
    ("    return [delattr for delattr in []]", "delattr"),
    ("    return {input: 1 for input in []}", "input"),
    ("    del object", "object"),
    ("    a, *hash = [1, 2]", "hash"),
    ("    [id] = [1]", "id"),
])
def test_binding_a_builtins_name_is_refused(binding, name):
    source = f"def helper():\n{binding}\n\n\n" + DECIDE.format(f"x = {name}(request)")
    r = check_program(program(source))
    assert not r.ok and f"binding the name {name!r} is not allowed" in r.reason, r.reason
    assert "line 2" in r.reason or "line 3" in r.reason or "line 4" in r.reason


def test_the_reported_shadowed_open_program_is_refused():
    r = check_program(program(SHADOWED_OPEN))
    assert not r.ok and "binding the name 'open'" in r.reason and "line 3" in r.reason, r.reason


@pytest.mark.parametrize("binding", [
    "    with request as open:\n        pass",
    "    global open",
    "    def g():\n        nonlocal open",
    "    match request:\n        case [*open]:\n            pass",
    "    match request:\n        case {'a': 1, **open}:\n            pass",
    "    match request:\n        case open:\n            pass",
    "    class open:\n        pass",
])
def test_bindings_in_refused_statements_are_refused_too(binding):
    r = check_program(program(f"def helper():\n{binding}\n\n\n" + DECIDE.format("x = open('/etc/passwd')")))
    assert not r.ok and "not allowed" in r.reason, r.reason


def test_shadowing_an_allowed_builtin_is_still_fine():
    r = check_program(program("def helper(len, max):\n    sorted = 1\n    return len + max + sorted\n\n\n"
                              + DECIDE.format("x = len(request.messages)")))
    assert r.ok, r.reason


@pytest.mark.parametrize("name", ["breakpoint", "globals", "vars", "locals", "setattr", "delattr", "memoryview",
                                  "type", "object", "super", "property", "help", "exit", "input", "print", "id",
                                  "hasattr", "callable", "classmethod", "staticmethod", "bytearray", "format"])
def test_unsafe_builtins_cannot_be_used(name):
    r = check_program(program(DECIDE.format(f"x = {name}(request)")))
    assert not r.ok and f"name {name!r} is not defined or not allowed" in r.reason, r.reason


@pytest.mark.parametrize("attr", ["gi_frame", "gi_code", "f_globals", "f_back", "f_locals", "tb_frame", "tb_next",
                                  "cr_frame", "ag_frame", "co_code", "func_globals", "format", "format_map", "mro",
                                  "args", "with_traceback", "send", "throw"])
def test_frame_and_introspection_attributes_are_refused(attr):
    r = check_program(program(DECIDE.format(f"x = request.{attr}")))
    assert not r.ok and f"attribute {attr!r} is not allowed" in r.reason, r.reason



@pytest.mark.parametrize("attr, track", [("tool_responses", "cache"), ("pool_free", "survival")])
def test_each_track_checks_against_its_own_api(attr, track):
    """The sandbox's allow-list comes from the track that checks the program: a name only the other
    track's API has is refused (on that track's objects it could only fail at run time)."""
    from search_spaces import survival
    from search_spaces.cache.program_api import API_CLASSES as CACHE_API
    from search_spaces.survival.api import API_CLASSES as SURVIVAL_API

    assert any(attr in dir(c) for c in (CACHE_API if track == "cache" else SURVIVAL_API))
    assert not any(attr in dir(c) for c in (SURVIVAL_API if track == "cache" else CACHE_API))
    source = (f"def decide(request, params):\n    x = request.{attr}\n    return {{}}\n\n\n"
              "def space(trial):\n    return {}\n")
    own, other = ((check_program, survival.check_program) if track == "cache"
                  else (survival.check_program, check_program))
    assert own(source).ok, own(source).reason
    assert f"attribute {attr!r} is not allowed" in other(source).reason


def test_the_sandbox_imports_neither_track():
    from search_spaces import sandbox

    imported = {m.group(2) for f in Path(sandbox.__file__).parent.glob("*.py")
                for m in re.finditer(r"^\s*(from|import)\s+([\w.]+)", f.read_text(), re.M)}
    assert imported and not {m for m in imported if m.startswith(("search_spaces.cache", "search_spaces.survival"))}
