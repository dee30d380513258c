"""Constrained decoding: what a reply must match, as a grammar, and the tokens it allows each step.

Two request options constrain a reply (as vLLM and SGLang do):

- OpenAI's ``tool_choice`` ``"required"``: after the forced ``<tool_call>\\n`` opening
  (``engine.toolcalls.forced_opening``), one or more ``<tool_call>`` blocks, each
  ``{"name": NAME, "arguments": ARGS}`` with NAME a declared tool and ARGS valid under that tool's
  ``parameters`` JSON schema; a named function: after its opening, one call's ARGS of that function.
- ``response_format`` ``{"type": "json_schema", "json_schema": {"schema": ...}}`` (or
  ``{"type": "json_object"}``): the reply is one JSON value of the schema.

:class:`ReplyGrammar` says which, without a tokenizer: built with the request
(:func:`reply_grammar`), its schemas checked there (a caller mistake is a 400 naming it).
:class:`GrammarCompiler` turns it into a :class:`GrammarMatcher` over an engine's tokenizer with
llguidance (an Earley parser over the tokenizer's token trie; chosen over xgrammar, which pulls a
GB of triton, and outlines-core, whose per-grammar index took 9 s on Qwen's vocabulary): compiled
grammars are kept per grammar (agents resend the same tools every turn) and each generation gets
its own copy. The decoder masks a constrained sequence's logits with its matcher's allowed tokens
(``engine.decode.Decoder.step``); the stop tokens are allowed only where the grammar accepts.

JSON is written compactly with ``", "`` and ``": "`` between items (as ``json.dumps`` and Qwen's
chat template write it). Recursive schemas (a ``$ref`` back to an ancestor) and ``$ref`` outside the
schema are refused, as are schemas past :data:`MAX_SCHEMA_CHARS` or :data:`MAX_SCHEMA_DEPTH`.

Not for: parsing replies (``engine.toolcalls``) or the forced opening itself.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import llguidance
import llguidance.hf
import numpy as np
import torch

from engine.errors import AKVError

MAX_SCHEMA_CHARS = 65_536
"""The most characters of JSON schema (all of a request's together, as JSON) a grammar is built from."""
MAX_SCHEMA_DEPTH = 32
"""The deepest nesting of objects and lists in a schema."""
MAX_CALLS = 8
"""The most ``<tool_call>`` blocks a required reply may hold."""
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""How constrained JSON is written (llguidance's JSON options): no free whitespace."""


def _limits() -> llguidance.LLParserLimits:
    """llguidance's parser limits (its defaults or below): a grammar past them is refused, a step never runs away."""
    return llguidance.LLParserLimits(max_grammar_size=200_000, initial_lexer_fuel=1_000_000, step_lexer_fuel=200_000)


CACHE_SIZE = 64
"""Compiled grammars kept per compiler."""


class GrammarKind(Enum):
    """What a constrained reply is (the text after the request's forced opening)."""

    TOOL_CALLS = "tool_calls"
    """One or more calls of the declared tools (``tool_choice: "required"``)."""
    NAMED_CALL = "named_call"
    """One call's arguments and its closing (a named function: its name is in the opening)."""
    JSON = "json"
    """One JSON value of a schema (``response_format``)."""


@dataclass(frozen=True)
class ReplyGrammar:
    """What a reply must match, before any tokenizer: the key of a compiled grammar.

    Attributes:
        kind: :class:`GrammarKind`.
        schemas: ``(name, schema as JSON)`` per function (``TOOL_CALLS``: the declared tools, in
            order; ``NAMED_CALL``: the one named); ``JSON``: one pair with an empty name.
    """

    kind: GrammarKind
    schemas: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        assert self.schemas, "a grammar needs a schema"
        assert self.kind is GrammarKind.TOOL_CALLS or len(self.schemas) == 1

    def lark(self, open_tag: str, close_tag: str) -> str:
        """The grammar in llguidance's Lark, with the tags written as ``open_tag`` / ``close_tag``
        (Lark terms: a quoted string, or ``<[id]>`` where the tag is one special token)."""
        if self.kind is GrammarKind.JSON:
            return f"start: %json {_styled(self.schemas[0][1])}\n"
        if self.kind is GrammarKind.NAMED_CALL:
            return f'start: %json {_styled(self.schemas[0][1])} "}}\\n" {close_tag}\n'
        rules = [f'start: call ("\\n" {open_tag} "\\n" call){{0,{MAX_CALLS - 1}}}',
                 "call: " + " | ".join(f"call_{i}" for i in range(len(self.schemas)))]
        for i, (name, params) in enumerate(self.schemas):
            whole = {"type": "object", "required": ["name", "arguments"], "additionalProperties": False,
                     "properties": {"name": {"const": name}, "arguments": _rebased(json.loads(params))},
                     "x-guidance": JSON_STYLE}
            rules.append(f'call_{i}: %json {json.dumps(whole)} "\\n" {close_tag}')
        return "\n".join(rules) + "\n"


def _styled(schema: str) -> str:
    """A schema's JSON with :data:`JSON_STYLE` as its llguidance options."""
    obj = json.loads(schema)
    return json.dumps({**obj, "x-guidance": JSON_STYLE} if isinstance(obj, dict) else obj)


def _rebased(node: Any) -> Any:
    """A tool's parameters schema with its ``$ref`` rewritten for where it sits in a call's schema
    (under ``properties/arguments``)."""
    if isinstance(node, list):
        return [_rebased(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _rebased(v) for k, v in node.items()}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        out["$ref"] = "#/properties/arguments" + ref[1:]
    return out


def _depth(value: Any, limit: int) -> int:
    """The nesting depth of ``value``, counted up to ``limit + 1`` at most."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if d > limit:
            return d
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((c, d + 1) for c in children if isinstance(c, dict | list))
    return deepest


def _pointer(root: Any, ref: str) -> Any:
    """The node ``ref`` (``#/a/b``) names inside ``root``; raises ``KeyError`` when none."""
    node = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            raise KeyError(ref)
    return node


def _ref_problem(root: Any) -> str | None:
    """Why ``root``'s ``$ref`` are refused (one outside the schema, one to nowhere, a cycle), or ``None``."""
    done: set[str] = set()

    def walk(node: Any, path: tuple[str, ...]) -> str | None:
        if isinstance(node, list):
            return next((p for p in (walk(v, path) for v in node) if p is not None), None)
        if not isinstance(node, dict):
            return None
        ref = node.get("$ref")
        if ref is not None:
            if not isinstance(ref, str) or not ref.startswith("#"):
                return f"$ref {str(ref)[:80]!r} points outside the schema (only '#...' references are supported)"
            if ref in path:
                return f"$ref {ref[:80]!r} is recursive (recursive schemas are not supported)"
            if ref not in done:
                try:
                    target = _pointer(root, ref)
                except KeyError:
                    return f"$ref {ref[:80]!r} points to nothing in the schema"
                problem = walk(target, (*path, ref))
                if problem is not None:
                    return problem
                done.add(ref)
        return next((p for p in (walk(v, path) for k, v in node.items() if k != "$ref") if p is not None), None)

    return walk(root, ())


def check_schema(schema: Any, where: str) -> str:
    """``schema`` (a JSON schema object) as compact JSON, checked: size, depth, references, and
    that llguidance can build a grammar of it.

    Raises:
        AKVError (field ``where``): not an object, too large or deep, a refused ``$ref``, or a
            schema llguidance rejects (its reason).
    """
    if not isinstance(schema, dict):
        raise AKVError(f"{where}: a JSON schema must be an object, got {type(schema).__name__}", field=where,
                       value=None)
    try:
        text = json.dumps(schema, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError, RecursionError) as err:
        raise AKVError(f"{where}: not a JSON schema ({err})"[:300], field=where, value=None) from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise AKVError(f"{where}: the schema has {len(text)} characters, over {MAX_SCHEMA_CHARS}", field=where,
                       value=None)
    if _depth(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise AKVError(f"{where}: the schema nests deeper than {MAX_SCHEMA_DEPTH}", field=where, value=None)
    problem = _ref_problem(schema)
    if problem is None:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(text, defaults=JSON_STYLE)  # type: ignore[arg-type]
        problem = llguidance.LLMatcher.validate_grammar(grammar, limits=_limits()) or None
    if problem is not None:
        raise AKVError(f"{where}: invalid JSON schema: {problem.splitlines()[0]}"[:300], field=where, value=None)
    return text


def _declared(tools: Any) -> list[tuple[str, Any]]:
    """``(name, parameters)`` of each function in an OpenAI ``tools`` list (no parameters: any object)."""
    out = []
    for tool in tools or ():
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            out.append((fn["name"], fn.get("parameters") or {"type": "object"}))
    return out


def _response_schema(response_format: Any) -> Any | None:
    """The schema ``response_format`` asks for (``None``: plain text).

    Raises:
        AKVError (field ``response_format``): not one of OpenAI's shapes.
    """
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if isinstance(spec, Mapping) and "schema" in spec:
            return spec["schema"]
        raise AKVError("response_format: json_schema needs {'json_schema': {'name': ..., 'schema': {...}}}",
                       field="response_format", value=None)
    raise AKVError(f"response_format: type must be 'text', 'json_object' or 'json_schema', got {kind!r}"[:300],
                   field="response_format", value=None)


def reply_grammar(tool_choice: Any, tools: Any, response_format: Any = None) -> ReplyGrammar | None:
    """The grammar a request's reply must match, or ``None`` (free text). ``tool_choice`` must
    already have passed ``engine.toolcalls.forced_opening`` (``"required"`` has tools; a named
    function is declared).

    Raises:
        AKVError: a schema refused by :func:`check_schema` (field: where it is), a malformed
            ``response_format``, or ``response_format`` JSON with a call required.
    """
    schema = _response_schema(response_format)
    forced = tool_choice == "required" or isinstance(tool_choice, Mapping)
    if schema is not None:
        if forced:
            raise AKVError("response_format: a JSON reply cannot also be a required tool call (tool_choice)",
                           field="response_format", value=None)
        return ReplyGrammar(GrammarKind.JSON, (("", check_schema(schema, "response_format")),))
    if not forced:
        return None
    declared = _declared(tools)
    if isinstance(tool_choice, Mapping):
        name = tool_choice["function"]["name"]
        declared = [(n, p) for n, p in declared if n == name][:1]
    schemas = tuple((name, check_schema(params, f"tools[{name}].function.parameters")) for name, params in declared)
    total = sum(len(s) for _, s in schemas)
    if total > MAX_SCHEMA_CHARS:
        raise AKVError(f"tools: the declared tools' schemas have {total} characters, over {MAX_SCHEMA_CHARS}",
                       field="tools", value=None)
    kind = GrammarKind.NAMED_CALL if isinstance(tool_choice, Mapping) else GrammarKind.TOOL_CALLS
    return ReplyGrammar(kind, schemas)


class GrammarMatcher:
    """One generation's place in its grammar (llguidance's ``LLMatcher``). Not thread-safe: the
    decoder's thread alone uses it once the generation starts.

    Args:
        matcher: a fresh matcher of the grammar.
        vocab_size: the model's logit count (ids past the tokenizer's are never allowed).
    """

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int):
        self._matcher = matcher
        self.vocab_size = vocab_size

    def allowed(self) -> torch.Tensor:
        """The tokens the grammar allows next: bool [vocab_size] (the stop tokens where it accepts)."""
        bits = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        return torch.from_numpy(np.unpackbits(bits, bitorder="little")[:self.vocab_size].astype(np.bool_))

    def consume(self, token: int) -> bool:
        """Advance by ``token``; ``False`` (and the matcher stays in error) when it was not allowed."""
        return bool(self._matcher.consume_token(token))

    @property
    def stopped(self) -> bool:
        """Whether nothing can follow (a stop token was taken, or the grammar ended in error)."""
        return bool(self._matcher.is_stopped())

    @property
    def error(self) -> str:
        """The matcher's error, or ``""``."""
        return str(self._matcher.get_error()) if self._matcher.is_error() else ""


_TOKENIZERS: dict[tuple[int, int, tuple[int, ...]], tuple[Any, llguidance.LLTokenizer]] = {}
_TOKENIZERS_LOCK = threading.Lock()


def _ll_tokenizer(tokenizer: Any, vocab_size: int, stop_ids: tuple[int, ...]) -> llguidance.LLTokenizer:
    """llguidance's view of a fast tokenizer (1 to 3 s for 150k to 260k tokens): one per process
    per tokenizer, vocabulary size and stops (engines over one tokenizer share it)."""
    key = (id(tokenizer), vocab_size, stop_ids)
    with _TOKENIZERS_LOCK:
        held = _TOKENIZERS.get(key)
        if held is None or held[0] is not tokenizer:
            lt = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=list(stop_ids))
            held = _TOKENIZERS[key] = (tokenizer, lt)
        return held[1]


class GrammarCompiler:
    """Compiles :class:`ReplyGrammar` for one tokenizer, with the last :data:`CACHE_SIZE` grammars
    kept. Safe on any thread (the server compiles on its pool threads while preparing).

    Args:
        tokenizer: a fast transformers tokenizer.
        vocab_size: the model's logit count.
        stop_ids: the tokens that end a reply (allowed where the grammar accepts).
    """

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: Collection[int]):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_ids = tuple(sorted(stop_ids))
        self._compiled: OrderedDict[ReplyGrammar, llguidance.LLMatcher] = OrderedDict()
        self._lock = threading.Lock()
        self.compiles = 0

    def _tag(self, lt: llguidance.LLTokenizer, text: str) -> str:
        """``text`` as a Lark term: ``<[id]>`` where the tokenizer makes it one special token
        (Qwen's ``<tool_call>``), else a quoted string."""
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return f"<[{ids[0]}]>" if len(ids) == 1 and lt.is_special_token(ids[0]) else json.dumps(text)

    def matcher(self, grammar: ReplyGrammar) -> GrammarMatcher:
        """A fresh :class:`GrammarMatcher` of ``grammar`` (compiled once, then copied).

        Raises:
            AKVError: the grammar is past llguidance's limits (its reason, field ``tools`` or
                ``response_format``).
        """
        with self._lock:
            base = self._compiled.get(grammar)
            if base is not None:
                self._compiled.move_to_end(grammar)
                return GrammarMatcher(base.deep_copy(), self.vocab_size)
        lt = _ll_tokenizer(self.tokenizer, self.vocab_size, self.stop_ids)
        lark = grammar.lark(self._tag(lt, "<tool_call>"), self._tag(lt, "</tool_call>"))
        base = llguidance.LLMatcher(lt, lark, log_level=0, limits=_limits())
        if base.is_error():
            where = "response_format" if grammar.kind is GrammarKind.JSON else "tools"
            raise AKVError(f"{where}: no grammar can be built: {base.get_error().splitlines()[0]}"[:300],
                           field=where, value=None)
        with self._lock:
            self.compiles += 1
            self._compiled[grammar] = base
            while len(self._compiled) > CACHE_SIZE:
                self._compiled.popitem(last=False)
        return GrammarMatcher(base.deep_copy(), self.vocab_size)
