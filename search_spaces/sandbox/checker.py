"""Static check of a policy program: parse it and refuse anything outside the allow-lists.

This is the first of two walls (the second is the sandbox process, ``process.py``): it refuses
imports beyond ``math``/``re``/``statistics``, names and attributes starting with ``_`` (so no
``__class__``/``__globals__``/``__subclasses__`` walks), builtins outside the list (no ``open``,
``eval``, ``exec``, ``compile``, ``getattr``), any binding of a builtin's name outside the list
(``open = None`` anywhere would otherwise make ``open`` look defined in every scope), attribute
names outside the list (no ``gi_frame``, ``str.format``), classes, ``global``/``nonlocal``,
``with``, ``yield``, attribute assignment, code that runs at load time, and sources over 20 KB. It
never executes the program. Its reason is one line, fit to show a proposer.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from search_spaces.errors import PolicyError
from search_spaces.sandbox import rules


@functools.cache
def allowed_attributes(api: tuple[type, ...]) -> frozenset[str]:
    """Attribute names a program written against ``api`` (a track's API classes) may read: the
    sandbox's plain types and modules, and ``api``'s public names. The tracks hand their API in;
    the sandbox knows neither track."""
    return rules.allowed_attributes(api)


# Names of builtins a program may not use, nor bind anywhere: the name check is scope-blind (a name
# bound anywhere counts as defined everywhere), so one ``open = None`` would let ``open(...)`` pass
# in every other function. The names ``site`` and newer Pythons add are listed too.
RESERVED_NAMES = frozenset(
    {n for n in dir(builtins) if not n.startswith("_")}
    | {"exit", "quit", "help", "copyright", "credits", "license", "breakpoint", "aiter", "anext",
       "ExceptionGroup", "BaseExceptionGroup", "EncodingWarning", "PythonFinalizationError"}
) - rules.ALLOWED_BUILTINS
_FRIENDLY = {
    "ClassDef": "class definitions", "With": "with statements", "AsyncWith": "with statements",
    "Global": "global statements", "Nonlocal": "nonlocal statements", "Yield": "yield",
    "YieldFrom": "yield from", "Await": "await", "AsyncFunctionDef": "async functions",
    "AsyncFor": "async for", "Match": "match statements", "TryStar": "except*", "withitem": "with statements",
}


@dataclass(frozen=True)
class CheckResult:
    """Outcome of :func:`check_program`.

    Attributes:
        ok: the program may be sent to the sandbox.
        reason: ``"ok"``, or the first problem as one line (``"line 3: import of 'os' is not allowed ..."``).
        sha256: hex digest of the UTF-8 source (a stable key for the program).
        defaults: the literal ``DEFAULTS`` dict, or ``None`` when the program has none.
        needs: the literal ``NEEDS`` dict: input name -> parameters that switch it on.
    """

    ok: bool
    reason: str
    sha256: str
    defaults: Mapping[str, Any] | None = None
    needs: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))


class _Problem(Exception):
    """A refusal at ``node``; problems sort by where their node ends, so in ``().__class__.mro()``
    the innermost offence (``__class__``) is reported first, and nodes without a line last."""

    def __init__(self, node: ast.AST | None, message: str, first: bool = False) -> None:
        super().__init__(message)
        self.line = getattr(node, "lineno", 0) if node is not None else 0
        self.message = message
        self.order = (self.line or 10**9, -1 if first else getattr(node, "end_col_offset", 0) or 0)


def check_program(source: str, api: tuple[type, ...]) -> CheckResult:
    """Check ``source`` statically (it is never run here) as a program of the track whose API
    classes are ``api`` (``search_spaces.check_program`` and ``search_spaces.survival.check_program``
    pass their own).

    Raises:
        PolicyError: ``source`` is not a string (a caller mistake, not a bad candidate).
    """
    if not isinstance(source, str):
        raise PolicyError(f"program source must be a string, got {type(source).__name__}", field="source")
    return _check_cached(source, api)


@functools.lru_cache(maxsize=512)
def _check_cached(source: str, api: tuple[type, ...]) -> CheckResult:
    data = source.encode("utf-8", errors="surrogatepass")
    digest = hashlib.sha256(data).hexdigest()
    if len(data) > rules.MAX_SOURCE_BYTES:
        return CheckResult(False, f"source is {len(data)} bytes; the limit is {rules.MAX_SOURCE_BYTES}", digest)
    try:
        tree = ast.parse(source, filename="<program>")
    except SyntaxError as err:
        return CheckResult(False, f"line {err.lineno or 0}: syntax error: {err.msg}", digest)
    except (ValueError, RecursionError, MemoryError) as err:
        return CheckResult(False, f"cannot parse the source: {type(err).__name__}", digest)
    try:
        _check_top_level(tree)
        problems = _walk(tree, allowed_attributes(api))
        if problems:
            first = min(problems, key=lambda p: p.order)
            more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
            return CheckResult(False, _one_line(f"line {first.line}: {first.message}{more}"), digest)
        defaults = _literal(tree, "DEFAULTS", _check_defaults)
        needs = _literal(tree, "NEEDS", _check_needs)
    except _Problem as p:
        return CheckResult(False, _one_line(f"line {p.line}: {p.message}" if p.line else p.message), digest)
    except RecursionError:
        return CheckResult(False, "the source is nested too deeply", digest)
    return CheckResult(True, "ok", digest, None if defaults is None else MappingProxyType(defaults),
                       MappingProxyType(needs or {}))


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_top_level(tree: ast.Module) -> None:
    functions: dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        kind = type(node).__name__
        if kind not in rules.TOP_LEVEL_NODES:
            raise _Problem(node, f"{_FRIENDLY.get(kind, kind)} at the top level is not allowed "
                                 "(only imports, function definitions and constant assignments)")
        if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant):
            raise _Problem(node, "expressions at the top level are not allowed (nothing may run at load time)")
        if isinstance(node, ast.FunctionDef):
            functions[node.name] = node
    for name, arity in rules.REQUIRED_FUNCTIONS.items():
        fn = functions.get(name)
        if fn is None:
            want = "decide(request, params)" if name == "decide" else "space(trial)"
            raise _Problem(None, f"the program must define {want} at the top level")
        a = fn.args
        positional = len(a.posonlyargs) + len(a.args)
        if positional != arity or a.vararg or a.kwarg or a.kwonlyargs:
            raise _Problem(fn, f"{name} must take exactly {arity} positional parameter{'s' * (arity > 1)}")


def _walk(tree: ast.Module, attributes: frozenset[str]) -> list[_Problem]:
    problems: list[_Problem] = []
    bound: set[str] = set()
    for node, name in _bindings(tree):
        bound.add(name)
        if name in RESERVED_NAMES:
            problems.append(_Problem(node, f"binding the name {name!r} is not allowed (it names a builtin outside "
                                           "the allowed ones; choose another name)", first=True))
    for node in ast.walk(tree):
        try:
            _check_node(node, bound, attributes)
        except _Problem as p:
            problems.append(p)
    return problems


def _bindings(tree: ast.Module) -> list[tuple[ast.AST, str]]:
    """Every (node, name) that binds or unbinds a name anywhere in ``tree``: assignment targets of
    every kind (plain, augmented, annotated, ``for``, comprehension, walrus, ``with ... as``,
    ``del``), function and class names, parameters, imports, ``except ... as``, ``global``/
    ``nonlocal`` and ``match`` captures (some of these are refused anyway; their names still count)."""
    out: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            out.append((node, node.id))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.append((node, node.name))
        elif isinstance(node, ast.arg):
            out.append((node, node.arg))
        elif isinstance(node, ast.alias):
            out.append((node, node.asname or node.name.partition(".")[0]))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.append((node, node.name))
        elif isinstance(node, ast.Global | ast.Nonlocal):
            out.extend((node, name) for name in node.names)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            out.append((node, node.name))
        elif isinstance(node, ast.MatchMapping) and node.rest:
            out.append((node, node.rest))
    return out


def _private(name: str | None) -> bool:
    return bool(name) and name.startswith("_")  # type: ignore[union-attr]


def _check_node(node: ast.AST, bound: set[str], attributes: frozenset[str]) -> None:
    kind = type(node).__name__
    if kind not in rules.ALLOWED_NODES:
        raise _Problem(node, f"{_FRIENDLY.get(kind, kind)} {'are' if kind in _FRIENDLY else 'is'} not allowed")
    if isinstance(node, ast.Name):
        if _private(node.id):
            raise _Problem(node, f"name {node.id!r} is not allowed (names starting with '_' are private)")
        if isinstance(node.ctx, ast.Load) and node.id not in bound and node.id not in rules.ALLOWED_BUILTINS:
            raise _Problem(node, f"name {node.id!r} is not defined or not allowed (builtins are limited to "
                                 "pure ones such as len, range, sorted, min, max, sum; see the API doc)")
    elif isinstance(node, ast.Attribute):
        if _private(node.attr):
            raise _Problem(node, f"attribute {node.attr!r} is not allowed (names starting with '_' are private)")
        if not isinstance(node.ctx, ast.Load):
            raise _Problem(node, f"assigning or deleting attribute {node.attr!r} is not allowed")
        if node.attr not in attributes:
            raise _Problem(node, f"attribute {node.attr!r} is not allowed (use the methods of plain data "
                                 "types, the allowed modules and the policy API)")
    elif isinstance(node, ast.FunctionDef):
        if node.decorator_list:
            raise _Problem(node.decorator_list[0], "decorators are not allowed", first=True)
        if _private(node.name):
            raise _Problem(node, f"function name {node.name!r} is not allowed (names starting with '_' are private)")
    elif isinstance(node, ast.arg | ast.keyword | ast.ExceptHandler):
        name = node.arg if isinstance(node, ast.arg | ast.keyword) else node.name
        if _private(name):
            raise _Problem(node, f"name {name!r} is not allowed (names starting with '_' are private)")
    elif isinstance(node, ast.Import | ast.ImportFrom):
        _check_import(node)


def _check_import(node: ast.Import | ast.ImportFrom) -> None:
    allowed = ", ".join(sorted(rules.ALLOWED_MODULES))
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name not in rules.ALLOWED_MODULES:
                raise _Problem(node, f"import of {alias.name!r} is not allowed (allowed modules: {allowed})")
            if _private(alias.asname):
                raise _Problem(node, f"alias {alias.asname!r} is not allowed (names starting with '_' are private)")
        return
    module = node.module or ""
    if node.level or module not in rules.ALLOWED_MODULES:
        raise _Problem(node, f"import from {'.' * node.level + module!r} is not allowed (allowed modules: {allowed})")
    for alias in node.names:
        if alias.name not in rules.ALLOWED_MODULES[module]:
            raise _Problem(node, f"{module}.{alias.name} is not available to programs")
        if _private(alias.asname):
            raise _Problem(node, f"alias {alias.asname!r} is not allowed (names starting with '_' are private)")


def _literal(tree: ast.Module, name: str, check: Any) -> Any:
    """The checked literal value assigned to ``name`` at the top level, or ``None``."""
    for node in tree.body:
        value: ast.expr | None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            try:
                literal = ast.literal_eval(value) if value is not None else None
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                raise _Problem(node, f"{name} must be a literal dict") from None
            return check(node, literal)
    return None


def _check_defaults(node: ast.AST, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _Problem(node, "DEFAULTS must be a dict with string keys")
    for key, v in value.items():
        if v is not None and not isinstance(v, bool | int | float | str):
            raise _Problem(node, f"DEFAULTS[{key!r}] must be a number, string, bool or None")
    return dict(value)


def _check_needs(node: ast.AST, value: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict) or set(value) - {"relevance"}:
        raise _Problem(node, "NEEDS must be a dict whose only key is 'relevance'")
    out = {}
    for key, params in value.items():
        if not isinstance(params, list | tuple) or not all(isinstance(p, str) for p in params):
            raise _Problem(node, f"NEEDS[{key!r}] must be a list of parameter names")
        out[key] = tuple(params)
    return out
