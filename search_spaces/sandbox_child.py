"""The sandbox child: runs one policy program on a batch of episodes, inside resource limits.

Started by ``sandbox.py`` as ``python -I -S -B sandbox_child.py`` (isolated: no site-packages, no
environment, no current directory on the path) with an empty environment, its JSON job as the
first line of stdin.
Standard library only; it loads ``rules.py`` and ``program_api.py`` by file path. Before the
program is compiled it sets RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE=0 (no file writes), RLIMIT_NOFILE
(no new files or sockets), RLIMIT_NPROC=0 and RLIMIT_CORE=0, removes ``socket`` from importable
modules, and gives the program only the allowed builtins (no ``open``/``eval``/``exec``/
``getattr``/``__build_class__``) and an ``__import__`` that hands out proxies of the allowed modules.
While program code runs, an audit hook (PEP 578) refuses file, process, network, import, compile
and frame-access events, so even an escape the static check missed meets a ``PermissionError``.

It answers one JSON object on stdout: ``{"status": "ok", ...}`` or ``{"status": "error" |
"memory" | "output_limit", "reason": ...}``. In ``space`` mode it first asks for each parameter
in turn (a line ``{"ask": spec}`` on stdout, answered by ``{"value": v}`` on stdin), so the host
draws exactly the parameters that ``space(trial)`` reaches, in order, from a real Optuna trial.
Survival programs (``survival_api.py``) run in ``survival`` mode (a batch of requests, one answer)
or in ``serve`` mode: after ``{"status": "ok", "ready": true}`` it answers each request line
``{"request": ...}`` with one line of decisions until ``{"stop": true}`` or end of input, so a
simulation can ask thousands of times without starting thousands of processes.
It is not imported by the search process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import resource
import sys
import traceback
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"akv_sandbox_{name}", HERE / f"{name}.py")
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
                     "sqlite3.", "ftplib.", "http.", "smtplib.", "telnetlib.", "imaplib.", "nntplib.", "poplib.")


class Guard:
    """An audit hook that refuses dangerous events while ``armed`` (program code is running).
    ``allowed_code`` is the program's own module code, whose one ``exec`` event is let through."""

    def __init__(self) -> None:
        self.armed = False
        self.allowed_code: Any = None

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed:
            return
        if event == "exec" and args and args[0] is self.allowed_code:
            return
        if event in _BLOCKED_EVENTS or event.startswith(_BLOCKED_PREFIXES):
            raise PermissionError(f"sandbox: {event} is not allowed")


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


def _program_line(err: BaseException) -> str:
    lines = [f.lineno for f in traceback.extract_tb(err.__traceback__) if f.filename == "<program>"]
    return f" (line {lines[-1]})" if lines else ""


def _run(job: dict[str, Any], api: Any, rules: Any, guard: Guard, survival: Any = None) -> dict[str, Any] | None:
    proxies = {name: types.SimpleNamespace(**{n: getattr(__import__(name), n) for n in sorted(allowed)})
               for name, allowed in rules.ALLOWED_MODULES.items()}

    def restricted_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                          level: int = 0) -> Any:
        if level or name not in proxies:
            raise ImportError(f"import of {name!r} is not allowed")
        return proxies[name]

    namespace: dict[str, Any] = {"__builtins__": {**rules.builtin_objects(), "__import__": restricted_import},
                                 "__name__": "policy_program"}
    _confine(job["limits"])
    stage = "loading the program"
    try:
        guard.allowed_code = compile(job["source"], "<program>", "exec")
        with _armed(guard):
            exec(guard.allowed_code, namespace)
        if job["mode"] == "space":
            stage = "space(trial)"
            with _armed(guard):
                params = namespace["space"](Trial())
            if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
                return {"status": "error", "reason": "space(trial) must return a dict with string keys"}
            return {"status": "ok", "params": json.loads(json.dumps(params))}
        if job["mode"] == "survival":
            return _survive_all(job, namespace["decide"], survival, guard)
        if job["mode"] == "serve":
            sys.stdout.write(json.dumps({"status": "ok", "ready": True}) + "\n")
            sys.stdout.flush()
            _serve(job, namespace["decide"], survival, guard)
            return None
        return _decide_all(job, namespace["decide"], api, guard)
    except MemoryError:
        return {"status": "memory", "reason": f"{stage}: out of memory"}
    except RecursionError as err:
        return {"status": "error", "reason": f"{stage}: RecursionError{_program_line(err)}: {err}"}
    except Exception as err:  # noqa: BLE001 - any failure of the program is its record, sent to the host
        return {"status": "error", "reason": f"{stage}: {type(err).__name__}{_program_line(err)}: {err}"}


@contextlib.contextmanager
def _armed(guard: Guard) -> Iterator[None]:
    guard.armed = True
    try:
        yield
    finally:
        guard.armed = False


def _decide_all(job: dict[str, Any], decide: Any, api: Any, guard: Guard) -> dict[str, Any]:
    out: list[list[Any]] = []
    size, cap = 0, int(job["limits"]["max_output_bytes"])
    for e, ep in enumerate(job["episodes"]):
        decisions: list[Any] = []
        previous = ep.get("previous")
        for n in ep["cuts"]:
            rel = ep["relevance"][:n] if ep["relevance"] is not None else None
            view = api.RequestView(ep["messages"][:n], ep["tokens"][:n], None, previous, rel)
            try:
                with _armed(guard):
                    raw = decide(view, dict(job["params"]))
                    wire = raw.wire() if isinstance(raw, api.Plan) else raw
            except MemoryError:
                raise
            except Exception as err:  # noqa: BLE001 - any failure of the program is its record
                return {"status": "error", "reason": f"decide: {type(err).__name__}{_program_line(err)}: {err} "
                                                     f"[episode {e}, request of {n} messages]"}
            if not isinstance(wire, dict):
                return {"status": "error", "reason": f"decide returned {type(raw).__name__}; return request.plan() "
                                                     f"or a dict [episode {e}, request of {n} messages]"}
            try:
                text = json.dumps(wire)
            except (TypeError, ValueError) as err:
                return {"status": "error", "reason": f"decide returned a value that is not JSON: {err}"}
            size += len(text)
            if size > cap:
                return {"status": "output_limit", "reason": f"decisions exceed {cap} bytes of output"}
            decisions.append(json.loads(text))
            previous = decisions[-1]
        out.append(decisions)
    return {"status": "ok", "episodes": out}


def _survive_one(request: Any, params: dict[str, Any], decide: Any, survival: Any, guard: Guard,
                 where: str) -> dict[str, Any]:
    """Run ``decide`` on one survival request; the answer maps session ids to decision dicts."""
    view = survival.SurvivalView(request)
    try:
        with _armed(guard):
            raw = decide(view, dict(params))
    except MemoryError:
        raise
    except Exception as err:  # noqa: BLE001 - any failure of the program is its record
        return {"status": "error", "reason": f"decide: {type(err).__name__}{_program_line(err)}: {err} [{where}]"}
    if isinstance(raw, list | tuple):
        raw = {s.session: d for s, d in zip(view.sessions, raw)}
    if not isinstance(raw, dict):
        return {"status": "error", "reason": f"decide returned {type(raw).__name__}; return a dict of session id "
                                             f"to decision [{where}]"}
    try:
        return {"status": "ok", "decisions": json.loads(json.dumps(raw))}
    except (TypeError, ValueError) as err:
        return {"status": "error", "reason": f"decide returned a value that is not JSON: {err} [{where}]"}


def _survive_all(job: dict[str, Any], decide: Any, survival: Any, guard: Guard) -> dict[str, Any]:
    out: list[Any] = []
    size, cap = 0, int(job["limits"]["max_output_bytes"])
    for r, request in enumerate(job["requests"]):
        answer = _survive_one(request, job["params"], decide, survival, guard, f"request {r}")
        if answer["status"] != "ok":
            return answer
        size += len(json.dumps(answer["decisions"]))
        if size > cap:
            return {"status": "output_limit", "reason": f"decisions exceed {cap} bytes of output"}
        out.append(answer["decisions"])
    return {"status": "ok", "decisions": out}


def _serve(job: dict[str, Any], decide: Any, survival: Any, guard: Guard) -> None:
    cap = int(job["limits"]["max_output_bytes"])
    calls = 0
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        msg = json.loads(line)
        if not isinstance(msg, dict) or msg.get("stop"):
            return
        calls += 1
        try:
            answer = _survive_one(msg["request"], job["params"], decide, survival, guard, f"call {calls}")
        except MemoryError:
            answer = {"status": "memory", "reason": f"decide: out of memory [call {calls}]"}
        text = json.dumps(answer)
        if len(text) > cap:
            text = json.dumps({"status": "output_limit", "reason": f"the answer exceeds {cap} bytes"})
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def main() -> None:
    job = json.loads(sys.stdin.buffer.readline())
    rules, api = _load("rules"), _load("program_api")
    survival = _load("survival_api") if job.get("mode") in ("survival", "serve") else None
    guard = Guard()
    sys.addaudithook(guard)
    try:
        result = _run(job, api, rules, guard, survival)
        if result is None:
            return
        text = json.dumps(result)
    except MemoryError:
        text = json.dumps({"status": "memory", "reason": "out of memory"})
    if len(text) > int(job["limits"]["max_output_bytes"]):
        text = json.dumps({"status": "output_limit", "reason": "the answer exceeds the output limit"})
    sys.stdout.write(text)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
