"""The sandbox child: runs one policy program on a batch of episodes, inside resource limits.

Started by ``process.py`` as ``python -I -S -B child.py`` (isolated: no site-packages, no
environment, no current directory on the path) with an empty environment, its JSON job as the
first line of stdin.
Standard library only; it loads ``rules.py`` and ``program_api.py`` by file path. Before the
program is compiled it sets RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE=0 (no file writes), RLIMIT_NOFILE
(no new files or sockets), RLIMIT_NPROC=0 and RLIMIT_CORE=0, removes ``socket`` from importable
modules, and gives the program only the allowed builtins (no ``open``/``eval``/``exec``/
``getattr``/``__build_class__``) and an ``__import__`` that hands out proxies of the allowed modules.
From the moment the program's module code runs until the process ends, an audit hook (PEP 578)
refuses file, process, network, import, compile, gc and frame-access events, so even an escape
the static check missed meets a ``PermissionError``. This covers program code run indirectly too
(a ``__str__`` of a raised exception, an ``__iter__`` or ``__class__`` of a returned object, a
rebound global of this module), since every failure reason and every answer is built and written
with the hook on; the hook has no off switch. The host only ever reads JSON from here.

It answers one JSON object on stdout: ``{"status": "ok", ...}`` or ``{"status": "error" |
"memory" | "output_limit", "reason": ...}``. In ``space`` mode it first asks for each parameter
in turn (a line ``{"ask": spec}`` on stdout, answered by ``{"value": v}`` on stdin), so the host
draws exactly the parameters that ``space(trial)`` reaches, in order, from a real Optuna trial.
Survival programs (``survival/api.py``) run in ``survival`` mode (a batch of requests, one answer)
or in ``serve`` mode: after ``{"status": "ok", "ready": true}`` it answers each request line
``{"request": ...}`` with one line of decisions until ``{"stop": true}`` or end of input, so a
simulation can ask thousands of times without starting thousands of processes.
It is not imported by the search process.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import resource
import sys
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"akv_sandbox_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _limit(kind: int, value: int) -> None:
    try:
        resource.setrlimit(kind, (value, value))
    except (ValueError, OSError):  # pragma: no cover - lowering a limit only fails if it is already lower
        resource.setrlimit(kind, (value, resource.getrlimit(kind)[1]))


def _confine(limits: dict[str, int]) -> None:
    cpu = int(limits["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    _limit(resource.RLIMIT_AS, int(limits["memory_bytes"]))
    _limit(resource.RLIMIT_FSIZE, 0)
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_NOFILE, 3)
    _limit(resource.RLIMIT_NPROC, 0)
    for name in ("socket", "_socket", "ssl", "_ssl", "subprocess", "_posixsubprocess", "ctypes", "_ctypes"):
        sys.modules[name] = None  # type: ignore[assignment]


_BLOCKED_EVENTS = frozenset({
    "open", "import", "compile", "exec", "builtins.input", "builtins.breakpoint", "code.__new__",
    "function.__new__", "object.__getattr__", "object.__setattr__", "object.__delattr__", "marshal.loads",
    "marshal.load", "pickle.find_class", "urllib.Request", "webbrowser.open", "cpython.run_command",
})
_BLOCKED_PREFIXES = ("os.", "subprocess.", "socket.", "shutil.", "ctypes.", "sys.", "_posixsubprocess",
                     "glob.", "tempfile.", "resource.", "signal.", "fcntl.", "mmap.", "syslog.", "time.",
                     "sqlite3.", "ftplib.", "http.", "smtplib.", "telnetlib.", "imaplib.", "nntplib.", "poplib.",
                     "gc.", "winreg.", "msvcrt.")


def _guard(allowed_code: Any, _events: frozenset[str] = _BLOCKED_EVENTS,
           _prefixes: tuple[str, ...] = _BLOCKED_PREFIXES, _error: type[Exception] = PermissionError) -> Any:
    """The audit hook that refuses dangerous events, installed just before the program's module code
    runs and never lifted (audit hooks cannot be removed). It holds no switch a program could turn
    off, and every global of this module can be rebound by a program that escapes the static check,
    so what it needs is bound here, before any program ran (and changing defaults is audited).
    ``allowed_code`` is the program's own module code, whose ``exec`` event is let through."""

    def guard(event: str, args: tuple[Any, ...]) -> None:
        if event == "exec" and args and args[0] is allowed_code:
            return
        if event in _events or event.startswith(_prefixes):
            raise _error(f"sandbox: {event} is not allowed")

    return guard


class Trial:
    """What ``space(trial)`` sees: each ``suggest_*`` is asked of the host, which answers from its
    real Optuna trial (see the module docstring)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def _ask(self, spec: dict[str, Any]) -> Any:
        if not isinstance(spec["name"], str) or spec["name"] in self.names:
            raise ValueError(f"parameter names must be distinct strings, got {spec['name']!r}")
        self.names.add(spec["name"])
        sys.stdout.write(json.dumps({"ask": spec}) + "\n")
        sys.stdout.flush()
        reply = json.loads(sys.stdin.readline() or "{}")
        if "value" not in reply:
            raise ValueError(f"no value for parameter {spec['name']!r}: {reply.get('error', 'the host stopped')}")
        return reply["value"]

    def suggest_int(self, name: str, low: int, high: int, step: int = 1, log: bool = False) -> Any:
        if not (isinstance(low, int) and isinstance(high, int) and low <= high):
            raise ValueError(f"suggest_int({name!r}): need integers low <= high")
        return self._ask({"name": name, "kind": "int", "low": low, "high": high, "step": step, "log": bool(log)})

    def suggest_float(self, name: str, low: float, high: float, step: float | None = None, log: bool = False) -> Any:
        if not (isinstance(low, int | float) and isinstance(high, int | float) and low <= high):
            raise ValueError(f"suggest_float({name!r}): need numbers low <= high")
        spec = {"name": name, "kind": "float", "low": float(low), "high": float(high), "step": step, "log": bool(log)}
        return self._ask(spec)

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        choices = list(choices)
        if not choices or not all(c is None or isinstance(c, bool | int | float | str) for c in choices):
            raise ValueError(f"suggest_categorical({name!r}): choices must be a non-empty list of scalars")
        return self._ask({"name": name, "kind": "categorical", "choices": choices})


class Stage:
    """Where the child is (``phase`` and, inside ``decide``, ``where``), so that every failure,
    out-of-memory included, names the place it happened."""

    def __init__(self) -> None:
        self.phase = "loading the program"
        self.where = ""

    def reason(self, detail: str) -> str:
        return f"{self.phase}: {detail}" + (f" {self.where}" if self.where else "")


def _text(obj: Any, limit: int = 2000) -> str:
    """``str(obj)`` if it is a plain ``str`` (cut to ``limit``), else a placeholder. Called with the
    guard on: it may run a program's ``__str__``."""
    try:
        value = str(obj)
    except BaseException:  # noqa: BLE001 - a hostile __str__ may raise anything; its text is simply unknown
        return "<unprintable>"
    return value[:limit] if type(value) is str else "<unprintable>"


def _type_name(obj: Any) -> str:
    """The name of ``obj``'s type, read with the guard on (a metaclass may override ``__name__``)."""
    try:
        return _text(type(obj).__name__, 100)
    except BaseException:  # noqa: BLE001 - as in _text
        return "<unprintable>"


def _program_line(tb: Any) -> str:
    """`` (line N)`` of the innermost program frame of traceback ``tb``. Reading frames in Python is
    an audited event (refused: a frame leads to every object of the process), so the traceback is
    printed by the interpreter's C code into a buffer and the program's lines are read from that."""
    buffer = io.StringIO()
    saved, sys.stderr = sys.stderr, buffer
    try:
        sys.__excepthook__(Exception, Exception(), tb)
    except BaseException:  # noqa: BLE001 - no line number is better than no answer
        return ""
    finally:
        sys.stderr = saved
    lines = re.findall(r'^  File "<program>", line (\d+)', buffer.getvalue(), re.M)
    return f" (line {lines[-1]})" if lines else ""


def _failure(err: BaseException, stage: Stage) -> dict[str, Any]:
    """The record of ``err`` (raised by program code, or by our code on a program's object), built
    with the guard on; call it inside the ``except`` clause (it reads ``sys.exc_info``)."""
    if isinstance(err, MemoryError):
        return {"status": "memory", "reason": stage.reason("out of memory")}
    line = _program_line(sys.exc_info()[2])
    name = _type_name(err)
    return {"status": "error", "reason": stage.reason(f"{name}{line}: {_text(err)}")}


def _namespace(rules: Any) -> dict[str, Any]:
    """A fresh global namespace for the program: the allowed builtins and an ``__import__`` that
    hands out new proxies of the allowed modules (nothing a program sets there outlives it)."""
    proxies = {name: types.SimpleNamespace(**{n: getattr(__import__(name), n) for n in sorted(allowed)})
               for name, allowed in rules.ALLOWED_MODULES.items()}

    def restricted_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                          level: int = 0) -> Any:
        if level or name not in proxies:
            raise ImportError(f"import of {name!r} is not allowed")
        return proxies[name]

    return {"__builtins__": {**rules.builtin_objects(), "__import__": restricted_import},
            "__name__": "policy_program"}


def _run(job: dict[str, Any], api: Any, rules: Any, stage: Stage,
         survival: Any = None) -> dict[str, Any] | None:
    namespace = _namespace(rules)
    _confine(job["limits"])
    try:
        code = compile(job["source"], "<program>", "exec")
    except MemoryError:
        return {"status": "memory", "reason": stage.reason("out of memory")}
    except (SyntaxError, ValueError, RecursionError) as err:
        return {"status": "error", "reason": stage.reason(f"{type(err).__name__}: {err}")}
    # From here to the end of the process the guard is on: program code may run not only in its
    # functions but in any method of an object it returns or raises (``__str__``, ``__eq__``,
    # ``__iter__``, a ``__class__`` property...), which this code touches to build the answer.
    sys.addaudithook(_guard(code))
    if job["mode"] == "program":
        _ready()
        _serve_program(job, code, api, rules, stage)
        return None
    try:
        exec(code, namespace)
        return _call(job, namespace, api, stage, survival)
    except BaseException as err:  # noqa: BLE001 - any failure of the program is its record, sent to the host
        return _failure(err, stage)


def _call(job: dict[str, Any], namespace: dict[str, Any], api: Any, stage: Stage,
          survival: Any = None) -> dict[str, Any] | None:
    """Run the job's mode on the loaded program (guarded; the caller records what it raises)."""
    mode = job["mode"]
    if mode == "space":
        stage.phase = "space(trial)"
        return _plain_params(namespace["space"](Trial()))
    stage.phase = "decide"
    if mode == "survival":
        return _survive_all(job, namespace["decide"], survival, stage)
    if mode == "serve":
        _ready()
        _serve(job, namespace["decide"], survival, stage)
        return None
    return _decide_all(job, namespace["decide"], api, stage)


def _ready() -> None:
    sys.stdout.write(json.dumps({"status": "ok", "ready": True}) + "\n")
    sys.stdout.flush()


def _serve_program(job: dict[str, Any], code: Any, api: Any, rules: Any, stage: Stage) -> None:
    """Answer each request line (``{"mode": "space"}`` or ``{"mode": "decide", "params", "episodes"}``)
    as a fresh process would: every call runs the module code in a new namespace, so no state of
    one call reaches the next. What is kept between calls is the host's data only: the
    trajectories it sent with a key (:func:`_hold`), read-only to programs (they cannot assign
    attributes or reach names starting with ``_``), so a later call sees them as they were sent.
    Guarded, like everything after the compile."""

    held: dict[str, Any] = {}  # trajectory key -> the Trajectory built from what the host sent with it

    def answer(msg: dict[str, Any]) -> dict[str, Any] | None:
        if msg.get("mode") not in ("space", "decide"):
            return None
        stage.phase, stage.where = "loading the program", ""
        built = _hold(msg, held, api) if msg.get("mode") == "decide" else None
        if isinstance(built, dict):
            return built
        try:
            namespace = _namespace(rules)
            exec(code, namespace)
            return _call({**msg, "limits": job["limits"], "built": built}, namespace, api, stage)
        except MemoryError:
            return {"status": "memory", "reason": stage.reason("out of memory")}
        except BaseException as err:  # noqa: BLE001 - as in _run
            return _failure(err, stage)

    _serve_lines(int(job["limits"]["max_output_bytes"]), answer)


def _hold(msg: dict[str, Any], held: dict[str, Any], api: Any) -> list[Any] | dict[str, Any]:
    """The trajectories of a ``decide`` request's episodes, kept between calls: an episode with a
    ``trajectory`` key and its ``messages`` and ``tokens`` is built and kept under that key; one with
    the key alone is given the trajectory kept under it (``{"forget": true}`` drops every kept one
    first). Episodes without a key are built by the call itself (``None``). Done before any program
    code of the call runs; the host keeps the same account of what this process holds, so a key it
    does not hold is the host's mistake: a ``crashed`` answer, which ends the process."""
    try:
        if msg.get("forget") is True:
            held.clear()
        out: list[Any] = []
        for ep in msg["episodes"]:
            key = ep.get("trajectory")
            if key is not None and "messages" in ep:
                held[key] = api.Trajectory(ep["messages"], ep["tokens"])
            out.append(held[key] if key is not None else None)
        return out
    except MemoryError:
        return {"status": "memory", "reason": "out of memory while keeping the episodes"}
    except (KeyError, TypeError, ValueError) as err:
        return {"status": "crashed", "reason": f"the host sent episodes this process cannot keep or does not hold: "
                                               f"{type(err).__name__}: {_text(err, 200)}"}


def _serve_lines(cap: int, answer: Any) -> None:
    """The serving modes' loop: one answer line (``answer(request)``, capped at ``cap`` bytes) per
    request line, until ``{"stop": true}``, end of input, a request ``answer`` refuses (``None``)
    or an answer that ran out of memory."""
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        msg = json.loads(line)
        if not isinstance(msg, dict) or msg.get("stop"):
            return
        reply = answer(msg)
        if reply is None:
            return
        text = _encode(reply)
        if len(text) > cap:
            text = json.dumps({"status": "output_limit", "reason": f"the answer exceeds {cap} bytes"})
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        if reply.get("status") == "memory":
            return


def _plain_params(params: Any) -> dict[str, Any]:
    """``space``'s answer as plain JSON data (guarded: a dict subclass's methods are program code)."""
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        return {"status": "error", "reason": "space(trial) must return a dict with string keys"}
    return {"status": "ok", "params": json.loads(json.dumps(params))}


def _wire_text(raw: Any, api: Any) -> tuple[str | None, str]:
    """(JSON text of the decision, "") or (None, why it is not one). Guarded."""
    wire = raw.wire() if isinstance(raw, api.Plan) else raw
    if not isinstance(wire, dict):
        return None, f"decide returned {_type_name(raw)}; return request.plan() or a dict"
    try:
        return json.dumps(wire), ""
    except (TypeError, ValueError) as err:
        return None, f"decide returned a value that is not JSON: {_text(err)}"


def _decide_all(job: dict[str, Any], decide: Any, api: Any, stage: Stage) -> dict[str, Any]:
    """Every request's decision, kept as the JSON text it is sent as (the reply embeds the texts).
    With ``job["stream"]`` each episode's decisions go out as a line ``{"partial": e, "decisions":
    [...]}`` as soon as they are made (the host checks and uses them while the next episode is
    decided), and the answer gives only their number. ``job["built"]``: per episode, the trajectory
    kept for it between calls (:func:`_hold`), or ``None`` to build it from the episode's messages."""
    stream = job.get("stream") is True
    out: list[list[str]] = []
    size, cap = 0, int(job["limits"]["max_output_bytes"])
    kept = job.get("built") or [None] * len(job["episodes"])
    for e, (ep, built) in enumerate(zip(job["episodes"], kept)):
        decisions: list[str] = []
        previous = ep.get("previous")
        text: str | None = json.dumps(previous) if previous is not None else None
        if built is None:
            built = api.Trajectory(ep["messages"], ep["tokens"])
        last = 0  # messages of the previous request (unknown, 0, for a previous decision given with the episode)
        for n in ep["cuts"]:
            stage.where = f"[episode {e}, request of {n} messages]"
            rel = ep["relevance"][:n] if ep["relevance"] is not None else None
            view = api.RequestView(built.messages[:n], built.tokens[:n], None, None, rel, built=built,
                                   previous_json=text, previous_n=last)
            last = n
            text, why = _wire_text(decide(view, dict(job["params"])), api)
            if text is None:
                return {"status": "error", "reason": f"{why} {stage.where}"}
            size += len(text)
            if size > cap:
                return {"status": "output_limit", "reason": f"decisions exceed {cap} bytes of output"}
            decisions.append(text)
        out.append(decisions)
        if stream:
            sys.stdout.write(_encode({"partial": e, "decisions": Raw("[" + ",".join(decisions) + "]")}) + "\n")
            sys.stdout.flush()
    stage.where = ""
    if stream:
        return {"status": "ok", "episodes": len(out)}
    return {"status": "ok", "episodes": Raw("[" + ",".join("[" + ",".join(d) + "]" for d in out) + "]")}


class Raw(str):
    """JSON text to embed as it is in an answer (the decisions, already encoded one by one)."""


def _encode(answer: dict[str, Any]) -> str:
    """``answer`` as one JSON line, a :class:`Raw` value embedded as the text it holds."""
    if not any(isinstance(v, Raw) for v in answer.values()):
        return json.dumps(answer)
    return "{" + ", ".join(f"{json.dumps(k)}: {v if isinstance(v, Raw) else json.dumps(v)}"
                           for k, v in answer.items()) + "}"


def _survive_one(request: Any, params: dict[str, Any], decide: Any, survival: Any,
                 stage: Stage) -> dict[str, Any]:
    """Run ``decide`` on one survival request (guarded); the answer maps session ids to decision dicts."""
    view = survival.SurvivalView(request)
    try:
        raw = decide(view, dict(params))
        if isinstance(raw, list | tuple):
            raw = {s.session: d for s, d in zip(view.sessions, raw)}
        if not isinstance(raw, dict):
            return {"status": "error", "reason": f"decide returned {_type_name(raw)}; "
                                                 f"return a dict of session id to decision {stage.where}"}
        try:
            return {"status": "ok", "decisions": json.loads(json.dumps(raw))}
        except (TypeError, ValueError) as err:
            return {"status": "error", "reason": f"decide returned a value that is not JSON: "
                                                 f"{_text(err)} {stage.where}"}
    except MemoryError:
        raise
    except BaseException as err:  # noqa: BLE001 - any failure of the program is its record
        return _failure(err, stage)


def _survive_all(job: dict[str, Any], decide: Any, survival: Any, stage: Stage) -> dict[str, Any]:
    out: list[Any] = []
    size, cap = 0, int(job["limits"]["max_output_bytes"])
    for r, request in enumerate(job["requests"]):
        stage.where = f"[request {r}]"
        answer = _survive_one(request, job["params"], decide, survival, stage)
        if answer["status"] != "ok":
            return answer
        size += len(json.dumps(answer["decisions"]))
        if size > cap:
            return {"status": "output_limit", "reason": f"decisions exceed {cap} bytes of output"}
        out.append(answer["decisions"])
    stage.where = ""
    return {"status": "ok", "decisions": out}


def _serve(job: dict[str, Any], decide: Any, survival: Any, stage: Stage) -> None:
    calls = [0]

    def answer(msg: dict[str, Any]) -> dict[str, Any]:
        calls[0] += 1
        stage.where = f"[call {calls[0]}]"
        try:
            return _survive_one(msg["request"], job["params"], decide, survival, stage)
        except MemoryError:
            return {"status": "memory", "reason": stage.reason("out of memory")}

    _serve_lines(int(job["limits"]["max_output_bytes"]), answer)


def main() -> None:
    job = json.loads(sys.stdin.buffer.readline())
    rules, api = _load("rules", HERE / "rules.py"), _load("program_api", HERE.parent / "cache" / "program_api.py")
    survival = (_load("survival_api", HERE.parent / "survival" / "api.py") if job.get("mode") in ("survival", "serve")
                else None)
    stage = Stage()
    try:
        result = _run(job, api, rules, stage, survival)
        if result is None:
            return
        text = _encode(result)  # still guarded: a program may have rebound this module's globals
    except MemoryError:
        text = json.dumps({"status": "memory", "reason": stage.reason("out of memory")})
    if len(text) > int(job["limits"]["max_output_bytes"]):
        text = json.dumps({"status": "output_limit", "reason": "the answer exceeds the output limit"})
    sys.stdout.write(text)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
