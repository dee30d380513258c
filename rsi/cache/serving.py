"""``akv serve --policy NAME=SPEC``: the policies a server offers by model name (``MODEL@NAME``).

``SPEC`` is one of:

- a built-in policy in the config notation (``rolling_drop:keep_tool_responses=12``, as
  ``evals.cache.evaluator.PolicySpec.parse`` reads it);
- a policy module written by ``akv export`` (or a program file), ending in ``.py``: read, checked
  and run in the sandbox as ``akv eval --program`` does (never imported); a module exported with
  the frame guard is served under it;
- a search run's directory with an optional ``#pick`` (``runs/x#headline``, the default pick; ``best``,
  an id or a label as ``akv eval --pick``), under the run's frame guard when it was searched with one.

Each becomes an :class:`evals.cache.served.ReplayPolicy`, checked on a sample session before the
server starts (one that fails there, or decides it differently twice, is refused). Programs run in
the sandbox's kept processes, each call bounded by ``time_limit_s`` (wall clock and CPU) and
:data:`MEMORY_MB`.

Not for: the server (``engine.server.policies`` runs what this builds).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

from engine.errors import AKVError
from evals.cache.cli import read_program_file
from evals.cache.evaluator import CONTROLS, PolicySpec
from evals.cache.served import ReplayPolicy
from search_spaces import FAMILIES, Policy, SandboxLimits

NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MEMORY_MB = 512
"""Address space of a served program's sandbox process."""
RESERVED = frozenset({*FAMILIES, "default", "program", *CONTROLS})
"""Names a served policy may not take: the built-in policies' (and the server's ``default``)."""


def parse_entry(entry: str) -> tuple[str, str]:
    """``NAME=SPEC`` -> (name, spec).

    Raises:
        AKVError: no ``=``, a bad name, or a name that shadows a built-in policy.
    """
    name, eq, spec = entry.partition("=")
    name, spec = name.strip(), spec.strip()
    if not eq or not spec:
        raise AKVError(f"--policy {entry!r}: write NAME=SPEC (e.g. k12=rolling_drop:keep_tool_responses=12)",
                       field="policy", value=entry)
    if NAME.fullmatch(name) is None:
        raise AKVError(f"--policy {entry!r}: the name {name!r} must be 1 to 64 letters, digits, '_', '.' or '-'",
                       field="policy", value=name)
    if name in RESERVED:
        raise AKVError(f"--policy {entry!r}: the name {name!r} is a built-in policy's; choose another (the model "
                       "id MODEL@NAME must not read as the built-in)", field="policy", value=name)
    return name, spec


def spec_of(spec: str) -> tuple[PolicySpec, bool]:
    """The policy ``spec`` names and whether it is served under the frame guard.

    Raises:
        AKVError subclasses: a missing file or run, a program the checker refuses (naming the
            file), an unknown pick.
    """
    if spec.endswith(".py"):
        program = read_program_file(spec)
        return PolicySpec("program", program.params, source=program.source, label=spec), program.frame_guard
    run, hashed, pick = spec.partition("#")
    if hashed or Path(run).is_dir():
        from rsi.cache.export import pick_spec, run_frame_guard

        return pick_spec(Path(run), pick or "headline"), run_frame_guard(Path(run))
    return PolicySpec.parse(spec), False


def build(spec: PolicySpec, time_limit_s: float) -> Policy:
    """``spec`` as a policy; a program's sandbox calls bounded by ``time_limit_s`` and :data:`MEMORY_MB`."""
    if spec.source is not None:
        limits = SandboxLimits(cpu_seconds=max(1, math.ceil(time_limit_s)), wall_seconds=time_limit_s,
                               memory_mb=MEMORY_MB)
        return Policy.from_program(spec.source, dict(spec.params), limits=limits)
    policy = spec.build()
    if policy is None:
        raise AKVError(f"{spec.name} is a diagnostic, not a policy to serve", field="policy", value=spec.name)
    return policy


def served_policies(entries: Sequence[str], time_limit_s: float = 10.0) -> list[ReplayPolicy]:
    """The policies of ``--policy NAME=SPEC`` entries, each built and checked on a sample session.

    Raises:
        AKVError subclasses: a bad entry, a repeated name, a policy that cannot be built, a text
            baseline, or one that fails its check (each message names the entry).
    """
    out: list[ReplayPolicy] = []
    for entry in entries:
        name, text = parse_entry(entry)
        if any(p.name == name for p in out):
            raise AKVError(f"--policy {entry!r}: the name {name!r} is given twice", field="policy", value=name)
        spec, guard = spec_of(text)
        served = ReplayPolicy(name, build(spec, time_limit_s), frame_guard=guard, label=spec.display)
        served.check()
        out.append(served)
    return out
