"""``RemoteEngine``: the engine interface (``engine.interface.ChatEngine``) over HTTP.

    eng = RemoteEngine("http://10.0.0.5:30000", model="/models/Qwen3-30B-A3B", template="plain")
    Replay(eng, EvalConfig(scoring="generate"))          # evaluators use it unchanged

What is local and what goes over the wire:

- **local** (exact, no server involved): the tokenizer and :class:`engine.layout.Renderer`
  (``render``, ``layout``), the dry-run :class:`engine.cache.accounting.Accountant` (the cost model is
  computed from exact local accounting, as with the in-process engine), schedule and sampling
  validation (bad requests raise the same ``AKVError`` subclass and ``field`` as ``Engine``).
- **remote**: ``chat`` (``POST /v1/chat/completions`` with ``drop_message`` / ``reposition`` /
  ``drop_rule`` and usage ``prompt_tokens_details.{cached_tokens, drop_skipped_tokens,
  repos_tokens}``) and ``score`` (``POST /v1/akv/score``, an extension of ``akv serve``).

Servers (``akv_extensions``: ``None`` detects ours by ``/v1/models`` ``owned_by == "akv-rsi"``):

- ``akv serve``: everything, including the assistant-reply ``prefix`` field, exact generated
  token ids (``return_token_ids``) and scoring.
- AKV-patched SGLang: chat with schedules. No scoring endpoint: :meth:`score` raises
  :class:`ScoringUnsupportedError` (use ``eval.scoring: generate``). No ``prefix`` field: with
  ``prefix_mode="continue_final_message"`` the prefix is sent as a final assistant message to
  continue (the vLLM/SGLang convention; check that your build supports it), and with the default
  ``"field"`` a non-empty prefix is refused rather than silently ignored. Generated token ids are
  re-encoded from the text (``completion_tokens`` in usage stays the server's).
- stock SGLang: no cache engineering. A request with a non-empty schedule whose usage lacks
  ``drop_skipped_tokens`` raises :class:`RemoteError` (code ``schedule_ignored``): a server that
  ignores drops must never score a drop policy. It serves full-cache and text baselines only.

Not for: streaming to end users (``engine.remote.client.AKVClient``), or launching servers
(``rsi.cache.executors.launcher``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

import httpx
import torch

from engine.cache.accounting import Accountant
from engine.cache.plan import TokenUsage
from engine.engine import GiB
from engine.errors import AKVError, ModelLoadError, RemoteError, ScoringUnsupportedError
from engine.grammar import reply_grammar
from engine.interface import ChatOptions
from engine.layout import Layout, Rendered, Renderer
from engine.models.lean import KVGeometry
from engine.remote.wire import WireClient, parse_usage
from engine.results import ChatResult, EngineStats, ScoreResult, Timings
from engine.sampling import SamplingParams
from engine.schedule import Schedule
from engine.template import render_tool_calls
from engine.toolcalls import forced_opening, message_tools

log = logging.getLogger("akv.remote")
PREFIX_MODES = ("field", "continue_final_message")
UNBOUNDED = 1 << 50  # a dry-run pool at least this large never evicts (Replay uses 1 << 60)


class RemoteEngine:
    """An engine served elsewhere (see the module docstring).

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:30000`` (no ``/v1``).
        model: name or local path of the served model, for the local tokenizer and KV geometry
            (``tiny-random``, ``gemma-3-270m`` or a checkpoint directory readable here).
        template: chat template the server renders with (``engine.template``); token counts are
            exact only when it matches the server's.
        served_model: the ``model`` field of requests (default: ``model``).
        tokenizer, geometry: override what ``model`` would give (``geometry``: KV shape for pool
            budgets of the dry-run accountant).
        kv_dtype: dtype of the server's KV cache (for the geometry's bytes per token).
        pool_bytes, host_bytes: the server's pool budgets, used by :meth:`accountant`.
        timeout: seconds per HTTP request.
        akv_extensions: the server is ``akv serve`` (``None``: detect once).
        prefix_mode: ``field`` or ``continue_final_message`` (how a reply prefix is sent when the
            server has no ``prefix`` field).
        check_usage: ``warn`` / ``raise`` / ``off`` when the server's prompt count differs from the
            local render (a template mismatch: local costs would not describe what it served).
        name: display name (default: ``model``).
        api_key: sent as ``Authorization: Bearer`` (a server started with ``--api-key``).
    """

    def __init__(self, base_url: str, model: str, *, template: str = "gemma", served_model: str | None = None,
                 tokenizer: Any = None, geometry: KVGeometry | None = None, kv_dtype: torch.dtype = torch.float32,
                 pool_bytes: int = 2 * GiB, host_bytes: int = 0, timeout: float = 600.0,
                 akv_extensions: bool | None = None, prefix_mode: str = "field", check_usage: str = "warn",
                 name: str | None = None, http: httpx.Client | None = None, api_key: str | None = None):
        if prefix_mode not in PREFIX_MODES:
            raise ValueError(f"prefix_mode must be one of {', '.join(PREFIX_MODES)}, got {prefix_mode!r}")
        if check_usage not in ("warn", "raise", "off"):
            raise ValueError(f"check_usage must be warn, raise or off, got {check_usage!r}")
        from engine.models.loading import load_config, load_tokenizer

        self.model = model
        self.name = name or model
        self.served_model = served_model or model
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
        self.renderer = Renderer(self.tokenizer, template)
        self.geometry = geometry if geometry is not None else _geometry(model, kv_dtype, load_config)
        self.pool_bytes, self.host_bytes = pool_bytes, host_bytes
        self.prefix_mode = prefix_mode
        self.check_usage = check_usage
        self.stats = EngineStats()
        self.usage_mismatches = 0
        self.wire = WireClient(base_url, timeout, http, api_key=api_key)
        self._extensions = akv_extensions

    # ------------------------------------------------------------------ local, exact

    @property
    def base_url(self) -> str:
        return self.wire.base_url

    def render(self, messages: Sequence[Any]) -> Rendered:
        """Tokens of ``messages`` under the template, with per-message spans (local)."""
        return self.renderer.render(messages)

    def layout(self, messages: Sequence[Any], schedule: Mapping[str, Any] | Schedule | None = None) -> Layout:
        """Render and compile ``messages`` + ``schedule`` (local; validates the schedule)."""
        return self.renderer.layout(messages, schedule)

    def accountant(self, pool_bytes: int | None = None, host_bytes: int | None = None) -> Accountant:
        """A dry-run accountant with the local renderer and the server's KV geometry and budgets.

        Raises:
            AKVError: budgets are bounded but the KV geometry is unknown (the model's config could
                not be read here; pass ``geometry=``).
        """
        pool = self.pool_bytes if pool_bytes is None else pool_bytes
        host = self.host_bytes if host_bytes is None else host_bytes
        if self.geometry is None:
            if pool < UNBOUNDED or host:
                raise AKVError(f"the KV geometry of {self.model!r} is unknown (its config could not be read here), so "
                               "a bounded dry-run pool cannot be sized; pass geometry= to RemoteEngine or use an "
                               "unbounded pool (eval pool_bytes None)", field="geometry", value=None)
            return Accountant(self.renderer, 1, pool, 0)
        return Accountant(self.renderer, self.geometry.bytes_per_token, pool, host)

    @property
    def akv_extensions(self) -> bool:
        """Whether the server is ``akv serve`` (prefix field, token ids, scoring); detected once."""
        if self._extensions is None:
            models = self.wire.get("/v1/models")
            data = models.get("data") or [{}]
            self._extensions = any(isinstance(m, dict) and m.get("owned_by") == "akv-rsi" for m in data)
        return self._extensions

    def health(self) -> dict[str, Any]:
        """The server's ``/health`` answer (raises ``RemoteUnavailableError`` when it is down)."""
        return self.wire.get("/health")

    def close(self) -> None:
        self.wire.close()

    def __enter__(self) -> RemoteEngine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ over HTTP

    def chat(self, messages: Sequence[Any], schedule: Mapping[str, Any] | Schedule | None = None,
             **options: Unpack[ChatOptions]) -> ChatResult:
        """Generate the assistant's next message on the server (arguments as ``Engine.chat``).

        With ``on_text`` or ``cancelled`` the reply is streamed; a cancelled request hangs up
        (the server stops and frees its locks) and, its usage being unknown, reports the whole
        prompt as prefilled (an upper bound).

        Raises:
            AKVError subclasses as ``Engine.chat`` (validated locally, or mapped from the server's
            error code), ``RemoteError`` for answers outside the wire format,
            ``RemoteUnavailableError`` when the server cannot be reached.
        """
        params = SamplingParams.of(options)  # the same checks as Engine
        if options.get("salt") is not None:
            raise AKVError("a remote engine's cache namespace is its API key's tenant: salt cannot be set "
                           f"per request, got {options['salt']!r}", field="salt", value=options["salt"])
        prefix, on_text, cancelled = options.get("prefix", ""), options.get("on_text"), options.get("cancelled")
        layout = self.layout(messages, schedule)
        body = self._body(messages, layout.schedule, prefix)
        body.update({"max_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p})
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.ignore_eos:
            body["ignore_eos"] = True  # the name vLLM and SGLang use too
        if params.min_tokens:
            body["min_tokens"] = params.min_tokens  # vLLM's and SGLang's name
        tool_choice, response_format = options.get("tool_choice"), options.get("response_format")
        opening = forced_opening(tool_choice, message_tools(messages))  # refused here as in process
        reply_grammar(tool_choice, message_tools(messages), response_format)  # the same schema checks
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
        if response_format is not None:
            body["response_format"] = dict(response_format)
        t0 = time.perf_counter()
        if on_text is not None or cancelled is not None:
            streamed = self.wire.stream_chat(body, on_text, cancelled)
            text, reason, raw_usage, ttft = streamed.text, streamed.finish_reason, streamed.usage, streamed.ttft
            token_ids = self.tokenizer.encode(text, add_special_tokens=False)
            hung_up = reason == "cancelled" and raw_usage is None
        else:
            if self.akv_extensions:
                body["return_token_ids"] = True
            answer = self.wire.post("/v1/chat/completions", body)
            choice = (answer.get("choices") or [{}])[0]
            text = _reply_text(choice.get("message") or {}, self.renderer.template.tool_call_json)
            reason = str(choice.get("finish_reason") or "stop")
            ids = choice.get("token_ids")
            token_ids = [int(i) for i in ids] if isinstance(ids, list) else self.tokenizer.encode(
                text, add_special_tokens=False)
            raw_usage, ttft, hung_up = answer.get("usage"), None, False
        elapsed = time.perf_counter() - t0
        n_prompt = self._prompt_tokens(layout, prefix + opening)
        if hung_up:  # cancelled mid-stream: nothing is known about reuse
            usage = TokenUsage(n_prompt, n_prompt, 0, 0, 0, len(token_ids))
        else:
            usage = parse_usage(raw_usage, self.base_url, schedule_sent=not layout.schedule.is_empty)
            self._check_prompt(usage, n_prompt)
        timings = Timings(ttft, elapsed - ttft) if ttft is not None else Timings(elapsed, 0.0)
        self.stats.add(usage, timings)
        return ChatResult(text, token_ids, usage, reason, timings)

    def score(
        self,
        messages: Sequence[Any],
        candidates: Sequence[str],
        schedule: Mapping[str, Any] | Schedule | None = None,
        *,
        prefix: str = "",
    ) -> ScoreResult:
        """Log-likelihood of each candidate continuation, on the server (``POST /v1/akv/score``).

        Raises:
            ScoringUnsupportedError: the server has no scoring endpoint (SGLang-based servers).
            AKVError subclasses as ``Engine.score``.
        """
        if not self.akv_extensions:
            raise ScoringUnsupportedError(_no_scoring(self.base_url, "it is not an `akv serve` engine"),
                                          server=self.base_url, status=404, code="no_scoring")
        layout = self.layout(messages, schedule)
        body = self._body(messages, layout.schedule, "")
        body.update({"candidates": list(candidates), "prefix": prefix})
        t0 = time.perf_counter()
        answer = self.wire.post("/v1/akv/score", body, missing=lambda status: ScoringUnsupportedError(
            _no_scoring(self.base_url, f"POST /v1/akv/score answered HTTP {status}"), server=self.base_url,
            status=status, code="no_scoring"))
        usage = parse_usage(answer.get("usage"), self.base_url, schedule_sent=not layout.schedule.is_empty)
        self._check_prompt(usage, self._prompt_tokens(layout, prefix))
        self.stats.add(usage, Timings(time.perf_counter() - t0, 0.0))
        try:
            return ScoreResult(list(candidates), [float(x) for x in answer["logprobs"]],
                               [int(n) for n in answer["n_tokens"]], usage)
        except (KeyError, TypeError, ValueError) as err:
            raise RemoteError(f"{self.base_url}: malformed score answer ({err!r})", server=self.base_url,
                              code="bad_answer") from err

    # ------------------------------------------------------------------ internals

    def _body(self, messages: Sequence[Any], schedule: Schedule, prefix: str) -> dict[str, Any]:
        msgs = [dict(m) for m in messages]
        tools = msgs[0].pop("tools", None) if msgs else None  # message 0's tool specs are the request's tools
        body: dict[str, Any] = {"model": self.served_model, "messages": msgs, **schedule.to_wire()}
        if tools:
            body["tools"] = tools
        if prefix:
            if self.akv_extensions:
                body["prefix"] = prefix
            elif self.prefix_mode == "continue_final_message":
                msgs.append({"role": "assistant", "content": prefix})
                body.update({"continue_final_message": True, "add_generation_prompt": False})
            else:
                raise RemoteError(
                    f"{self.base_url} has no assistant-reply `prefix` field (not `akv serve`); construct the "
                    "RemoteEngine with prefix_mode='continue_final_message' if the server supports it, or use "
                    "a probe format without a lead-in", server=self.base_url, status=400, code="no_prefix",
                    field="prefix", value=prefix)
        return body

    def _prompt_tokens(self, layout: Layout, prefix: str) -> int:
        return len(layout.rendered.token_ids) + (len(self.renderer.encode_text(prefix)) if prefix else 0)

    def _check_prompt(self, usage: TokenUsage, local: int) -> None:
        if usage.prompt_tokens == local or self.check_usage == "off":
            return
        self.usage_mismatches += 1
        msg = (f"{self.base_url} counted {usage.prompt_tokens} prompt tokens where the local renderer counts "
               f"{local}: the server's chat template or tokenizer differs from template "
               f"{self.renderer.template.name!r}, so local cost accounting does not describe what it served")
        if self.check_usage == "raise":
            raise RemoteError(msg, server=self.base_url, code="usage_mismatch", field="usage.prompt_tokens",
                              value=usage.prompt_tokens)
        if self.usage_mismatches == 1:
            log.warning("%s (reported once)", msg)


def _reply_text(message: Mapping[str, Any], style: str) -> str:
    """The reply as the model's text: its content, and the OpenAI ``tool_calls`` a server parsed
    out of it written back as ``<tool_call>`` blocks (so a caller parses every server's reply alike)."""
    content = str(message.get("content") or "")
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls or not all(isinstance(c, Mapping) for c in calls):
        return content
    return content + render_tool_calls(calls, leading_newline=bool(content), style=style)


def _geometry(model: str, kv_dtype: torch.dtype, load_config: Callable[[str], Any]) -> KVGeometry | None:
    """The KV geometry from the model's config, or ``None`` when the config cannot be parsed here
    (e.g. a model type this transformers version does not know)."""
    try:
        return KVGeometry.from_config(load_config(model), kv_dtype)
    except ModelLoadError:
        raise
    except (ValueError, OSError, KeyError, AttributeError, TypeError) as err:
        log.warning("KV geometry of %r unknown (%s); bounded dry-run pools are refused", model, err)
        return None


def _no_scoring(url: str, why: str) -> str:
    return (f"the server at {url} cannot score candidates by log-likelihood ({why}); SGLang-based servers lack "
            "the AKV extension POST /v1/akv/score. Set `eval.scoring: generate` (with `eval.generate: true`) "
            "to score probes by greedy answers instead")
