"""A pydantic-ai agent, written as pydantic-ai's docs write one, playing the paged-report live suite
against any OpenAI-compatible endpoint: pointed at ``akv serve --policy NAME=SPEC`` with the model
``MODEL@NAME``, it runs under that served policy with no other change (docs/export.md, "Serve it").

The agent has the suite's tools (``read_page``: ``evals.cache.live.Pages``, the tool ``akv live``
runs, so a page reads the same and can be read once) and answers through its output tool
``submit_answer``; pydantic-ai then asks with ``tool_choice: "required"``, as ``akv live`` does. Its
HTTP client (an ``httpx2.AsyncClient``, which pydantic-ai's OpenAI provider takes) records every
exchange. Per episode it writes what ``akv live`` writes (``evals.cache.live.LiveResult``: the
answer judged by the same exact and contains match, the cost priced by ``evals.cache.cost`` from the
usage the server returned) plus the dropped tokens each request's ``usage.prompt_tokens_details``
reported, so ``python -m bench.framework_agent`` sets it beside an ``akv live`` run.

``check`` sends each recorded request again to the plain model with the schedule computed here
(``rsi.cache.serving.served_policies``: the server's own ``ReplayPolicy`` for the same ``NAME=SPEC``,
with token counts from the served model's tokenizer and template) and says how many replies are equal.

    pip install -e '.[example]'
    OPENAI_API_KEY=... python examples/framework_agent.py play --base-url http://127.0.0.1:30001/v1 \\
        --model qwen2.5-coder-1.5b@keep12 --tasks examples/live-pages-end.jsonl --limit 8 \\
        --out runs/framework-qwen-end-keep12
    python examples/framework_agent.py check runs/framework-qwen-end-keep12 \\
        --base-url http://127.0.0.1:30001/v1 --model qwen2.5-coder-1.5b \\
        --policy keep12=rolling_drop:keep_tool_responses=12

The key comes from ``OPENAI_API_KEY`` (any value for a server without ``--api-key``), never argv.
``--warm-pages N`` starts each episode after the task's first N recorded page reads, handed to the
agent as its message history: a model that cannot call tools (tiny-random, in the test) still
carries tool results the policy can drop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
from pydantic_ai import (
    Agent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    RunContext,
    ToolCallPart,
    ToolOutput,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.exceptions import AgentRunError
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits

from engine import Renderer
from engine.remote.wire import parse_usage
from engine.served_policy import PolicyFailure
from engine.template import attach_tools
from evals.cache.cost import task_cost
from evals.cache.live import LiveResult, Pages, summary
from evals.cache.scoring import contains_match, exact_match
from evals.rates import load_rates
from evals.tasks.paged import PAGES_SYSTEM
from evals.tasks.schema import Task

FRAMEWORK = "pydantic-ai-slim 2.68.0"


@dataclass
class Report:
    """What one episode's tools work on (the agent's ``deps``): the task's pages and its system prompt."""

    pages: Pages
    system: str


def submit_answer(answer: str) -> str:
    """Submit the final answer (once), as short as possible."""
    return answer


agent = Agent(deps_type=Report, output_type=ToolOutput(submit_answer, name="submit_answer"))


@agent.instructions
def system_prompt(ctx: RunContext[Report]) -> str:
    return ctx.deps.system


@agent.tool
def read_page(ctx: RunContext[Report], cursor: int) -> str:
    """One page of the report and the next cursor."""
    return ctx.deps.pages.read_page({"cursor": cursor})


@dataclass
class Recorder:
    """Every exchange of the agent's HTTP client: request body, status, response body (JSON)."""

    exchanges: list[dict[str, Any]] = field(default_factory=list)

    async def on_response(self, response: httpx2.Response) -> None:
        await response.aread()
        try:
            reply = response.json()
        except ValueError:
            reply = {"text": response.text[:2000]}
        self.exchanges.append({"request": json.loads(response.request.content), "status": response.status_code,
                               "response": reply})

    def client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(event_hooks={"response": [self.on_response]}, timeout=600)


@dataclass(frozen=True)
class PlayConfig:
    """Knobs of the agent (the ``akv live`` ones of the same name, and the same defaults as its docs
    use for the paged suite: ``--max-steps 18 --max-tokens 48``); replies are greedy, as there."""

    max_steps: int = 18
    max_tokens: int = 48
    rates: str = "gpt-oss-120b"
    warm_pages: int = 0


def warm_history(task: Task, pages: Pages, n: int) -> list[ModelMessage]:
    """The user's ask and the task's first ``n`` recorded ``read_page`` calls with their pages (read
    through ``pages``, so they count as read), as pydantic-ai messages."""
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(_ask(task))])]
    calls = [c for m in task.messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    for call in calls[:n]:
        args = json.loads(call["function"]["arguments"])
        history.append(ModelResponse(parts=[ToolCallPart("read_page", args, tool_call_id=call["id"])]))
        history.append(ModelRequest(parts=[ToolReturnPart("read_page", pages.read_page(args),
                                                          tool_call_id=call["id"])]))
    return history


def _ask(task: Task) -> str:
    return next(str(m["content"]) for m in task.messages if m.get("role") == "user")


async def play_episode(model: OpenAIChatModel, recorder: Recorder, label: str, task: Task,
                       config: PlayConfig) -> LiveResult:
    """One episode of ``task`` (its first probe), judged and priced as ``akv live`` judges and prices."""
    probe = task.probes[0]
    pages = Pages(task)
    system = next((str(m["content"]) for m in task.messages if m.get("role") == "system"), PAGES_SYSTEM)
    history = warm_history(task, pages, config.warm_pages) if config.warm_pages else None
    first = len(recorder.exchanges)
    t0 = time.perf_counter()
    answer, error = None, None
    try:
        result = await agent.run(None if history else _ask(task), message_history=history, model=model,
                                 deps=Report(pages, system), retries=config.max_steps,
                                 model_settings=ModelSettings(temperature=0.0, max_tokens=config.max_tokens),
                                 usage_limits=UsageLimits(request_limit=config.max_steps))
        answer = result.output
    except AgentRunError as err:  # the request limit, a model that never calls a tool, an HTTP error: recorded
        error = f"{type(err).__name__}: {err}"[:300]
    exchanges = recorder.exchanges[first:]
    for x in exchanges:
        x["episode"] = task.id
    usages = [parse_usage(x["response"].get("usage"), model.base_url, schedule_sent=False)  # as akv live reads it
              for x in exchanges if x["status"] == 200]
    calls = [c["function"]["name"] for x in exchanges if x["status"] == 200
             for c in x["response"]["choices"][0]["message"].get("tool_calls") or []]
    total = Counter[str]()
    for u in usages:
        total.update(u.as_dict())
    return LiveResult(
        task_id=task.id, family=task.family, probe=0, policy=label, question=probe.question, gold=probe.answer,
        answer=answer, exact=answer is not None and exact_match(answer, probe.answer),
        contains=answer is not None and contains_match(answer, probe.answer),
        submitted="submit_answer" in calls, steps=len(usages), tool_calls=calls,
        invalid_calls=sum(not x["response"]["choices"][0]["message"].get("tool_calls") for x in exchanges
                          if x["status"] == 200),  # replies without a call: pydantic-ai asks again
        usage=dict(total), cost_cents=task_cost(usages, load_rates(config.rates)).cents,
        seconds=time.perf_counter() - t0, error=error)


async def play(base_url: str, api_key: str, model_name: str, tasks: Sequence[Task], out: Path,
               config: PlayConfig = PlayConfig()) -> dict[str, Any]:
    """Every task once; writes ``out/live.json`` (as ``akv live`` does) and ``out/requests.jsonl``."""
    recorder = Recorder()
    label = f"pydantic-ai {model_name}"
    async with recorder.client() as http:
        model = OpenAIChatModel(model_name, provider=OpenAIProvider(base_url=base_url, api_key=api_key,
                                                                    http_client=http))
        rows = [await play_episode(model, recorder, label, t, config) for t in tasks]
    dropped = {t.id: [_dropped(x) for x in recorder.exchanges if x.get("episode") == t.id and x["status"] == 200]
               for t in tasks}  # one count per answered request, as the episode's steps
    episodes = [{**r.to_row(), "dropped_tokens": dropped[r.task_id]} for r in rows]
    data = {"summary": summary(rows), "config": asdict(config), "policy": label, "endpoint": base_url,
            "framework": FRAMEWORK, "episodes": episodes}
    out.mkdir(parents=True, exist_ok=True)
    (out / "live.json").write_text(json.dumps(data, indent=1))
    (out / "requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recorder.exchanges))
    return data


def _dropped(exchange: dict[str, Any]) -> int:
    usage = exchange["response"].get("usage") or {}
    return int((usage.get("prompt_tokens_details") or {}).get("drop_skipped_tokens") or 0)


@dataclass(frozen=True)
class CheckReport:
    """The resend check of a play: requests resent, replies equal (message, finish reason, prompt
    length), usages equal (every count), and the first differences."""

    policy: str
    model: str
    requests: int
    equal: int
    usage_equal: int
    differences: list[dict[str, Any]]

    @property
    def different(self) -> int:
        return self.requests - self.equal


def check(run: Path, base_url: str, api_key: str, model: str, policy: str, template: str | None = None,
          tokenizer: str | None = None) -> CheckReport:
    """Each recorded request of ``run``, in order, sent again to the plain ``model`` with the
    schedule of ``policy`` (``NAME=SPEC``, as ``akv serve --policy`` takes it) computed here, and
    compared with the reply it got; writes ``run/check.json``.

    Replies compare as message, finish reason and prompt length. Usages (how much of the prompt was
    cached, computed, dropped) depend on what the server's cache held as well: they are equal too
    when ``base_url`` is a fresh server that has served nothing else, as the played one was.
    """
    from engine.models.catalog import default_template
    from rsi.cache.serving import served_policies

    served = served_policies([policy])[0]
    renderer = Renderer.for_model(tokenizer or model, template or default_template(tokenizer or model, "gemma"))
    lines = (run / "requests.jsonl").read_text().splitlines()
    recorded = [x for x in map(json.loads, lines) if x["status"] == 200]
    differences, usage_equal = [], 0
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=600) as http:
        for i, x in enumerate(recorded):
            body = x["request"]
            messages = attach_tools(body["messages"], body.get("tools"))  # as the server reads the request
            try:
                schedule = served.schedule(messages, renderer.render(messages).message_tokens)
            except PolicyFailure as err:  # the server served the fallback (usage.akv_policy says so)
                schedule = err.fallback or {}
            r = http.post("/chat/completions", json={**body, "model": model, **schedule})
            r.raise_for_status()
            resent = r.json()
            usage_equal += _usage(resent) == _usage(x["response"])
            if _reply(resent) != _reply(x["response"]):
                differences.append({"request": i, "episode": x.get("episode"), "served": _reply(x["response"]),
                                    "resent": _reply(resent)})
    report = CheckReport(policy, model, len(recorded), len(recorded) - len(differences), usage_equal,
                         differences[:5])
    (run / "check.json").write_text(json.dumps({**asdict(report), "different": report.different}, indent=1))
    return report


def _reply(response: dict[str, Any]) -> dict[str, Any]:
    return {"message": response["choices"][0]["message"], "finish_reason": response["choices"][0]["finish_reason"],
            "prompt_tokens": response["usage"]["prompt_tokens"]}


def _usage(response: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in response["usage"].items() if k != "akv_policy"}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="examples/framework_agent.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    pl = sub.add_parser("play", help="play the tasks; writes OUT/live.json and OUT/requests.jsonl")
    pl.add_argument("--base-url", required=True, help="the endpoint with /v1, e.g. http://127.0.0.1:30001/v1")
    pl.add_argument("--model", required=True, help="the request's model, e.g. qwen2.5-coder-1.5b@keep12")
    pl.add_argument("--tasks", default="examples/live-pages-end.jsonl", help="a paged task file or suite")
    pl.add_argument("--split", default="heldout")
    pl.add_argument("--limit", type=int, default=8, help="at most N tasks (akv live's selection)")
    pl.add_argument("--max-steps", type=int, default=PlayConfig.max_steps)
    pl.add_argument("--max-tokens", type=int, default=PlayConfig.max_tokens)
    pl.add_argument("--rates", default=PlayConfig.rates)
    pl.add_argument("--warm-pages", type=int, default=0, help="start after the task's first N recorded reads")
    pl.add_argument("--out", required=True, type=Path)
    ck = sub.add_parser("check", help="resend a play's requests to the plain model with the client-side schedule")
    ck.add_argument("run", type=Path, help="a play's --out")
    ck.add_argument("--base-url", required=True)
    ck.add_argument("--model", required=True, help="the plain served model, e.g. qwen2.5-coder-1.5b")
    ck.add_argument("--policy", required=True, help="NAME=SPEC, as given to akv serve --policy")
    ck.add_argument("--tokenizer", default=None, help="the served model's tokenizer (default --model)")
    ck.add_argument("--template", default=None, help="the server's chat template (default the model's own)")
    args = p.parse_args(argv)
    api_key = os.environ.get("OPENAI_API_KEY", "unused")
    if args.command == "check":
        c = check(args.run, args.base_url, api_key, args.model, args.policy, args.template, args.tokenizer)
        print(f"resent {c.requests} requests to {c.model} with {c.policy} computed here: {c.equal} replies equal, "
              f"{c.different} different; {c.usage_equal} usages equal ({args.run / 'check.json'})")
        return 1 if c.different else 0
    from evals.cache.cli import select_suite

    config = PlayConfig(args.max_steps, args.max_tokens, args.rates, args.warm_pages)
    data = asyncio.run(play(args.base_url, api_key, args.model, select_suite(args.tasks, args.split, args.limit),
                            args.out, config))
    s = data["summary"]
    print(f"{data['policy']}: {s['episodes']} episodes, pass {s['pass_rate']:.3f}, cost {s['cost_cents_mean']:.4f} "
          f"c/episode, {s['steps_mean']:.1f} requests, tools {s['tool_calls']}, dropped tokens (last request) "
          f"{[e['dropped_tokens'][-1:] for e in data['episodes']]}, errors {s['errors']} ({args.out / 'live.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
