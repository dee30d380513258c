"""Loading a module that ``akv export`` wrote, the way a harness would (a file, not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_exported(path: Path) -> ModuleType:
    """The module in ``path``, imported from its file under a name of its own (its stem)."""
    spec = importlib.util.spec_from_file_location(f"exported_{Path(path).stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
