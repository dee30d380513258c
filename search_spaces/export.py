"""Export a chosen cache policy as one standalone, standard-library-only Python module.

The library call behind ``akv export``. The exported file holds the policy API (the code of
``program_api.py``), the policy program (a seed for built-in families, the evolved source for
programs) and its parameters, and exposes::

    decide(messages, token_counts=None, previous=None) -> {"drop_message": ..., "reposition": ...}
    apply(payload, token_counts=None) -> payload with the schedule fields set (a chat-completions body)

and, run as a script, reads a request body on stdin and prints ``apply(body)``. Token counts come
from the crude estimator ``estimate_tokens`` unless given; the in-framework policy reproduces an
exported module's decisions when it is given the same counts. Text baselines, and policies that
need sentence embeddings (relevance), cannot be exported: an export raises rather than silently
deciding differently. The program in an exported module is contained as in the sandbox's first
wall: the module re-checks it on import (its hash, names, attributes, imports) and runs it with
only the allowed builtins and module functions, so importing the module cannot reach files,
processes or the network even where the static check had a gap (it has no sandbox process or
resource limits: a program that loops forever still loops).

``format="akv-harness"`` writes the same program and walls behind the interface of the public AKV
policy package instead (``HarnessPolicy().decide(request) -> ContextDecision``; the code is
``_harness_runtime.py``; docs/export.md). Policies that drop reasoning (``thinking_drop``) cannot
take that form: its decision has no field for them.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from search_spaces import _harness_runtime
from search_spaces.cache import frame_guard as frame_guard_module
from search_spaces.cache import program_api
from search_spaces.cache.policy import Policy
from search_spaces.cache.program import ProgramPolicy, check_program
from search_spaces.cache.registry import FAMILIES
from search_spaces.cache.request import PolicyKind
from search_spaces.cache.seeds import seed_source
from search_spaces.errors import PolicyError
from search_spaces.sandbox import rules
from search_spaces.sandbox.checker import allowed_attributes

_MARKER = "# ---- exported from here ----"

_CONTAINED = '''

# ---- the policy program ----
# Checked again on import (its hash, and no name or attribute outside what the sandbox allows), then
# run in its own namespace with only the builtins and module functions the sandbox gives it, so
# that, imported anywhere, it reaches nothing the sandbox forbids (no open, eval, getattr...).
import ast as _ast
import builtins as _builtins
import hashlib as _hashlib
import types as _types

PROGRAM_SHA256 = {sha!r}
PARAMS = {params!r}
PROGRAM_SOURCE = {source}
_BUILTINS = {builtins!r}
_MODULES = {modules!r}
_NODES = frozenset({nodes!r})
_ATTRIBUTES = frozenset({attributes!r})


def _refusal(source):
    """Why ``source`` may not run here, or None."""
    if _hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest() != PROGRAM_SHA256:
        return "the program does not match PROGRAM_SHA256"
    for node in _ast.walk(_ast.parse(source)):
        kind = type(node).__name__
        if kind not in _NODES:
            return kind + " is not allowed"
        names = [getattr(node, f, None) for f in ("id", "arg", "name", "asname", "attr")]
        if any(isinstance(n, str) and n.startswith("_") for n in names):
            return "names starting with '_' are not allowed (line %s)" % getattr(node, "lineno", "?")
        if isinstance(node, _ast.Attribute) and node.attr not in _ATTRIBUTES:
            return "attribute %r is not allowed (line %s)" % (node.attr, node.lineno)
        if isinstance(node, _ast.Import) and any(a.name not in _MODULES for a in node.names):
            return "only these modules may be imported: " + ", ".join(sorted(_MODULES))
        if isinstance(node, _ast.ImportFrom) and (node.level or node.module not in _MODULES or any(
                a.name not in _MODULES[node.module] for a in node.names)):
            return "import from %r is not allowed (line %s)" % (node.module, node.lineno)
    return None


def _restricted_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level or name not in _MODULES:
        raise ImportError("import of %r is not allowed" % name)
    module = __import__(name)
    return _types.SimpleNamespace(**{{n: getattr(module, n) for n in _MODULES[name] if hasattr(module, n)}})


_why = _refusal(PROGRAM_SOURCE)
if _why is not None:
    raise ImportError("this AKV policy module refuses its program: " + _why)
_program: dict = {{
    "__builtins__": {{**{{n: getattr(_builtins, n) for n in _BUILTINS if hasattr(_builtins, n)}},
                     "__import__": _restricted_import}},
    "__name__": "akv_policy_program",
}}
exec(compile(PROGRAM_SOURCE, "<akv-policy>", "exec"), _program)
'''

_MODULE_FACE = '''

def decide(messages, token_counts=None, previous=None):
    """The cumulative cache schedule for ``messages`` (OpenAI-style dicts) as a wire-format dict.
    ``token_counts``: tokens per message (default: ``estimate_tokens(messages)``). Under
    ``FRAME_GUARD`` the program decides from the history alone (``previous`` is not given to it)
    and its schedule is guarded (``guard_wire``: a message leaves only after an assistant turn has
    read it; the system prompt and first user message never leave)."""
    counts = list(token_counts) if token_counts is not None else estimate_tokens(messages)
    seen = None if FRAME_GUARD else previous
    out = _program["decide"](RequestView(messages, counts, None, seen, None), dict(PARAMS))
    wire = out.wire() if isinstance(out, Plan) else json.loads(json.dumps(out))
    return guard_wire(messages, wire) if FRAME_GUARD else wire


def apply(payload, token_counts=None):
    """A copy of the chat-completions request ``payload`` with this policy's schedule fields set."""
    body = dict(payload)
    for key in ("drop_message", "drop_rule", "reposition", "cache"):
        body.pop(key, None)
    body.update(decide(body["messages"], token_counts))
    return body


if __name__ == "__main__":
    import sys

    json.dump(apply(json.load(sys.stdin)), sys.stdout)
'''


def program_for(policy: Policy) -> tuple[str, dict[str, Any], str]:
    """The (program source, parameters, label) that reproduce ``policy``.

    Raises:
        PolicyError: a text baseline, a policy that needs relevance, or a family without a seed.
    """
    if policy.kind is not PolicyKind.CACHE:
        raise PolicyError(f"{policy.name} is a text baseline; only cache policies can be exported",
                          field="policy", value=policy.name)
    if policy.needs_relevance:
        raise PolicyError(f"{policy.name} with these parameters needs sentence embeddings (relevance), which an "
                          "exported module cannot compute; set the intent weights to 0", field="policy")
    if isinstance(policy, ProgramPolicy):
        return policy.source, policy.params, f"program {policy.sha256[:12]}"
    family = FAMILIES.get(policy.name)
    if family is None or family.seed is None:
        raise PolicyError(f"policy {policy.name!r} has no program form to export", field="policy", value=policy.name)
    return seed_source(family.seed), policy.params, policy.name


def api_code(module: Any = program_api) -> str:
    """The code of ``module`` (``program_api.py``; ``survival/api.py`` for survival programs) without
    its docstring and ``__future__`` import."""
    source = Path(module.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source)
    first = tree.body[0]
    start = first.end_lineno if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) else 0
    lines = source.splitlines()[start or 0:]
    return "\n".join(line for line in lines if line.strip() != "from __future__ import annotations").strip()


def _literal(text: str) -> str:
    """``text`` as a Python literal: a readable triple-quoted one where that reads back exactly
    (no quote at the end to merge with the closing quotes, no backslash, no carriage return)."""
    if "'''" not in text and not text.endswith("'") and "\\" not in text and "\r" not in text:
        return "'''" + text + "'''"
    return repr(text)


FORMATS = ("module", "akv-harness")


def harness_code() -> str:
    """The code of ``_harness_runtime.py`` from its export marker on (the AKV-harness face)."""
    source = Path(_harness_runtime.__file__).read_text(encoding="utf-8")
    return source.split(_MARKER, 1)[1].strip()


def guard_code() -> str:
    """The code of ``frame_guard.py`` from its export marker on (the frame guard's rule)."""
    source = Path(frame_guard_module.__file__).read_text(encoding="utf-8")
    return source.split(_MARKER, 1)[1].strip()


def _harness_header(label: str) -> str:
    return (f'"""AKV cache policy: {label}, exported by search_spaces.export for an AKV harness (standard library '
            "only).\n\n"
            "    policy = HarnessPolicy()            # or HarnessPolicy(token_counter=counter)\n"
            "    decision = policy.decide(request)   # request: messages, call_index, tools,\n"
            "                                        # completed_call_message_ids, prompt_end_message_ids\n"
            "    body = apply_decision(payload, decision)   # what to send (drop_message, reposition)\n"
            "    request_from_payload(payload)       # a request for a chat-completions body\n"
            "    python this_file.py < body.json     # prints the body to send\n\n"
            "Token counts: the counter's message layout, else estimate_tokens(). Needs Python 3.10 or later.\n"
            "Regenerate rather than edit.\n"
            '"""\n\n')


def export_policy(policy: Policy, path: str | Path, format: str = "module", frame_guard: bool = False) -> Path:
    """Write ``policy`` with its parameters as one standalone module at ``path`` (see the module
    docstring): ``format`` is ``module`` (this project's interface) or ``akv-harness`` (the public
    AKV policy interface); ``frame_guard``: every decision guarded as the evaluator's frame guard
    guards it (``FRAME_GUARD`` in the file; a policy searched under the guard needs it to drop
    what its evaluation counted). Returns the path.

    Raises:
        PolicyError: an unknown format, the policy cannot be exported (see :func:`program_for`;
            for ``akv-harness`` also a reasoning-dropping family), or its program is refused.
    """
    if format not in FORMATS:
        raise PolicyError(f"unknown export format {format!r}; valid formats: {', '.join(FORMATS)}", field="format",
                          value=format)
    source, params, label = program_for(policy)
    if format == "akv-harness" and policy.name == "thinking_drop":
        raise PolicyError("thinking_drop drops reasoning (drop_rule), which an AKV harness decision cannot carry; "
                          "export it with --format module", field="policy", value=policy.name)
    check = check_program(source)
    if not check.ok:
        raise PolicyError(f"cannot export: the program is refused: {check.reason}", field="policy")
    params = json.loads(json.dumps(params))
    contained = _CONTAINED.format(
        sha=check.sha256, params=params, source=_literal(source), builtins=tuple(sorted(rules.ALLOWED_BUILTINS)),
        modules={name: tuple(sorted(names)) for name, names in sorted(rules.ALLOWED_MODULES.items())},
        nodes=tuple(sorted(rules.ALLOWED_NODES)),
        attributes=tuple(sorted(allowed_attributes(program_api.API_CLASSES))))
    contained += f"FRAME_GUARD = {bool(frame_guard)!r}\n\n" + guard_code() + "\n"
    if format == "akv-harness":
        text = (_harness_header(label) + api_code() + "\n" + contained + f"LABEL = {label!r}\n\n" + harness_code()
                + "\n")
    else:
        text = _module_header(label) + api_code() + "\n" + contained + _MODULE_FACE
    out = Path(path)
    out.write_text(text, encoding="utf-8")
    return out


_SURVIVAL_FACE = '''

def decide(request):
    """One decision point: ``request`` is a survival request in wire form (``SurvivalRequest.wire()``:
    ``now``, ``pending``, ``system``, ``log``, ``cost``); returns ``{session id: {"action", "ttl_s",
    "score"}}`` for every pending session."""
    out = _program["decide"](SurvivalView(request), dict(PARAMS))
    out = json.loads(json.dumps(out))
    for s in request["pending"]:
        d = out.get(str(s["session"])) if isinstance(out, dict) else None
        if not isinstance(d, dict) or d.get("action") not in ACTIONS:
            raise ValueError("the program gave no valid decision for session %r: %r" % (s["session"], d))
    return out


if __name__ == "__main__":
    import sys

    json.dump(decide(json.load(sys.stdin)), sys.stdout)
'''


def export_survival_program(source: str, params: dict[str, Any], path: str | Path, label: str) -> Path:
    """Write survival program ``source`` with ``params`` as one standalone module at ``path``: the
    survival API's views (``survival/api.py``), the program contained as for cache programs (re-checked
    on import, restricted builtins) and ``decide(request_wire) -> {session: decision}``.

    Raises:
        PolicyError: the program is refused by the checker, or a parameter is not in its ``DEFAULTS``.
    """
    from search_spaces.survival import api as survival_api
    from search_spaces.survival import check_program as check_survival_program

    check = check_survival_program(source)
    if not check.ok:
        raise PolicyError(f"cannot export: the program is refused: {check.reason}", field="policy")
    unknown = sorted(set(params) - set(check.defaults or {}))
    if unknown:
        raise PolicyError(f"cannot export: parameter {unknown[0]!r} is not in the program's DEFAULTS",
                          field="params", value=unknown[0])
    full = json.loads(json.dumps({**(check.defaults or {}), **params}))
    contained = _CONTAINED.format(
        sha=check.sha256, params=full, source=_literal(source), builtins=tuple(sorted(rules.ALLOWED_BUILTINS)),
        modules={name: tuple(sorted(names)) for name, names in sorted(rules.ALLOWED_MODULES.items())},
        nodes=tuple(sorted(rules.ALLOWED_NODES)),
        attributes=tuple(sorted(allowed_attributes(survival_api.API_CLASSES))))
    header = (f'"""AKV tool-gap survival policy: {label}, exported by search_spaces.export (standard library '
              "only).\n\n"
              "    decide(request) -> {session id: {\"action\", \"ttl_s\", \"score\"}}\n"
              "        request: a survival request in wire form (engine.survival.SurvivalRequest.wire())\n"
              "    python this_file.py < request.json  prints decide(request)\n\n"
              "Regenerate rather than edit.\n"
              '"""\n\n')
    out = Path(path)
    out.write_text(header + api_code(survival_api) + "\n" + contained + _SURVIVAL_FACE, encoding="utf-8")
    return out


def _module_header(label: str) -> str:
    return (f'"""AKV cache policy: {label}, exported by search_spaces.export (standard library only).\n\n'
            "    decide(messages, token_counts=None) -> {\"drop_message\": ..., \"reposition\": ...}\n"
            "        (a reasoning-dropping policy gives \"drop_rule\" instead of \"drop_message\")\n"
            "    apply(payload, token_counts=None) -> the request body with the schedule fields set\n"
            "    python this_file.py < body.json  prints apply(body)\n\n"
            "Token counts default to estimate_tokens(): 4 tokens of turn markup plus one per 4 characters.\n"
            "Regenerate rather than edit.\n"
            '"""\n\nfrom __future__ import annotations\n\n')
