"""The lint configuration keeps its checks on: a check switched off in pyproject.toml fails here."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PLANTED = textwrap.dedent('''\
    """A module that reaches into another module's object."""

    from __future__ import annotations


    class Counter:
        """Counts; its state is its own."""

        def __init__(self) -> None:
            self._n = 0

        def bump(self) -> int:
            self._n += 1
            return self._n


    def peek(counter: Counter) -> int:
        """Reads the counter's private state from outside the class."""
        return counter._n
''')


def _ruff(path: Path) -> subprocess.CompletedProcess[str]:
    """``ruff check`` of ``path`` (outside the project) under the project's own configuration."""
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           str(ROOT / "pyproject.toml"), "--output-format", "concise", str(path)],
                          capture_output=True, text=True, timeout=120)


def test_ruff_refuses_private_access_across_modules(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    out = _ruff(planted)
    assert out.returncode == 1, out.stdout + out.stderr
    codes = {line.split(": ", 1)[1].split()[0] for line in out.stdout.splitlines() if ".py:" in line}
    assert codes == {"SLF001"}, out.stdout  # the only finding: ``counter._n`` in ``peek``
    line = PLANTED.splitlines().index("    return counter._n") + 1
    assert f"planted.py:{line}:" in out.stdout, out.stdout


def test_ruff_accepts_the_same_module_without_the_outside_access(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED.replace("return counter._n", "return counter.bump()"))
    out = _ruff(planted)
    assert out.returncode == 0, out.stdout + out.stderr
