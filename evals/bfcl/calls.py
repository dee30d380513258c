"""Model replies as BFCL function calls: parsed against the declared functions, never evaluated.

A reply's calls are read in one of two forms:

- ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (what ChatML models write;
  :func:`engine.toolcalls.parse_tool_calls`), the arguments a JSON object; a block may hold several
  calls (a JSON list, or one object per line);
- BFCL's Python-call form, ``[cd(folder='document'), ls(a=True)]`` or one bare call, read with
  :func:`ast.parse` and accepted only when every call is a declared name applied to literal
  arguments (:func:`ast.literal_eval` of each; nothing is looked up or run); on its own or inside a
  ``<tool_call>`` block.

Either way a call becomes a :class:`Call` (a declared name, literal positional and keyword
arguments) and anything else a :class:`Refused` with a one-line reason: an undeclared or
attribute name, a call nested in an argument, a lambda, ``*args``/``**kwargs``, a name written
other than as declared (Unicode lookalikes that Python's parser folds), a keyword that is not an
ASCII identifier, an argument past :data:`MAX_CALL_CHARS` or :data:`MAX_DEPTH`. :attr:`Call.source`
rebuilds the call as BFCL writes it (the name, ``repr`` of each argument); only such rebuilt strings
ever reach BFCL's helpers, never the model's text (docs/DESIGN.md, invariant 7).

Not for: executing calls (:mod:`evals.bfcl.backends`).
"""

from __future__ import annotations

import ast
import json
import keyword
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.toolcalls import parse_tool_calls

MAX_CALL_CHARS = 20_000
"""The longest call (as rebuilt) or Python-form reply accepted; BFCL's gold calls stay under 2,000."""
MAX_DEPTH = 16
"""The deepest nesting of containers accepted in an argument."""
MAX_REPLY_CHARS = 200_000
"""A Python-form reply longer than this is not parsed at all."""


@dataclass(frozen=True)
class Call:
    """A call of a declared function with literal arguments (``args`` positional, ``kwargs`` by name)."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """The call as BFCL writes it, rebuilt from the parsed values: ``name(1, k='v')``."""
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"


@dataclass(frozen=True)
class Refused:
    """A piece of a reply that is not an acceptable call, and why (one line)."""

    reason: str


@dataclass(frozen=True)
class ParsedCalls:
    """The calls of one reply (in order), the refused pieces, and the form they were read in
    (``tool_call``, ``python`` or ``none`` when the reply holds no call)."""

    calls: tuple[Call, ...]
    refused: tuple[Refused, ...]
    form: str

    @property
    def empty(self) -> bool:
        """Whether the reply made no attempt at a call (the model ends its turn)."""
        return not self.calls and not self.refused


def _depth_ok(value: Any, depth: int = 0) -> bool:
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return all(_depth_ok(k, depth + 1) and _depth_ok(v, depth + 1) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return all(_depth_ok(v, depth + 1) for v in value)
    return True


def _short(text: str, n: int = 60) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= n else text[:n] + "...")


def check_call(name: Any, args: tuple[Any, ...], kwargs: Mapping[Any, Any], declared: Collection[str],
               ) -> Call | Refused:
    """A :class:`Call` when ``name`` is declared, every keyword an ASCII identifier and the call
    within the size and depth limits; else the :class:`Refused` reason."""
    if not isinstance(name, str) or name not in declared:
        return Refused(f"{_short(name)} is not a declared function")
    for k in kwargs:
        if not isinstance(k, str) or not k.isascii() or not k.isidentifier() or keyword.iskeyword(k):
            return Refused(f"argument name {_short(k)} of {name} is not an identifier")
    if not _depth_ok(list(args)) or not _depth_ok(dict(kwargs)):
        return Refused(f"an argument of {name} is nested deeper than {MAX_DEPTH}")
    call = Call(name, tuple(args), dict(kwargs))
    try:
        size = len(call.source)
    except (RecursionError, ValueError):
        return Refused(f"an argument of {name} cannot be written back")
    if size > MAX_CALL_CHARS:
        return Refused(f"the call of {name} is {size} characters, over {MAX_CALL_CHARS}")
    return call


def _literal(node: ast.expr, name: str) -> Any:
    """The value of a literal argument node; raises ``ValueError`` naming what it is otherwise."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call | ast.Lambda | ast.Attribute | ast.Name | ast.Starred | ast.Subscript
                      | ast.NamedExpr | ast.comprehension | ast.JoinedStr | ast.Await | ast.Yield):
            raise ValueError(f"an argument of {name} is not a literal ({type(sub).__name__})")
    return ast.literal_eval(node)


def _python_call(node: ast.expr, text: str, declared: Collection[str]) -> Call | Refused:
    if not isinstance(node, ast.Call):
        return Refused(f"{type(node).__name__} is not a function call")
    if not isinstance(node.func, ast.Name):
        return Refused(f"the called thing is a {type(node.func).__name__}, not a declared function's name")
    name = node.func.id
    written = ast.get_source_segment(text, node.func)
    if written != name:  # Python folds Unicode lookalikes (NFKC): the text must spell the name itself
        return Refused(f"the name {_short(written or '')} is not written as the declared {name!r}")
    if name not in declared:
        return Refused(f"{name!r} is not a declared function")
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return Refused(f"{name} is called with *args or **kwargs")
    try:
        args = tuple(_literal(a, name) for a in node.args)
        kwargs = {k.arg: _literal(k.value, name) for k in node.keywords if k.arg is not None}
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as err:
        return Refused(str(err).splitlines()[0][:200] or f"an argument of {name} is not a literal")
    return check_call(name, args, kwargs, declared)


def parse_python_calls(text: str, declared: Collection[str]) -> ParsedCalls | None:
    """BFCL's Python-call form: one call or a list (or tuple) of calls; ``None`` when ``text`` is not
    Python at all (then it is no call of this form)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("python").strip()
    if not body or len(body) > MAX_REPLY_CHARS:
        return None
    try:
        tree = ast.parse(body, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    nodes = tree.body.elts if isinstance(tree.body, ast.List | ast.Tuple) else [tree.body]
    if not nodes or not all(isinstance(n, ast.Call) for n in nodes):
        return None  # prose, a number, a literal: not a call
    out = [_python_call(n, body, declared) for n in nodes]
    return ParsedCalls(tuple(c for c in out if isinstance(c, Call)), tuple(c for c in out if isinstance(c, Refused)),
                       "python")


def parse_reply(text: str, declared: Collection[str]) -> ParsedCalls:
    """The calls of a model's reply (see the module docstring). A reply with ``<tool_call>`` blocks
    (or only a call's bare JSON) is read as JSON; else as BFCL's Python form; else it holds no call."""
    reply = parse_tool_calls(text, declared)
    if reply.tool_calls or reply.invalid:
        calls: list[Call] = []
        refused: list[Refused] = []
        for raw in reply.invalid:  # a block that holds no JSON call may hold Python-form calls
            python = parse_python_calls(raw, declared)
            if python is None:
                refused.append(Refused(f"not a JSON tool call: {_short(raw)}"))
            else:
                calls.extend(python.calls)
                refused.extend(python.refused)
        for tc in reply.tool_calls:
            fn = tc["function"]
            try:
                arguments = json.loads(fn["arguments"])
            except (json.JSONDecodeError, RecursionError):
                arguments = None
            if not isinstance(arguments, dict):
                refused.append(Refused(f"the arguments of {_short(fn['name'])} are not a JSON object"))
                continue
            checked = check_call(fn["name"], (), arguments, declared)
            (calls if isinstance(checked, Call) else refused).append(checked)  # type: ignore[arg-type]
        return ParsedCalls(tuple(calls), tuple(refused), "tool_call")
    python = parse_python_calls(text, declared)
    return python if python is not None else ParsedCalls((), (), "none")
