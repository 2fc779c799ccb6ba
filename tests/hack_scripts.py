"""hack/ scripts as modules for tests: hack/ is not a package (its scripts run before the virtualenv
exists)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

HACK = Path(__file__).resolve().parents[1] / "hack"


def load(name: str) -> Any:
    """hack/NAME.py, imported once under a name of its own (`gymsandbox_hack_NAME`)."""
    module_name = f"gymsandbox_hack_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, HACK / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
