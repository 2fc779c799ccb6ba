"""Run docs/gitops/gymsandbox-health.lua the way Argo CD does: Lua 5.1, the object as the global table `obj`,
and no standard library but the base one (Argo CD opens the rest only with
`resource.customizations.useOpenLibs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lupa.lua51  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "gitops" / "gymsandbox-health.lua"
# Everything a LuaRuntime opens beyond the base library, and lupa's own bridge to Python.
CLOSED = ("coroutine", "debug", "io", "math", "os", "package", "string", "table", "require", "python")


@dataclass(frozen=True)
class Health:
    status: str
    message: str


def to_lua(runtime: Any, value: Any) -> Any:
    """A JSON-like value as Argo CD hands it to Lua: mappings and lists become tables, lists 1-based."""
    if isinstance(value, Mapping):
        table = runtime.table()
        for key, item in value.items():
            table[key] = to_lua(runtime, item)
        return table
    if isinstance(value, list):
        table = runtime.table()
        for index, item in enumerate(value, start=1):
            table[index] = to_lua(runtime, item)
        return table
    return value


def assess(obj: Mapping[str, Any], script: str | None = None) -> Health:
    """The health the script gives `obj`, in a fresh interpreter as each Argo CD evaluation gets."""
    runtime = lupa.lua51.LuaRuntime(register_eval=False, register_builtins=False)
    names = runtime.globals()
    for name in CLOSED:
        names[name] = None
    names["obj"] = to_lua(runtime, obj)
    result = runtime.execute(SCRIPT.read_text() if script is None else script)
    return Health(result["status"], result["message"])
