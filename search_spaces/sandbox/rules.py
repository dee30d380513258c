"""The allow-lists of the policy-program language, in one place.

Read by the static checker (``checker.py``) in the search process and, by file path, by the
sandbox child (``child.py``), which builds the restricted builtins and module proxies from
the same lists. Standard library only: the child runs in an isolated interpreter (``python -I -S``).
This module decides nothing by itself; it only names what is allowed.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable

MAX_SOURCE_BYTES = 20_000

ALLOWED_BUILTINS = frozenset({
    "abs", "all", "any", "bool", "chr", "dict", "divmod", "enumerate", "filter", "float", "frozenset",
    "int", "isinstance", "iter", "len", "list", "map", "max", "min", "next", "ord", "pow", "range",
    "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "zip",
    "ArithmeticError", "Exception", "IndexError", "KeyError", "LookupError", "RuntimeError",
    "StopIteration", "TypeError", "ValueError", "ZeroDivisionError",
})

# Module -> the names a program may use from it. Programs get a proxy holding only these, so a
# module's own imports (``statistics.sys``) are never reachable.
def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


ALLOWED_MODULES: dict[str, frozenset[str]] = {
    "math": _words(
        "acos acosh asin asinh atan atan2 atanh cbrt ceil comb copysign cos cosh degrees dist e erf erfc "
        "exp exp2 expm1 fabs factorial floor fmod frexp fsum gamma gcd hypot inf isclose isfinite isinf "
        "isnan isqrt lcm ldexp lgamma log log10 log1p log2 modf nan nextafter perm pi pow prod radians "
        "remainder sin sinh sqrt tan tanh tau trunc ulp"),
    "re": _words(
        "compile escape findall finditer fullmatch match search split sub subn "
        "A ASCII DOTALL I IGNORECASE M MULTILINE S VERBOSE X"),
    "statistics": _words(
        "correlation covariance fmean geometric_mean harmonic_mean linear_regression mean median "
        "median_high median_low mode multimode pstdev pvariance quantiles stdev variance"),
}

# Attributes of regex matches and patterns, and of the trial object ``space(trial)`` receives.
_EXTRA_ATTRIBUTES = _words(
    "end endpos expand group groupdict groups lastgroup lastindex pos span start string pattern flags "
    "suggest_int suggest_float suggest_categorical")

# Public methods that are refused even on allowed types: str.format can read attributes by name.
BLOCKED_ATTRIBUTES = frozenset({"format", "format_map", "mro"})

_TYPES = (str, list, dict, set, frozenset, tuple, int, float, bool)

ALLOWED_NODES = frozenset({
    "Module", "FunctionDef", "arguments", "arg", "Return", "Assign", "AugAssign", "AnnAssign", "For",
    "While", "If", "Break", "Continue", "Pass", "Expr", "Raise", "Try", "ExceptHandler", "Assert",
    "Delete", "Import", "ImportFrom", "alias", "BoolOp", "BinOp", "UnaryOp", "Lambda", "IfExp", "Dict",
    "Set", "ListComp", "SetComp", "DictComp", "GeneratorExp", "comprehension", "Compare", "Call",
    "keyword", "Constant", "JoinedStr", "FormattedValue", "Attribute", "Subscript", "Starred", "Name",
    "List", "Tuple", "Slice", "NamedExpr", "Load", "Store", "Del",
    "And", "Or", "Add", "Sub", "Mult", "Div", "FloorDiv", "Mod", "Pow", "LShift", "RShift", "BitOr",
    "BitXor", "BitAnd", "MatMult", "Invert", "Not", "UAdd", "USub", "Eq", "NotEq", "Lt", "LtE", "Gt",
    "GtE", "Is", "IsNot", "In", "NotIn",
})

# Statements a program may have at its top level (definitions only: nothing runs at load time
# beyond imports and constant assignments).
TOP_LEVEL_NODES = frozenset({"Import", "ImportFrom", "FunctionDef", "Assign", "AnnAssign", "Expr"})

REQUIRED_FUNCTIONS = {"decide": 2, "space": 1}

_PUBLIC = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def public_names(objects: Iterable[object]) -> set[str]:
    """Every public attribute name of ``objects`` (names starting with ``_`` excluded)."""
    return {n for obj in objects for n in dir(obj) if _PUBLIC.match(n)}


def allowed_attributes(api_classes: Iterable[type]) -> frozenset[str]:
    """Attribute names a program may read: methods of the plain data types, the names of the
    allowed modules, match/pattern/trial attributes and the policy API's public names.
    """
    names = public_names(_TYPES) | public_names(api_classes) | set(_EXTRA_ATTRIBUTES)
    for allowed in ALLOWED_MODULES.values():
        names |= allowed
    return frozenset(names - BLOCKED_ATTRIBUTES)


def builtin_objects() -> dict[str, object]:
    """The allowed builtins as a namespace (the sandbox adds its restricted ``__import__``)."""
    return {name: getattr(builtins, name) for name in sorted(ALLOWED_BUILTINS)}
