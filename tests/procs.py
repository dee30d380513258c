"""Process helpers shared by the tests that check no process outlives its owner."""

from __future__ import annotations

import os
import time


def gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether process ``pid`` (our child or not) has ended within ``timeout`` (a zombie counts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return True
        except ChildProcessError:
            pass  # not our child: fall back to signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if _zombie(pid):
            return True
        time.sleep(0.1)
    return False


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:  # vanished between the checks, or no /proc
        return False
