"""The sandbox: hostile programs are contained at run time with the right flags and reasons.

Static refusals are in test_checker.py; here programs pass the checker (or, for the defense-in-depth
tests, skip it on purpose) and misbehave while running.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from search_spaces import Episode, Policy, ProgramFailure, SandboxLimits, Status, run_program
from search_spaces.sandbox import SandboxSession, run_child
from search_spaces.sandbox.process import _collect
from tests.search_spaces.test_survival import request as survival_request
from tests.search_spaces.test_survival import session as survival_session
from tests.search_spaces.trajectories import build

LIMITS = SandboxLimits(cpu_seconds=1, wall_seconds=10, memory_mb=256, max_output_bytes=200_000)
MSGS = build(["call"] * 4, [True])  # A2 T3 A4 T5 A6 T7 A8 T9
EPISODE = Episode.of(MSGS, [20] * len(MSGS))  # requests of 2, 4, 6, 8 and 10 messages
SURVIVAL_REQUEST = survival_request(survival_session("s1")).wire()

ROLL = '''
def decide(request, params):
    plan = request.plan()
    tools = request.tool_responses()
    for j in range(params["keep"], len(tools)):
        plan.drop(tools[j], [tools[j - params["keep"]]])
    return plan


def space(trial):
    return {"keep": trial.suggest_int("keep", 1, 4)}
'''


def prog(body: str) -> str:
    return f"def decide(request, params):\n{body}\n\n\ndef space(trial):\n    return {{}}\n"


def run(body: str, limits: SandboxLimits = LIMITS, episodes=(EPISODE,)):
    return run_program(prog(body), {}, list(episodes), limits)


def test_good_program_runs_and_is_validated():
    r = run_program(ROLL, {"keep": 1}, [EPISODE, EPISODE], LIMITS)
    assert r.ok and not r.timed_out and not r.error and r.reason == "ok"
    assert [d.n_messages for d in r.decisions[0]] == [2, 4, 6, 8, 10]
    assert r.decisions[0][-1].wire == {"drop_message": {"5": [3], "7": [5], "9": [7]}, "reposition": []}
    assert r.record()["status"] == "ok" and len(r.sha256) == 64


def test_refused_program_never_runs():
    r = run("    import os\n    return {}")
    assert r.status is Status.REFUSED and r.error and not r.timed_out and "import of 'os'" in r.reason


def test_infinite_loop_hits_the_cpu_limit():
    r = run("    while True:\n        pass")
    assert r.timed_out and not r.ok and not r.error
    assert r.reason == "CPU time limit of 1 s exceeded"


def test_wall_clock_limit_kills_the_group():
    start = time.monotonic()
    r = run("    while True:\n        pass", SandboxLimits(cpu_seconds=30, wall_seconds=0.8))
    assert r.timed_out and "wall-clock limit of 0.8 s" in r.reason
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("body", ["    x = [0] * (10 ** 9)\n    return x", "    x = 'a' * (10 ** 10)\n    return x"])
def test_memory_bomb_hits_the_memory_limit(body):
    r = run(body)
    assert r.status is Status.MEMORY and r.error and "memory limit of 256 MB" in r.reason


def test_huge_output_is_cut():
    r = run("    return {'drop_message': {}, 'reposition': [], 'junk': 'x' * 1000000}")
    assert r.status is Status.OUTPUT_LIMIT and "200000 bytes" in r.reason


def test_parent_caps_a_child_that_floods_stdout():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdout.write('x' * 10_000_000)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    out, _, ended = _collect(proc, time.monotonic() + 10, 100_000)
    assert ended == "output" and len(out) < 1_000_000


def test_recursion_bomb_is_an_error():
    r = run_program("def f(n):\n    return f(n + 1)\n\n\ndef decide(request, params):\n    return f(0)\n\n\n"
                    "def space(trial):\n    return {}\n", {}, [EPISODE], LIMITS)
    assert r.status is Status.ERROR and "RecursionError" in r.reason


def test_exception_reports_type_line_and_request():
    r = run("    x = 1\n    return x / 0")
    assert r.status is Status.ERROR
    assert "ZeroDivisionError (line 3): division by zero [episode 0, request of 2 messages]" in r.reason


@pytest.mark.parametrize(("body", "status", "reason"), [
    ("    return {'drop_message': {str(request.n - 2): [request.n - 1]}}", Status.INVALID, "after its trigger"),
    ("    return {'drop_message': {'1': [0], '3': [0]}} if request.n > 3 else request.plan()", Status.INVALID,
     "dropped twice"),
    ("    return {'drop_message': {str(request.n): [0]}}", Status.INVALID, "out of range"),
    ("    return {'drop_message': {str(request.n - 1): [1]}}", Status.INVALID, "rewrites the past"),
    ("    return {'reposition': [3, 1]} if request.n > 3 else request.plan()", Status.INVALID, "strictly increasing"),
    ("    return [1, 2]", Status.ERROR, "decide returned list"),
    ("    return {'drop_message': {1, 2}}", Status.ERROR, "not JSON"),
])
def test_bad_decisions_are_recorded_failures(body, status, reason):
    r = run(body)
    assert r.status is status and r.error and reason in r.reason, r.reason
    assert "\n" not in r.reason


def test_previous_is_passed_and_cannot_be_corrupted():
    body = ("    prev = request.previous\n"
            "    plan = request.plan()\n"
            "    if prev is not None:\n"
            "        prev['drop_message'] = {'0': [0]}\n"
            "        for t, ids in request.previous['drop_message'].items():\n"
            "            plan.drop(int(t), ids)\n"
            "    plan.drop(request.n - 1, [request.n - 1])\n"
            "    return plan")
    r = run(body)
    assert r.ok, r.reason
    assert r.decisions[0][-1].wire["drop_message"] == {"1": [1], "3": [3], "5": [5], "7": [7], "9": [9]}


def _unchecked_job(source: str) -> dict:
    return {"mode": "decide", "source": source, "params": {},
            "episodes": [{"messages": MSGS[:2], "tokens": [1, 1], "cuts": [2], "relevance": None, "previous": None}]}


def _unchecked(source: str) -> tuple[Status, str]:
    """Run ``source`` in the child without the static check (defense in depth)."""
    out = run_child(_unchecked_job(source), LIMITS)
    return out.status, out.reason


@pytest.mark.parametrize(("source", "reason"), [
    ("import os\ndef decide(r, p):\n    return {}\n", "import of 'os' is not allowed"),
    ("import socket\ndef decide(r, p):\n    return {}\n", "import of 'socket' is not allowed"),
    ("def decide(r, p):\n    return open('/etc/hostname').read()\n", "NameError"),
    ("def decide(r, p):\n    return eval('1')\n", "NameError"),
    ("def decide(r, p):\n    return getattr(r, 'n')\n", "NameError"),
    ("class A:\n    pass\n", "NameError"),
    ("def decide(r, p):\n    return [c for c in ().__class__.__bases__[0].__subclasses__() if c.__name__ == "
     "'_wrap_close'][0].__init__.__globals__['system']('echo pwned')\n", "sandbox: os.system is not allowed"),
    ("def decide(r, p):\n    g = (i for i in [1])\n    return g.gi_frame.f_globals\n",
     "sandbox: object.__getattr__ is not allowed"),
    ("def decide(r, p):\n    return [c for c in ().__class__.__bases__[0].__subclasses__() if c.__name__ == "
     "'_wrap_close'][0].__init__.__globals__['__builtins__']['open']('/etc/hostname').read()\n",
     "sandbox: open is not allowed"),
    ("def decide(r, p):\n    return decide.__globals__['__builtins__']['__import__']('os')\n",
     "import of 'os' is not allowed"),
])
def test_runtime_walls_hold_without_the_checker(source, reason):
    status, why = _unchecked(source)
    assert status is Status.ERROR and reason in why, why


def test_program_policy_raises_program_failure_with_the_record():
    p = Policy.from_program(prog("    while True:\n        pass"), {}, limits=LIMITS)
    with pytest.raises(ProgramFailure) as err:
        p.run_episodes([EPISODE])
    assert err.value.result.timed_out
    with pytest.raises(ProgramFailure, match="refused"):
        Policy.from_program(prog("    import os"), {})


# ---------------------------------------------------------------- program code run after decide returns
# A program's objects run program code in their methods: the child used to evaluate them (format an
# exception, check and serialise a returned value) with the guard off, so the code below read
# /etc/passwd into the reason and created the canary directory. Classes are built with `type` found
# by a `__class__` walk, since the checker (skipped here) would refuse any of this.
HOSTILE = '''
def evil(*args):
    g = [c for c in ().__class__.__bases__[0].__subclasses__() if c.__name__ == '_wrap_close'][0].__init__.__globals__
    g['mkdir']({canary!r})
    g['close'](0)
    fd = g['open']('/etc/passwd', g['O_RDONLY'])
    return g['read'](fd, 200).decode()


def make():
    T = ().__class__.__class__
    prop = [c for c in ().__class__.__bases__[0].__subclasses__() if c.__name__ == 'property'][0]
    kind = {kind!r}
    if kind == 'exc_str':
        raise T('E', (Exception,), {{'__str__': evil}})()
    if kind == 'exc_name':
        meta = T('M', (T,), {{'__name__': prop(evil)}})
        raise meta('E', (Exception,), {{}})()
    if kind == 'class_prop':
        return T('O', (), {{'__class__': prop(evil)}})()
    if kind == 'repr':
        return T('O', (), {{'__repr__': evil, '__str__': evil}})()
    if kind == 'dict_items':
        d = T('D', (dict,), {{'items': evil, 'keys': evil, '__iter__': evil, '__len__': evil}})()
        d['drop_message'] = {{}}
        return d
    if kind == 'list_iter':
        return T('L', (list,), {{'__iter__': evil, '__len__': evil}})([1])
    if kind == 'key_hash':
        return {{T('K', (str,), {{'__hash__': evil, '__eq__': evil, '__str__': evil}})('k'): 1}}
    if kind == 'value_float':
        return {{'x': T('F', (float,), {{'__float__': evil, '__repr__': evil}})(1.0)}}
    raise ValueError(kind)


def decide(r, p):
    return make()


def space(trial):
    return make()
'''
KINDS = ["exc_str", "exc_name", "class_prop", "repr", "dict_items", "list_iter", "key_hash", "value_float"]


def _touched(canary, reason: str) -> list[str]:
    return [what for what, bad in (("canary created", canary.exists()), ("/etc/passwd read", "root:" in reason))
            if bad]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["decide", "space", "survival"])
def test_program_objects_evaluated_by_the_child_stay_inside_the_guard(tmp_path, mode, kind):
    canary = tmp_path / "canary"
    job = {"mode": mode, "source": HOSTILE.format(canary=str(canary), kind=kind), "params": {}}
    if mode == "decide":
        job["episodes"] = _unchecked_job("")["episodes"]
    elif mode == "survival":
        job["requests"] = [SURVIVAL_REQUEST]
    out = run_child(job, LIMITS, answer=(lambda spec: 1) if mode == "space" else None)
    assert not _touched(canary, out.reason), (out.status, out.reason)
    assert out.status is not Status.OK or kind in ("value_float", "key_hash"), out.reason


@pytest.mark.parametrize("kind", KINDS)
def test_serve_mode_answers_stay_inside_the_guard(tmp_path, kind):
    canary = tmp_path / "canary"
    job = {"source": HOSTILE.format(canary=str(canary), kind=kind), "params": {}}
    with SandboxSession(job, LIMITS) as s:
        out = s.ask({"request": SURVIVAL_REQUEST})
    assert not _touched(canary, out.reason), (out.status, out.reason)


def test_plain_exceptions_still_name_type_line_and_text():
    r = run("    raise ValueError('bad ' + str(request.n))")
    assert r.status is Status.ERROR
    assert r.reason == "decide: ValueError (line 2): bad 2 [episode 0, request of 2 messages]"


def test_a_raised_exit_is_a_recorded_error_not_a_crash():
    status, why = _unchecked("def decide(r, p):\n    base = [c for c in ().__class__.__bases__[0].__subclasses__() "
                             "if c.__name__ == 'BaseException'][0]\n"
                             "    raise [c for c in base.__subclasses__() if c.__name__ == 'SystemExit'][0](3)\n")
    assert status is Status.ERROR and "decide: SystemExit (line 3): 3" in why, why


@pytest.mark.parametrize(("source", "reason"), [
    ("X = [0] * (10 ** 9)\n" + prog("    return request.plan()"), "loading the program: out of memory"),
    (prog("    x = [0] * (10 ** 9)\n    return x"), "decide: out of memory [episode 0, request of 2 messages]"),
    (prog("    x = [0] * (10 ** 9) if request.n > 4 else 1\n    return request.plan()"),
     "decide: out of memory [episode 0, request of 6 messages]"),
])
def test_memory_failures_name_the_phase_and_request(source, reason):
    r = run_program(source, {}, [EPISODE], LIMITS)
    assert r.status is Status.MEMORY and "memory limit of 256 MB exceeded" in r.reason and reason in r.reason, r.reason


# A program past the checker can reach this child's module globals (through any of its functions'
# __globals__) and rebind them: the child must not run code of its own unguarded after the program
# ran, nor let the guard's lists be emptied.
HIJACK = '''
def decide(r, p):
    subs = ().__class__.__bases__[0].__subclasses__()
    os_g = [c for c in subs if c.__name__ == '_wrap_close'][0].__init__.__globals__
    mine = [c for c in subs if c.__name__ == 'Trial'][0].suggest_int.__globals__
    ns = [c for c in subs if c.__name__ == 'SimpleNamespace'][0]
    prop = [c for c in subs if c.__name__ == 'property'][0]

    def evil(*args, **kwargs):
        os_g['mkdir']({canary!r})
        return real(*args, **kwargs)

    how = {how!r}
    real = mine['json'].dumps
    if how == 'json':
        mine['json'] = ns(dumps=evil, loads=mine['json'].loads)
    elif how == 'lists':
        mine['_BLOCKED_EVENTS'] = frozenset()
        mine['_BLOCKED_PREFIXES'] = ('nothing',)
        os_g['mkdir']({canary!r})
    elif how == 'exc_info':
        T = ().__class__.__class__
        fake = T('TB', (), {{'tb_frame': prop(evil), 'tb_next': None, 'tb_lineno': 1}})()
        mine['sys'] = ns(exc_info=lambda: (None, None, fake), stdout=mine['sys'].stdout, modules={{}})
        mine['type'] = lambda x: T(x)
        raise ValueError('x')
    elif how == 'class':  # a hook that is a method could be replaced on its class
        for c in subs:
            if c.__name__ == 'Guard':
                c.__call__ = lambda self, event, args: None
        os_g['mkdir']({canary!r})
    return {{"drop_message": {{}}, "reposition": []}}
'''


@pytest.mark.parametrize("how", ["json", "lists", "exc_info", "class"])
def test_rebinding_the_childs_globals_does_not_lift_the_guard(tmp_path, how):
    canary = tmp_path / "canary"
    out = run_child(_unchecked_job(HIJACK.format(canary=str(canary), how=how)), LIMITS)
    assert not canary.exists(), (out.status, out.reason)
    assert out.status is not Status.OK


# ---------------------------------------------------------------- one process serving many calls
# A search asks one program for thousands of trials; its sandbox process is kept (search_spaces.cache.program
# .SESSIONS) and each call runs the module code afresh. These check that a kept process behaves as a
# fresh one would: no state between calls, limits per call, the guard through every call.
@pytest.fixture
def pool(monkeypatch):
    import search_spaces.cache.program as program
    from search_spaces.sandbox import SessionPool

    fresh = SessionPool(size=2, max_calls=8)
    monkeypatch.setattr(program, "SESSIONS", fresh)
    yield fresh
    fresh.close()


def _pids(pool) -> list[int]:
    return [s.proc.pid for s in pool._sessions.values()]


def test_a_kept_process_carries_no_state_from_one_call_to_the_next(pool):
    # five requests per call: a sixth entry in SEEN could only come from an earlier call
    source = "SEEN = []\n" + prog("    SEEN.append(1)\n    plan = request.plan()\n    if len(SEEN) > 5:\n"
                                  "        plan.drop(request.n - 1, [request.n - 1])\n    return plan")
    first = run_program(source, {}, [EPISODE], LIMITS)
    pids = _pids(pool)
    second = run_program(source, {}, [EPISODE], LIMITS)
    assert first.ok and second.ok, (first.reason, second.reason)
    assert [d.wire for d in first.decisions[0]] == [d.wire for d in second.decisions[0]]
    assert _pids(pool) == pids and len(pids) == 1  # the same process answered both


def test_cpu_limit_is_per_call_not_per_process(pool):
    # about 0.4 s of CPU per call under a 1 s limit: five calls use 2 s in one process and all pass
    burn = prog("    x = 0\n    if request.n == 2:\n        for i in range(4_000_000):\n            x += i\n"
                "    return request.plan()")
    results = [run_program(burn, {}, [EPISODE], LIMITS) for _ in range(5)]
    assert all(r.ok for r in results), [r.reason for r in results]
    assert len(_pids(pool)) == 1
    spin = run_program(prog("    while True:\n        pass"), {}, [EPISODE], LIMITS)
    assert spin.timed_out and spin.reason == "CPU time limit of 1 s exceeded"


def test_an_error_keeps_the_process_a_timeout_replaces_it(pool):
    source = prog("    if params['x'] == 1:\n        raise ValueError('one')\n"
                  "    while params['x'] == 2:\n        pass\n    return request.plan()").replace(
        "def decide", "DEFAULTS = {'x': 0}\n\n\ndef decide")
    assert run_program(source, {"x": 0}, [EPISODE], LIMITS).ok
    pids = _pids(pool)
    bad = run_program(source, {"x": 1}, [EPISODE], LIMITS)
    assert bad.status is Status.ERROR and "ValueError (line" in bad.reason and _pids(pool) == pids
    assert run_program(source, {"x": 2}, [EPISODE], LIMITS).timed_out
    again = run_program(source, {"x": 0}, [EPISODE], LIMITS)
    assert again.ok and _pids(pool) != pids


def test_processes_are_replaced_after_max_calls_and_least_recent_first(pool):
    a, b, c = (prog(f"    return request.plan()  # {k}") for k in "abc")
    for _ in range(8):
        run_program(a, {}, [EPISODE], LIMITS)
    first = _pids(pool)
    assert run_program(a, {}, [EPISODE], LIMITS).ok and _pids(pool) != first  # the ninth call: a new process
    run_program(b, {}, [EPISODE], LIMITS)
    run_program(c, {}, [EPISODE], LIMITS)
    assert len(pool._sessions) == 2  # a's process was the least recently used: closed


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["decide", "stream", "space"])
def test_program_mode_answers_stay_inside_the_guard(tmp_path, mode, kind):
    canary = tmp_path / "canary"
    job = _unchecked_job("")
    parts: list[bytes] = []
    with SandboxSession({"mode": "program", "source": HOSTILE.format(canary=str(canary), kind=kind)}, LIMITS) as s:
        for _ in range(2):
            out = s.ask({"mode": "space" if mode == "space" else "decide", "params": {}, "episodes": job["episodes"],
                         "stream": mode == "stream"},
                        (lambda spec: 1) if mode == "space" else None, keep_on_error=True, partial=parts.append)
            assert not _touched(canary, out.reason), (out.status, out.reason)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("how", ["json", "lists", "exc_info", "class"])
def test_a_kept_process_stays_guarded_after_its_globals_were_rebound(tmp_path, how, stream):
    canary = tmp_path / "canary"
    job = _unchecked_job("")
    with SandboxSession({"mode": "program", "source": HIJACK.format(canary=str(canary), how=how)}, LIMITS) as s:
        answers = [s.ask({"mode": "decide", "params": {}, "episodes": job["episodes"], "stream": stream},
                         keep_on_error=True, partial=lambda line: None) for _ in range(3)]
    assert not canary.exists(), [(a.status, a.reason) for a in answers]
    assert all(a.status is not Status.OK for a in answers[:1])


def test_each_episode_is_handed_over_as_soon_as_it_is_decided(pool):
    """run_program streams: on_episode gets episode e's validated decisions before the sandbox has
    finished (here: while the program still sleeps in a busy loop on the last episode), in order,
    equal to the final result's."""
    source = prog("    x = 0\n    if request.n == 10 and request.tokens[0] == 21:\n"
                  "        for i in range(3_000_000):\n            x += i\n"
                  "    plan = request.plan()\n    if request.n > 2:\n        plan.drop(2, [1])\n    return plan")
    last = Episode.of(MSGS, [21] + [20] * (len(MSGS) - 1))
    seen: list[tuple[int, float]] = []
    got: list[tuple] = []

    def on_episode(e, decisions):
        seen.append((e, time.perf_counter()))
        got.append(decisions)

    assert run_program(source, {}, [EPISODE, EPISODE, last], LIMITS).ok  # the processes start (not timed)
    start = time.perf_counter()
    r = run_program(source, {}, [EPISODE, EPISODE, last], LIMITS, on_episode)
    end = time.perf_counter()
    assert r.ok, r.reason
    assert [e for e, _ in seen] == [0, 1, 2] and tuple(got) == r.decisions
    assert seen[1][1] - start < (end - start) / 2  # the first two arrived long before the busy last one ended


def test_a_later_failure_fails_the_run_and_a_callback_error_is_raised_after_it(pool):
    """Episodes handed over before a failure do not make the run a success; an exception of the
    callback is raised once the sandbox has answered, and the kept process still serves."""
    failing = prog("    if request.tokens[0] == 21:\n        raise ValueError('late')\n    return request.plan()")
    last = Episode.of(MSGS, [21] + [20] * (len(MSGS) - 1))
    seen: list[int] = []
    r = run_program(failing, {}, [EPISODE, EPISODE, last], LIMITS, lambda e, d: seen.append(e))
    assert r.status is Status.ERROR and "ValueError" in r.reason and seen == [0, 1]

    def boom(e, decisions):
        raise RuntimeError(f"callback {e}")

    with pytest.raises(RuntimeError, match="callback 0"):
        run_program(ROLL, {"keep": 1}, [EPISODE, EPISODE], LIMITS, boom)
    assert run_program(ROLL, {"keep": 1}, [EPISODE, EPISODE], LIMITS).ok  # the process answered in full


def test_a_proxy_evaluation_fails_every_task_when_a_late_episode_fails(pool):
    """ProxyReplay accounts tasks while the program decides the next: a failure on the last task
    must still fail every task (a policy that cannot run has no score anywhere)."""
    from evals.cache.evaluator import EvalConfig, PolicySpec
    from evals.cache.fidelity import DryEngine, EvidenceTable, ProxyReplay
    from evals.tasks import load_suite
    from tests.conftest import get_engine

    tasks = load_suite("smoke", "train")[:3]
    engine = get_engine("tiny-random")
    proxy = ProxyReplay(DryEngine(engine.renderer, 1), EvidenceTable({}), EvalConfig(generate=False))
    last = tasks[-1].id
    source = prog(f"    if request.n > 3 and request.messages[1].content == {tasks[-1].messages[1]['content']!r}:\n"
                  "        raise ValueError('the last task')\n    return request.plan()")
    results = proxy.evaluate_many(PolicySpec("program", {}, source=source), tasks)
    assert [r.ok for r in results] == [False] * 3 and all("the last task" in (r.error or "") for r in results), last


def test_an_unchanged_decision_is_the_one_full_validation_gives():
    from search_spaces.cache.decision import cache_decision

    source = prog("    plan = request.plan()\n    if request.n > 3:\n        plan.drop(3, [1])\n    return plan")
    r = run_program(source, {}, [EPISODE], LIMITS)
    assert r.ok, r.reason
    previous, prev_n, prev_schedule = None, 0, None
    for n, d in zip(EPISODE.cuts, r.decisions[0]):  # requests of 4..10 repeat the decision made at 4
        full = cache_decision(d.wire, EPISODE.request(n, previous, prev_n), prev_schedule)
        assert (d.n_messages, d.schedule, d.kind) == (full.n_messages, full.schedule, full.kind)
        previous, prev_n, prev_schedule = d.wire, n, d.schedule
    assert [d.n_messages for d in r.decisions[0]] == [2, 4, 6, 8, 10]
    assert r.decisions[0][-1].wire == {"drop_message": {"3": [1]}, "reposition": []}


def test_episodes_are_split_across_processes_without_changing_a_decision(pool, monkeypatch):
    """Two processes decide a call's episodes at once (even and odd): the decisions equal one
    process's, in order, and each process keeps the per-call CPU limit; a failure in either fails
    the call."""
    import search_spaces.cache.program as program

    episodes = [Episode.of(MSGS, [20 + k] * len(MSGS)) for k in range(5)]
    source = ROLL.replace('params["keep"]', "keep").replace(
        "    tools = request.tool_responses()\n",
        "    tools = request.tool_responses()\n    keep = params['keep'] + (request.tokens[0] - 20) % 2\n")
    split = run_program(source, {"keep": 1}, episodes, LIMITS)
    assert split.ok, split.reason
    assert len(pool._sessions) == 2
    monkeypatch.setattr(program, "SHARDS", 1)
    whole = run_program(source, {"keep": 1}, episodes, LIMITS)
    assert whole.ok and whole.decisions == split.decisions
    monkeypatch.setattr(program, "SHARDS", 2)
    burn = prog("    x = 0\n    if request.tokens[0] == 24 and request.n == 10:\n        while True:\n"
                "            x += 1\n    return request.plan()")
    late = run_program(burn, {}, episodes, LIMITS)
    assert late.timed_out and late.reason == "CPU time limit of 1 s exceeded"
    for k in (21, 22):  # an episode of the second process, then of the first
        failing = prog(f"    if request.tokens[0] == {k}:\n        raise ValueError('episode {k - 20}')\n"
                       "    return request.plan()")
        r = run_program(failing, {}, episodes, LIMITS)
        assert r.status is Status.ERROR and f"episode {k - 20}" in r.reason


def test_an_answer_that_arrives_past_the_calls_cpu_time_is_a_timeout():
    """The CPU time of a call is read while its answer is awaited, and once more when it arrives:
    an answer made with more CPU than the call's share (here about 0.2 s against 0.05 s, answered
    before the host's first look) is a timeout, as it would be had the host looked in time."""
    burn = prog("    x = 0\n    for i in range(3_000_000):\n        x += i\n    return request.plan()")
    job = _unchecked_job("")
    with SandboxSession({"mode": "program", "source": burn}, LIMITS, call_cpu_seconds=0.05) as s:
        out = s.ask({"mode": "decide", "params": {}, "episodes": job["episodes"]})
    assert out.status is Status.TIMEOUT and out.reason == "CPU time limit of 0.05 s exceeded"


def test_an_interrupted_call_leaves_no_half_read_answer_behind(pool):
    """A callback that does not return (an interrupt) while the other process's answer is unread:
    those processes are ended, so the next call cannot read the old answer as its own."""
    episodes = [Episode.of(MSGS, [20 + k] * len(MSGS)) for k in range(4)]
    seen: list[int] = []

    def interrupt(e, decisions):
        seen.append(e)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_program(ROLL, {"keep": 1}, episodes, LIMITS, interrupt)
    again = run_program(ROLL, {"keep": 2}, episodes, LIMITS)
    assert seen == [0] and again.ok, again.reason
    assert again.decisions[0][-1].wire["drop_message"] == {"7": [3], "9": [5]}  # keep=2, not the old keep=1
