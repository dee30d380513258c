"""The sandbox both tracks run programs in: two walls, one package.

- :mod:`~search_spaces.sandbox.checker`: the static wall. ``check_program`` parses a program and
  refuses anything outside the allow-lists of :mod:`~search_spaces.sandbox.rules`, with a one-line
  reason; it never executes the program.
- :mod:`~search_spaces.sandbox.process`: the process wall. ``run_child`` (one job) and
  ``SandboxSession`` / ``SessionPool`` (a kept process per program) run
  :mod:`~search_spaces.sandbox.child` as ``python -I -S -B``: rlimits, an audit hook, a wall clock,
  a CPU clock per call, an output cap.

Cache policy programs (``search_spaces.cache.program``) and survival programs
(``search_spaces.survival.program``) both go through here.
"""

from search_spaces.sandbox.checker import CheckResult, check_program
from search_spaces.sandbox.process import (
    ChildOutput,
    RunOutcome,
    SandboxLimits,
    SandboxSession,
    SessionPool,
    Status,
    one_line,
    run_child,
)

__all__ = [
    "CheckResult",
    "ChildOutput",
    "RunOutcome",
    "SandboxLimits",
    "SandboxSession",
    "SessionPool",
    "Status",
    "check_program",
    "one_line",
    "run_child",
]
